"""Forgetting caught as it happens: each validated domain tested against its own step-0 score (pure).

The trainer's in-loop validation (:mod:`training.validation`) scores the policy on a fixed slice of
held-out items of every trained and watched domain, greedy, at step 0 and every ``eval_every`` steps.
At each validation, per domain, on the items both step 0 and now scored:

    H0: delta >= -margin   (no worse than at step 0 by more than ``validation.forgetting_margin``)
    H1: delta <  -margin   (forgotten)

with the regression report's own paired test (:func:`storage.paired_statistics.paired_test`: exact
McNemar for greedy binary scores at margin 0, else the tests :mod:`evaluation.regression` describes),
then Benjamini-Hochberg across the validated domains of that validation. A domain whose BH q is at
most ``validation.forgetting_q`` and whose mean fell is **flagged** (``forgetting``), with its
evidence (start and current means, delta and its 95% CI, the items lost and gained, p, q, the test).

The recipe's ``validation.forgetting`` decides what a flag does: ``warn`` (log, MLflow, checkpoint,
dashboard), ``stop`` (also end the run after saving that step's checkpoint) or ``reweight`` (also
raise the flagged domain's mixture weight: :func:`next_boosts`, x ``reweight_factor`` per validation
it stays flagged, at most ``reweight_max``, back to its own weight once it is no longer flagged; a
watched domain the run does not train on cannot be reweighted and is only warned about).

Plateaus (:func:`plateaued`): a trained domain whose validation has set no new best for
``validation.replateau_steps`` steps (since its last best or its last re-measure) has its train
items' pass rates measured again (learnability sampling).

Each validation is its own test against step 0, so over a run of many validations a domain that did
not change is flagged at some validation more often than ``forgetting_q`` (a watch, not a proof, as
the reward-hacking watch: sweep the checkpoint and run the regression report before acting on it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FORGETTING_MODES = ("warn", "stop", "reweight")


@dataclass(frozen=True)
class DomainValidation:
    """One validated domain at one validation, against step 0 on the same items."""

    domain: str
    step: int
    score: float            # mean over the domain's validation items now
    n: int                  # items scored now
    trained: bool           # whether the run trains on it (else only watched)
    start: float | None = None   # mean over the same items at step 0 (None at step 0 itself)
    delta: float | None = None   # score - start on the items both scored
    ci_low: float | None = None  # 95% CI of delta
    ci_high: float | None = None
    p: float | None = None       # one-sided p of "below step 0 by more than the margin"
    q: float | None = None       # BH-adjusted across the validated domains of this validation
    test: str | None = None
    lost: int = 0                # items passed at step 0 and failed now (score >= 0.5 -> < 0.5)
    gained: int = 0
    flagged: bool = False

    def evidence(self) -> dict:
        """Plain data for the run state, an MLflow tag, the checkpoint and the Dagster metadata."""
        def rounded(value, significant: bool = False):
            if value is None or not math.isfinite(value):
                return None
            return float(f"{value:.6g}") if significant else round(value, 6)

        return {"domain": self.domain, "step": self.step, "score": rounded(self.score), "start": rounded(self.start),
                "delta": rounded(self.delta), "ci_low": rounded(self.ci_low), "ci_high": rounded(self.ci_high),
                "p": rounded(self.p, True), "q": rounded(self.q, True), "n": self.n, "lost": self.lost,
                "gained": self.gained,
                "test": self.test, "trained": self.trained, "flagged": self.flagged}

    def describe(self) -> str:
        if self.start is None:
            return f"{self.domain} {self.score:.3f} (n {self.n}, step-0 baseline)"
        text = (f"{self.domain} {self.start:.3f} -> {self.score:.3f} ({self.delta:+.3f}, 95% CI "
                f"[{self.ci_low:+.3f}, {self.ci_high:+.3f}], {self.lost} items lost, {self.gained} gained, "
                f"n {self.n}, p {self.p:.3g}, q {self.q:.3g})")
        return text + (" FORGETTING" if self.flagged else "")


def judge(step: int, start: dict[str, dict[str, float]], now: dict[str, dict[str, float]], trained: set[str], *,
          q_level: float, margin: float = 0.0) -> list[DomainValidation]:
    """Every domain of ``now`` (``{domain: {item_id: score}}``) tested against ``start`` on the items
    both scored, BH across them; a domain without step-0 scores (or none in common) is reported with
    its score and no test."""
    import numpy as np

    from storage.paired_statistics import benjamini_hochberg, paired_test

    if not 0 < q_level < 1:
        raise ValueError(f"q_level must be in (0, 1), got {q_level!r}")
    tested: list[tuple[str, object, dict]] = []
    out: dict[str, DomainValidation] = {}
    for domain in sorted(now):
        scores = now[domain]
        mean_now = sum(scores.values()) / len(scores) if scores else float("nan")
        base = start.get(domain) or {}
        common = sorted(set(base) & set(scores))
        out[domain] = DomainValidation(domain, step, mean_now, len(scores), domain in trained)
        if step == 0 or not common:
            continue
        b = np.array([base[i] for i in common], dtype=float)
        c = np.array([scores[i] for i in common], dtype=float)
        binary = bool(np.isin(b, (0.0, 1.0)).all() and np.isin(c, (0.0, 1.0)).all())
        result = paired_test(b, c, margin=margin, binary_single_sample=binary)
        extra = {"start": float(b.mean()), "lost": int(((b >= 0.5) & (c < 0.5)).sum()),
                 "gained": int(((c >= 0.5) & (b < 0.5)).sum())}
        tested.append((domain, result, extra))
    qs = benjamini_hochberg([t.p for _, t, _ in tested])
    for (domain, t, extra), q in zip(tested, qs):
        flagged = bool(q <= q_level and t.delta < 0)
        out[domain] = DomainValidation(domain, step, out[domain].score, out[domain].n, domain in trained,
                                       start=extra["start"], delta=t.delta, ci_low=t.ci_low, ci_high=t.ci_high,
                                       p=t.p, q=float(q), test=t.test, lost=extra["lost"], gained=extra["gained"],
                                       flagged=flagged)
    return [out[d] for d in sorted(out)]


def next_boosts(boosts: dict[str, float], results: list[DomainValidation], *, factor: float,
                cap: float) -> dict[str, float]:
    """The mixture multipliers after a validation (``forgetting: reweight``): a flagged trained domain's
    grows by ``factor`` (at most ``cap``); a domain no longer flagged goes back to its own weight;
    watched domains the run does not train on have no weight to raise."""
    if not (factor > 1 and cap >= factor):
        raise ValueError(f"factor must be > 1 and cap >= factor, got {factor!r}, {cap!r}")
    out = {}
    for result in results:
        if result.flagged and result.trained:
            out[result.domain] = min(cap, boosts.get(result.domain, 1.0) * factor)
    return out


def plateaued(record: dict, step: int, score: float, patience: int) -> bool:
    """Update one domain's plateau ``record`` (``{"best", "since"}``: its best validation score and the
    step from which it counts) with the validation of ``step``, and say whether the domain has set no
    new best for ``patience`` steps. A new best (or a re-measure: the caller sets ``since``) restarts it."""
    if patience <= 0:
        return False
    if record.get("best") is None or score > record["best"] + 1e-12:
        record["best"], record["since"] = score, step
        return False
    return step - int(record.get("since", 0)) >= patience
