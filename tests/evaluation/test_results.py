"""evaluation.results, the one reader of sweep results: each checkpoint read once (two lake reads,
every domain), latest config first, nothing written; a report survives its JSON round trip."""

from __future__ import annotations

import numpy as np

from tests.evaluation.test_promotion import GREEDY64, SAMPLED256, _report, _sweep


class CountingLake:
    """The real lake, with a count of the tables read (the reader's cost is what is asserted)."""

    def __init__(self, lake):
        self.lake, self.reads = lake, []

    def read(self, table, *args, **kwargs):
        self.reads.append(table)
        return self.lake.read(table, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.lake, name)


def _lake_with_sweeps(assay_home):
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    rng = np.random.default_rng(2)
    scores = [float(x) for x in rng.random(12) < 0.5]
    for domain in ("math", "code", "safety"):
        _sweep(lake, "champ", domain, GREEDY64, scores, "2026-01-01T00:00:01")
        _sweep(lake, "cand", domain, GREEDY64, scores, "2026-01-02T00:00:01")
    _sweep(lake, "cand", "math", SAMPLED256, [0.0] * 12, "2026-01-02T00:00:09")  # its latest math sweep
    return lake


def test_a_checkpoint_is_read_once_for_every_domain_and_nothing_is_written(assay_home):
    from evaluation.results import comparable_results, read_checkpoint

    lake = CountingLake(_lake_with_sweeps(assay_home))
    before = sorted(p.relative_to(assay_home) for p in assay_home.rglob("*"))
    cand = read_checkpoint(lake, "cand")
    assert lake.reads == ["results", "sweep_summary"]
    assert cand.domains == ["code", "math", "safety"]
    latest = cand.latest()
    assert latest.height == 36 and latest.filter(latest["domain"] == "math")["score"].sum() == 0  # the 256 sweep
    configs = cand.configs("math")
    assert len(configs) == 2 and configs[0].k == 1 and configs[1].k is None

    lake.reads.clear()
    c_rows, b_rows = comparable_results(lake, "cand", "champ")
    assert sorted(lake.reads) == ["results", "results", "sweep_summary", "sweep_summary"]
    # math is paired on the config both swept (greedy 64), not the candidate's latest
    assert set(c_rows["gen_config"]) == set(b_rows["gen_config"]) and c_rows.height == b_rows.height == 36
    assert sorted(p.relative_to(assay_home) for p in assay_home.rglob("*")) == before


def test_comparing_with_champion_and_anchor_reads_the_candidate_once(assay_home, monkeypatch):
    from evaluation import promotion
    from evaluation.promotion_policy import PromotionPolicy

    lake = CountingLake(_lake_with_sweeps(assay_home))
    monkeypatch.setattr(promotion.tracking, "current_champion", lambda uri: "champ")
    champion, reports = promotion.compare_with_champion(lake, "unused", "cand", PromotionPolicy(), [],
                                                        anchor="champ", write=False)
    assert champion == "champ" and set(reports) == {"champion", "anchor"}
    # the candidate once, the baseline once per role: 3 checkpoints x 2 tables, not 2 per domain
    assert len(lake.reads) == 6


def test_a_report_round_trips_through_json_with_the_same_decision():
    from evaluation.promotion import decide_promotion
    from evaluation.regression import RegressionReport

    for shift in (-0.2, 0.0, 0.2):
        report = _report(shift)
        again = RegressionReport.from_json(report.to_json())
        assert again.to_json() == report.to_json()
        a = decide_promotion("cand", "champ", {"champion": report})
        b = decide_promotion("cand", "champ", {"champion": again})
        assert (a.promoted, a.reason, a.blocking) == (b.promoted, b.reason, b.blocking)
