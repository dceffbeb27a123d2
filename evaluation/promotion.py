"""Checkpoint comparison and champion promotion: what gets promoted, and the record of why.

- swept samples are read by :mod:`evaluation.results` (each checkpoint once, every domain);
- :func:`compare_checkpoints` compares like with like: per domain it picks a generation config
  *both* checkpoints were swept with (the candidate's latest if the baseline has it, else the
  candidate's newest one the baseline also has). A domain with none in common is "not
  comparable": the report names the differing fields (``max_new_tokens: 64 vs 256``) and never
  tests it. Rows go to lake table ``regression``;
- :func:`decide_promotion` is the pure rule: the promotion policy
  (:mod:`evaluation.promotion_policy`) says what blocks (protected regressions, or any significant
  drop; underpowered, not-comparable and missing protected domains), against the champion and
  the anchor, and whether a candidate must also have improved a domain with evidence
  (``promote_when``). The verdict names the rule in force, says whether any domain improved with
  evidence (95% CI above 0; otherwise the largest gain and why it is not evidence), and lists the BH
  warnings;
- :func:`compare_with_champion` runs those comparisons for a candidate: against the champion
  now and an optional fixed anchor, under the policy;
- :func:`apply_promotion` moves the MLflow registry alias ``champion`` on ``assay-policy`` to the
  candidate's model version, as a compare-and-set, and appends the decision to lake table
  ``promotions`` either way.

The alias is the one source of truth for the champion (:func:`storage.tracking.current_champion`);
the ``promotions`` table is the record of each decision and why. They agree unless someone
moves the alias without Assay, which the dashboard reports.

Compare-and-set. The alias moves only if the champion the candidate was compared with
(``decision.previous_champion``) is still the champion at the moment of the move; otherwise the
decision is recorded as a refusal, "champion changed from X to Y since the comparison". MLflow
has no conditional alias update, so the read-check-write runs under an exclusive lock
(:class:`PromotionLock`): by default an ``fcntl.flock`` on ``$ASSAY_HOME/locks/promotion.lock``,
which serialises every Assay process on this host that promotes into this ASSAY_HOME (the lock is
released by the kernel if its holder dies). Limits: ``flock`` does not coordinate processes on
different hosts (nor reliably over NFS), and a writer that moves the alias without Assay (the
MLflow UI, another tool) does not take the lock. For a shared tracking server, pass a lock that
every promoter shares, e.g. a Postgres advisory lock on the tracking database
(``pg_advisory_lock``) held the same way; :func:`apply_promotion` takes it as ``lock=``.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Protocol

import polars as pl

from storage import tracking
from storage.lake import Lake
from storage.tables import PROMOTIONS
from evaluation.promotion_policy import (ActivePolicy, PromotionPolicy, blocking_reasons, improved_domains, policy_json,
                                        promotion_rule, unchecked)
from evaluation.regression import DEFAULT_ALPHA, DEFAULT_MARGIN, DEFAULT_Q, RegressionReport, compare_results
from evaluation.results import CheckpointResults, pair_results, read_checkpoint

LOCK_TIMEOUT_S = 120.0


class PromotionError(RuntimeError):
    """Promotion could not be applied (no model version for the candidate, no results...)."""


def compare_checkpoints(lake: Lake, candidate: str, baseline: str, *, protected: Iterable[str] = (),
                        margin: float | dict = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA,
                        q_level: float = DEFAULT_Q, write: bool = True,
                        read: tuple[CheckpointResults, CheckpointResults] | None = None) -> RegressionReport:
    """The regression report of ``candidate`` against ``baseline`` on the domains both swept, each
    on a generation config both were swept with (:func:`evaluation.results.pair_results`).
    ``read``: both sides' results already read (:func:`evaluation.results.read_checkpoint`)."""
    cand_read, base_read = read or (read_checkpoint(lake, candidate), read_checkpoint(lake, baseline))
    for name, side in ((candidate, cand_read), (baseline, base_read)):
        if not side.domains:  # (a domain with no verifier is never swept: a run on such domains alone has none)
            raise PromotionError(f"checkpoint {name!r} has no sweep results: run `assay sweep --checkpoint {name}`; "
                                 "domains with no verifier are not swept, so they cannot be compared")
    cand, base = pair_results(cand_read, base_read)
    if cand.height == 0:
        raise PromotionError(f"checkpoint {candidate!r} has no sweep results: run `assay sweep --checkpoint {candidate}`")
    if base.height == 0:
        raise PromotionError(f"baseline {baseline!r} has no sweep results: run `assay sweep --checkpoint {baseline}`")
    if isinstance(margin, dict):  # margins only for domains in the results (others get the default)
        present = set(cand["domain"].unique()) | set(base["domain"].unique())
        margin = {d: m for d, m in margin.items() if d in present}
    report = compare_results(base, cand, margin=margin, protected=protected, alpha=alpha, q_level=q_level,
                             baseline_name=baseline, candidate_name=candidate)
    if write:
        lake.write_batch("regression", {"candidate": candidate, "baseline": baseline}, {"part": report.to_frame()})
    return report


def compare_with_policy(lake: Lake, candidate: str, baseline: str, policy: PromotionPolicy,
                        registry_protected: Iterable[str], *, write: bool = True,
                        candidate_read: CheckpointResults | None = None) -> RegressionReport:
    """:func:`compare_checkpoints` with the protected set, margins and levels the policy names."""
    cand_read = candidate_read or read_checkpoint(lake, candidate)
    base_read = read_checkpoint(lake, baseline)
    domains = set(cand_read.domains) | set(base_read.domains)
    return compare_checkpoints(lake, candidate, baseline,
                               protected=policy.protected_domains(registry_protected, domains),
                               margin=policy.margin_by_domain(domains), alpha=policy.alpha, q_level=policy.q,
                               write=write, read=(cand_read, base_read))


def compare_with_champion(lake: Lake, tracking_uri: str, candidate: str, policy: PromotionPolicy,
                          registry_protected: Iterable[str], *, anchor: str | None = None,
                          write: bool = True) -> tuple[str | None, dict[str, RegressionReport]]:
    """(the champion now, ``{"champion": report, "anchor": report}``): ``candidate`` compared with
    the champion (the MLflow alias) and with ``anchor`` under ``policy``, leaving out a baseline
    that is unset or is the candidate itself. The candidate's results are read once for both.
    Rows go to lake table ``regression`` (one partition per pair, replaced) unless ``write`` is False."""
    champion = tracking.current_champion(tracking_uri)
    registry_protected = list(registry_protected)
    baselines = [(role, b) for role, b in (("champion", champion), ("anchor", anchor or None)) if b and b != candidate]
    cand_read = read_checkpoint(lake, candidate) if baselines else None
    reports = {role: compare_with_policy(lake, candidate, baseline, policy, registry_protected, write=write,
                                         candidate_read=cand_read) for role, baseline in baselines}
    return champion, reports


@dataclass
class PromotionDecision:
    candidate: str
    previous_champion: str | None   # the champion the candidate was compared with
    promoted: bool
    reason: str
    blocking: list[str] = field(default_factory=list)   # domains (or "<kind>:<domain>") that blocked
    policy: str | None = None       # the policy applied (JSON), recorded with the decision
    decision_id: str | None = None  # set once recorded in lake table promotions


def _fmt(d, with_p: bool = True) -> str:
    """A domain's change; ``p`` is the one-sided p of a *drop*, so it is left off improvements."""
    shown = f"{d.domain} {100 * d.delta:+.1f} pts [{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]"
    return shown + (f", p={d.p:.2g}" if with_p else "")


def improvement_evidence(report: RegressionReport | None) -> tuple[list, str]:
    """(the domains that improved with evidence, a sentence saying so): the 95% CI of the change
    lies above 0. When none did, the sentence names the largest gain and why it is not evidence
    (its CI includes 0; the run's MDE says how large a change this sweep can tell from noise)."""
    if report is None:
        return [], "no comparison with a champion, so no evidence of improvement either way"
    better = improved_domains(report)
    if better:
        return better, "improved with evidence (95% CI above 0): " + ", ".join(_fmt(d, with_p=False)
                                                                            for d in better[:10])
    gains = [d for d in report.domains if d.delta == d.delta and d.delta > 0]
    if not gains:
        return [], "no domain improved with evidence (no domain's score rose)"
    top = max(gains, key=lambda d: d.delta)
    mde = "" if not (top.mde == top.mde and top.mde < float("inf")) else f"; this sweep's MDE there is {100 * top.mde:.1f} pts"
    return [], (f"no domain improved with evidence: the largest gain, {_fmt(top, with_p=False)}, has a 95% CI that "
                f"includes 0{mde}")


def decide_promotion(candidate: str, champion: str | None, reports: dict[str, RegressionReport],
                     policy: PromotionPolicy | ActivePolicy | None = None) -> PromotionDecision:
    """Promote unless a report (``{"champion": r, "anchor": r}``) holds something the policy
    blocks on (:func:`evaluation.promotion_policy.blocking_reasons`; default: the shipped policy),
    or the policy's ``promote_when: improvement`` finds no domain improved with evidence against the
    champion. With no champion yet the candidate becomes the first one. The reason starts with the
    verdict and the rule in force: ``promoted (rule promote_when: no_regression = ...): ...``."""
    active = policy
    policy = policy.policy if isinstance(policy, ActivePolicy) else (policy or PromotionPolicy())
    recorded = policy_json(active) if active is not None else policy_json(policy)
    rule = f"(rule {promotion_rule(policy)})"
    if champion == candidate:
        return PromotionDecision(candidate, champion, False, f"{candidate} is already the champion", policy=recorded)
    blocking, reasons = [], []
    for role, report in reports.items():
        for key, reason in blocking_reasons(report, policy, role):
            blocking.append(key)
            reasons.append(reason)
    if blocking:
        return PromotionDecision(candidate, champion, False, f"refused {rule}: " + "; ".join(reasons), blocking,
                                 policy=recorded)
    if champion is None:
        return PromotionDecision(candidate, None, True, f"first champion: no champion yet, {candidate} promoted "
                                 f"({rule[1:-1]} applies from the next candidate on)", policy=recorded)
    nothing_blocks = ("no domain had a significant drop (BH)" if policy.block_on == "any"
                      else "no protected domain regressed (Holm)") + ", none is missing or not comparable"
    main = reports.get("champion")
    better, evidence = improvement_evidence(main)
    if policy.promote_when == "improvement" and not better:
        return PromotionDecision(candidate, champion, False, f"refused {rule}: {nothing_blocks}, but {evidence}",
                                 ["no_improvement"], policy=recorded)
    parts = [nothing_blocks, evidence]
    for role, report in reports.items():
        let_through = unchecked(report, policy)
        if let_through:
            parts.append(f"unchecked vs {role} (underpowered, on_underpowered: allow): {', '.join(let_through)}")
    if main is not None and main.warnings:
        parts.append("warnings (BH): " + ", ".join(_fmt(d) for d in main.warnings[:10]))
    return PromotionDecision(candidate, champion, True, f"promoted {rule}: " + "; ".join(parts), policy=recorded)


# -- compare-and-set of the alias ------------------------------------------------------------------

class PromotionLock(Protocol):
    """An exclusive lock held across read-check-write of the alias (a context manager)."""

    def __enter__(self) -> "PromotionLock": ...

    def __exit__(self, *exc) -> None: ...


class FileLock:
    """``fcntl.flock`` on a file: exclusive among processes (and threads, each opening the file)
    of one host; released by the kernel when the holder exits, so a crash never leaves it held."""

    def __init__(self, path: str | os.PathLike, timeout_s: float = LOCK_TIMEOUT_S):
        self.path = Path(path)
        self.timeout_s = timeout_s
        self._fd: int | None = None

    def __enter__(self) -> "FileLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise PromotionError(f"another promotion has held {self.path} for over {self.timeout_s:.0f} s; "
                                         "wait for it to finish (or find the stuck process with `fuser "
                                         f"{self.path}`) and try again") from None
                time.sleep(0.01)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


def promotion_lock(lake: Lake) -> FileLock:
    """The default lock: one file per ASSAY_HOME (see the module docstring for its limits)."""
    return FileLock(lake.home / "locks" / "promotion.lock")


def decision_id(subject: str, now: datetime) -> str:
    """A decision's id: time, subject and a random suffix, safe as a lake partition value."""
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", f"{now:%Y%m%dT%H%M%S}-{subject}-{uuid.uuid4().hex[:6]}")


def _record(lake: Lake, decision: PromotionDecision) -> PromotionDecision:
    now = datetime.now(timezone.utc)
    recorded_id = decision_id(decision.candidate, now)
    row = {"decision": recorded_id, "candidate": decision.candidate, "previous_champion": decision.previous_champion,
           "promoted": decision.promoted, "reason": decision.reason, "created_at": now.isoformat(),
           "policy": decision.policy}
    lake.write_batch("promotions", {"decision": recorded_id}, {"part": pl.DataFrame([row], schema=PROMOTIONS)})
    return replace(decision, decision_id=recorded_id)


def apply_promotion(lake: Lake, tracking_uri: str, decision: PromotionDecision, *,
                    lock: PromotionLock | None = None) -> PromotionDecision:
    """Move the alias when promoted and the champion is still ``decision.previous_champion``
    (compare-and-set under ``lock``, default :func:`promotion_lock`); record the decision either
    way. Returns the recorded decision: a lost race comes back refused, with the reason."""
    if not decision.promoted:
        return _record(lake, decision)
    version_tags = [v.tags for v in tracking.checkpoint_versions(tracking_uri, decision.candidate)]
    if any(tags.get("variant_of") for tags in version_tags):
        # a variant serves its parent's policy faster; it is certified for the `fast` alias
        # (evaluation.variants), never made champion in its parent's place
        return _record(lake, replace(
            decision, promoted=False, blocking=["variant"],
            reason=f"refused: {decision.candidate} is a variant of {version_tags[-1]['variant_of']}; a variant is "
                   f"never champion (`assay variant` certifies it for the '{tracking.FAST_ALIAS}' alias) "
                   f"(was: {decision.reason})"))
    with lock if lock is not None else promotion_lock(lake):
        now_champion = tracking.current_champion(tracking_uri)
        if now_champion != decision.previous_champion:
            return _record(lake, replace(
                decision, promoted=False, blocking=["champion_changed"],
                reason=f"refused: champion changed from {decision.previous_champion or 'none'} to "
                       f"{now_champion or 'none'} since the comparison; compare {decision.candidate} with "
                       f"{now_champion or 'the new state'} again (was: {decision.reason})"))
        versions = tracking.checkpoint_versions(tracking_uri, decision.candidate)
        if not versions:
            raise PromotionError(f"checkpoint {decision.candidate!r} has no version of registered model "
                                 f"{tracking.REGISTERED_MODEL!r}: register it first "
                                 "(generation.checkpoints.register_checkpoint)")
        version = versions[-1].version
        previous = tracking.champion_version(tracking_uri)
        tracking.set_champion_alias(tracking_uri, version)
        try:
            recorded = _record(lake, decision)
        except BaseException:
            # the lake did not take the record: put the alias back, so alias and table still agree
            tracking.set_champion_alias(tracking_uri, previous.version if previous is not None else None)
            raise
        tracking.tag_model_version(tracking_uri, version, "promotion_reason", decision.reason[:5000])
    return recorded


def protected_domains(registry=None) -> set[str]:
    """The registry's domains marked ``protected=True``."""
    if registry is None:
        from domains import get_registry

        registry = get_registry()
    return {d.name for d in registry if d.protected}
