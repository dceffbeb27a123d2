"""Schedules: the nightly sweep of the champion and the latest checkpoint at 02:00 UTC, the nightly
report card of every domain at 03:00 UTC, and the hourly lake maintenance.

The sweep is cached per item, so a nightly run of an unchanged checkpoint only generates what is
new: domains added since (plugins), eval items added, or a changed generation config. Its runs
generate with the policy resource's engine (``PolicyResource.backend``: auto, i.e. vLLM where it
is installed and serves the model; the sweep asset's ``backend`` left empty means that one), named
in each run's ``assay.backend`` tag.

``lake_maintenance_schedule`` runs ``lake_maintenance_job`` (:mod:`assets.maintenance`) at minute
17 of every hour. It is on by default where the lake is shared (the ``team`` and ``cluster``
profiles: Iceberg tables whose history grows with every commit) and off by default on the local
profile, where the job has almost nothing to do; either way it can be switched in the Dagster UI.
"""

from __future__ import annotations

import datetime as dt

import dagster as dg

from pipelines.jobs import checkpoint_sweep_job, lake_maintenance_job, report_card_job
from assets.partitions import checkpoint_partitions, domain_partitions
from assets.resources import LakeResource, MlflowResource, PolicyResource


def nightly_targets(lake: LakeResource, mlflow: MlflowResource) -> list[str]:
    """The champion (MLflow alias) and the latest trained checkpoint, deduplicated."""
    from storage.tracking import current_champion
    from generation.checkpoints import list_checkpoints

    targets = []
    champion = current_champion(mlflow.tracking_uri)
    if champion:
        targets.append(champion)
    trained = [r.checkpoint for r in list_checkpoints(lake.lake()) if not r.checkpoint.startswith("base-")]
    if trained:
        targets.append(trained[-1])
    return list(dict.fromkeys(targets))


@dg.schedule(cron_schedule="0 2 * * *", execution_timezone="UTC", job=checkpoint_sweep_job,
             description="Nightly 02:00 UTC sweep of the champion and the latest checkpoint.")
def nightly_sweep_schedule(context: dg.ScheduleEvaluationContext, lake: LakeResource, mlflow: MlflowResource,
                           policy: PolicyResource):
    targets = nightly_targets(lake, mlflow)
    if not targets:
        return dg.SkipReason("no champion and no trained checkpoint yet")
    # schedules cannot return partition requests: add any missing partition directly
    known = set(context.instance.get_dynamic_partitions(checkpoint_partitions.name))
    missing = [t for t in targets if t not in known]
    if missing:
        context.instance.add_dynamic_partitions(checkpoint_partitions.name, missing)
    when = context.scheduled_execution_time or dt.datetime.now(dt.timezone.utc)
    return [dg.RunRequest(partition_key=t, run_key=f"nightly-{when:%Y%m%d}-{t}",
                          tags={"assay.trigger": "nightly", "assay.backend": policy.backend})
            for t in targets]


def maintenance_status(profile=None) -> dg.DefaultScheduleStatus:
    """On by default where the lake is shared (team, cluster), off on the local profile."""
    from storage.deployment import load_profile

    return dg.DefaultScheduleStatus.RUNNING if (profile or load_profile()).shared else dg.DefaultScheduleStatus.STOPPED


lake_maintenance_schedule = dg.ScheduleDefinition(
    name="lake_maintenance_schedule", job=lake_maintenance_job, cron_schedule="17 * * * *",
    execution_timezone="UTC", default_status=maintenance_status(),
    description="Hourly lake maintenance (compaction, snapshot expiry, orphan removal); on by default in the "
                "team and cluster profiles.",
)

@dg.schedule(cron_schedule="0 3 * * *", execution_timezone="UTC", job=report_card_job,
             description="Nightly 03:00 UTC report card of every domain (after the sweep): a verifier changed by a "
                         "plugin update or a new hack in the corpus is caught by the morning.")
def nightly_report_card_schedule(context: dg.ScheduleEvaluationContext):
    when = context.scheduled_execution_time or dt.datetime.now(dt.timezone.utc)
    return [dg.RunRequest(partition_key=domain, run_key=f"card-{when:%Y%m%d}-{domain}",
                          tags={"assay.trigger": "nightly"})
            for domain in domain_partitions.get_partition_keys()]


SCHEDULES = [nightly_sweep_schedule, nightly_report_card_schedule, lake_maintenance_schedule]
