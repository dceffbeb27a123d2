"""Jobs: named selections of assets that people and schedules run."""

from __future__ import annotations

import dagster as dg

from assets.partitions import checkpoint_partitions, domain_partitions

ingest_job = dg.define_asset_job(
    "ingest_job", selection=dg.AssetSelection.groups("ingest"), partitions_def=domain_partitions,
    description="Ingest one domain's generated train and eval samples into the lake.",
)

# The main job per domain partition: ingest, the quality gates (their blocking checks stop the
# rest for this domain only), then the domain's train set for GRPO.
domain_pipeline_job = dg.define_asset_job(
    "domain_pipeline_job",
    selection=dg.AssetSelection.groups("ingest", "quality") | dg.AssetSelection.assets("domain_train_set"),
    partitions_def=domain_partitions,
    description="Ingest, gate and package one domain's train set: what `assay demo` runs for every domain.",
)

# Per domain partition, when the champion changes (champion_change_sensor): re-measure the
# domain's pass rates on the new champion, re-judge its latest batch, rebuild its train set.
difficulty_refresh_job = dg.define_asset_job(
    "difficulty_refresh_job",
    selection=dg.AssetSelection.assets("policy_pass_rates", "gated_samples", "domain_train_set"),
    partitions_def=domain_partitions,
    description="Re-measure a domain's difficulty on the difficulty policy, re-run its gates and rebuild its "
                "train set (requested by champion_change_sensor when the champion changes).",
)

training_job = dg.define_asset_job(
    "training_job", selection=dg.AssetSelection.assets("policy_checkpoint"),
    description="GRPO on the gated train sets of the configured domains; registers a checkpoint.",
)

# Per checkpoint partition: sweep every domain, then the regression report and the promotion.
checkpoint_sweep_job = dg.define_asset_job(
    "checkpoint_sweep_job", selection=dg.AssetSelection.assets("checkpoint_sweep"),
    partitions_def=checkpoint_partitions,
    description="Benchmark sweep of one checkpoint on every domain (cached per item).",
)
checkpoint_evaluation_job = dg.define_asset_job(
    "checkpoint_evaluation_job", selection=dg.AssetSelection.groups("evaluation", "regression"),
    partitions_def=checkpoint_partitions,
    description="Sweep a checkpoint, compare it with the champion, and promote it or refuse.",
)

# Per checkpoint partition: make, time and certify its fast variant (the variant itself is then a
# checkpoint partition of its own, evaluated by checkpoint_evaluation_job).
fast_variant_job = dg.define_asset_job(
    "fast_variant_job", selection=dg.AssetSelection.assets("fast_variant"), partitions_def=checkpoint_partitions,
    description="Make a checkpoint's fast variant, time it against the checkpoint, prove per-domain "
                "non-inferiority and move the 'fast' alias when certified.",
)

# The lake's history kept short (assets.maintenance): hourly by lake_maintenance_schedule in the
# team profile; on the local profile it only recovers dead writers' staging folders.
lake_maintenance_job = dg.define_asset_job(
    "lake_maintenance_job", selection=dg.AssetSelection.assets("lake_maintenance"),
    description="Compact small files, expire old snapshots and remove orphan files in every lake table.",
)

# Per domain partition: the environment report card (assets.report_card); nightly for every domain
# (nightly_report_card_schedule). A failed card refuses the domain's train set until a card passes.
report_card_job = dg.define_asset_job(
    "report_card_job", selection=dg.AssetSelection.assets("environment_report_card"),
    partitions_def=domain_partitions,
    description="Card one domain's verifier: recall on equivalent correct answers, fixed and searched hacks, "
                "oracle and nop, hidden-test strength.",
)

JOBS = [ingest_job, domain_pipeline_job, difficulty_refresh_job, training_job, checkpoint_sweep_job,
        checkpoint_evaluation_job, fast_variant_job, lake_maintenance_job,
        report_card_job]
