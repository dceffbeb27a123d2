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
    from storage.lake import Lake

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


def _rows(prefix: str, start: int, n: int, answer=lambda a, b: str(a + b)) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "prompt": f"What is {a} plus {a + 7}?", "answer": answer(a, a + 7)}
            for i, a in enumerate(range(start, start + n))]


def _ingest(lake, domain, tmp_path, name: str, rows: list[dict]):
    import json

    from quality.ingest import ingest_file

    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return ingest_file(lake, domain, path)


@pytest.mark.slow
def test_batch_gates_judge_the_incoming_batch_not_the_domains_history(assay_home, tmp_path):
    from quality.batch_gates import evaluate_batch_gates, train_set_rows
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    domain = _domain("hist_dom", answer_pattern=r"\d+")

    good = _ingest(lake, domain, tmp_path, "good", _rows("g", 100, 30))
    assert good.admitted == 30
    first = evaluate_batch_gates(lake, domain)
    assert all(first.severity(g) is None for g in ("format", "safety", "difficulty")), first.outcomes

    # A bad incoming batch: 4 of its 10 rows carry PII (quarantined). Its own flagged share is 0.4,
    # over the 0.2 limit; diluted by the clean history (4 of 40 rows) it would pass.
    pii = [{"id": f"p-{i}", "prompt": f"Email me at jane.doe{i}@example.com: what is {i} plus 2?", "answer": str(i + 2)}
           for i in range(4)]
    bad = _ingest(lake, domain, tmp_path, "pii", _rows("c", 500, 6) + pii)
    assert (bad.admitted, bad.reasons) == (6, {"pii": 4})
    second = evaluate_batch_gates(lake, domain)
    assert second.severity("safety") == "ERROR", "the incoming batch's own flagged share decides"
    assert second.stats["admitted"] == 6 and second.stats["quarantined"] == 4
    assert first.stats["incoming_batches"] == [good.batch] and second.stats["incoming_batches"] == [bad.batch]
    assert second.stats["history"]["accepted_batches"] == [good.batch], "history is reported beside the verdict"

    # Another bad batch (answers that are not numbers), then a good one: the good one passes
    # although the domain holds bad rows from earlier batches.
    words = _ingest(lake, domain, tmp_path, "words", _rows("w", 700, 10, answer=lambda a, b: f"number {a + b}"))
    third = evaluate_batch_gates(lake, domain)
    assert third.severity("format") == "ERROR"
    assert third.stats["history"]["rejected_batches"] == [bad.batch]
    fixed = _ingest(lake, domain, tmp_path, "fixed", _rows("f", 900, 10))
    fourth = evaluate_batch_gates(lake, domain)
    assert all(fourth.severity(g) is None for g in ("format", "safety")), \
        [o for o in fourth.outcomes["format"] + fourth.outcomes["safety"] if not o.success]
    assert fourth.stats["incoming_batches"] == [fixed.batch] and fourth.stats["admitted"] == 10
    assert fourth.severity("difficulty") in (None, "WARN")
    assert sorted(fourth.stats["history"]["rejected_batches"]) == sorted([bad.batch, words.batch])
    drift = fourth.stats["drift"]
    assert drift["last_accepted_evaluation"] == first.evaluation and len(drift["incoming"]) == len(drift["quantiles"])

    from quality.gate_history import batch_status

    status = {r["batch"]: r["status"] for r in batch_status(lake, domain.name).iter_rows(named=True)}
    assert status == {good.batch: "accepted", bad.batch: "rejected", words.batch: "rejected", fixed.batch: "accepted"}
    rows = train_set_rows(lake, domain.name, fourth.evaluation, "now")
    assert set(r.split("-")[0] for r in rows["id"].to_list()) == {"g", "f"}, "rejected batches never train"
    assert rows.height == 40 and set(rows["evaluation"]) == {fourth.evaluation}


@pytest.mark.slow
def test_a_reused_id_is_a_duplicate_at_ingest_and_the_format_gate_passes(assay_home, tmp_path):
    from quality.batch_gates import evaluate_batch_gates
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    domain = _domain("ids_dom", answer_pattern=r"\d+")
    _ingest(lake, domain, tmp_path, "first", _rows("u", 100, 20))
    assert evaluate_batch_gates(lake, domain).severity("format") is None
    # ids u-0 .. u-4 again, with new content: the id is the stable key, so they are duplicates
    second = _ingest(lake, domain, tmp_path, "second", _rows("u", 300, 5) + _rows("v", 400, 5))
    assert (second.admitted, second.quarantined, second.reasons) == (5, 5, {"duplicate": 5})
    result = evaluate_batch_gates(lake, domain)
    unique = [o for o in result.outcomes["format"] if o.expectation == "expect_column_values_to_be_unique(id)"]
    assert unique and unique[0].success and result.severity("format") is None
    assert lake.read("ingest", "samples")["id"].n_unique() == 25

    # the very same file once more: all duplicates; the gates judge an empty batch and pass
    again = _ingest(lake, domain, tmp_path, "second", _rows("u", 300, 5) + _rows("v", 400, 5))
    assert (again.admitted, again.reasons) == (0, {"duplicate": 10})
    third = evaluate_batch_gates(lake, domain)
    assert third.stats["incoming_batches"] == [again.batch] and third.stats["admitted"] == 0
    assert all(third.severity(g) in (None, "WARN") for g in ("format", "safety", "difficulty")), third.outcomes


def test_a_rejected_batch_does_not_block_its_corrected_copy(assay_home, tmp_path):
    """Rows of a batch the gates rejected are not 'already held': the fixed file is admitted."""
    import polars as pl

    from storage import tables
    from quality.gate_history import record_judged, versions_of
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    domain = _domain("fix_dom", answer_pattern=r"\d+")
    bad = _ingest(lake, domain, tmp_path, "bad", _rows("x", 100, 5, answer=lambda a, b: f"number {a + b}"))
    # the gates' record of a failed evaluation of that batch (what evaluate_batch_gates stores)
    samples = lake.read("ingest", "samples")
    record_judged(lake, domain.name, "e1", "2026-01-01T00:00:00.000001+00:00",
                  versions_of(samples, tables.empty(tables.QUARANTINE)))
    lake.write_batch("gate_results", {"domain": domain.name, "evaluation": "e1"}, {"part": pl.DataFrame([{
        "domain": domain.name, "evaluation": "e1", "gate": "format", "expectation": "expect_column_values_to_match_regex(answer)",
        "severity": "critical", "success": False, "observed": "{}", "threshold": "{}", "rows_checked": 5,
        "rows_failed": 5, "evaluated_at": "2026-01-01T00:00:00.000001+00:00", "mlflow_run_id": None}],
        schema=tables.GATE_RESULTS)})
    fixed = _ingest(lake, domain, tmp_path, "fixed", _rows("x", 100, 5))
    assert (fixed.admitted, fixed.reasons) == (5, {}), "the corrected copy (same ids) is admitted"
    assert bad.batch != fixed.batch
