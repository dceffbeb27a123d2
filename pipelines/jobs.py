"""Jobs: named selections of assets that people and schedules run."""

from __future__ import annotations

import dagster as dg

from pipelines.partitions import domain_partitions

ingest_job = dg.define_asset_job(
    "ingest_job", selection=dg.AssetSelection.groups("ingest"), partitions_def=domain_partitions,
    description="Ingest one domain's generated train and eval samples into the lake.",
)

# The main job per domain partition: ingest, then the quality gates (their checks block training).
domain_pipeline_job = dg.define_asset_job(
    "domain_pipeline_job", selection=dg.AssetSelection.groups("ingest", "quality"),
    partitions_def=domain_partitions,
    description="Ingest and gate one domain: what `assay demo` runs for every domain.",
)

JOBS = [ingest_job, domain_pipeline_job]
