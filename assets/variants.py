"""Variants stage: a checkpoint's fast variant, made, timed and certified per domain.

``fast_variant`` (partitioned by checkpoint) calls :func:`evaluation.variants.certify_variant` on its
partition: the configured method's variant is made and registered (it then becomes a checkpoint
partition itself, swept and compared by ``checkpoint_evaluation_job`` like any checkpoint, and
refused as champion), timed against the checkpoint, swept with it on the same items, and tested
per domain for non-inferiority; the MLflow alias ``fast`` moves to it only when every domain is
non-inferior and it is fast enough. ``champion_fast_variant_sensor`` (off until turned on in the UI)
requests it for each new champion.
"""

import dagster as dg
from pydantic import Field

from domains import get_registry
from evaluation.variant_config import VariantConfig
from assets.config_bridge import dagster_config
from assets.pools import POOL_SWEEP
from assets.k8s import k8s_op_tags
from assets.partitions import checkpoint_partitions
from assets.resources import LakeResource, MlflowResource
from storage.markdown import markdown_table


class FastVariantConfig(dagster_config(VariantConfig, name="VariantConfigFields", exclude={"progress"})):
    """How the variant is made and certified (the fields of evaluation.variant_config.VariantConfig) and on which domains."""

    domains: list[str] = Field([], description="domains of the equivalence sweep (empty: every domain a sweep covers)")


def _domains_table(rows: list[dict]) -> str:
    def pts(value):
        return "n/a" if value is None else f"{100 * value:+.1f}"

    return markdown_table([{"domain": d["domain"], "n": d["n"], "delta (pts)": pts(d["delta"]),
                            "95% CI (pts)": f"[{pts(d['ci_low'])}, {pts(d['ci_high'])}]", "verdict": d["verdict"],
                            "items for 80% power": d["items_for_power"] if d["items_for_power"] is not None else "n/a"}
                           for d in rows],
                          ["domain", "n", "delta (pts)", "95% CI (pts)", "verdict", "items for 80% power"], width=None)


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name="variants",
    kinds={"torch", "parquet", "mlflow"},
    pool=POOL_SWEEP,  # it sweeps: same core budget as the sweeps
    op_tags=k8s_op_tags(POOL_SWEEP),  # GPU pod on the cluster profile (assets.k8s)
    check_specs=[dg.AssetCheckSpec("variant_equivalent", asset="fast_variant",
                                   description="Every domain shown non-inferior to the checkpoint at the margin; "
                                               "WARN when a domain is inferior, underpowered or not comparable.")],
    description="Makes this checkpoint's variant (default GGUF Q4_0 on llama.cpp), times it against the checkpoint "
                "in one run, sweeps both on the same items and tests each domain for non-inferiority; moves the "
                "MLflow alias 'fast' to it when every domain passes and it is at least min_speedup faster at batch 1.",
)
def fast_variant(context: dg.AssetExecutionContext, config: FastVariantConfig, lake: LakeResource,
                 mlflow: MlflowResource) -> dg.MaterializeResult:
    from evaluation.variants import certify_variant

    domains = get_registry().sweep_selection(names=config.domains or None)
    if not domains:
        raise dg.Failure(f"no domains to certify on: domains={config.domains}")
    cert = certify_variant(lake.lake(write=True), mlflow.tracking_uri, context.partition_key, domains,
                           config.to_library(), log=context.log.info)
    payload = cert.to_json()
    speed = payload["speed"]
    return dg.MaterializeResult(
        metadata={"variant": payload["variant"], "method": payload["method"],
                  "speedup_batch1": dg.MetadataValue.float(payload["speedup_batch1"] or float("nan")),
                  "speedup_batch": dg.MetadataValue.float(payload["speedup_batch"] or float("nan")),
                  "tokens_per_s_batch1": dg.MetadataValue.float(speed["variant"]["tokens_per_s_batch1"]),
                  "parent_tokens_per_s_batch1": dg.MetadataValue.float(speed["parent"]["tokens_per_s_batch1"]),
                  "load_average": dg.MetadataValue.float(speed["load_average"]),
                  "equivalent": payload["equivalent"], "fast_alias": payload["fast_alias"],
                  "domains": dg.MetadataValue.md(_domains_table(payload["domains"])),
                  "reasons": dg.MetadataValue.md("\n".join(f"- {r}" for r in payload["reasons"]) or "none"),
                  "decision": payload["decision"]},
        check_results=[dg.AssetCheckResult(
            check_name="variant_equivalent", passed=payload["equivalent"], severity=dg.AssetCheckSeverity.WARN,
            metadata={"verdicts": ", ".join(f"{d['domain']}: {d['verdict']}" for d in payload["domains"]) or "none"})],
    )
