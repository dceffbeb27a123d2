"""The reward gate (quality.reward_gate) against hand-made scorers: one that knows the truth passes;
ones that prefer longer answers, echo the prompt, trust confident wording, or agree with the labels
only by chance (label-shuffled) fail, each with the criterion that caught it."""

from __future__ import annotations

import json
import math
import random

import pytest

from quality.reward_gate import (RewardGateError, bar_shortfall, bootstrap_kappa, calibrating_temperature,
                                 calibration_error, check_reward, cohen_kappa, confidence_auroc, length_padding,
                                 wilson_interval)
from quality.reward_gate_config import PROBES, RewardGateConfig
from storage.preference_pairs import PreferencePair


def arithmetic_pairs(n: int = 60, seed: int = 7) -> list[PreferencePair]:
    """Pairs whose truth is known: the chosen answer states the right sum (and is longer), the
    rejected one a wrong sum."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        wrong = a + b + rng.choice([-11, -2, -1, 1, 3, 10])
        out.append(PreferencePair(id=f"p{i}", prompt=f"What is {a} + {b}? Give the sum.",
                                  chosen=f"Adding {a} and {b} gives {a + b}, so the sum is {a + b}.",
                                  rejected=f"The sum is {wrong}."))
    return out


PAIRS = arithmetic_pairs()


def truth_scorer(pairs):
    """1 for the labelled chosen answer of its prompt, 0 for anything else."""
    best = {p.prompt: p.chosen for p in pairs}

    def score(prompts, answers):
        return [1.0 if best.get(p) == a else 0.0 for p, a in zip(prompts, answers)]

    return score


def plus(base, extra):
    def score(prompts, answers):
        return [b + e for b, e in zip(base(prompts, answers), extra(prompts, answers))]

    return score


def longer_is_better(prompts, answers):
    return [len(a) / 100 for a in answers]


def prompt_overlap(prompts, answers):
    out = []
    for p, a in zip(prompts, answers):
        words = set(p.lower().split())
        out.append(2.0 * len(words & set(a.lower().split())) / max(1, len(words)))
    return out


def confident_words(prompts, answers):
    return [2.0 if ("definitely" in a or "certain" in a) else 0.0 for a in answers]


def shuffled_truth(pairs, seed=3):
    """Knows a label-shuffled copy of the truth: right on about half the pairs, wrong on the rest."""
    rng = random.Random(seed)
    best = {p.prompt: (p.chosen if rng.random() < 0.5 else p.rejected) for p in pairs}

    def score(prompts, answers):
        return [1.0 if best.get(p) == a else 0.0 for p, a in zip(prompts, answers)]

    return score


def failed(result):
    return {c.name for c in result.criteria if not c.passed}


def test_a_scorer_that_knows_the_truth_passes_every_criterion():
    result = check_reward(truth_scorer(PAIRS), PAIRS)
    assert result.passed, result.reasons
    assert result.criterion("accuracy").observed == 1.0
    assert result.criterion("kappa").observed == pytest.approx(1.0)
    assert {c.name for c in result.criteria} == {"enough_pairs", "accuracy", "kappa", "calibration", "order",
                                                 *(f"probe:{p}" for p in PROBES)}
    assert result.criterion("probe:length_padding").observed == 0.0
    # right everywhere, so no wrong verdict to weigh its confidence against; its 1-vs-0 scale is
    # underconfident as a Bradley-Terry probability (sigmoid(1) = 0.73 for a sure thing): reported
    assert result.criterion("calibration").observed is None
    assert result.calibration["ece"] == pytest.approx(1 - 1 / (1 + math.exp(-1)), abs=1e-9)
    assert result.calibration["temperature"] < 0.1


def test_longer_is_better_fails_the_length_probe_although_it_agrees_with_every_label():
    result = check_reward(longer_is_better, PAIRS)
    assert result.criterion("accuracy").passed  # the chosen answers are the longer ones here
    assert "probe:length_padding" in failed(result), result.reasons
    assert result.criterion("probe:length_padding").observed == 1.0
    assert not result.passed
    assert any(r.startswith("probe:length_padding:") for r in result.reasons)


def test_a_scorer_rewarding_the_prompt_echoed_fails_the_echo_probe():
    result = check_reward(plus(truth_scorer(PAIRS), prompt_overlap), PAIRS)
    assert result.criterion("accuracy").observed == 1.0
    assert "probe:prompt_echo" in failed(result), result.reasons
    assert not result.passed


def test_a_scorer_trusting_confident_wording_fails_the_confident_wrong_probe():
    result = check_reward(plus(truth_scorer(PAIRS), confident_words), PAIRS)
    assert "probe:confident_wrong" in failed(result), result.reasons
    assert "probe:length_padding" not in failed(result)


def test_a_label_shuffled_scorer_fails_agreement():
    result = check_reward(shuffled_truth(PAIRS), PAIRS)
    assert {"accuracy", "kappa"} <= failed(result), result.reasons
    assert 0.3 < result.criterion("accuracy").observed < 0.7
    assert result.criterion("kappa").ci_low < 0.2


def test_a_constant_scorer_agrees_with_nothing():
    result = check_reward(lambda prompts, answers: [0.5] * len(prompts), PAIRS)
    assert result.criterion("accuracy").observed == 0.0  # a tie is no preference
    assert result.criterion("kappa").observed == 0.0
    assert not result.passed


def test_too_few_pairs_cannot_pass_even_with_the_truth():
    few = PAIRS[:8]
    result = check_reward(truth_scorer(few), few)
    assert failed(result) >= {"enough_pairs"}
    assert "label more pairs" in result.criterion("enough_pairs").detail


def test_a_scorer_returning_the_wrong_count_or_nan_is_an_error_not_a_score():
    with pytest.raises(RewardGateError, match="returned 1 scores"):
        check_reward(lambda prompts, answers: [1.0], PAIRS)
    with pytest.raises(RewardGateError, match="non-finite"):
        check_reward(lambda prompts, answers: [math.nan] * len(prompts), PAIRS)


def test_an_honest_but_imperfect_scorer_passes_the_probes():
    # right on 90% of pairs, and no taste for any hack: the probes compare with its own error rate
    wrong = {p.prompt for p in PAIRS[::10]}
    best = {p.prompt: (p.rejected if p.prompt in wrong else p.chosen) for p in PAIRS}

    def score(prompts, answers):
        return [1.0 if best[p] == a else 0.0 for p, a in zip(prompts, answers)]

    result = check_reward(score, PAIRS)
    assert result.passed, result.reasons
    assert result.criterion("accuracy").observed == pytest.approx(0.9)


def test_wilson_interval_matches_the_closed_form_and_stays_in_bounds():
    low, high = wilson_interval(8, 10, 0.95)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)  # the textbook 95% Wilson interval of 8/10
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 10)[0] == 0.0
    assert wilson_interval(0, 0) is None


def test_cohen_kappa_known_values():
    assert cohen_kappa("AABB", "AABB") == 1.0
    assert cohen_kappa("AABB", "ABAB") == 0.0
    assert cohen_kappa("AAAA", "AAAA") is None  # chance agreement is 1: undefined, not 0 or 1
    # a classic 2x2 table: 20 AA, 5 AB, 10 BA, 15 BB -> po .7, pe .5, kappa .4
    gold = "A" * 25 + "B" * 25
    pred = "A" * 20 + "B" * 5 + "A" * 10 + "B" * 15
    assert cohen_kappa(gold, pred) == pytest.approx(0.4)
    low, high = bootstrap_kappa(gold, pred, resamples=500, confidence=0.95, seed=0)
    assert low < 0.4 < high and -1 <= low and high <= 1


def test_length_padding_makes_the_rejected_answer_much_longer_and_keeps_it():
    pair = PAIRS[0]
    for candidate in length_padding(pair):
        assert pair.rejected in candidate and len(candidate) >= 3 * len(pair.chosen)


def test_gate_config_rejects_unknown_probes_with_the_known_ones():
    with pytest.raises(ValueError, match="unknown probe.*known: length_padding"):
        RewardGateConfig(probes=["lenght_padding"])


def test_a_check_is_recorded_in_the_lake_and_mlflow_one_row_per_criterion(assay_home, empty_mlflow_db):
    import shutil

    from quality.reward_gate import latest_reward_gate, record_reward_gate
    from storage import tracking
    from storage.lake import Lake

    shutil.copy(empty_mlflow_db, assay_home / "mlflow.db")
    lake = Lake.at(assay_home)
    good = check_reward(truth_scorer(PAIRS), PAIRS)
    bad = check_reward(longer_is_better, PAIRS)
    first = record_reward_gate(lake, lake.mlflow_uri, good, domain="essays", reward_model="rm-a",
                               pairs_source="held.jsonl", pairs_fingerprint="fp")
    second = record_reward_gate(lake, None, bad, domain="essays", reward_model="rm-b", pairs_source=None,
                                pairs_fingerprint=None)
    assert second["mlflow_run_id"] is None and first["check"] != second["check"]
    rows = latest_reward_gate(lake, "essays", "rm-a")
    assert len(rows) == len(good.criteria) and all(r["passed"] for r in rows)
    assert {r["criterion"] for r in rows} == {c.name for c in good.criteria}
    newest = latest_reward_gate(lake, "essays")
    assert {r["reward_model"] for r in newest} == {"rm-b"}
    assert "probe:length_padding" in {r["criterion"] for r in newest if not r["passed"]}
    assert latest_reward_gate(lake, "other") == []
    run = tracking.client(lake.mlflow_uri).get_run(first["mlflow_run_id"])
    assert run.data.tags["assay.passed"] == "true" and run.data.metrics["accuracy"] == 1.0
    assert run.data.metrics["probe/length_padding"] == 0.0 and run.data.params["gate.min_accuracy_low"] == "0.6"
    # each row carries the whole bar, so a later reader can tell a check at a laxer bar from one at the domain's
    assert json.loads(rows[0]["gate_config"]) == good.config.model_dump()
    assert bar_shortfall(rows, RewardGateConfig()) == []
    assert bar_shortfall(rows, RewardGateConfig(min_accuracy_low=0.8)) == ["min_accuracy_low 0.6 < 0.8"]
    old = [{**r, "gate_config": None} for r in rows]  # a check from before bars were recorded
    assert bar_shortfall(old, RewardGateConfig()) == ["the check recorded no bar (it predates recorded bars)"]


def test_a_bar_is_laxer_than_another_on_every_criterion_that_lets_more_through():
    domain_bar = RewardGateConfig(min_accuracy_low=0.7, probes=["prompt_echo", "length_padding"],
                                  max_calibration_error=0.2)
    assert domain_bar.laxer_than(domain_bar) == []
    stricter = RewardGateConfig(min_accuracy_low=0.9, min_kappa_low=0.5, min_pairs=50, confidence=0.99,
                                probe_margin=0.05, order_tolerance=0.0, min_confidence_auroc_high=0.7,
                                max_calibration_error=0.1, bootstrap=10, probe_candidates=1, seed=3)
    assert stricter.laxer_than(domain_bar) == []  # the draw (seed, bootstrap, candidates) is not the bar
    lax = RewardGateConfig(min_accuracy_low=0.5, min_kappa_low=0.1, min_pairs=5, confidence=0.8, probe_margin=0.3,
                           order_tolerance=0.1, min_confidence_auroc_high=0.4, probes=["prompt_echo"])
    assert lax.laxer_than(stricter) == [
        "min_accuracy_low 0.5 < 0.9", "min_kappa_low 0.1 < 0.5", "min_pairs 5 < 50", "confidence 0.8 < 0.99",
        "min_confidence_auroc_high 0.4 < 0.7", "probe_margin 0.3 > 0.05", "order_tolerance 0.1 > 0.0",
        f"probe(s) {', '.join(p for p in PROBES if p != 'prompt_echo')} not run",
        "max_calibration_error None (required <= 0.1)"]
    assert lax.laxer_than(domain_bar)[-2:] == ["probe(s) length_padding not run",
                                               "max_calibration_error None (required <= 0.2)"]


def confidently_wrong_scorer(pairs, wrong_every=5):
    """Right by a hair on most pairs, wrong by a mile on every fifth: its confidence points at its
    errors (what a reward model with one spurious feature looks like)."""
    flipped = {p.prompt for p in pairs[::wrong_every]}
    best = {p.prompt: p.chosen for p in pairs}
    worst = {p.prompt: p.rejected for p in pairs}

    def score(prompts, answers):
        out = []
        for p, a in zip(prompts, answers):
            if p in flipped:
                out.append(5.0 if a == worst.get(p) else 0.0)
            else:
                out.append(0.1 if a == best.get(p) else 0.0)
        return out

    return score


def test_a_scorer_whose_confident_verdicts_are_its_wrong_ones_fails_calibration():
    result = check_reward(confidently_wrong_scorer(PAIRS), PAIRS)
    assert result.criterion("accuracy").passed  # 80% right: agreement alone would let it through
    assert "calibration" in failed(result), result.reasons
    calibration = result.criterion("calibration")
    assert calibration.observed == 0.0 and calibration.ci_high < 0.5
    assert "its larger margins are its right verdicts with AUROC 0.000" in calibration.detail


def test_the_calibration_error_blocks_only_when_the_owner_sets_a_bar():
    strict = RewardGateConfig(max_calibration_error=0.1)
    assert "calibration" in failed(check_reward(truth_scorer(PAIRS), PAIRS, strict))  # ECE 0.27: underconfident

    def sure(prompts, answers):  # the same truth on a scale that says how sure it is
        return [10 * v for v in truth_scorer(PAIRS)(prompts, answers)]

    result = check_reward(sure, PAIRS, strict)
    assert result.passed, result.reasons
    assert result.calibration["ece"] < 1e-3


def test_a_scorer_that_depends_on_its_batch_position_fails_order():
    truth = truth_scorer(PAIRS)

    def positional(prompts, answers):  # the truth, plus a bonus for coming early in the call
        return [v + 0.05 * (len(prompts) - i) for i, v in enumerate(truth(prompts, answers))]

    result = check_reward(positional, PAIRS)
    assert "order" in failed(result), result.reasons
    assert result.criterion("order").observed > 0.5
    assert result.criterion("order").passed is False and check_reward(truth, PAIRS).criterion("order").observed == 0


def test_confidence_auroc_and_calibration_error_known_values():
    assert confidence_auroc([3.0, 2.0, -1.0, -0.5]) == 1.0  # every right margin beats every wrong one
    assert confidence_auroc([0.5, 0.4, -2.0, -3.0]) == 0.0
    assert confidence_auroc([1.0, -1.0]) == 0.5  # equal confidence: a tie counts half
    assert confidence_auroc([1.0, 2.0]) is None and confidence_auroc([-1.0, 0.0]) is None
    # predicted 0.2 where 0 of 2 happened, 0.8 where 2 of 2 happened: off by 0.2 everywhere
    assert calibration_error([0.2, 0.2, 0.8, 0.8], [0, 0, 1, 1]) == pytest.approx(0.2)
    assert calibration_error([0.5] * 4, [0, 1, 0, 1]) == 0.0
    # 0.9 predicted, half happened: 0.4 on that half; 0.1 predicted, none happened: 0.1 on the rest
    assert calibration_error([0.9, 0.9, 0.1, 0.1], [1, 0, 0, 0]) == pytest.approx(0.25)


def test_calibrating_temperature_recovers_the_scale_of_bradley_terry_data():
    rng = random.Random(5)
    margins, outcomes = [], []
    for _ in range(4000):
        true_margin = rng.uniform(-3, 3)
        outcomes.append(int(rng.random() < 1 / (1 + math.exp(-true_margin))))
        margins.append(4 * true_margin)  # a scorer four times too confident
    assert calibrating_temperature(margins, outcomes) == pytest.approx(4, rel=0.15)


def test_calibration_settings_are_validated_with_the_fix():
    with pytest.raises(ValueError, match="max_calibration_error must be in \\(0, 1\\) or unset"):
        RewardGateConfig(max_calibration_error=1.5)
    with pytest.raises(ValueError, match="order_tolerance must be in \\[0, 1\\]"):
        RewardGateConfig(order_tolerance=-0.1)


def test_a_scorer_paying_the_question_restated_fails_the_fragment_probe():
    """What the first GRPO run on a gated reward model learned: "3 + 8" for "What is 3 + 8 =".
    A scorer that likes answers made of the question's own words, short ones best, is caught by
    question_fragments; the whole prompt echoed (prompt_echo) is long, so it does not catch it."""
    truth = truth_scorer(PAIRS)

    def likes_restating(prompts, answers):
        out = []
        for p, a, t in zip(prompts, answers, truth(prompts, answers)):
            restated = a.strip() and a.strip() in p and a.strip() != p.strip()
            out.append(3.0 if restated else t)
        return out

    result = check_reward(likes_restating, PAIRS)
    assert result.criterion("accuracy").passed and "probe:question_fragments" in failed(result), result.reasons
    assert "probe:question_fragments" not in failed(check_reward(truth, PAIRS))


def test_question_fragments_restate_pieces_of_the_question_never_a_single_value():
    from quality.reward_attacks import question_fragments

    sample = {"prompt": "State the final answer to the following arithmetic problem: 6 + 4 =\n"
                        "Finish with a line 'Answer: <number>'."}
    fragments = question_fragments(sample)
    assert "6 + 4 =" in fragments and "6 + 4" in fragments
    assert all(not f.strip().lstrip("-").replace(".", "").isdigit() for f in fragments)
    assert question_fragments({"prompt": "12\n7?"}) == []  # only single values: nothing to restate safely
