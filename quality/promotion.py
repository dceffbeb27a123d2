"""Checkpoint comparison and champion promotion: what gets promoted, and the record of why.

- :func:`checkpoint_results` reads a checkpoint's swept samples from the lake (per domain, the
  generation config of its latest ``sweep_summary`` row);
- :func:`compare_checkpoints` runs :func:`quality.regression.compare_results` on two checkpoints
  and stores one row per domain in lake table ``regression``;
- :func:`decide_promotion` is the pure rule: refuse on any ``regression`` verdict (a protected
  domain worse than the baseline beyond its margin, Holm-corrected) against the champion or the
  anchor, or when a protected domain was not compared (missing results never pass silently);
  otherwise promote, listing the BH warnings and the domains that improved;
- :func:`apply_promotion` moves the MLflow registry alias ``champion`` on ``assay-policy`` to the
  candidate's model version (when promoted) and appends the decision to lake table ``promotions``.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Iterable

import polars as pl

from quality.lake import Lake
from quality.lake_tables import PROMOTIONS, RESULTS, conform
from quality.regression import DEFAULT_ALPHA, DEFAULT_MARGIN, DEFAULT_Q, RegressionReport, compare_results

REGISTERED_MODEL = "assay-policy"
CHAMPION_ALIAS = "champion"


class PromotionError(RuntimeError):
    """Promotion could not be applied (no model version for the candidate, no results...)."""


def checkpoint_results(lake: Lake, checkpoint: str, domains: Iterable[str] | None = None) -> pl.DataFrame:
    """Per-sample rows of ``checkpoint``'s latest sweep of each domain (``results`` contract)."""
    summaries = lake.read("sweep_summary", where={"checkpoint": checkpoint})
    if summaries.height == 0:
        return conform(pl.DataFrame(), RESULTS)
    wanted = set(domains) if domains is not None else None
    frames = []
    for row in summaries.iter_rows(named=True):
        if wanted is not None and row["domain"] not in wanted:
            continue
        rows = lake.read("results", where={"checkpoint": checkpoint, "domain": row["domain"]})
        if rows.height == 0:
            continue
        rows = conform(rows, RESULTS).filter((pl.col("gen_config") == row["gen_config"]) & (pl.col("sample_idx") < row["k"]))
        frames.append(rows.unique(subset=["item_id", "sample_idx"], keep="first", maintain_order=True))
    return pl.concat(frames) if frames else conform(pl.DataFrame(), RESULTS)


def compare_checkpoints(lake: Lake, candidate: str, baseline: str, *, protected: Iterable[str] = (),
                        margin: float | dict = DEFAULT_MARGIN, alpha: float = DEFAULT_ALPHA,
                        q_level: float = DEFAULT_Q, write: bool = True) -> RegressionReport:
    """The regression report of ``candidate`` against ``baseline`` on the domains both swept."""
    cand = checkpoint_results(lake, candidate)
    base = checkpoint_results(lake, baseline)
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


@dataclass
class PromotionDecision:
    candidate: str
    previous_champion: str | None
    promoted: bool
    reason: str
    blocking: list[str] = field(default_factory=list)   # domains (or "missing:<domain>") that blocked


def _fmt(d) -> str:
    return f"{d.domain} {100 * d.delta:+.1f} pts [{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}], p={d.p:.2g}"


def decide_promotion(candidate: str, champion: str | None, reports: dict[str, RegressionReport]) -> PromotionDecision:
    """Promote unless a report (``{"champion": r, "anchor": r}``) holds a regression or a protected
    domain went uncompared. With no champion yet the candidate becomes the first one."""
    if champion == candidate:
        return PromotionDecision(candidate, champion, False, f"{candidate} is already the champion")
    blocking, reasons = [], []
    for role, report in reports.items():
        for d in report.regressions:
            blocking.append(d.domain)
            reasons.append(f"regression vs {role} ({report.baseline}): {_fmt(d)}")
        for domain in report.missing.get("protected_not_compared", []):
            blocking.append(f"missing:{domain}")
            reasons.append(f"protected domain {domain} has no paired results vs {role} ({report.baseline})")
    if blocking:
        return PromotionDecision(candidate, champion, False, "refused: " + "; ".join(reasons), blocking)
    if champion is None:
        return PromotionDecision(candidate, None, True, f"first champion: no champion yet, {candidate} promoted")
    parts = ["no protected domain regressed (Holm) and none is missing"]
    main = reports.get("champion")
    if main is not None:
        better = [d for d in main.domains if d.ci_low > 0]
        if better:
            parts.append("improved: " + ", ".join(_fmt(d) for d in better[:10]))
        if main.warnings:
            parts.append("warnings (BH): " + ", ".join(_fmt(d) for d in main.warnings[:10]))
    return PromotionDecision(candidate, champion, True, "promoted: " + "; ".join(parts))


def current_champion(tracking_uri: str) -> str | None:
    """The checkpoint id the ``champion`` alias points at, or None when it is unset."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    try:
        version = client.get_model_version_by_alias(REGISTERED_MODEL, CHAMPION_ALIAS)
    except MlflowException:
        return None
    return version.tags.get("checkpoint") or None


def apply_promotion(lake: Lake, tracking_uri: str, decision: PromotionDecision) -> str:
    """Move the alias when promoted, and record the decision either way; returns the decision id."""
    if decision.promoted:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=tracking_uri)
        versions = client.search_model_versions(f"name = '{REGISTERED_MODEL}' and tags.checkpoint = '{decision.candidate}'")
        if not versions:
            raise PromotionError(f"checkpoint {decision.candidate!r} has no version of registered model "
                                 f"{REGISTERED_MODEL!r}: register it first (training.checkpoints.register_checkpoint)")
        version = max(versions, key=lambda v: int(v.version))
        client.set_registered_model_alias(REGISTERED_MODEL, CHAMPION_ALIAS, version.version)
        client.set_model_version_tag(REGISTERED_MODEL, version.version, "promotion_reason", decision.reason[:5000])
    now = datetime.now(timezone.utc)
    decision_id = re.sub(r"[^A-Za-z0-9_.\-]", "_", f"{now:%Y%m%dT%H%M%S}-{decision.candidate}-{uuid.uuid4().hex[:6]}")
    row = {"decision": decision_id, "candidate": decision.candidate, "previous_champion": decision.previous_champion,
           "promoted": decision.promoted, "reason": decision.reason, "created_at": now.isoformat()}
    lake.write_batch("promotions", {"decision": decision_id}, {"part": pl.DataFrame([row], schema=PROMOTIONS)})
    return decision_id


def protected_domains(registry=None) -> set[str]:
    """The registry's domains marked ``protected=True``."""
    if registry is None:
        from domains import get_registry

        registry = get_registry()
    return {d.name for d in registry if d.protected}
