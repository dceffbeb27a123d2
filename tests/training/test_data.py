"""Training rows: the one freshness rule (latest gate evaluation passed, train set built after it)
and the data fingerprint that is part of a run's identity."""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains import Domain
from domains.registry import Registry
from storage import tables
from storage.lake import Lake
from training.data import TrainingDataError, load_training_data


def _samples(split, n, seed):
    for i in range(n):
        yield {"id": f"fresh-{split}-{i}", "prompt": f"What is {i} plus 2?", "answer": str(i + 2)}


@pytest.fixture
def registry() -> Registry:
    reg = Registry()
    reg.add_module(type("M", (), {"DOMAIN": Domain(name="fresh", owner="t", description="d", samples=_samples,
                                                   score=lambda c, s: 0.0)}), "test")
    return reg


def write_gate_result(lake: Lake, domain: str, evaluation: str, evaluated_at: str, *,
                      failed: tuple[str, str] | None = None) -> None:
    """One evaluation's gate_results as evaluate_batch_gates stores them (a failed critical
    expectation when ``failed`` = (gate, expectation))."""
    gate, expectation = failed or ("format", "expect_column_values_to_be_unique(id)")
    lake.write_batch("gate_results", {"domain": domain, "evaluation": evaluation}, {"part": pl.DataFrame([{
        "domain": domain, "evaluation": evaluation, "gate": gate, "expectation": expectation,
        "severity": "critical", "success": failed is None, "observed": "{}", "threshold": "{}",
        "rows_checked": 4, "rows_failed": 4 if failed else 0, "evaluated_at": evaluated_at, "mlflow_run_id": None,
    }], schema=tables.GATE_RESULTS)})


def write_train_set(lake: Lake, domain: str, evaluation: str, rows: list[tuple[str, str, str]]) -> None:
    frame = pl.DataFrame({
        "domain": [domain] * len(rows), "id": [r[0] for r in rows], "prompt": [r[1] for r in rows],
        "answer": [r[2] for r in rows], "metadata": [json.dumps({})] * len(rows), "difficulty": [0.5] * len(rows),
        "evaluation": [evaluation] * len(rows), "gated_at": ["2026-01-01T00:00:00+00:00"] * len(rows)})
    lake.write_batch("train_set", {"domain": domain}, {"part": tables.conform(frame, tables.TRAIN_SET)})


ROWS = [("a", "What is 1 plus 1?", "2"), ("b", "What is 2 plus 2?", "4"), ("c", "What is 3 plus 3?", "6")]


def test_a_domain_whose_latest_gates_failed_has_no_train_set(assay_home, registry):
    lake = Lake.at(assay_home)
    write_gate_result(lake, "fresh", "e1", "2026-01-01T00:00:01.000000+00:00")
    write_train_set(lake, "fresh", "e1", ROWS)
    assert len(load_training_data(["fresh"], lake, registry=registry, allow_generate=False).rows["fresh"]) == 3

    write_gate_result(lake, "fresh", "e2", "2026-01-01T00:00:02.000000+00:00",
                      failed=("format", "expect_column_values_to_match_regex(answer)"))
    for allow_generate in (False, True):  # the CLI does not fall back to generated rows either
        with pytest.raises(TrainingDataError) as caught:
            load_training_data(["fresh"], lake, registry=registry, allow_generate=allow_generate)
        message = str(caught.value)
        assert message.startswith("domain fresh: latest batch failed gate format_gate (critical: "
                                  "expect_column_values_to_match_regex(answer))"), message
        assert "e2" in message and "fix the data and re-run the gates" in message

    # a later evaluation passes, but the train set was built before it: stale, refused
    write_gate_result(lake, "fresh", "e3", "2026-01-01T00:00:03.000000+00:00")
    with pytest.raises(TrainingDataError, match="built after gate evaluation e1, not the latest \\(e3\\)"):
        load_training_data(["fresh"], lake, registry=registry, allow_generate=True)
    write_train_set(lake, "fresh", "e3", ROWS + [("d", "What is 4 plus 4?", "8")])
    data = load_training_data(["fresh"], lake, registry=registry, allow_generate=False)
    assert [r["id"] for r in data.rows["fresh"]] == ["a", "b", "c", "d"]
    assert data.sources == {"fresh": "train_set"} and data.evaluations == {"fresh": "e3"}


def test_a_train_set_without_gate_results_is_refused_and_an_ungated_domain_is_generated(assay_home, registry):
    lake = Lake.at(assay_home)
    data = load_training_data(["fresh"], lake, registry=registry, allow_generate=True, generate_n=5)
    assert data.sources == {"fresh": "generated"} and len(data.rows["fresh"]) == 5
    write_train_set(lake, "fresh", "e1", ROWS)
    with pytest.raises(TrainingDataError, match="no gate results"):
        load_training_data(["fresh"], lake, registry=registry, allow_generate=True)


def test_rows_fingerprint_is_order_independent_and_sees_every_change():
    from training.data import rows_fingerprint

    rows = [{"id": i, "prompt": p, "answer": a, "metadata": {}} for i, p, a in ROWS]
    base = rows_fingerprint(rows)
    assert rows_fingerprint(list(reversed(rows))) == base
    assert rows_fingerprint(rows[:2]) != base                                        # a row removed
    assert rows_fingerprint(rows + [{**rows[0], "id": "z"}]) != base                 # a row added
    assert rows_fingerprint([{**rows[0], "answer": "3"}, *rows[1:]]) != base         # content changed
    assert rows_fingerprint([{**rows[0], "id": "a2"}, *rows[1:]]) != base            # id changed
    assert rows_fingerprint([{**rows[0], "metadata": {"k": 1}}, *rows[1:]]) != base  # metadata changed
    assert rows_fingerprint([{**rows[0], "prompt": "what is 1 plus 1?"}, *rows[1:]]) != base  # exact text


def test_the_fingerprint_follows_the_rows_not_the_gate_run(assay_home, registry):
    """Rebuilding the train set after a re-evaluation with the same rows keeps the fingerprint."""
    lake = Lake.at(assay_home)
    write_gate_result(lake, "fresh", "e1", "2026-01-01T00:00:01.000000+00:00")
    write_train_set(lake, "fresh", "e1", ROWS)
    first = load_training_data(["fresh"], lake, registry=registry, allow_generate=False)
    write_gate_result(lake, "fresh", "e2", "2026-01-01T00:00:02.000000+00:00")
    write_train_set(lake, "fresh", "e2", list(reversed(ROWS)))
    second = load_training_data(["fresh"], lake, registry=registry, allow_generate=False)
    assert second.fingerprint() == first.fingerprint() and second.evaluations == {"fresh": "e2"}
    assert [r["id"] for r in second.rows["fresh"]] == ["a", "b", "c"], "rows are in id order"
