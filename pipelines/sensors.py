"""Sensors: new checkpoints registered in MLflow become checkpoint partitions and get evaluated.

``new_checkpoint_sensor`` reads the versions of the registered model ``assay-policy`` (each tagged
``checkpoint=<id>`` by ``training.checkpoints.register_checkpoint``). Its cursor is the highest
version number already handled, so a checkpoint whose partition the training asset added itself
is still evaluated exactly once (run_key = ``evaluate-<id>`` deduplicates too). For each new
checkpoint it adds the dynamic partition (``SensorResult(dynamic_partitions_requests=...)``) and
requests ``checkpoint_evaluation_job`` (sweep -> regression report -> promotion) for it.
"""

from __future__ import annotations

import dagster as dg

from pipelines.jobs import checkpoint_evaluation_job
from pipelines.partitions import checkpoint_partitions
from pipelines.resources import MlflowResource


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


SENSORS = [new_checkpoint_sensor]
