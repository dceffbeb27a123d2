"""The proxy over-optimisation watch (training.overoptimisation), tried on histories built to fool it:
only a learned reward rising while the verifier falls fires; noise, both rising, one flat and too few
steps do not (too few: no verdict at all)."""

from __future__ import annotations

import json
import math
import random

import pytest

from training.config import RecipeError, load_recipe
from training.overoptimisation import MIN_WINDOW, T_MIN, fit, judge, points_of, shift, watch

WINDOW, MIN_CHANGE = 8, 0.05


def _points(learned, gold, start: int = 1):
    return [(start + i, float(a), float(b)) for i, (a, b) in enumerate(zip(learned, gold))]


def _line(start: float, per_step: float, n: int = WINDOW, noise: float = 0.0, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [start + per_step * i + rng.gauss(0, noise) for i in range(n)]


def _verdict(learned, gold):
    return judge(_points(learned, gold), "d", window=WINDOW, min_change=MIN_CHANGE)


def test_the_real_pattern_fires_with_its_evidence():
    verdict = _verdict(_line(0.5, 0.03, noise=0.01, seed=1), _line(0.6, -0.03, noise=0.01, seed=2))
    assert verdict.fired
    assert verdict.learned.slope == pytest.approx(0.03, abs=0.01) and verdict.learned.t >= T_MIN
    assert verdict.gold.slope == pytest.approx(-0.03, abs=0.01) and verdict.gold.t <= -T_MIN
    assert verdict.learned.change == pytest.approx(verdict.learned.slope * 7)  # span of steps 1..8
    assert (verdict.first_step, verdict.last_step, verdict.steps) == (1, WINDOW, WINDOW)
    evidence = verdict.evidence()
    assert json.loads(json.dumps(evidence)) == evidence  # plain data: an MLflow tag, the run state
    assert evidence["fired"] and evidence["learned"]["slope"] > 0 > evidence["gold"]["slope"]
    assert "proxy over-optimisation (trend) over steps 1-8" in verdict.describe() and verdict.rule == "trend"
    assert evidence["since_start"] is None  # 8 steps: no first window apart from the latest yet


def test_noise_without_a_trend_does_not_fire():
    fired = 0
    for seed in range(200):
        verdict = _verdict(_line(0.5, 0.0, noise=0.1, seed=seed), _line(0.5, 0.0, noise=0.1, seed=10_000 + seed))
        assert verdict is not None
        fired += verdict.fired
    assert fired <= 2  # both slopes must clear |t| >= 2: pure noise fires about 0.1-0.2% of windows
    # noise around a flat line, whatever its size, with a tiny opposite drift: under min_change
    assert not _verdict(_line(0.5, 0.004, noise=0.0005), _line(0.5, -0.004, noise=0.0005)).fired


def test_both_rising_does_not_fire():
    verdict = _verdict(_line(0.4, 0.04, noise=0.01, seed=3), _line(0.2, 0.05, noise=0.01, seed=4))
    assert not verdict.fired and verdict.learned.t > T_MIN and verdict.gold.t > T_MIN


def test_learned_flat_while_gold_falls_does_not_fire():
    """The policy got worse, but nothing the reward model pays for rose: not over-optimisation of it."""
    verdict = _verdict([0.6] * WINDOW, _line(0.7, -0.05, noise=0.01, seed=5))
    assert not verdict.fired and verdict.learned.slope == 0 and verdict.learned.t == 0
    assert verdict.gold.t <= -T_MIN


def test_learned_rising_while_gold_stays_flat_does_not_fire():
    """The reward model's gains do not transfer, but gold is not being traded away (yet)."""
    verdict = _verdict(_line(0.5, 0.05, noise=0.01, seed=6), _line(0.3, 0.0, noise=0.02, seed=7))
    assert not verdict.fired and verdict.learned.t >= T_MIN and abs(verdict.gold.change) < MIN_CHANGE
    # an exactly constant verifier (a tiny policy that never solves the task) is flat too
    assert not _verdict(_line(0.5, 0.05), [0.0] * WINDOW).fired


def test_a_rise_and_fall_on_exact_lines_fires_and_steep_noise_alone_does_not():
    exact = _verdict(_line(0.5, 0.02), _line(0.5, -0.02))
    assert exact.fired and exact.learned.t == math.inf and exact.gold.t == -math.inf
    assert exact.evidence()["learned"]["t"] == "inf"
    # a big change between the ends with a zig-zag between them: the slope's t stays small
    zigzag = [0.2, 0.9, 0.1, 0.8, 0.3, 0.9, 0.2, 0.7]
    assert not _verdict(zigzag, [1.0 - v for v in zigzag]).fired


def test_too_few_steps_give_no_verdict_and_only_the_trailing_window_counts():
    learned, gold = _line(0.5, 0.03), _line(0.6, -0.03)
    assert judge(_points(learned, gold)[:WINDOW - 1], "d", window=WINDOW, min_change=MIN_CHANGE) is None
    assert judge([], "d", window=WINDOW, min_change=MIN_CHANGE) is None
    # a long flat start, then the pattern over the last window: judged on the window, it fires
    history = _points([0.5] * 20 + learned, [0.6] * 20 + gold)
    verdict = judge(history, "d", window=WINDOW, min_change=MIN_CHANGE)
    assert verdict.fired and (verdict.first_step, verdict.last_step) == (21, 28)
    with pytest.raises(ValueError, match=f"at least {MIN_WINDOW}"):
        judge(history, "d", window=MIN_WINDOW - 1, min_change=MIN_CHANGE)
    with pytest.raises(ValueError, match="at least 3 points"):
        fit([1, 2], [0.0, 1.0])


# The first CPU proof run (bench/RESULTS.md, "Learned rewards"): GRPO on a gated SmolLM2 reward model of
# math_arith_easy learned to restate the expression ("3 + 8") instead of answering; per step, the
# reward model's mean reward and the verifier's mean score on the same 16 rollouts, as recorded.
PROOF_LEARNED = [0.0, 0.151, 0.04, 0.423, 0.277, 0.483, 0.725, 0.765, 0.568, 0.605, 0.94, 0.819, 0.94, 0.669, 0.748,
                 0.968, 0.775, 0.978, 0.971, 0.828, 0.937, 0.817, 0.816, 0.767, 0.964, 0.921, 0.957, 0.756, 0.879,
                 0.94, 0.834, 0.906, 0.923, 0.891, 0.932, 0.93, 0.933, 0.908, 0.871, 0.963]
PROOF_GOLD = [0.0, 0.0625, 0.125, 0.375, 0.0, 0.0625, 0.0, 0.375, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.125, 0.0,
              0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.4375, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
              0.0, 0.0]


def test_a_collapse_before_the_first_full_window_is_caught_since_the_start():
    """The proof run's shape: the verifier fell from a low level within the first steps, then sat at 0
    while the learned reward stayed high. No trailing window holds a falling gold line (the first
    rule never fired in that run); against the run's first window it clearly fell."""
    points = _points(PROOF_LEARNED, PROOF_GOLD)
    verdicts = {k: judge(points[:k], "d", window=WINDOW, min_change=MIN_CHANGE) for k in range(WINDOW, 41)}
    assert not any(v.rule == "trend" for v in verdicts.values())
    fired = [k for k, v in verdicts.items() if v.fired]
    assert fired and fired[0] == 25 and all(verdicts[k].rule == "since_start" for k in fired)
    first = verdicts[25]
    assert first.learned_shift.change > 0.5 and first.learned_shift.t >= T_MIN
    assert first.gold_shift.start == pytest.approx(0.125) and first.gold_shift.latest == 0.0
    assert first.gold_shift.t <= -T_MIN
    evidence = first.evidence()
    assert json.loads(json.dumps(evidence)) == evidence and evidence["rule"] == "since_start"
    assert "since the start: learned mean" in first.describe()


def test_since_the_start_needs_both_to_move_and_stays_quiet_on_noise():
    rising = _line(0.2, 0.02, n=24, noise=0.05, seed=11)
    # learned up, gold up: the hoped-for case
    assert not judge(_points(rising, _line(0.1, 0.01, n=24, noise=0.03, seed=12)), "d", window=WINDOW,
                     min_change=MIN_CHANGE).fired
    # learned flat, gold down since the start: worse, but not by exploiting the reward model
    assert not judge(_points([0.5] * 24, [0.4] * 8 + [0.0] * 16), "d", window=WINDOW, min_change=MIN_CHANGE).fired
    # learned up, gold flat (an exactly constant verifier): gains that do not transfer, nothing traded away
    assert not judge(_points(rising, [0.0] * 24), "d", window=WINDOW, min_change=MIN_CHANGE).fired
    fired = 0
    for seed in range(200):
        verdict = judge(_points(_line(0.5, 0.0, n=24, noise=0.1, seed=seed),
                                _line(0.5, 0.0, n=24, noise=0.1, seed=20_000 + seed)), "d", window=WINDOW,
                        min_change=MIN_CHANGE)
        fired += verdict.rule == "since_start"
    assert fired <= 3  # both Welch t beyond 2: noise fires about 0.1% of such verdicts
    assert shift([0.1, 0.1], [0.1, 0.1]).t == 0 and shift([0.0, 0.0], [1.0, 1.0]).t == math.inf
    with pytest.raises(ValueError, match="at least 2 values"):
        shift([0.1], [0.2, 0.3])


def test_history_rows_are_read_per_domain_skipping_steps_without_the_learned_reward():
    rows = [{"step": s, "domain": d, "learned_mean": (0.5 + 0.03 * s if d == "essays" else None),
             "score_mean": (0.6 - 0.03 * s if d == "essays" else None)}
            for s in range(1, 10) for d in ("essays", "math", "_all")]
    rows = [r for r in rows if not (r["domain"] == "essays" and r["step"] == 4)]  # not drawn at step 4
    points = points_of(rows, "essays")
    assert [p[0] for p in points] == [1, 2, 3, 5, 6, 7, 8, 9]
    assert points_of(rows, "math") == [] and watch(rows, "math", window=WINDOW, min_change=MIN_CHANGE) is None
    verdict = watch(rows, "essays", window=WINDOW, min_change=MIN_CHANGE)
    assert verdict.fired and verdict.steps == WINDOW and verdict.first_step == 1
    assert watch(rows, "essays", window=9, min_change=MIN_CHANGE) is None  # 8 recorded steps, not 9


def test_the_recipe_fields_are_validated_with_the_fix():
    config = load_recipe("tiny")
    assert (config.reward_hacking, config.reward_hacking_window, config.reward_hacking_min_change) == ("warn", 8, 0.05)
    assert load_recipe("tiny", reward_hacking="stop").reward_hacking == "stop"
    # watching is not what a run trains: the same run, resumable under either mode
    assert load_recipe("tiny", reward_hacking="stop", reward_hacking_window=5).fingerprint() == config.fingerprint()
    with pytest.raises(RecipeError, match=r"reward_hacking must be 'warn' .* or 'stop' .*got 'halt'.*"
                                          r"`reward_hacking: stop` in the recipe"):
        load_recipe("tiny", reward_hacking="halt")
    with pytest.raises(RecipeError, match=rf"reward_hacking_window must be a whole number of steps >= {MIN_WINDOW}"
                                          r".*`reward_hacking_window: 8`"):
        load_recipe("tiny", reward_hacking_window=3)
    for bad in (0, 1.5, "a lot"):
        with pytest.raises(RecipeError, match=r"reward_hacking_min_change must be a number in \(0, 1\]"):
            load_recipe("tiny", reward_hacking_min_change=bad)


def test_the_mode_reaches_a_training_process_from_the_cli_and_the_dagster_config():
    from pydantic import ValidationError

    from training.config import TrainRequest
    from training.launch import run_grpo_args, training_command
    from training.run_grpo import _apply_set

    args = run_grpo_args("tiny", reward_hacking="stop")
    assert args[-2:] == ["--set", "reward_hacking=stop"]
    assert "reward_hacking=" not in " ".join(run_grpo_args("tiny"))  # unset: the recipe's own
    assert training_command("tiny", "/tmp/r.json", reward_hacking="warn")[-2:] == ["--set", "reward_hacking=warn"]
    data: dict = {}
    _apply_set(data, "reward_hacking=stop")
    assert load_recipe("tiny", **data).reward_hacking == "stop"
    assert TrainRequest(reward_hacking="stop").reward_hacking == "stop" and TrainRequest().reward_hacking == ""
    with pytest.raises(ValidationError):
        TrainRequest(reward_hacking="halt")


def test_assay_train_has_the_flag_and_refuses_an_unknown_mode(tmp_path):
    from tests.conftest import run_cli

    help_text = run_cli("train", "--help").stdout
    assert "--reward-hacking {warn,stop}" in help_text
    bad = run_cli("train", "--reward-hacking", "halt", env={"ASSAY_HOME": str(tmp_path)})
    assert bad.returncode == 2 and "invalid choice: 'halt'" in bad.stderr


def _history(learned, same_rollout, heldout, every: int):
    """Per-step rows of one domain: learned_mean and score_mean every step, val_score every ``every``
    steps (and step 0), as the trainer writes them."""
    rows = [{"step": 0, "domain": "d", "learned_mean": None, "score_mean": None, "val_score": heldout[0]}]
    for step in range(1, len(learned) + 1):
        rows.append({"step": step, "domain": "d", "learned_mean": learned[step - 1], "score_mean": same_rollout[step - 1],
                     "val_score": heldout[step // every] if step % every == 0 else None})
    return rows


def test_the_held_out_validation_is_the_gold_signal_once_enough_validations_exist():
    """Learned rising; the verifier on the same rollouts flat (the policy pleases both on its own samples)
    while the held-out validation falls: only a watch that reads the held-out score sees it. And the
    other way round: a held-out score that holds up clears a same-rollout fall."""
    from training.overoptimisation import HELDOUT_GOLD, SAME_ROLLOUT_GOLD, heldout_points_of, heldout_window

    steps, every = 16, 2
    learned = _line(0.5, 0.03, n=steps, noise=0.005, seed=3)
    flat = _line(0.6, 0.0, n=steps, noise=0.005, seed=4)
    falling = _line(0.7, -0.05, n=steps // every + 1, noise=0.005, seed=5)  # one per validation, step 0 first
    history = _history(learned, flat, falling, every)
    points = heldout_points_of(history, "d")
    assert [p[0] for p in points] == list(range(2, steps + 1, 2))  # step 0 has no learned reward to pair
    assert points[0][1] == pytest.approx(sum(learned[:2]) / 2)  # the learned mean since the previous validation
    verdict = watch(history, "d", window=WINDOW, min_change=MIN_CHANGE, eval_every=every)
    assert verdict.fired and verdict.gold_source == HELDOUT_GOLD and verdict.steps == heldout_window(WINDOW, every)
    assert "held-out validation (gold)" in verdict.describe() and verdict.evidence()["gold_source"] == HELDOUT_GOLD
    blind = watch(history, "d", window=WINDOW, min_change=MIN_CHANGE)  # no validation: the same rollouts
    assert not blind.fired and blind.gold_source == SAME_ROLLOUT_GOLD

    holding = _history(learned, _line(0.6, -0.03, n=steps, noise=0.005, seed=6), _line(0.7, 0.0, n=9, seed=7), every)
    assert watch(holding, "d", window=WINDOW, min_change=MIN_CHANGE).fired  # the same-rollout verifier fell
    held = watch(holding, "d", window=WINDOW, min_change=MIN_CHANGE, eval_every=every)
    assert not held.fired and held.gold_source == HELDOUT_GOLD
    early = watch(history[:8], "d", window=4, min_change=MIN_CHANGE, eval_every=every)  # 3 validations so far
    assert early.gold_source == SAME_ROLLOUT_GOLD
