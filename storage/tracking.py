"""MLflow tracking with explicit run ids (no global fluent run state).

One MLflow run per training run, in experiment ``assay`` (the same one the Dagster
``MlflowResource`` uses), resumable by id: a resumed training run keeps logging into the run it
started. The store is the SQLite file under ``ASSAY_HOME`` (``Lake.mlflow_uri``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

EXPERIMENT = "assay"
MAX_BATCH = 1000  # MLflow's log_batch limit for metrics
MAX_PARAMS = 100  # and for params
MAX_PARAM_LEN = 6000


def _quiet_mlflow() -> None:
    import logging

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


@dataclass
class Tracker:
    tracking_uri: str
    artifact_root: str | None = None
    experiment: str = EXPERIMENT
    run_id: str | None = None

    def __post_init__(self) -> None:
        _quiet_mlflow()
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=self.tracking_uri)

    def experiment_id(self) -> str:
        found = self.client.get_experiment_by_name(self.experiment)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(self.experiment, artifact_location=self.artifact_root)
        except Exception:  # noqa: BLE001 - another process created it first
            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                raise
            return found.experiment_id

    def start(self, run_name: str, params: dict[str, str], tags: dict[str, str] | None = None,
              resume_run_id: str | None = None) -> str:
        from mlflow.entities import Param

        if resume_run_id:
            self.run_id = resume_run_id
            self.client.update_run(resume_run_id, status="RUNNING")
            return resume_run_id
        run = self.client.create_run(self.experiment_id(), run_name=run_name, tags=tags or {})
        self.run_id = run.info.run_id
        items = [Param(k, str(v)[:MAX_PARAM_LEN]) for k, v in sorted(params.items())]
        for start in range(0, len(items), MAX_PARAMS):
            self.client.log_batch(self.run_id, params=items[start:start + MAX_PARAMS])
        return self.run_id

    def log_metrics(self, step: int, metrics: dict[str, float]) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        items = [Metric(k, float(v), stamp, step) for k, v in metrics.items() if v is not None and v == v]
        for start in range(0, len(items), MAX_BATCH):
            self.client.log_batch(self.run_id, metrics=items[start:start + MAX_BATCH])

    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value))

    def finish(self, status: str = "FINISHED") -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, status=status)
