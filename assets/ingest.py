"""Ingest stage: a domain's generated train and eval samples, gated, into the lake."""

import dagster as dg

from domains import get_registry
from assets.config_bridge import dagster_config
from assets.pools import POOL_INGEST
from assets.k8s import k8s_op_tags
from assets.partitions import domain_partitions
from assets.resources import LakeResource
from quality.ingest import IngestSettings, ingest_generated
from storage.markdown import markdown_table
from generation.policy import policy_token_counter


IngestConfig = dagster_config(IngestSettings, name="IngestConfig")


@dg.asset(
    partitions_def=domain_partitions,
    group_name="ingest",
    kinds={"parquet", "polars"},
    pool=POOL_INGEST,
    op_tags=k8s_op_tags(POOL_INGEST),  # CPU-only pod on the cluster profile (assets.k8s)
    description="A domain's generated samples (train + eval) after the row gates; quarantined "
                "rows are kept with their reasons.",
)
def domain_samples(context: dg.AssetExecutionContext, config: IngestConfig,
                   lake: LakeResource) -> dg.MaterializeResult:
    registry = get_registry()
    domain = registry.get(context.partition_key)
    store = lake.lake(write=True)
    # a long-context domain's prompts are measured in the policy's tokens (its length bucket)
    count_tokens = policy_token_counter(home=store.home) if domain.context_tokens else None
    reports = ingest_generated(store, domain, train_n=config.train_samples, seed=config.seed,
                               all_domains=list(registry), count_tokens=count_tokens)
    reasons: dict[str, int] = {}
    for report in reports.values():
        for code, count in report.reasons.items():
            reasons[code] = reasons.get(code, 0) + count
    train, evals = reports["train"], reports["eval"]
    received = train.received + evals.received
    admitted = train.admitted + evals.admitted
    context.log.info(f"{domain.name}: admitted {admitted}/{received}, reasons {reasons or 'none'}")
    return dg.MaterializeResult(metadata={
        "owner": domain.owner,
        "train_admitted": train.admitted,
        "eval_admitted": evals.admitted,
        "received": received,
        "quarantined": train.quarantined + evals.quarantined,
        "admitted_fraction": dg.MetadataValue.float(admitted / received if received else 0.0),
        "quarantine_reasons": dg.MetadataValue.md(
            markdown_table([{"reason": k, "rows": v} for k, v in sorted(reasons.items())], ["reason", "rows"])
            if reasons else "no rows quarantined"),
        "preview": dg.MetadataValue.md(markdown_table(train.preview, ["id", "prompt", "answer"])),
        "lake_path": dg.MetadataValue.path(train.path or ""),
    })
