"""The promotion rule: refuse on regression or a missing protected domain, otherwise promote."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from evaluation.promotion import decide_promotion
from evaluation.promotion_policy import PromotionPolicy
from evaluation.regression import compare_results


def _rows(domain, p, rng, k=4):
    return pl.DataFrame([{"domain": domain, "item_id": f"i{i}", "sample_idx": s, "score": float(rng.random() < pi)}
                         for i, pi in enumerate(p) for s in range(k)])


def _report(shift_math: float, protected=("math",), drop_code_domain: bool = False):
    rng = np.random.default_rng(0)
    p = np.linspace(0.3, 0.7, 200)
    base = pl.concat([_rows("math", p, rng), _rows("code", p, rng)])
    cand_parts = [_rows("math", p + shift_math, rng)] + ([] if drop_code_domain else [_rows("code", p, rng)])
    return compare_results(base, pl.concat(cand_parts), protected=protected, baseline_name="champ",
                           candidate_name="cand")


def test_regression_in_a_protected_domain_refuses():
    decision = decide_promotion("cand", "champ", {"champion": _report(-0.2)})
    assert not decision.promoted and decision.blocking == ["math"]
    assert "regression vs champion (champ): math" in decision.reason


def test_missing_protected_domain_refuses():
    decision = decide_promotion("cand", "champ", {"champion": _report(0.0, protected=("code",), drop_code_domain=True)})
    assert not decision.promoted and decision.blocking == ["missing:code"]


def test_no_regression_promotes_and_names_improvements():
    decision = decide_promotion("cand", "champ", {"champion": _report(+0.2), "anchor": _report(0.0)})
    assert decision.promoted and "improved with evidence (95% CI above 0): math" in decision.reason
    # the p of an improvement's drop test (near 1) would read as "not significant": left off
    improved = decision.reason.split("improved with evidence (95% CI above 0): ", 1)[1].split(";")[0]
    assert "p=" not in improved and "pts [" in improved


def _small_gain_report():
    """The issue's case: the only gain (+20.8 points on 24 items) is inside the noise: its CI
    includes 0 and the sweep's MDE (36.8 points there) is larger than the gain."""
    base = pl.DataFrame([{"domain": "math", "item_id": f"i{i}", "sample_idx": 0, "score": float(i < 12)}
                         for i in range(24)])
    cand = pl.DataFrame([{"domain": "math", "item_id": f"i{i}", "sample_idx": 0,
                          "score": float(i < 12 and i not in (0, 1) or i in (12, 13, 14, 15, 16, 17, 18))}
                         for i in range(24)])
    return compare_results(base, cand, protected=("math",), baseline_name="champ", candidate_name="cand")


@pytest.mark.parametrize("rule", ["no_regression", "improvement"])
def test_the_verdict_says_whether_anything_improved_with_evidence_and_names_the_rule(rule):
    report = _small_gain_report()
    (math,) = report.domains
    assert math.delta > 0 and math.ci_low < 0, math  # a gain, but no evidence of one
    decision = decide_promotion("cand", "champ", {"champion": report}, PromotionPolicy(promote_when=rule))
    gain = f"math {100 * math.delta:+.1f} pts [{100 * math.ci_low:+.1f}, {100 * math.ci_high:+.1f}]"
    nothing_better = f"no domain improved with evidence: the largest gain, {gain}, has a 95% CI that includes 0"
    if rule == "no_regression":
        assert decision.promoted and decision.blocking == []
        assert decision.reason.startswith("promoted (rule promote_when: no_regression = promote when nothing "
                                          "regressed, no improvement required): no protected domain regressed")
    else:
        assert not decision.promoted and decision.blocking == ["no_improvement"]
        assert decision.reason.startswith("refused (rule promote_when: improvement = promote only when a domain "
                                          "improved with evidence and nothing regressed): no protected domain "
                                          "regressed (Holm), none is missing or not comparable, but ")
    assert nothing_better in decision.reason, decision.reason
    assert "MDE" in decision.reason.split(nothing_better, 1)[1]


@pytest.mark.parametrize("rule", ["no_regression", "improvement"])
def test_an_improvement_with_evidence_promotes_under_either_rule(rule):
    decision = decide_promotion("cand", "champ", {"champion": _report(+0.2)}, PromotionPolicy(promote_when=rule))
    assert decision.promoted, decision.reason
    assert decision.reason.startswith(f"promoted (rule promote_when: {rule} = ")
    assert "improved with evidence (95% CI above 0): math +" in decision.reason


def test_a_refusal_names_the_rule_too_and_the_first_champion_says_when_the_rule_applies():
    refused = decide_promotion("cand", "champ", {"champion": _report(-0.2)}, PromotionPolicy(promote_when="improvement"))
    assert refused.reason.startswith("refused (rule promote_when: improvement = ") and refused.blocking == ["math"]
    first = decide_promotion("cand", None, {}, PromotionPolicy(promote_when="improvement"))
    assert first.promoted and "applies from the next candidate on" in first.reason


def test_the_rule_is_a_documented_policy_setting(tmp_path):
    from evaluation.promotion_policy import SHIPPED_POLICY, ActivePolicy, PolicyError, load_policy, parse_policy

    assert load_policy(tmp_path).policy.promote_when == "no_regression"  # the shipped default
    assert "promote_when: no_regression" in SHIPPED_POLICY.read_text()
    assert parse_policy("promote_when: improvement\n", "x").promote_when == "improvement"
    with pytest.raises(PolicyError, match="promote_when"):
        parse_policy("promote_when: sometimes\n", "team.yaml")
    lines = ActivePolicy(PromotionPolicy(promote_when="improvement"), "x").describe()
    assert ("promotes when: promote_when: improvement = promote only when a domain improved with evidence and "
            "nothing regressed") in lines


def test_anchor_regression_also_refuses_and_champion_is_not_repromoted():
    assert not decide_promotion("cand", "champ", {"champion": _report(0.0), "anchor": _report(-0.2)}).promoted
    assert not decide_promotion("champ", "champ", {}).promoted


# -- compare like with like ----------------------------------------------------------------------

GREEDY64 = {"max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "stop": [], "prompt_format": "raw"}
SAMPLED256 = {**GREEDY64, "max_new_tokens": 256, "temperature": 0.7, "top_p": 0.95}


def _sweep(lake, checkpoint: str, domain: str, params: dict, scores: list[float], at: str, k: int = 1):
    """One sweep of `domain` written to the lake as evaluation.sweep writes it (results + summary)."""
    from evaluation.comparability import gen_identity
    from storage.tables import RESULTS, SWEEP_SUMMARY, conform

    config, text = gen_identity(params)
    n = len(scores) // k
    rows = pl.DataFrame({"checkpoint": checkpoint, "domain": domain, "item_id": [f"{domain}-{i}" for i in range(n) for _ in range(k)],
                         "sample_idx": [s for _ in range(n) for s in range(k)], "score": scores,
                         "gen_config": config, "gen_params": text, "created_at": at})
    lake.write_batch("results", {"checkpoint": checkpoint, "domain": domain, "batch": f"{config}-{at[-2:]}"},
                     {"part": conform(rows, RESULTS)})
    summary = pl.DataFrame([{"checkpoint": checkpoint, "domain": domain, "n": n, "k": k, "gen_config": config,
                             "gen_params": text, "created_at": at}])
    lake.write_batch("sweep_summary", {"checkpoint": checkpoint, "domain": domain}, {"part": conform(summary, SWEEP_SUMMARY)})
    return config


def test_domains_are_compared_on_a_config_both_swept_or_reported_not_comparable(assay_home):
    from storage.lake import Lake
    from evaluation.promotion import compare_checkpoints

    lake = Lake.at(assay_home)
    rng = np.random.default_rng(1)
    good = [float(x) for x in rng.random(40) < 0.6]
    # the champion: greedy at 64 tokens on both domains
    g64 = _sweep(lake, "champ", "math", GREEDY64, good, "2026-01-01T00:00:01")
    _sweep(lake, "champ", "safety", GREEDY64, good, "2026-01-01T00:00:02")
    # the candidate: greedy 64 on math first, then (its latest sweeps) sampled at 256 tokens on both
    _sweep(lake, "cand", "math", GREEDY64, good, "2026-01-02T00:00:01")
    _sweep(lake, "cand", "math", SAMPLED256, [0.0] * 40, "2026-01-02T00:00:02")
    _sweep(lake, "cand", "safety", SAMPLED256, [0.0] * 40, "2026-01-02T00:00:03")

    report = compare_checkpoints(lake, "cand", "champ", protected=["safety"])
    (math,) = report.domains
    # math: the candidate's latest config is not the champion's, its earlier greedy-64 one is
    assert math.domain == "math" and math.gen_config == g64 and math.delta == 0 and math.verdict == "ok"
    (nc,) = report.not_comparable
    assert nc["domain"] == "safety"
    assert nc["difference"] == "max_new_tokens: 64 vs 256; temperature: 0.0 vs 0.7; top_p: 1.0 vs 0.95"
    stored = lake.read("regression").filter(pl.col("domain") == "safety").row(0, named=True)
    assert stored["verdict"] == "not_comparable" and "max_new_tokens: 64 vs 256" in stored["detail"]

    decision = decide_promotion("cand", "champ", {"champion": report})
    assert not decision.promoted and decision.blocking == ["not_comparable:safety"]
    assert "safety not comparable vs champion (champ): max_new_tokens: 64 vs 256; temperature: 0.0 vs 0.7" in decision.reason


def test_underpowered_protected_domain_refuses_unless_the_policy_allows_it():
    from evaluation.promotion_policy import PromotionPolicy

    rng = np.random.default_rng(0)
    base = pl.concat([_rows("math", np.full(200, 0.5), rng), _rows("safety", np.full(4, 0.9), rng)])
    cand = pl.concat([_rows("math", np.full(200, 0.5), rng), _rows("safety", np.full(4, 0.9), rng)])
    report = compare_results(base, cand, protected=["safety"], baseline_name="champ", candidate_name="cand")
    assert {d.domain: d.verdict for d in report.domains}["safety"] == "underpowered"  # 4 items: p >= 1/16
    refused = decide_promotion("cand", "champ", {"champion": report})
    assert not refused.promoted and refused.blocking == ["underpowered:safety"]
    assert "cannot show it did not regress" in refused.reason
    allowed = decide_promotion("cand", "champ", {"champion": report}, PromotionPolicy(on_underpowered="allow"))
    assert allowed.promoted and "unchecked vs champion (underpowered, on_underpowered: allow): safety" in allowed.reason


def test_block_on_any_lets_an_unprotected_drop_block():
    from evaluation.promotion_policy import PromotionPolicy

    report = _report(-0.2, protected=())          # math drops, but nothing is protected
    assert [d.verdict for d in report.domains if d.domain == "math"] == ["warn"]
    assert decide_promotion("cand", "champ", {"champion": report}).promoted
    strict = decide_promotion("cand", "champ", {"champion": report}, PromotionPolicy(block_on="any"))
    assert not strict.promoted and strict.blocking == ["warn:math"]
    assert '"block_on": "any"' in strict.policy  # the policy applied is recorded with the decision


# -- compare-and-set: two promotions against the same observed champion, exactly one wins ---------

def _register(uri: str, checkpoints: list[str]) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from storage.tracking import REGISTERED_MODEL

    client = MlflowClient(tracking_uri=uri)
    try:
        client.create_registered_model(REGISTERED_MODEL)
    except MlflowException:
        pass
    for name in checkpoints:
        client.create_model_version(REGISTERED_MODEL, source=f"file:///models/{name}", tags={"checkpoint": name})


def _promoter(home: str, uri: str, tasks, barrier, done) -> None:
    """Promote what `tasks` says, released together with the other promoter by `barrier`."""
    from pathlib import Path

    from storage.lake import Lake
    from evaluation.promotion import PromotionDecision, apply_promotion

    lake = Lake(Path(home))
    while (task := tasks.get()) is not None:
        candidate, observed = task
        barrier.wait(timeout=120)
        apply_promotion(lake, uri, PromotionDecision(candidate, observed, True, f"promoted: test {candidate}"))
        done.put(candidate)


def _race(assay_home, reps: int, start_workers) -> None:
    """`reps` rounds: two candidates promoted at the same moment against the champion both saw."""
    from storage.lake import Lake
    from evaluation.promotion import PromotionDecision, apply_promotion
    from storage.tracking import current_champion

    lake = Lake.at(assay_home)
    uri = f"sqlite:///{assay_home / 'mlflow.db'}"
    names = ["c0"] + [f"{side}{i}" for i in range(reps) for side in "ab"]
    _register(uri, names)
    apply_promotion(lake, uri, PromotionDecision("c0", None, True, "first champion"))
    tasks, done, stop = start_workers(str(assay_home), uri)
    try:
        champion = "c0"
        for i in range(reps):
            a, b = f"a{i}", f"b{i}"
            tasks[0].put((a, champion))
            tasks[1].put((b, champion))
            assert {done.get(timeout=120), done.get(timeout=120)} == {a, b}
            rows = lake.read("promotions").filter(pl.col("candidate").is_in([a, b]))
            winners = rows.filter(pl.col("promoted"))["candidate"].to_list()
            assert len(winners) == 1, f"round {i}: {len(winners)} promotions won against champion {champion}: {winners}"
            (winner,) = winners
            loser = b if winner == a else a
            assert current_champion(uri) == winner  # the alias and the promotions table agree
            (lost,) = rows.filter(pl.col("candidate") == loser).iter_rows(named=True)
            assert not lost["promoted"] and lost["previous_champion"] == champion
            assert f"champion changed from {champion} to {winner} since the comparison" in lost["reason"]
            champion = winner
    finally:
        stop()
    history = lake.read("promotions").filter(pl.col("promoted")).sort("created_at")
    assert history.height == reps + 1 and history["candidate"][-1] == current_champion(uri)


def test_concurrent_promotions_in_two_processes_exactly_one_wins(assay_home, empty_mlflow_db):
    import multiprocessing as mp
    import shutil

    shutil.copy(empty_mlflow_db, assay_home / "mlflow.db")
    ctx = mp.get_context("spawn")

    def start(home, uri):
        tasks = [ctx.Queue(), ctx.Queue()]
        done, barrier = ctx.Queue(), ctx.Barrier(2)
        procs = [ctx.Process(target=_promoter, args=(home, uri, q, barrier, done), daemon=True) for q in tasks]
        for proc in procs:
            proc.start()

        def stop():
            for q in tasks:
                q.put(None)
            for proc in procs:
                proc.join(timeout=60)
                assert proc.exitcode == 0
            barrier.abort()  # (also keeps the barrier alive until the workers are done with it)

        return tasks, done, stop

    _race(assay_home, 12, start)


def test_concurrent_promotions_in_two_threads_exactly_one_wins(assay_home, empty_mlflow_db):
    import queue
    import shutil
    import threading

    shutil.copy(empty_mlflow_db, assay_home / "mlflow.db")

    def start(home, uri):
        tasks = [queue.Queue(), queue.Queue()]
        done, barrier = queue.Queue(), threading.Barrier(2)
        threads = [threading.Thread(target=_promoter, args=(home, uri, q, barrier, done), daemon=True) for q in tasks]
        for thread in threads:
            thread.start()

        def stop():
            for q in tasks:
                q.put(None)
            for thread in threads:
                thread.join(timeout=60)

        return tasks, done, stop

    _race(assay_home, 25, start)


def test_a_promotion_whose_champion_moved_is_recorded_as_refused(assay_home, empty_mlflow_db):
    import shutil

    from storage.lake import Lake
    from evaluation.promotion import PromotionDecision, apply_promotion
    from storage.tracking import current_champion

    shutil.copy(empty_mlflow_db, assay_home / "mlflow.db")
    lake = Lake.at(assay_home)
    uri = f"sqlite:///{assay_home / 'mlflow.db'}"
    _register(uri, ["x", "y", "late"])
    apply_promotion(lake, uri, PromotionDecision("x", None, True, "first"))
    apply_promotion(lake, uri, PromotionDecision("y", "x", True, "promoted: y"))
    late = apply_promotion(lake, uri, PromotionDecision("late", "x", True, "promoted: late"))  # compared with x
    assert not late.promoted and late.blocking == ["champion_changed"]
    assert late.reason.startswith("refused: champion changed from x to y since the comparison")
    assert current_champion(uri) == "y"
    row = lake.read("promotions", where={"decision": late.decision_id}).row(0, named=True)
    assert row["candidate"] == "late" and not row["promoted"] and row["previous_champion"] == "x"
