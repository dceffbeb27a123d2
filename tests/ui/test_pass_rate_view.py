"""Difficulty measured on the policy, as the dashboard shows it (issue 13): the queries over lake table
``pass_rates`` on small lakes written through the real Lake, and the domain and training pages
(AppTest) on the fixture lake, checked against the lake read independently."""

from __future__ import annotations

import json

import polars as pl
import pytest

from evaluation.pass_rates import cached_pass_rates
from quality.difficulty import Band, pass_rate_verdict
from storage import tables as T
from storage.lake import Lake
from tests.ui.test_app import _open
from ui import queries as Q


def _rates(lake, checkpoint, domain, k, gen_config, passes: dict[str, int], at: str, batch: str):
    frame = T.conform(pl.DataFrame([
        {"checkpoint": checkpoint, "domain": domain, "item_id": item, "samples": k, "passes": n,
         "pass_rate": n / k, "mean_score": n / k, "gen_config": gen_config, "gen_params": '{"temperature": 1.0}',
         "engine": "torch:test", "created_at": at} for item, n in passes.items()]), T.PASS_RATES)
    lake.write_batch("pass_rates", {"checkpoint": checkpoint, "domain": domain, "batch": batch}, {"part": frame})


def _promotion(lake, decision, candidate, promoted, at):
    frame = T.conform(pl.DataFrame([{"decision": decision, "candidate": candidate, "promoted": promoted,
                                     "reason": "test", "created_at": at}]), T.PROMOTIONS)
    lake.write_batch("promotions", {"decision": decision}, {"part": frame})


def _saved(lake, checkpoint, at):
    frame = T.conform(pl.DataFrame([{"checkpoint": checkpoint, "step": 1, "created_at": at}]), T.CHECKPOINTS)
    lake.write_batch("checkpoints", {"checkpoint": checkpoint}, {"part": frame})


def _views(lake, domain):
    return Q.open_views(lake, {"pass_rates": [{"domain": domain}], "promotions": None, "checkpoints": None})


def test_pass_rate_rows_keep_each_checkpoints_newest_key_and_the_row_the_cache_serves(assay_home):
    lake = Lake.at(assay_home)
    assert Q.pass_rate_rows(_views(lake, "d"), "d").is_empty()  # no table yet: the page's empty state
    _rates(lake, "c1", "d", 4, "g1", {"a": 1, "b": 4}, "2026-11-01T00:00:00+00:00", "b1")
    _rates(lake, "c1", "d", 4, "g1", {"a": 3}, "2026-11-01T01:00:00+00:00", "b2")  # a re-run: the cache keeps b1's
    _rates(lake, "c2", "d", 4, "g1", {"a": 0, "b": 2}, "2026-11-02T00:00:00+00:00", "b3")
    _rates(lake, "c2", "d", 8, "g2", {"a": 8, "b": 5, "c": 0}, "2026-11-03T00:00:00+00:00", "b4")  # c2's newest key
    _rates(lake, "c1", "other", 4, "g1", {"z": 2}, "2026-11-04T00:00:00+00:00", "b5")  # another domain
    rows = Q.pass_rate_rows(_views(lake, "d"), "d")
    got = {(r["checkpoint"], r["item_id"]): (r["samples"], r["gen_config"], r["passes"]) for r in rows.iter_rows(named=True)}
    assert got == {("c1", "a"): (4, "g1", 1), ("c1", "b"): (4, "g1", 4),
                   ("c2", "a"): (8, "g2", 8), ("c2", "b"): (8, "g2", 5), ("c2", "c"): (8, "g2", 0)}
    # the same rows evaluation.pass_rates serves from its cache for that key
    cached = cached_pass_rates(lake, "c1", "d", 4, "g1")
    assert dict(zip(cached["item_id"], cached["passes"])) == {"a": 1, "b": 4}


def test_pass_rate_panels_follow_the_champion_history_and_count_the_band(assay_home):
    lake = Lake.at(assay_home)
    k = 16
    _rates(lake, "base-tiny", "d", k, "g", {"a": 0, "b": 1, "c": 8, "d": 16}, "2026-11-05T00:00:00+00:00", "b0")
    _rates(lake, "c1", "d", k, "g", {"a": 2, "b": 4, "c": 16, "d": 16}, "2026-11-05T00:00:00+00:00", "b1")
    _rates(lake, "c2", "d", k, "g", {"a": 4, "b": 8, "c": 12, "d": 15}, "2026-11-05T00:00:00+00:00", "b2")
    _rates(lake, "c3", "d", k, "g", {"a": 3, "b": 3, "c": 3, "d": 3}, "2026-11-05T00:00:00+00:00", "b3")
    _saved(lake, "c1", "2026-11-01T00:00:00+00:00")
    _saved(lake, "c3", "2026-11-02T00:00:00+00:00")
    _saved(lake, "c2", "2026-11-03T00:00:00+00:00")
    _promotion(lake, "p1", "c1", True, "2026-11-01T06:00:00+00:00")
    _promotion(lake, "p3", "c3", False, "2026-11-02T06:00:00+00:00")  # refused: never champion
    _promotion(lake, "p2", "c2", True, "2026-11-03T06:00:00+00:00")
    con = _views(lake, "d")
    band = (0.1, 0.9)
    items, per = Q.pass_rate_panels(Q.pass_rate_rows(con, "d"), Q.champion_history(con), Q.checkpoint_times(con),
                                    "c2", band)
    assert per["checkpoint"].to_list() == ["base-tiny", "c1", "c3", "c2"]  # base first, then history
    assert per["role"].to_list() == [Q.ROLE_BASE, Q.ROLE_FORMER, Q.ROLE_OTHER, Q.ROLE_CURRENT]
    assert per["label"].to_list()[-1] == "4. c2 (current champion)"
    assert per["champion_since"].to_list() == [None, "2026-11-01T06:00:00+00:00", None, "2026-11-03T06:00:00+00:00"]
    lake_rows = lake.read("pass_rates").filter(pl.col("domain") == "d")
    for row in per.iter_rows(named=True):
        mine = lake_rows.filter(pl.col("checkpoint") == row["checkpoint"])
        verdicts = [pass_rate_verdict(p, k, Band(*band)) for p in mine["passes"]]
        assert row["in_band_share"] == pytest.approx(verdicts.count("in_band") / len(verdicts))
        assert row["too_easy_share"] == pytest.approx(verdicts.count("too_easy") / len(verdicts))
        assert row["mean_pass_rate"] == pytest.approx(mine["pass_rate"].mean())
        assert (row["items"], row["samples"], row["gen_config"]) == (4, k, "g")
    base = dict(items.filter(pl.col("checkpoint") == "base-tiny").select("item_id", "bucket").iter_rows())
    # all-fail and all-pass items get bars of their own; 1 of 16 (6%) is not "all fail"
    assert base == {"a": 0, "b": 1, "c": 6, "d": 11}
    assert Q.PASS_RATE_BUCKETS[0] == "all fail" and Q.PASS_RATE_BUCKETS[11] == "all pass"
    c2 = dict(items.filter(pl.col("checkpoint") == "c2").select("item_id", "verdict").iter_rows())
    assert c2 == {"a": "in_band", "b": "in_band", "c": "in_band", "d": "too_easy"}  # 15/16: difficulty 0.06 < 0.1


def _chart_frames(at) -> dict[str, list]:
    """Title -> data frames of every Vega-Lite chart on the page (as Streamlit ships them)."""
    import pyarrow as pa

    charts = {}
    for element in at.get("vega_lite_chart"):
        spec = json.loads(element.proto.spec)
        title = spec.get("title")
        title = title.get("text") if isinstance(title, dict) else title
        charts[title] = [pa.ipc.open_stream(d.data.data).read_all().to_pandas() for d in element.proto.datasets]
    return charts


def test_domain_page_shows_the_measured_difficulty_per_checkpoint(lake_env):
    domain = lake_env["domains"][2]
    at = _open("domain", domain=domain)
    assert "Difficulty measured on the policy" in [s.value for s in at.subheader]
    table = next(t.value for t in at.table if "in band" in t.value.columns)
    rates = Lake.at(lake_env["home"]).read("pass_rates").filter(pl.col("domain") == domain)
    promoted = Lake.at(lake_env["home"]).read("promotions").filter(pl.col("promoted")).sort("created_at")
    expected = ["base-tiny", *promoted["candidate"].to_list()]
    assert set(rates["checkpoint"]) == set(expected)
    assert [label.split(" ")[1] for label in table.index] == expected  # champion history order
    assert table.index[-1] == f"{len(expected)}. {lake_env['champion']} (current champion)"
    for label, row in table.iterrows():
        mine = rates.filter(pl.col("checkpoint") == label.split(" ")[1])
        verdicts = [pass_rate_verdict(p, s, Band(0.05, 0.95)) for p, s in zip(mine["passes"], mine["samples"])]
        assert float(row["in band"].rstrip("%")) == pytest.approx(100 * verdicts.count("in_band") / len(verdicts),
                                                                 abs=0.05)
        assert float(row["mean pass rate"].rstrip("%")) == pytest.approx(100 * mine["pass_rate"].mean(), abs=0.05)
        assert row["K"] == mine["samples"][0] and row["gen config"] == mine["gen_config"][0]
    charts = _chart_frames(at)
    histogram = next(v for k, v in charts.items() if k and k.startswith("Pass rate of the train items"))[0]
    assert histogram["items"].sum() == rates.height  # every measured item is in a bar
    assert set(histogram["label"]) == set(table.index)
    assert any(k and k.startswith("How the domain's difficulty moves") for k in charts)
    captions = " ".join(c.value for c in at.caption)
    assert "Gate's difficulty estimate: the policy's pass rate (K = 8)" in captions


def test_domain_page_without_pass_rates_says_what_to_run_and_that_the_gate_used_the_heuristic(lake_env):
    domain = lake_env["domains"][-1]  # the synthetic lake measured no policy on its last domain
    at = _open("domain", domain=domain)
    infos = " ".join(i.value for i in at.info)
    assert f"`assay difficulty {domain} --policy champion`" in infos, infos
    assert not any(k and k.startswith("Pass rate of the train items") for k in _chart_frames(at))
    captions = " ".join(c.value for c in at.caption)
    assert "Gate's difficulty estimate: the text heuristic (no policy run)" in captions, captions


def test_training_page_plots_reward_kl_and_zero_variance_per_domain(lake_env):
    at = _open("training")
    history = Lake.at(lake_env["home"]).read("training_history")
    # a watched domain's rows (and every step-0 row) hold only the in-loop validation: not trained there
    trained = set(history.filter(pl.col("reward_mean").is_not_null())["domain"]) - {"_all"}
    assert trained and trained < set(history["domain"]) - {"_all"}  # the synthetic lake watches one more
    by_metric = {}
    for element in at.get("vega_lite_chart"):
        import pyarrow as pa

        field = json.loads(element.proto.spec)["encoding"]["y"]["field"]
        by_metric[field] = pa.ipc.open_stream(element.proto.datasets[0].data.data).read_all().to_pandas()
    for metric in ("reward_mean", "kl", "zero_var_frac"):
        frame = by_metric[metric]
        assert trained <= set(frame["domain"]), (metric, set(frame["domain"]))  # one curve per trained domain
        for domain in trained:
            expected = history.filter((pl.col("domain") == domain) & pl.col(metric).is_not_null()
                                      ).sort("step")[metric].to_list()
            got = frame[frame["domain"] == domain].sort_values("step")[metric].tolist()
            assert got == pytest.approx(expected), (metric, domain)
