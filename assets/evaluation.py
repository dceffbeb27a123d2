"""Evaluation stage: one benchmark sweep per checkpoint partition, every domain, model loaded once.

``checkpoint_sweep`` (partitioned by ``assets.partitions.checkpoint_partitions``) calls
:func:`evaluation.sweep.sweep_checkpoint`: K samples per eval item, scored by each domain's scorer,
cached per (checkpoint, item, sample, generation config) in lake table ``results`` so a re-run or
a resumed run only generates what is missing; one ``sweep_summary`` row per domain; an MLflow run
with ``score/<domain>`` and ``stderr/<domain>`` against the checkpoint's LoggedModel.
"""

from typing import Literal

import dagster as dg
from pydantic import Field

from domains import get_registry
from domains.registry import ON_REQUEST_TAGS
from evaluation.sweep_config import SweepConfig
from assets.config_bridge import dagster_config
from assets.pools import POOL_SWEEP
from assets.k8s import k8s_op_tags
from assets.partitions import checkpoint_partitions
from assets.resources import LakeResource, MlflowResource, PolicyResource
from storage.markdown import markdown_table


class SweepAssetConfig(dagster_config(SweepConfig, name="SweepConfigFields", exclude={"progress"})):
    """A sweep's settings (the fields of evaluation.sweep_config.SweepConfig), the domains and the engine."""

    domains: list[str] = Field([], description="domains to sweep (empty: every registered domain but those with an "
                                               "exclude_tags tag)")
    exclude_tags: list[str] = Field(
        list(ON_REQUEST_TAGS), description="with domains empty, leave out domains with any of these tags (default: "
                                           "the long-context buckets, minutes per item on CPU; [] sweeps them too)")
    backend: Literal["", "torch", "vllm", "auto"] = Field(
        "", description="generation engine: torch, vllm or auto (empty: the policy resource's, auto by default)")
    dtype: Literal["", "bfloat16", "float32"] = Field(
        "", description="dtype the engine runs the policy in (empty: the policy resource's, bfloat16 by default)")


def _summary_table(domains: list[dict]) -> str:
    def num(value, fmt):
        return format(value, fmt) if value is not None else "n/a"

    rows = [{"domain": r["domain"], "n": r["n"], "K": r["k"], "mean": num(r["mean"], ".3f"),
             "95% CI": f"[{num(r['ci_low'], '.3f')}, {num(r['ci_high'], '.3f')}]", "pass@K": num(r["passk"], ".3f"),
             "tokens/s": num(r["tokens_per_s"], ".1f"), "cached": f"{r['cached']}/{r['cached'] + r['generated']}"}
            for r in domains]
    return markdown_table(rows, ["domain", "n", "K", "mean", "95% CI", "pass@K", "tokens/s", "cached"], width=None)


@dg.asset(
    partitions_def=checkpoint_partitions,
    group_name="evaluation",
    kinds={"torch", "parquet", "mlflow"},
    pool=POOL_SWEEP,  # sweeps limited by cores across all runs (pipelines.instance)
    op_tags=k8s_op_tags(POOL_SWEEP),  # GPU pod on the cluster profile (assets.k8s)
    description="Benchmark sweep of one checkpoint on every domain's eval items (K samples per item, "
                "cached per item; resumable), with per-domain mean, pass@k, clustered SE and 95% CI.",
)
def checkpoint_sweep(context: dg.AssetExecutionContext, config: SweepAssetConfig, lake: LakeResource,
                     mlflow: MlflowResource, policy: PolicyResource) -> dg.MaterializeResult:
    from evaluation.sweep import sweep_checkpoint

    registry = get_registry()
    domains = registry.sweep_selection(names=config.domains or None,
                                       exclude_tags=None if config.domains else config.exclude_tags)
    if not domains:
        raise dg.Failure(f"no domains to sweep: domains={config.domains} exclude_tags={config.exclude_tags}")
    sweep_config = config.to_library()
    the_lake = lake.lake(write=True)
    result, run_id = sweep_checkpoint(the_lake, mlflow.tracking_uri, context.partition_key, domains,
                                      config=sweep_config, backend=config.backend or policy.backend,
                                      dtype=config.dtype or policy.dtype, artifact_root=mlflow.artifact_root,
                                      log=context.log.info)
    payload = result.to_json()
    metadata = {
        "domains": len(payload["domains"]),
        "samples_generated": payload["generated"],
        "samples_cached": payload["cached"],
        "seconds": dg.MetadataValue.float(payload["seconds"]),
        "model_loaded": payload["model_loaded"],
        "engine": payload["engine"] or "none (every sample cached)",
        "summary": dg.MetadataValue.md(_summary_table(payload["domains"])),
        "lake_path": dg.MetadataValue.path(the_lake.location("results", {"checkpoint": result.checkpoint})),
    }
    if run_id:
        metadata["mlflow_run"] = dg.MetadataValue.url(mlflow.run_url(run_id))
    for row in payload["domains"]:
        if row["mean"] is not None:
            metadata[f"score/{row['domain']}"] = dg.MetadataValue.float(row["mean"])
    return dg.MaterializeResult(metadata=metadata)
