"""Sensors: new checkpoints registered in MLflow become checkpoint partitions and get evaluated.

``new_checkpoint_sensor`` reads the versions of the registered model ``assay-policy`` (each tagged
``checkpoint=<id>`` by ``generation.checkpoints.register_checkpoint``). Its cursor is the highest
version number already handled, so a checkpoint whose partition the training asset added itself
is still evaluated exactly once (run_key = ``evaluate-<id>`` deduplicates too). For each new
checkpoint it adds the dynamic partition (``SensorResult(dynamic_partitions_requests=...)``) and
requests ``checkpoint_evaluation_job`` (sweep -> regression report -> promotion) for it.

``champion_change_sensor`` watches the MLflow alias ``champion``; its cursor is the champion it
last acted on. When the champion changes it records an observation of the ``champion`` source
asset (data version = the checkpoint id) and requests ``difficulty_refresh_job`` for each domain
whose difficulty follows the champion (see :mod:`assets.difficulty` for why a sensor).

``champion_fast_variant_sensor`` (stopped by default) requests ``fast_variant_job`` for each new
champion, so a team that turns it on always has a certified ``fast`` variant of the champion.
"""

from __future__ import annotations

import dagster as dg

from pipelines.jobs import checkpoint_evaluation_job, difficulty_refresh_job, fast_variant_job
from assets.partitions import checkpoint_partitions, domain_partitions
from assets.resources import LakeResource, MlflowResource


def registered_checkpoints(mlflow: MlflowResource, after_version: int = 0) -> list[tuple[int, str]]:
    """(version, checkpoint id) of every ``assay-policy`` version above ``after_version``, oldest first."""
    from storage.tracking import checkpoint_versions

    found = [(int(v.version), v.tags.get("checkpoint", "")) for v in checkpoint_versions(mlflow.tracking_uri)]
    return [(n, c) for n, c in found if n > after_version and c]


@dg.sensor(job=checkpoint_evaluation_job, minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Adds checkpoints newly registered in MLflow as partitions and requests their "
                       "sweep, regression report and promotion.")
def new_checkpoint_sensor(context: dg.SensorEvaluationContext, mlflow: MlflowResource) -> dg.SensorResult:
    after = int(context.cursor) if context.cursor else 0
    new = registered_checkpoints(mlflow, after)
    if not new:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"no new assay-policy versions after version {after}"))
    known = set(context.instance.get_dynamic_partitions(checkpoint_partitions.name))
    ids = list(dict.fromkeys(c for _, c in new))
    to_add = [c for c in ids if c not in known]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=c, run_key=f"evaluate-{c}") for c in ids],
        dynamic_partitions_requests=[checkpoint_partitions.build_add_request(to_add)] if to_add else [],
        cursor=str(max(n for n, _ in new)),
    )


def domains_following_champion(lake: LakeResource, domains: list[str]) -> dict[str, dict]:
    """{domain: its DifficultySettings as a dict} for each domain whose last ``policy_pass_rates``
    measured on a policy without naming one (it follows the champion)."""
    from evaluation.policy_difficulty import current_difficulty, measured_settings

    the_lake = lake.lake()
    out = {}
    for name in domains:
        settings = measured_settings(current_difficulty(the_lake, name))
        if settings is not None and settings.estimate == "policy" and not settings.policy:
            out[name] = settings.model_dump()
    return out


@dg.sensor(job=difficulty_refresh_job, minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="When the MLflow alias 'champion' moves: observes the champion asset and re-measures the "
                       "difficulty (policy_pass_rates -> gated_samples -> domain_train_set) of every domain whose "
                       "difficulty policy is the champion.")
def champion_change_sensor(context: dg.SensorEvaluationContext, lake: LakeResource,
                           mlflow: MlflowResource) -> dg.SensorResult:
    from assets.difficulty import NO_CHAMPION, champion_version

    now = champion_version(mlflow)
    before = context.cursor or NO_CHAMPION
    if now == before:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"champion unchanged ({now})"))
    observation = dg.AssetObservation(asset_key="champion", tags={"dagster/data_version": now},
                                      metadata={"previous": before})
    following = domains_following_champion(lake, domain_partitions.get_partition_keys())
    runs = [dg.RunRequest(partition_key=name, run_key=f"difficulty-{now}-{name}",
                          run_config={"ops": {"policy_pass_rates": {"config": settings}}},
                          tags={"assay.trigger": "champion_change", "assay.champion": now})
            for name, settings in following.items()]
    if not runs:
        return dg.SensorResult(asset_events=[observation], cursor=now, skip_reason=dg.SkipReason(
            f"champion {before} -> {now}: no domain's difficulty follows the champion"))
    return dg.SensorResult(run_requests=runs, asset_events=[observation], cursor=now)


@dg.sensor(job=fast_variant_job, minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.STOPPED,  # hours of sweeps on a CPU: a team opts in, in the UI
           description="When the MLflow alias 'champion' moves to a new checkpoint: requests fast_variant_job for it "
                       "(its variant made, timed and certified with fast_variant's config). Off by default; turn it "
                       "on in the UI to keep a certified fast variant of every champion.")
def champion_fast_variant_sensor(context: dg.SensorEvaluationContext, mlflow: MlflowResource) -> dg.SensorResult:
    from assets.difficulty import NO_CHAMPION, champion_version

    now = champion_version(mlflow)
    if now == (context.cursor or NO_CHAMPION) or now == NO_CHAMPION:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"champion unchanged or unset ({now})"), cursor=now)
    return dg.SensorResult(run_requests=[dg.RunRequest(partition_key=now, run_key=f"fast-variant-{now}",
                                                       tags={"assay.trigger": "champion_change"})],
                           cursor=now)


SENSORS = [new_checkpoint_sensor, champion_change_sensor, champion_fast_variant_sensor]
