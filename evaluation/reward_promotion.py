"""Reward models regression-tested and promoted like policies (issue 31 item 4).

A reward model's "sweep" is its newest gate check's per-pair scores on held-out labelled pairs
(lake table ``reward_sweeps``, written with each ``assay reward check``): per pair, 1.0 when it
preferred the labelled answer, else 0.0. Two reward models of a domain are compared on the pairs
both were judged on with the policy's paired per-item test (:func:`evaluation.regression.compare_results`,
the domain protected: Holm-adjusted one-sided p of a drop in agreement).

``promote_reward_model`` makes a reward model the domain's champion (``LearnedReward(reward_model=
"champion")`` then trains on it) only when its own newest gate check passed and, against the
current champion, on enough shared pairs, the paired test finds no regression; a check that passed
at a bar laxer than the domain's declared one (``LearnedReward(gate=...)``) does not count. Each decision is a
row of lake table ``reward_promotions`` with the statistics and the reason.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone

import polars as pl

from evaluation.regression import RegressionReport, compare_results
from storage import tables
from storage.lake import Lake

SWEEPS_TABLE = "reward_sweeps"
PROMOTIONS_TABLE = "reward_promotions"
MIN_SHARED_PAIRS = 20  # fewer shared pairs than this: no comparison worth a promotion


class RewardPromotionError(ValueError):
    """A reward-model comparison that cannot be made, with what to run."""


def reward_sweep(lake: Lake, domain: str, reward_model: str) -> pl.DataFrame:
    """``reward_model``'s per-pair rows from its newest gate check on ``domain``; empty when none."""
    frame = lake.read(SWEEPS_TABLE, where={"domain": domain})
    if frame.is_empty():
        return tables.empty(tables.REWARD_SWEEPS)
    frame = tables.conform(frame, tables.REWARD_SWEEPS).filter(pl.col("reward_model") == reward_model)
    if frame.is_empty():
        return frame
    newest = frame.sort(["checked_at", "check"])["check"][-1]
    return frame.filter(pl.col("check") == newest)


def _as_results(sweep: pl.DataFrame, domain: str) -> pl.DataFrame:
    # the results contract compare_results reads: one sample per labelled pair, scored by agreement
    return sweep.select(pl.lit(domain).alias("domain"), pl.col("pair_id").alias("item_id"),
                        pl.lit(0, dtype=pl.Int64).alias("sample_idx"), pl.col("correct").alias("score"))


def compare_reward_models(lake: Lake, domain: str, candidate: str, baseline: str) -> RegressionReport:
    """``candidate`` against ``baseline`` on the labelled pairs both were checked on (paired test)."""
    sides = {}
    for name in (candidate, baseline):
        sweep = reward_sweep(lake, domain, name)
        if sweep.is_empty():
            raise RewardPromotionError(f"reward model {name!r} has no per-pair results on {domain!r}: run "
                                       f"`assay reward check {domain} --reward-model {name}`")
        sides[name] = sweep
    shared = set(sides[candidate]["pair_id"]) & set(sides[baseline]["pair_id"])
    if len(shared) < MIN_SHARED_PAIRS:
        raise RewardPromotionError(
            f"{candidate} and {baseline} share {len(shared)} labelled pairs (at least {MIN_SHARED_PAIRS} are "
            f"needed): check both on the same file, `assay reward check {domain} --reward-model RM --pairs FILE`")
    cand, base = (_as_results(sides[n].filter(pl.col("pair_id").is_in(list(shared))), domain)
                  for n in (candidate, baseline))
    return compare_results(base, cand, protected=[domain], baseline_name=baseline, candidate_name=candidate)


def reward_champion(lake: Lake, domain: str) -> str | None:
    """The domain's champion reward model (its newest promotion), or None."""
    frame = lake.read(PROMOTIONS_TABLE, where={"domain": domain})
    if frame.is_empty():
        return None
    frame = tables.conform(frame, tables.REWARD_PROMOTIONS).filter(pl.col("promoted")).sort("decided_at")
    return frame["candidate"][-1] if frame.height else None


@dataclass
class RewardPromotion:
    domain: str
    candidate: str
    previous_champion: str | None
    promoted: bool
    reason: str
    report: RegressionReport | None = None
    decision: str | None = None

    def to_json(self) -> dict:
        d = self.report.domains[0] if self.report is not None and self.report.domains else None
        return {"domain": self.domain, "candidate": self.candidate, "previous_champion": self.previous_champion,
                "promoted": self.promoted, "reason": self.reason, "decision": self.decision,
                "comparison": d.to_json() if d is not None else None}


def promote_reward_model(lake: Lake, domain: str, candidate: str) -> RewardPromotion:
    """Decide (and record) whether ``candidate`` becomes ``domain``'s champion reward model."""
    from quality.reward_gate import latest_reward_gate, shortfall_against_domain

    champion = reward_champion(lake, domain)
    gate = latest_reward_gate(lake, domain, candidate)
    report = None
    if not gate:
        decision = RewardPromotion(domain, candidate, champion, False,
                                   f"{candidate} has never been checked: run `assay reward check {domain} "
                                   f"--reward-model {candidate}` first")
    elif not all(r["passed"] for r in gate):
        failed = ", ".join(r["criterion"] for r in gate if not r["passed"])
        decision = RewardPromotion(domain, candidate, champion, False,
                                   f"{candidate} failed its gate (check {gate[0]['check']}: {failed})")
    elif shortfall := shortfall_against_domain(domain, gate):
        decision = RewardPromotion(domain, candidate, champion, False,
                                   f"{candidate} passed a gate laxer than {domain}'s declared bar (check "
                                   f"{gate[0]['check']}: {'; '.join(shortfall)}): run `assay reward check {domain} "
                                   f"--reward-model {candidate}` at the domain's bar")
    elif champion is None:
        decision = RewardPromotion(domain, candidate, None, True, f"first champion reward model of {domain} "
                                                                  "(its gate passed; nothing to compare with)")
    elif champion == candidate:
        decision = RewardPromotion(domain, candidate, champion, False, f"{candidate} is already the champion")
    else:
        report = compare_reward_models(lake, domain, candidate, champion)
        d = report.domains[0]
        shown = (f"agreement {100 * d.delta:+.1f} pts [{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}] on {d.n} "
                 f"shared pairs, p={d.p:.2g} ({d.test})")
        if d.verdict == "regression":
            decision = RewardPromotion(domain, candidate, champion, False,
                                       f"regressed against champion {champion}: {shown}", report)
        else:
            decision = RewardPromotion(domain, candidate, champion, True,
                                       f"no regression against champion {champion} ({d.verdict}): {shown}", report)
    _record(lake, decision)
    return decision


def _record(lake: Lake, decision: RewardPromotion) -> None:
    now = datetime.now(timezone.utc)
    decision.decision = f"rpromo-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    d = decision.report.domains[0] if decision.report is not None and decision.report.domains else None
    row = {"decision": decision.decision, "domain": decision.domain, "candidate": decision.candidate,
           "previous_champion": decision.previous_champion, "promoted": decision.promoted, "reason": decision.reason,
           "delta": d.delta if d else None, "ci_low": d.ci_low if d else None, "ci_high": d.ci_high if d else None,
           "p": d.p if d else None, "pairs": d.n if d else None,
           "decided_at": now.isoformat(timespec="microseconds")}
    lake.write_batch(PROMOTIONS_TABLE, {"domain": decision.domain, "decision": decision.decision},
                     {"part": tables.conform(pl.DataFrame([row]), tables.REWARD_PROMOTIONS)})
