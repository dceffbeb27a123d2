"""Item difficulty: how hard a train item is for the current policy, and the learnable band.

Definition: ``difficulty = 1 - pass rate`` of the current policy over ``k`` samples. GRPO learns
nothing from an item that every sample solves (difficulty 0) or every sample fails (difficulty
1): all rewards in its group are equal, so its advantages are zero. The gate keeps the batch in a
**learnable band** ``[difficulty_min, difficulty_max]`` (defaults 0.05 and 0.95, overridable per
domain in ``gate_thresholds``), reports the share of zero-signal items, and compares the
distribution with the last accepted batch (quantiles). Rows outside the band are quarantined as
``difficulty_out_of_band`` (kept in the lake, not deleted) and left out of the train set.

Estimators, first match wins:

0. ``policy_pass_rate`` from measured rates: what the pipeline's gate uses. The
   ``policy_pass_rates`` asset measures the domain's train rows on the difficulty policy
   (:mod:`evaluation.policy_difficulty`) and the gate passes them as ``policy_rates``.
1. ``policy_pass_rate``: a pass-rate function registered with :func:`register_pass_rate_estimator`
   (:func:`evaluation.pass_rates.pass_rate_estimator`: ``k`` seeded samples of a named policy per
   item, scored by the domain, cached in lake table ``pass_rates``). An item is judged by
   :func:`pass_rate_verdict`.
2. ``metadata``: the item's own ``metadata["difficulty"]`` when it is a number in [0, 1].
3. ``heuristic``: a documented stand-in until (1) exists. A small policy's pass rate falls with
   the work an item asks for, so the heuristic combines three saturating signals:
   ``s = 0.45*f(#numbers in the prompt, 6) + 0.35*f(answer chars, 24) + 0.20*f(prompt words, 120)``
   with ``f(x, h) = x / (x + h)`` (0 for nothing, 0.5 at ``h``, -> 1), then
   ``difficulty = 0.02 + 0.96 * s``: trivial items land near 0, long multi-number items near 1.
   ``pass_rate`` is null for it: no policy was run, and no pass rate is made up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import polars as pl

from quality.detectors.base import threshold

DEFAULT_BAND = (0.05, 0.95)
PassRateFn = Callable[[Any, Sequence[dict], int], Sequence[float]]  # (domain, rows, k) -> rates
_ESTIMATOR: dict[str, Any] = {}


def register_pass_rate_estimator(fn: PassRateFn | None, k: int = 8) -> None:
    """Use the policy's pass rate over ``k`` samples from now on (``None`` to go back)."""
    _ESTIMATOR.clear()
    if fn is not None:
        _ESTIMATOR.update(fn=fn, k=k)


@dataclass(frozen=True)
class Band:
    low: float
    high: float

    @classmethod
    def for_domain(cls, domain: Any) -> "Band":
        ctx = type("Ctx", (), {"domain": domain})()
        return cls(threshold(ctx, "difficulty_min", DEFAULT_BAND[0]), threshold(ctx, "difficulty_max", DEFAULT_BAND[1]))


IN_BAND, TOO_EASY, TOO_HARD = "in_band", "too_easy", "too_hard"
VERDICTS = (IN_BAND, TOO_EASY, TOO_HARD)


def pass_rate_verdict(passes: int, samples: int, band: Band) -> str:
    """``in_band``, ``too_easy`` or ``too_hard`` for an item ``passes`` of whose ``samples`` samples
    passed. All passing or all failing is out of band whatever the band says: every reward of the
    item's GRPO group is then equal and its advantages are zero. Otherwise the difficulty
    ``1 - passes/samples`` must lie in ``[band.low, band.high]`` (edges included)."""
    if samples < 1 or not 0 <= passes <= samples:
        raise ValueError(f"{passes} passes of {samples} samples: need samples >= 1 and 0 <= passes <= samples")
    if passes == samples:
        return TOO_EASY
    if passes == 0:
        return TOO_HARD
    difficulty = 1.0 - passes / samples
    if difficulty < band.low:
        return TOO_EASY
    if difficulty > band.high:
        return TOO_HARD
    return IN_BAND


def heuristic_difficulty(frame: pl.DataFrame) -> pl.Series:
    f = lambda x, h: x / (x + h)  # noqa: E731
    feats = frame.select(
        pl.col("prompt").fill_null("").str.count_matches(r"\d+(?:\.\d+)?").cast(pl.Float64).alias("nums"),
        pl.col("answer").fill_null("").str.len_chars().cast(pl.Float64).alias("achars"),
        pl.col("prompt").fill_null("").str.split(" ").list.len().cast(pl.Float64).alias("words"),
    )
    s = 0.45 * f(feats["nums"], 6.0) + 0.35 * f(feats["achars"], 24.0) + 0.20 * f(feats["words"], 120.0)
    return (0.02 + 0.96 * s).alias("difficulty")


def _metadata_difficulty(meta: Any) -> float | None:
    if isinstance(meta, str) and meta:
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            return None
    value = meta.get("difficulty") if isinstance(meta, dict) else None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value <= 1.0:
        return float(value)
    return None


def estimate_difficulty(domain: Any, rows: pl.DataFrame, band: Band | None = None, *,
                        policy_rates: pl.DataFrame | None = None) -> pl.DataFrame:
    """Difficulty of each row of ``rows`` (id, prompt, answer, metadata): a frame with the
    ``storage.tables.DIFFICULTY`` columns except ``domain``, ``evaluated_at`` and ``policy``.

    ``policy_rates``: measured pass rates (``id, passes, samples``; the domain's
    ``policy_difficulty`` rows) to judge every row by; a row they lack raises ``KeyError``: a
    policy-mode gate never falls back to a guess. Otherwise the registered estimator, metadata or
    the heuristic (see the module docstring)."""
    band = band or Band.for_domain(domain)
    n = rows.height
    if policy_rates is not None:
        by_id = {r["id"]: (r["passes"], r["samples"]) for r in policy_rates.iter_rows(named=True)}
        missing = [i for i in rows["id"].to_list() if i not in by_id]
        if missing:
            raise KeyError(f"{len(missing)} item(s) have no measured pass rate, e.g. {missing[:3]}")
        measured = [by_id[i] for i in rows["id"].to_list()]
        rates = np.array([p / k for p, k in measured], dtype=float)
        diff, pass_rate, method = 1.0 - rates, rates, ["policy_pass_rate"] * n
        ks = [k for _, k in measured]
        in_band = np.array([pass_rate_verdict(p, k, band) == IN_BAND for p, k in measured], dtype=bool)
    elif _ESTIMATOR and n:
        k = int(_ESTIMATOR["k"])
        rates = np.asarray(_ESTIMATOR["fn"](domain, rows.to_dicts(), k), dtype=float)
        if rates.shape != (n,) or not np.all((rates >= 0) & (rates <= 1)):  # NaN fails too
            raise ValueError(f"the pass-rate estimator returned {rates.tolist()!r:.200} for {n} items; "
                             "it must return one rate in [0, 1] per item")
        diff, pass_rate, method = 1.0 - rates, rates, ["policy_pass_rate"] * n
        ks = [k] * n
        in_band = np.array([pass_rate_verdict(int(round(r * k)), k, band) == IN_BAND for r in rates], dtype=bool)
    else:
        heur = heuristic_difficulty(rows).to_numpy() if n else np.zeros(0)
        metas = [_metadata_difficulty(m) for m in rows["metadata"].to_list()] if "metadata" in rows.columns else [None] * n
        diff = np.array([m if m is not None else h for m, h in zip(metas, heur)], dtype=float)
        method = ["metadata" if m is not None else "heuristic" for m in metas]
        pass_rate, ks = [None] * n, [None] * n
        in_band = (diff >= band.low) & (diff <= band.high)
    return pl.DataFrame({
        "id": rows["id"] if n else pl.Series([], dtype=pl.Utf8),
        "difficulty": pl.Series(diff, dtype=pl.Float64),
        "pass_rate": pl.Series(list(pass_rate), dtype=pl.Float64),
        "k": pl.Series(ks, dtype=pl.Int64),
        "method": pl.Series(method, dtype=pl.Utf8),
        "in_band": pl.Series(in_band, dtype=pl.Boolean),
    })


def zero_signal_fraction(difficulty: pl.Series) -> float | None:
    """Share of items every sample solves or every sample fails (difficulty 0 or 1)."""
    if len(difficulty) == 0:
        return None
    return float(((difficulty <= 1e-9) | (difficulty >= 1 - 1e-9)).mean())


QUANTILES = (0.1, 0.25, 0.5, 0.75, 0.9)


def quantile_ranges(previous: pl.Series, tolerance: float) -> dict | None:
    """GE ``quantile_ranges`` around the previous accepted batch's quantiles (+- ``tolerance``)."""
    if previous is None or len(previous) == 0:
        return None
    qs = [float(previous.quantile(q, "linear")) for q in QUANTILES]
    return {"quantiles": list(QUANTILES),
            "value_ranges": [[max(0.0, q - tolerance), min(1.0, q + tolerance)] for q in qs]}
