"""Batch gates: difficulty estimates and band, GE suites with severities, what is stored."""

from __future__ import annotations

import polars as pl
import pytest

from domains import Domain
from quality import difficulty
from quality.expectations import gate_parameters, gate_severity, run_suite


def _domain(name="bg_dom", **kw):
    def samples(split, n, seed):
        base = 0 if split == "train" else 50_000
        for i in range(n):
            k = base + seed * 1000 + i
            # every 5th train item is trivial (no numbers, one-char answer): out of the band
            if split == "train" and i % 5 == 0:
                yield {"id": f"{name}-{split}-{k}", "prompt": f"Say yes please item {chr(97 + i % 26) * 2}", "answer": "y"}
            else:
                yield {"id": f"{name}-{split}-{k}", "prompt": f"What is {k} plus {k + 7} minus 3?", "answer": str(2 * k + 4)}

    return Domain(name=name, owner="t@x", description="d", samples=samples, score=lambda c, s: 0.0,
                  eval_size=20, **kw)


def test_heuristic_difficulty_orders_items_and_stays_in_unit_interval():
    rows = pl.DataFrame({"id": ["a", "b", "c"], "prompt": ["Say hi", "What is 12 plus 30?",
                                                          "Compute " + " + ".join(str(i) for i in range(40))],
                         "answer": ["hi", "42", "780"], "metadata": [None, None, None]})
    est = difficulty.estimate_difficulty(_domain(), rows)
    d = est["difficulty"].to_list()
    assert 0 <= d[0] < d[1] < d[2] <= 1
    assert set(est["method"]) == {"heuristic"} and est["pass_rate"].null_count() == 3
    assert est["in_band"].to_list() == [False, True, True]


def test_metadata_difficulty_and_the_pass_rate_hook():
    rows = pl.DataFrame({"id": ["a", "b"], "prompt": ["p1", "p2"], "answer": ["1", "2"],
                         "metadata": ['{"difficulty": 0.5}', None]})
    est = difficulty.estimate_difficulty(_domain(), rows)
    assert est["method"].to_list() == ["metadata", "heuristic"] and est["difficulty"][0] == 0.5
    difficulty.register_pass_rate_estimator(lambda domain, items, k: [1.0, 0.25], k=4)
    try:
        est = difficulty.estimate_difficulty(_domain(), rows)
    finally:
        difficulty.register_pass_rate_estimator(None)
    assert est["method"].to_list() == ["policy_pass_rate"] * 2
    assert est["difficulty"].to_list() == [0.0, 0.75] and est["k"].to_list() == [4, 4]
    assert est["in_band"].to_list() == [False, True]  # solved by every sample: no GRPO signal
    assert difficulty.zero_signal_fraction(est["difficulty"]) == 0.5


def test_domain_overrides_reach_the_suite_parameters():
    params = gate_parameters(_domain(gate_thresholds={"max_safety_flagged_fraction": 0.5}, answer_pattern=r"\d+"))
    assert params["max_safety_flagged_fraction"] == 0.5
    assert params["answer_regex"] == r"^(?:\d+)$"
    band = difficulty.Band.for_domain(_domain(gate_thresholds={"difficulty_min": 0.2}))
    assert (band.low, band.high) == (0.2, 0.95)


def _format_frame(ids, answers):
    n = len(ids)
    return pl.DataFrame({"domain": ["d"] * n, "split": ["train"] * n, "id": ids, "prompt": ["q"] * n,
                         "answer": answers, "metadata": [None] * n, "source": ["s"] * n, "line": list(range(n)),
                         "batch": ["b"] * n, "content_hash": ids, "ingested_at": ["t"] * n},
                        schema_overrides={"metadata": pl.Utf8}).to_pandas()


@pytest.mark.slow
def test_ge_severity_mapping_critical_is_error_warning_is_warn():
    params = gate_parameters(_domain(answer_pattern=r"\d+"))
    ok = run_suite("format", _format_frame(["a", "b"], ["1", "2"]), params)
    assert gate_severity(ok) is None
    bad = run_suite("format", _format_frame(["a", "a", "c"], ["1", "x", "3"]), params)
    failed = {o.expectation for o in bad if not o.success}
    assert {"expect_column_values_to_be_unique(id)", "expect_column_values_to_match_regex(answer)"} <= failed
    assert gate_severity(bad) == "ERROR"
    assert "x" not in str(bad) or any(o.rows_failed for o in bad)
    warn = run_suite("format", _format_frame(["a"], ["1"]), params | {"min_rows": 5})
    assert [o.expectation for o in warn if not o.success] == ["expect_table_row_count_to_be_between"]
    assert gate_severity(warn) == "WARN"


@pytest.mark.slow
def test_evaluate_batch_gates_quarantines_out_of_band_and_stores_results(assay_home):
    from quality.batch_gates import evaluate_batch_gates, train_set_rows
    from quality.ingest import ingest_generated, quarantine_listing
    from quality.lake import Lake

    lake = Lake.at(assay_home)
    domain = _domain()
    ingest_generated(lake, domain, train_n=40, all_domains=[domain])
    first = evaluate_batch_gates(lake, domain)
    assert first.stats["train_rows"] == 40 and first.stats["out_of_band"] == 8
    assert first.severity("format") is None and first.severity("safety") is None
    assert first.severity("difficulty") is None and first.stats["previous_batch"] is False
    listing = [r for r in quarantine_listing(lake, domain.name) if "difficulty_out_of_band" in r["reasons"]]
    assert len(listing) == 8
    results = lake.read("gate_results", where={"domain": domain.name})
    assert set(results["gate"]) == {"format", "safety", "difficulty"}
    assert lake.read("difficulty", where={"domain": domain.name}).height == 40
    rows = train_set_rows(lake, domain.name, first.evaluation, "now")
    assert rows.height == 32 and rows["difficulty"].null_count() == 0

    second = evaluate_batch_gates(lake, domain)  # compares with the first (accepted) batch
    assert second.stats["previous_batch"] is True
    quantile = [o for o in second.outcomes["difficulty"] if "quantile" in o.expectation]
    assert quantile and quantile[0].success
    # re-evaluating replaces the out-of-band quarantine batch instead of piling up copies
    assert len([r for r in quarantine_listing(lake, domain.name) if "difficulty_out_of_band" in r["reasons"]]) == 8
