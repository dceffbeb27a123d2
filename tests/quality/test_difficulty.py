"""Verdicts from a policy's pass rates: all pass / all fail carry no GRPO signal, band edges."""

from __future__ import annotations

import polars as pl
import pytest

from quality import difficulty
from quality.difficulty import IN_BAND, TOO_EASY, TOO_HARD, Band, estimate_difficulty, pass_rate_verdict


@pytest.mark.parametrize("passes, samples, verdict", [
    (4, 4, TOO_EASY), (0, 4, TOO_HARD), (1, 4, IN_BAND), (2, 4, IN_BAND), (3, 4, IN_BAND),
    (1, 1, TOO_EASY), (0, 1, TOO_HARD), (0, 8, TOO_HARD), (8, 8, TOO_EASY)])
def test_default_band_verdicts(passes, samples, verdict):
    assert pass_rate_verdict(passes, samples, Band(0.05, 0.95)) == verdict


def test_all_pass_and_all_fail_are_out_even_when_the_band_is_everything():
    everything = Band(0.0, 1.0)
    assert pass_rate_verdict(4, 4, everything) == TOO_EASY
    assert pass_rate_verdict(0, 4, everything) == TOO_HARD
    assert pass_rate_verdict(2, 4, everything) == IN_BAND


def test_band_edges_are_inside_and_just_past_them_outside():
    band = Band(0.25, 0.75)  # difficulty = 1 - pass rate
    assert pass_rate_verdict(3, 4, band) == IN_BAND   # difficulty 0.25 == low
    assert pass_rate_verdict(1, 4, band) == IN_BAND   # difficulty 0.75 == high
    assert pass_rate_verdict(7, 8, band) == TOO_EASY  # 0.125 < low
    assert pass_rate_verdict(1, 8, band) == TOO_HARD  # 0.875 > high


@pytest.mark.parametrize("passes, samples", [(5, 4), (-1, 4), (0, 0)])
def test_impossible_counts_are_refused(passes, samples):
    with pytest.raises(ValueError, match="passes"):
        pass_rate_verdict(passes, samples, Band(0.05, 0.95))


def _rows(n: int) -> pl.DataFrame:
    return pl.DataFrame({"id": [f"r{i}" for i in range(n)], "prompt": ["What is 1 plus 1?"] * n,
                         "answer": ["2"] * n, "metadata": ["{}"] * n})


def test_a_registered_estimator_judges_all_pass_out_of_band_whatever_the_band():
    class Wide:  # a domain whose band admits every difficulty
        name, gate_thresholds = "wide", {"difficulty_min": 0.0, "difficulty_max": 1.0}

    difficulty.register_pass_rate_estimator(lambda domain, rows, k: [1.0, 0.0, 0.5], k=4)
    try:
        frame = estimate_difficulty(Wide(), _rows(3))
    finally:
        difficulty.register_pass_rate_estimator(None)
    assert frame["method"].to_list() == ["policy_pass_rate"] * 3
    assert frame["in_band"].to_list() == [False, False, True]


@pytest.mark.parametrize("rates", [[float("nan"), 0.5], [1.5, 0.5], [0.5]])
def test_an_estimator_returning_nan_or_out_of_range_rates_is_refused(rates):
    class Plain:
        name, gate_thresholds = "plain", {}

    difficulty.register_pass_rate_estimator(lambda domain, rows, k: rates, k=4)
    try:
        with pytest.raises(ValueError, match="one rate in \\[0, 1\\] per item"):
            estimate_difficulty(Plain(), _rows(2))
    finally:
        difficulty.register_pass_rate_estimator(None)
