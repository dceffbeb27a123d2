"""Regression stage: the candidate checkpoint against the champion (and an optional fixed anchor),
the blocking check ``no_domain_regression``, and the promotion of the champion alias.

- ``regression_report`` (per checkpoint): :func:`quality.promotion.compare_checkpoints` against the
  MLflow alias ``champion`` and, when configured, a fixed anchor checkpoint (catches slow drift
  that many small non-significant steps add up to). Rows go to lake table ``regression``.
  Its check ``no_domain_regression`` is ERROR (blocking ``champion_promotion``) when a protected
  domain regressed beyond its margin (Holm-corrected, see :mod:`quality.regression`) or has no
  paired results; WARN when only Benjamini-Hochberg warnings exist. A refusal is recorded in lake
  table ``promotions`` here, since the blocked promotion asset does not run.
- ``champion_promotion`` (per checkpoint): :func:`quality.promotion.decide_promotion` and
  :func:`quality.promotion.apply_promotion` move the alias and record why.

Protected domains: those marked ``protected=True`` in the registry, plus ``protected`` in config.
"""

import dagster as dg

from domains import get_registry
from pipelines.partitions import checkpoint_partitions
from pipelines.resources import LakeResource, MlflowResource


class RegressionConfig(dg.Config):
    anchor: str = ""
    """A fixed anchor checkpoint id also compared against ("" = none)."""
    protected: list[str] = []
    """Extra protected domains (regressions there are errors), beyond those the registry marks."""
    margin: float = 0.01
    """Non-inferiority margin in score units (0.01 = one point) for every domain."""
    margins: dict[str, float] = {}
    """Per-domain margins overriding ``margin``."""
    alpha: float = 0.05
    """One-sided level per test and the Holm family-wise level for protected domains."""
    q: float = 0.05
    """Benjamini-Hochberg false discovery rate across domains (warnings)."""


class PromotionConfig(RegressionConfig):
    """The same settings as ``regression_report``'s: the promotion re-derives the same verdicts
    (a regression against the champion or the anchor refuses)."""


def _reports(lake, tracking_uri: str, candidate: str, cfg) -> tuple[str | None, dict]:
    from quality.promotion import compare_checkpoints, current_champion, protected_domains

    champion = current_champion(tracking_uri)
    protected = protected_domains(get_registry()) | set(cfg.protected)
    margin = {**{d.name: cfg.margin for d in get_registry()}, **cfg.margins}
    reports = {}
    for role, baseline in (("champion", champion), ("anchor", cfg.anchor or None)):
        if baseline and baseline != candidate:
            reports[role] = compare_checkpoints(lake, candidate, baseline, protected=protected, margin=margin,
                                                alpha=cfg.alpha, q_level=cfg.q)
    return champion, reports


def _table(report) -> str:
    head = ("| domain | n | K | delta (pts) | 95% CI | p | q | MDE (pts) | lost/gained | verdict |\n"
            "|---|---|---|---|---|---|---|---|---|---|\n")
    order = {"regression": 0, "warn": 1, "ok": 2}
    rows = sorted(report.domains, key=lambda d: (order[d.verdict], d.p))
    return head + "\n".join(
        f"| {d.domain}{' (protected)' if d.protected else ''} | {d.n} | {d.k} | {100 * d.delta:+.1f} | "
        f"[{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}] | {d.p:.2g} | {d.q:.2g} | {100 * d.mde:.1f} | "
        f"{d.items_lost}/{d.items_gained} | {d.verdict.upper()} |" for d in rows)


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name="regression",
    deps=["checkpoint_sweep"],
    kinds={"polars", "mlflow"},
    check_specs=[dg.AssetCheckSpec("no_domain_regression", asset="regression_report", blocking=True,
                                   description="ERROR when a protected domain regressed beyond its margin "
                                               "(Holm) or lacks paired results; WARN on BH warnings.")],
    description="Paired per-domain regression report of this checkpoint vs the champion (and an anchor).",
)
def regression_report(context: dg.AssetExecutionContext, config: RegressionConfig, lake: LakeResource,
                      mlflow: MlflowResource):
    from quality.promotion import PromotionDecision, apply_promotion

    candidate = context.partition_key
    the_lake = lake.lake(write=True)
    champion, reports = _reports(the_lake, mlflow.tracking_uri, candidate, config)
    metadata: dict = {"candidate": candidate, "champion": champion or "none yet", "anchor": config.anchor or "none"}
    regressions, warnings, missing = [], [], []
    for role, report in reports.items():
        metadata[f"vs_{role}"] = dg.MetadataValue.md(_table(report))
        metadata[f"missing_vs_{role}"] = dg.MetadataValue.json(report.missing)
        regressions += [f"{d.domain} (vs {role})" for d in report.regressions]
        warnings += [f"{d.domain} (vs {role})" for d in report.warnings]
        missing += [f"{d} (vs {role})" for d in report.missing["protected_not_compared"]]
        metadata[f"mde_median_vs_{role}"] = dg.MetadataValue.float(
            sorted(d.mde for d in report.domains)[len(report.domains) // 2] if report.domains else float("nan"))
    if not reports:
        metadata["note"] = "no baseline to compare with (no champion yet, or this is the champion)"
    failed = bool(regressions or missing)
    if failed:  # the promotion asset will not run: record the refusal here
        reason = "refused: " + "; ".join([f"regression in {r}" for r in regressions] +
                                         [f"protected domain without paired results: {m}" for m in missing])
        apply_promotion(the_lake, mlflow.tracking_uri, PromotionDecision(candidate, champion, False, reason,
                                                                         regressions + missing))
    check = dg.AssetCheckResult(
        check_name="no_domain_regression",
        passed=not failed and not warnings,
        severity=dg.AssetCheckSeverity.ERROR if failed else dg.AssetCheckSeverity.WARN,
        metadata={"regressions": ", ".join(regressions) or "none", "warnings": ", ".join(warnings) or "none",
                  "missing_protected": ", ".join(missing) or "none"},
    )
    return dg.MaterializeResult(metadata=metadata, check_results=[check])


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name="regression",
    deps=["regression_report"],
    kinds={"mlflow"},
    description="Moves the MLflow registry alias 'champion' on 'assay-policy' to this checkpoint when no "
                "protected domain regressed, and records the decision and why in lake table promotions.",
)
def champion_promotion(context: dg.AssetExecutionContext, config: PromotionConfig, lake: LakeResource,
                       mlflow: MlflowResource) -> dg.MaterializeResult:
    from quality.promotion import apply_promotion, decide_promotion

    candidate = context.partition_key
    the_lake = lake.lake(write=True)
    champion, reports = _reports(the_lake, mlflow.tracking_uri, candidate, config)
    decision = decide_promotion(candidate, champion, reports)
    decision_id = apply_promotion(the_lake, mlflow.tracking_uri, decision)
    context.log.info(decision.reason)
    return dg.MaterializeResult(metadata={
        "promoted": decision.promoted, "previous_champion": champion or "none",
        "reason": dg.MetadataValue.md(decision.reason), "decision": decision_id})
