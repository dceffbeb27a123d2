"""The proxy over-optimisation watch (training.overoptimisation), tried on histories built to fool it:
only a learned reward rising while the verifier falls fires; noise, both rising, one flat and too few
steps do not (too few: no verdict at all)."""

from __future__ import annotations

import json
import math
import random

import pytest

from training.config import RecipeError, load_recipe
from training.overoptimisation import MIN_WINDOW, T_MIN, fit, judge, points_of, watch

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
    assert "proxy over-optimisation over steps 1-8" in verdict.describe()


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
