"""A domain's difficulty measurement (evaluation.policy_difficulty) and how the gate uses it:
the real tiny policy through torch, the real lake and MLflow store, real GE suites."""

from __future__ import annotations

import polars as pl
import pytest

from domains import Domain
from quality import difficulty
from quality.difficulty_settings import DifficultySettings

SETTINGS = DifficultySettings(samples=2, max_new_tokens=6, backend="torch")


def _domain(name="pd_dom"):
    def samples(split, n, seed):
        base = 0 if split == "train" else 50_000
        for i in range(n):
            k = base + seed * 1000 + i
            yield {"id": f"{name}-{split}-{k}", "prompt": f"What is {k} plus {k + 7} minus 3?", "answer": str(2 * k + 4),
                   "metadata": {"difficulty": 0.5}}

    # exact answers only: the tiny policy never writes them, every item is too hard
    return Domain(name=name, owner="t@x", description="d", samples=samples,
                  score=lambda c, s: float(c.strip() == s["answer"]), eval_size=6)


def test_policy_rates_decide_and_a_missing_one_is_never_guessed():
    rows = pl.DataFrame({"id": ["a", "b"], "prompt": ["What is 1 plus 2?", "p2"], "answer": ["3", "2"],
                         "metadata": ['{"difficulty": 0.5}', None]})
    rates = pl.DataFrame({"id": ["a", "b"], "passes": [4, 2], "samples": [4, 4]})
    difficulty.register_pass_rate_estimator(lambda domain, items, k: [0.5] * len(items), k=4)
    try:  # measured rates win over a registered estimator and over the item's own metadata
        est = difficulty.estimate_difficulty(_domain(), rows, policy_rates=rates)
        with pytest.raises(KeyError, match="1 item"):
            difficulty.estimate_difficulty(_domain(), rows, policy_rates=rates.head(1))
    finally:
        difficulty.register_pass_rate_estimator(None)
    assert est["method"].to_list() == ["policy_pass_rate"] * 2 and est["pass_rate"].to_list() == [1.0, 0.5]
    assert est["in_band"].to_list() == [False, True]


def test_settings_refuse_copies_of_one_greedy_sample_and_say_which_estimate():
    with pytest.raises(ValueError, match="copies of one greedy completion"):
        DifficultySettings(samples=4, temperature=0)
    assert DifficultySettings(estimate="heuristic").describe().startswith("heuristic")
    assert "base-tiny over K=2" in SETTINGS.describe("base-tiny")


@pytest.mark.slow
def test_measurement_feeds_the_gate_and_new_rows_need_a_new_measurement(tiny_home, tmp_path):
    import json

    from evaluation.policy_difficulty import DifficultyNotMeasured, current_difficulty, measure_domain_difficulty
    from quality.batch_gates import evaluate_batch_gates
    from quality.ingest import ingest_file, ingest_generated
    from storage.lake import Lake

    lake = Lake.at(tiny_home)
    domain = _domain()
    ingest_generated(lake, domain, train_n=8, all_domains=[domain])
    measured = measure_domain_difficulty(lake, lake.mlflow_uri, domain, SETTINGS, dtype="float32")
    summary = measured.summary()
    assert (summary["policy"], summary["items"], summary["computed"]) == ("base-tiny", 8, 8)
    assert summary["verdicts"] == {"too_hard": 8} and summary["histogram"][0]["items"] == 8
    stored = current_difficulty(lake, domain.name)
    assert stored.height == 8 and set(stored["checkpoint"]) == {"base-tiny"}

    result = evaluate_batch_gates(lake, domain)
    assert result.severity("difficulty") == "ERROR" and result.stats["mean_pass_rate"] == 0.0
    messages = [o.message for o in result.outcomes["difficulty"] if not o.success]
    assert any(m.startswith("mean pass rate 0.00 < 0.10") for m in messages), messages
    assert result.stats["difficulty_estimate"]["estimate"] == "policy"
    # training's refusal names the failed check and says what to do
    from quality.gate_history import train_set_problem

    assert "mean pass rate 0.00 < 0.10: add easier items" in train_set_problem(lake, domain.name, None)

    # a new batch the measurement has not seen: the gate refuses to judge it (no heuristic stand-in)
    path = tmp_path / "more.jsonl"
    path.write_text("\n".join(json.dumps({"id": f"new-{i}", "prompt": f"What is {i} plus {i + 9} minus 3?",
                                          "answer": str(2 * i + 6)}) for i in range(900, 904)) + "\n")
    ingest_file(lake, domain, path)
    with pytest.raises(DifficultyNotMeasured, match="materialize policy_pass_rates"):
        evaluate_batch_gates(lake, domain)
    again = measure_domain_difficulty(lake, lake.mlflow_uri, domain, SETTINGS, dtype="float32")
    assert (again.computed, again.cached) == (4, 8)  # only the new rows cost generation


def test_gate_results_written_before_the_message_column_still_read(assay_home):
    from quality.gate_history import latest_verdict
    from storage import tables
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    old = {k: v for k, v in tables.GATE_RESULTS.items() if k != "message"}
    row = {"domain": "d", "evaluation": "e1", "gate": "format", "expectation": "x", "severity": "critical",
           "success": False, "observed": "1", "threshold": "{}", "rows_checked": 1, "rows_failed": 1,
           "evaluated_at": "2026-01-01T00:00:00", "mlflow_run_id": None}
    lake.write_batch("gate_results", {"domain": "d", "evaluation": "e1"}, {"part": pl.DataFrame([row], schema=old)})
    verdict = latest_verdict(lake, "d")
    assert not verdict.passed and verdict.advice == () and verdict.describe() == "format_gate (critical: x)"
