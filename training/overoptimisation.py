"""Proxy over-optimisation of a learned reward, judged from a run's per-step history (pure, no torch).

A policy trained on a learned reward (a reward model: :mod:`training.learned_rewards`) can learn what
the reward model likes instead of what the task wants: the learned reward keeps rising while the
gold signal (the domain's verifier, scored beside it on the same rollouts) falls. Gao et al. (2022,
"Scaling laws for reward model overoptimization") measured exactly this shape; this module watches
for it while the run trains.

The rule, over the trailing ``window`` recorded steps of one domain (steps where the learned reward
scored some rollouts; a step the domain was not drawn in is skipped, not filled):

- fit a least-squares line to ``learned_mean`` against the step, and another to ``score_mean`` (the
  verifier's mean, the gold signal);
- the verdict **fires** when the learned reward rose and the gold fell, both by at least
  ``min_change`` over the window (slope times the window's span of steps, in reward units 0-1) and
  both trends clear of the step-to-step noise: ``|t| >= T_MIN`` for each slope (slope over its
  standard error, ``n - 2`` degrees of freedom).

What it deliberately does not call over-optimisation (the tests hold it to this):

- noise with no trend (the t-statistics stay small, or the change is under ``min_change``);
- both rising (the learned reward is carrying the verifier with it: the hoped-for case);
- learned flat while gold falls (the policy got worse, but not by exploiting the reward model:
  nothing the reward model pays for is rising);
- learned rising while gold stays flat (the reward model's gains do not transfer, which is worth a
  look on the curves, but gold is not being traded away yet; Gao et al.'s over-optimisation is the
  gold score falling).

A second rule looks further back, for a collapse the trailing window cannot see: once the run has
``2 * window`` recorded steps, the mean of its **first** ``window`` steps (where the policy started)
is compared with the mean of its **latest** ``window`` (Welch's two-sample t on the step means); it
fires when the learned reward rose and the gold fell since the start, both by at least
``min_change`` with ``|t| >= T_MIN``. This is the shape of the first CPU proof run (bench/RESULTS.md,
"Learned rewards"): the gold score fell from an already low level within the first few steps,
before the trailing window was full, then sat at zero while the learned reward stayed high, so no
trailing window held a falling gold line; since the start it had clearly fallen. Either rule fires
the verdict (``rule`` says which).

The gold signal (item 3 of issue 42). When the run validates the domain in the loop
(:mod:`training.validation`: the verifier on held-out items, answered greedily by the policy every
``eval_every`` steps), the gold signal is that held-out validation score, not the verifier on the very
rollouts the learned reward scored: a policy can learn to please the reward model on its own samples
in ways the same-rollout verifier shares, and the held-out score is what the sweep will measure. Its
points are the validations (step 0 aside): ``(step, mean learned reward over the steps since the
previous validation, val_score)``, judged by the same two rules over a window of
``max(MIN_WINDOW, ceil(window / eval_every))`` validations. Until that many validations exist (or
without validation) the same-rollout verifier serves. The verdict says which (``gold_source``).

Fewer than ``window`` recorded steps give no verdict (``None``), never a made-up number. A window
is at least :data:`MIN_WINDOW` steps: with fewer a slope's standard error has under 2 degrees of
freedom. The thresholds are a one-sided test at about the 5% level per slope for a window of 8
(the critical t with 6 degrees of freedom is 1.94); both slopes must pass, so pure noise fires far
less often than that: on independent noise (std 0.1 on both signals, window 8, ``min_change`` 0.05)
the trailing rule fires on 0.14% of windows and in 5.7% of 50-step runs at some step, the
since-the-start rule on 0.08% of steps and in 1.3% of runs, the two together at 0.2% of steps and
in 6.3% of runs (300 seeded runs each). It is a watch,
not a proof: a run that fires should be looked at on its
curves (the training page shows them) and its checkpoints swept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Mapping

MIN_WINDOW = 4
# what a verdict compared the learned reward with (Verdict.gold_source)
HELDOUT_GOLD = "held-out validation"
SAME_ROLLOUT_GOLD = "verifier on the same rollouts"
# what the trainer does when the watch fires (GRPOConfig.reward_hacking): warn = flag it (MLflow, log,
# dashboard) and train on; stop = flag it and end the run after saving that step's checkpoint
REWARD_HACKING_MODES = ("warn", "stop")
T_MIN = 2.0  # |slope / standard error| a trend needs to count (about p < 0.05 one-sided at 6 df)


@dataclass(frozen=True)
class Trend:
    """A least-squares line through one signal over the window."""

    slope: float   # reward units per step
    t: float       # slope / its standard error; +-inf when the points lie exactly on a sloped line
    change: float  # slope times the window's span of steps: the rise (or fall) the line says happened
    first: float   # the signal's value at the window's first and last recorded step
    last: float

    def as_dict(self) -> dict:
        return {"slope": round(self.slope, 6), "t": _finite_or_text(self.t), "change": round(self.change, 6),
                "first": round(self.first, 6), "last": round(self.last, 6)}


@dataclass(frozen=True)
class Shift:
    """One signal's mean over the run's first window against its mean over the latest window."""

    start: float   # mean of the first window's recorded steps
    latest: float  # mean of the latest window's
    change: float  # latest - start
    t: float       # Welch's t of the difference; +-inf when neither window varies and the means differ

    def as_dict(self) -> dict:
        return {"start": round(self.start, 6), "latest": round(self.latest, 6), "change": round(self.change, 6),
                "t": _finite_or_text(self.t)}


def shift(start: list[float], latest: list[float]) -> Shift:
    """Welch's two-sample comparison of ``latest`` with ``start`` (at least 2 values each)."""
    if len(start) < 2 or len(latest) < 2:
        raise ValueError("a shift needs at least 2 values on each side")
    a, b = sum(start) / len(start), sum(latest) / len(latest)
    va = sum((v - a) ** 2 for v in start) / (len(start) - 1)
    vb = sum((v - b) ** 2 for v in latest) / (len(latest) - 1)
    se = math.sqrt(va / len(start) + vb / len(latest))
    change = b - a
    if se <= 1e-12:
        t = 0.0 if abs(change) <= 1e-12 else math.copysign(math.inf, change)
    else:
        t = change / se
    return Shift(start=a, latest=b, change=change, t=t)


@dataclass(frozen=True)
class Verdict:
    """The watch's decision on one domain's trailing window, with its evidence."""

    domain: str
    fired: bool
    first_step: int
    last_step: int
    steps: int      # recorded steps in the window
    learned: Trend  # learned_mean: the reward model's mean (sigmoid) reward
    gold: Trend     # score_mean: the verifier's mean score on the same rollouts
    min_change: float
    t_min: float = T_MIN
    # the run's first window against its latest (None before 2 * window recorded steps)
    learned_shift: Shift | None = None
    gold_shift: Shift | None = None
    rule: str | None = None  # what fired: "trend" (the trailing window) or "since_start"; None if nothing
    gold_source: str = SAME_ROLLOUT_GOLD  # HELDOUT_GOLD: the in-loop validation score (points: validations)

    def evidence(self) -> dict:
        """Plain data for an MLflow tag, the run state and the log."""
        return {"domain": self.domain, "fired": self.fired, "rule": self.rule, "first_step": self.first_step,
                "last_step": self.last_step, "steps": self.steps, "learned": self.learned.as_dict(),
                "gold": self.gold.as_dict(),
                "since_start": None if self.learned_shift is None else {
                    "learned": self.learned_shift.as_dict(), "gold": self.gold_shift.as_dict()},
                "min_change": self.min_change, "t_min": self.t_min, "gold_source": self.gold_source}

    def describe(self) -> str:
        what = f"proxy over-optimisation ({self.rule})" if self.fired else "no proxy over-optimisation"
        points = "validations" if self.gold_source == HELDOUT_GOLD else "steps"
        text = (f"{self.domain}: {what} over steps {self.first_step}-{self.last_step} ({self.steps} {points}): "
                f"learned reward {self.learned.first:.3f} -> {self.learned.last:.3f} "
                f"(change {self.learned.change:+.3f}, t {_fmt_t(self.learned.t)}), {self.gold_source} (gold) "
                f"{self.gold.first:.3f} -> {self.gold.last:.3f} (change {self.gold.change:+.3f}, "
                f"t {_fmt_t(self.gold.t)})")
        if self.learned_shift is not None:
            text += (f"; since the start: learned mean {self.learned_shift.start:.3f} -> {self.learned_shift.latest:.3f}"
                     f" (t {_fmt_t(self.learned_shift.t)}), gold mean {self.gold_shift.start:.3f} -> "
                     f"{self.gold_shift.latest:.3f} (t {_fmt_t(self.gold_shift.t)})")
        return (text + f"; fires when the learned reward rises and the gold falls by >= {self.min_change:g} each "
                       f"with |t| >= {self.t_min:g}, over the trailing window or since the start")


def _finite_or_text(value: float):
    return round(value, 4) if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _fmt_t(value: float) -> str:
    return f"{value:+.2f}" if math.isfinite(value) else ("+inf" if value > 0 else "-inf")


def fit(steps: list[int], values: list[float]) -> Trend:
    """Least-squares slope of ``values`` on ``steps`` (at least 3 distinct steps), its t-statistic
    and the change it implies over the span of ``steps``."""
    n = len(steps)
    if n < 3 or len(values) != n:
        raise ValueError(f"a slope with a standard error needs at least 3 points, got {n}")
    mx, my = sum(steps) / n, sum(values) / n
    sxx = sum((x - mx) ** 2 for x in steps)
    if sxx == 0:
        raise ValueError("the steps of a window must differ")
    slope = sum((x - mx) * (y - my) for x, y in zip(steps, values)) / sxx
    intercept = my - slope * mx
    ssr = sum((y - (intercept + slope * x)) ** 2 for x, y in zip(steps, values))
    scale = max(1.0, max(abs(v) for v in values))
    if ssr <= (1e-12 * scale) ** 2 * n:  # exactly on a line: no noise to test against
        t = 0.0 if abs(slope) <= 1e-12 else math.copysign(math.inf, slope)
    else:
        t = slope / math.sqrt(ssr / (n - 2) / sxx)
    return Trend(slope=slope, t=t, change=slope * (max(steps) - min(steps)), first=values[0], last=values[-1])


def points_of(history: Iterable[Mapping], domain: str) -> list[tuple[int, float, float]]:
    """``(step, learned_mean, score_mean)`` of ``domain``'s history rows where both were recorded,
    by step (a later row of the same step, from a resumed run, replaces the earlier)."""
    by_step: dict[int, tuple[float, float]] = {}
    for row in history:
        if row.get("domain") != domain:
            continue
        learned, gold = row.get("learned_mean"), row.get("score_mean")
        if learned is None or gold is None or not (math.isfinite(learned) and math.isfinite(gold)):
            continue
        by_step[int(row["step"])] = (float(learned), float(gold))
    return [(step, *by_step[step]) for step in sorted(by_step)]


def heldout_points_of(history: Iterable[Mapping], domain: str) -> list[tuple[int, float, float]]:
    """``(step, learned, val_score)`` per in-loop validation of ``domain`` (step 0 aside): the mean
    ``learned_mean`` over the steps since the previous validation, beside the held-out score; a
    validation with no learned reward recorded since the previous one is skipped."""
    learned: dict[int, float] = {}
    validated: dict[int, float] = {}
    for row in history:
        if row.get("domain") != domain:
            continue
        step = int(row["step"])
        value, val = row.get("learned_mean"), row.get("val_score")
        if value is not None and math.isfinite(value):
            learned[step] = float(value)
        if val is not None and math.isfinite(val):
            validated[step] = float(val)
    points, previous = [], 0
    for step in sorted(validated):
        if step == 0:
            continue
        since = [learned[s] for s in learned if previous < s <= step]
        previous = step
        if since:
            points.append((step, sum(since) / len(since), validated[step]))
    return points


def judge(points: list[tuple[int, float, float]], domain: str, *, window: int, min_change: float,
          t_min: float = T_MIN, gold_source: str = SAME_ROLLOUT_GOLD) -> Verdict | None:
    """The verdict on the last ``window`` of ``points`` (``(step, learned, gold)``, by step), or None
    while fewer than ``window`` steps are recorded."""
    if window < MIN_WINDOW:
        raise ValueError(f"window must be at least {MIN_WINDOW} steps, got {window}")
    if not min_change > 0:
        raise ValueError(f"min_change must be > 0, got {min_change}")
    if len(points) < window:
        return None
    tail = points[-window:]
    steps = [p[0] for p in tail]
    learned = fit(steps, [p[1] for p in tail])
    gold = fit(steps, [p[2] for p in tail])
    trend = (learned.change >= min_change and learned.t >= t_min
             and gold.change <= -min_change and gold.t <= -t_min)
    learned_shift = gold_shift = None
    since_start = False
    if len(points) >= 2 * window:  # the first and latest windows do not overlap
        head = points[:window]
        learned_shift = shift([p[1] for p in head], [p[1] for p in tail])
        gold_shift = shift([p[2] for p in head], [p[2] for p in tail])
        since_start = (learned_shift.change >= min_change and learned_shift.t >= t_min
                       and gold_shift.change <= -min_change and gold_shift.t <= -t_min)
    rule = "trend" if trend else "since_start" if since_start else None
    return Verdict(domain=domain, fired=rule is not None, first_step=steps[0], last_step=steps[-1], steps=len(tail),
                   learned=learned, gold=gold, min_change=min_change, t_min=t_min, learned_shift=learned_shift,
                   gold_shift=gold_shift, rule=rule, gold_source=gold_source)


def heldout_window(window: int, eval_every: int) -> int:
    """Validations the held-out rule judges over: about as many steps as ``window``, at least MIN_WINDOW."""
    return max(MIN_WINDOW, -(-window // eval_every))


def watch(history: Iterable[Mapping], domain: str, *, window: int, min_change: float,
          eval_every: int | None = None) -> Verdict | None:
    """:func:`judge` on ``domain``'s rows of a run's history (the trainer's ``training_history`` rows):
    against the held-out validation when the run validates the domain every ``eval_every`` steps and
    enough validations are recorded, else against the verifier on the same rollouts."""
    history = list(history)
    if eval_every:
        points = heldout_points_of(history, domain)
        held = heldout_window(window, eval_every)
        if len(points) >= held:
            return judge(points, domain, window=held, min_change=min_change, gold_source=HELDOUT_GOLD)
    return judge(points_of(history, domain), domain, window=window, min_change=min_change)
