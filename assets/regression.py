"""Regression stage: the candidate checkpoint against the champion (and an optional fixed anchor),
the blocking check ``no_domain_regression``, and the promotion of the champion alias.

Both assets apply one promotion policy (:mod:`evaluation.promotion_policy`): the file named by the
config's ``policy_path``, else ``$ASSAY_HOME/promotion.yaml``, else the shipped default. It names
the protected domains, the margins, alpha and q, and what blocks. Both show it in their metadata.

- ``regression_report`` (per checkpoint): :func:`evaluation.promotion.compare_checkpoints` against the
  MLflow alias ``champion`` and, when configured, a fixed anchor checkpoint (catches slow drift
  that many small non-significant steps add up to), each domain on a generation config both
  sides were swept with. Rows go to lake table ``regression``. Its check ``no_domain_regression``
  is ERROR (blocking ``champion_promotion``) when the policy blocks: a protected domain regressed
  beyond its margin (Holm), or any domain dropped (BH) under ``block_on: any``; a domain that could
  block is underpowered; a domain is not comparable (different generation configs); a protected
  domain has no paired results. WARN when only non-blocking BH warnings exist. A refusal is
  recorded in lake table ``promotions`` here, since the blocked promotion asset does not run.
- ``champion_promotion`` (per checkpoint): decides on the reports ``regression_report`` materialized
  for this checkpoint (read back from its materialization's ``reports`` metadata: the comparison
  runs once and the ``regression`` rows are written once), by :func:`evaluation.promotion.decide_promotion`,
  and :func:`evaluation.promotion.apply_promotion` moves the alias (compare-and-set: only if the
  champion those reports compared with is still the champion) and records why.
"""

import dagster as dg

from domains import get_registry
from evaluation.promotion_policy import PromotionSettings
from assets.config_bridge import dagster_config
from assets.partitions import checkpoint_partitions
from assets.resources import LakeResource, MlflowResource
from storage.markdown import markdown_table


REPORTS_KEY = "reports"  # regression_report's metadata entry champion_promotion reads back

RegressionConfig = dagster_config(PromotionSettings, name="RegressionConfig")
PromotionConfig = RegressionConfig  # the promotion re-derives the same verdicts under the same policy


def _policy(lake, cfg):
    from evaluation.promotion_policy import load_policy

    active = load_policy(lake.home, cfg.policy_path or None)
    active.policy.check_domains(get_registry().names, active.source)
    return active


def _compare(lake, tracking_uri: str, candidate: str, cfg, active) -> tuple[str | None, dict]:
    from evaluation.promotion import compare_with_champion, protected_domains

    return compare_with_champion(lake, tracking_uri, candidate, active.policy, protected_domains(get_registry()),
                                 anchor=cfg.anchor or None)


def _num(value, fmt: str, scale: float = 1.0) -> str:
    return format(scale * value, fmt) if value is not None and value == value else "n/a"


REPORT_COLUMNS = {"domain": "domain", "n": "n", "k": "K", "delta": "delta (pts)", "ci": "95% CI", "p": "p",
                  "q": "q", "mde": "MDE (pts)", "lost_gained": "lost/gained", "verdict": "verdict"}


def _table(report) -> str:
    """The report for a person: not-comparable domains first, then by verdict and p."""
    order = {"regression": 0, "warn": 1, "underpowered": 2, "ok": 3}
    rows = [{"domain": f"{nc['domain']}{' (protected)' if nc['protected'] else ''}",
             "verdict": f"NOT COMPARABLE: {nc['difference']}"} for nc in report.not_comparable]
    rows += [{"domain": f"{d.domain}{' (protected)' if d.protected else ''}", "n": d.n, "k": d.k,
              "delta": f"{100 * d.delta:+.1f}", "ci": f"[{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]",
              "p": f"{d.p:.2g}", "q": f"{d.q:.2g}", "mde": "inf" if d.underpowered else _num(d.mde, ".1f", 100),
              "lost_gained": f"{d.items_lost}/{d.items_gained}",
              "verdict": d.verdict.upper() + (f" (smallest attainable p {d.p_min:.2g})" if d.underpowered else "")}
             for d in sorted(report.domains, key=lambda d: (order[d.verdict], d.p))]
    return markdown_table(rows, REPORT_COLUMNS, width=None)


def _policy_md(active) -> str:
    """The active policy for a person, the protected set resolved against the registry."""
    from evaluation.promotion import protected_domains

    registry = get_registry()
    protected = active.policy.protected_domains(protected_domains(registry), registry.names)
    return "\n".join(f"- {line}" for line in active.describe(protected))


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name="regression",
    deps=["checkpoint_sweep"],
    kinds={"polars", "mlflow"},
    check_specs=[dg.AssetCheckSpec("no_domain_regression", asset="regression_report", blocking=True,
                                   description="ERROR when the promotion policy blocks: a protected domain "
                                               "regressed beyond its margin (Holm), or any domain dropped (BH) "
                                               "under block_on: any; a domain that could block is underpowered; "
                                               "a domain is not comparable (different generation configs); a "
                                               "protected domain lacks paired results. WARN on BH warnings.")],
    description="Paired per-domain regression report of this checkpoint vs the champion (and an anchor), "
                "each domain on a generation config both were swept with, judged by the promotion policy.",
)
def regression_report(context: dg.AssetExecutionContext, config: RegressionConfig, lake: LakeResource,
                      mlflow: MlflowResource):
    from evaluation.promotion import PromotionError, apply_promotion, decide_promotion
    from evaluation.promotion_policy import blocking_reasons

    candidate = context.partition_key
    the_lake = lake.lake(write=True)
    active = _policy(the_lake, config)
    try:
        champion, reports = _compare(the_lake, mlflow.tracking_uri, candidate, config, active)
    except PromotionError as exc:  # nothing to compare (no sweep results): the reason, not a traceback
        raise dg.Failure(str(exc)) from exc
    metadata: dict = {"candidate": candidate, "champion": champion or "none yet", "anchor": config.anchor or "none",
                      "promotion_policy": dg.MetadataValue.md(_policy_md(active)),
                      "promotion_policy_json": dg.MetadataValue.json(active.to_json())}
    blocking, warnings, underpowered, not_comparable = [], [], [], []
    for role, report in reports.items():
        metadata[f"vs_{role}"] = dg.MetadataValue.md(_table(report))
        metadata[f"missing_vs_{role}"] = dg.MetadataValue.json(report.missing)
        blocking += [reason for _, reason in blocking_reasons(report, active.policy, role)]
        warnings += [f"{d.domain} (vs {role})" for d in report.warnings]
        underpowered += [f"{d.domain} (vs {role})" for d in report.underpowered]
        not_comparable += [f"{nc['domain']} (vs {role}): {nc['difference']}" for nc in report.not_comparable]
        finite = sorted(d.mde for d in report.domains if not d.underpowered)
        metadata[f"mde_median_vs_{role}"] = dg.MetadataValue.float(finite[len(finite) // 2] if finite else float("nan"))
    if not reports:
        metadata["note"] = "no baseline to compare with (no champion yet, or this is the champion)"
    # what champion_promotion decides on: these reports, not a second comparison
    metadata[REPORTS_KEY] = dg.MetadataValue.json({"champion": champion,
                                                   "reports": {role: r.to_json() for role, r in reports.items()}})
    failed = bool(blocking)
    if failed:  # the promotion asset will not run: record the refusal here, by the same rule
        decision = decide_promotion(candidate, champion, reports, active)
        apply_promotion(the_lake, mlflow.tracking_uri, decision)
    check = dg.AssetCheckResult(
        check_name="no_domain_regression",
        passed=not failed and not warnings,
        severity=dg.AssetCheckSeverity.ERROR if failed else dg.AssetCheckSeverity.WARN,
        metadata={"blocking": dg.MetadataValue.md("\n".join(f"- {b}" for b in blocking) or "none"),
                  "warnings": ", ".join(warnings) or "none",
                  "underpowered": ", ".join(underpowered) or "none",
                  "not_comparable": "; ".join(not_comparable) or "none",
                  "policy": f"{active.source} (block_on: {active.policy.block_on}, "
                            f"on_underpowered: {active.policy.on_underpowered})"},
    )
    return dg.MaterializeResult(metadata=metadata, check_results=[check])


def _stored_reports(context: dg.AssetExecutionContext, candidate: str) -> tuple[str | None, dict]:
    """(the champion compared with, ``{role: report}``) of the latest ``regression_report`` of
    ``candidate``; a Failure naming what to run when there is none."""
    from evaluation.regression import RegressionReport

    found = context.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=dg.AssetKey("regression_report"), asset_partitions=[candidate]), limit=1)
    entry = (found.records[0].asset_materialization.metadata.get(REPORTS_KEY) if found.records else None)
    if entry is None:
        raise dg.Failure(f"no regression report of {candidate} to decide on: materialize regression_report "
                         f"for partition {candidate} first (`assay sweep` then the regression job does both)")
    payload = entry.value
    return payload["champion"], {role: RegressionReport.from_json(r) for role, r in payload["reports"].items()}


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name="regression",
    deps=["regression_report"],
    kinds={"mlflow"},
    description="Moves the MLflow registry alias 'champion' on 'assay-policy' to this checkpoint when the "
                "promotion policy finds nothing blocking, only if the champion it compared with is still "
                "the champion (compare-and-set), and records the decision and why in lake table promotions.",
)
def champion_promotion(context: dg.AssetExecutionContext, config: PromotionConfig, lake: LakeResource,
                       mlflow: MlflowResource) -> dg.MaterializeResult:
    from evaluation.promotion import apply_promotion, decide_promotion

    candidate = context.partition_key
    the_lake = lake.lake(write=True)
    active = _policy(the_lake, config)
    champion, reports = _stored_reports(context, candidate)
    decision = apply_promotion(the_lake, mlflow.tracking_uri, decide_promotion(candidate, champion, reports, active))
    context.log.info(decision.reason)
    return dg.MaterializeResult(metadata={
        "promoted": decision.promoted, "previous_champion": champion or "none",
        "reason": dg.MetadataValue.md(decision.reason), "decision": decision.decision_id,
        "promotion_policy": dg.MetadataValue.md(_policy_md(active))})
