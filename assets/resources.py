"""Dagster resources: the one place that says where data, runs and models live.

Assets receive these; nothing inside an asset reads ``os.environ``. ``default_resources`` picks
the deployment profile's (:mod:`storage.deployment`): locally the lake under ``ASSAY_HOME`` and
MLflow on SQLite there; for a team the Iceberg lake on object storage and MLflow on PostgreSQL,
without touching assets.
"""

from __future__ import annotations

from typing import Any, Literal

import dagster as dg
from pydantic import Field

from storage import tracking
from storage.lake import Lake, resolve_home
from generation.contract import Backend


class LakeResource(dg.ConfigurableResource):
    """The lake of the deployment profile (``ASSAY_PROFILE``, :mod:`storage.deployment`): the
    Parquet lake under ``home`` (``ASSAY_HOME``) locally, Iceberg on object storage for a team."""

    home: str = Field(description="the Assay home folder (ASSAY_HOME): the lake, MLflow store and checkpoints")

    def lake(self, write: bool = False) -> Lake:
        """The lake; an asset that writes asks ``write=True`` (creates the folder, cleans up after
        dead writers). Reading touches nothing on disk."""
        from storage.deployment import open_lake

        return open_lake(self.home, write=write)


class MlflowResource(dg.ConfigurableResource):
    """An MLflow tracking store addressed explicitly (no global fluent run state)."""

    tracking_uri: str = Field(description="MLflow tracking URI (local default: SQLite under ASSAY_HOME)")
    artifact_root: str = Field(description="where MLflow stores run artifacts and models")
    experiment: str = Field(tracking.EXPERIMENT, description="MLflow experiment that Assay's runs go to")

    # what the store holds and how: storage.tracking

    def client(self):
        return tracking.client(self.tracking_uri)

    def experiment_id(self) -> str:
        """Get-or-create, safe when several runs create the experiment at once."""
        return tracking.experiment_id(self.tracking_uri, self.experiment, self.artifact_root)

    def tracker(self) -> tracking.Tracker:
        """A :class:`storage.tracking.Tracker` for a new run in this experiment."""
        return tracking.Tracker(self.tracking_uri, self.artifact_root, self.experiment)

    def run_url(self, run_id: str) -> str:
        return tracking.run_url(self.experiment_id(), run_id)


class PolicyResource(dg.ConfigurableResource):
    """The policy to train and generate with: a recipe name, and the generation engine sweeps use
    (the nightly schedule's among them) unless a run's config names one. Training takes its
    rollout engine from the recipe (``rollout.backend``), which is part of the run's identity."""

    recipe: str = Field("tiny", description="training recipe when a run names none: tiny, smollm2 or a YAML path")
    backend: Backend = Field(
        "auto", description="generation engine of sweeps: torch, vllm, or auto (vLLM where it is installed, serves "
                            "the model and was measured faster; generation.factory.resolve_backend)")
    dtype: Literal["bfloat16", "float32"] = Field("bfloat16", description="dtype the engine runs the policy in")

    def engine(self, policy_ref: str, home: str | None = None):
        from generation.factory import make_engine

        return make_engine(policy_ref, backend=self.backend, dtype=self.dtype, home=home)


def default_resources(home: str | None = None) -> dict[str, Any]:
    from storage.deployment import open_lake

    root = resolve_home(home)
    lake = open_lake(root, write=True)  # the profile says where MLflow's store and artifacts are
    resources: dict[str, Any] = {
        "lake": LakeResource(home=str(root)),
        "mlflow": MlflowResource(tracking_uri=lake.mlflow_uri, artifact_root=str(lake.mlflow_artifacts)),
        "policy": PolicyResource(),
    }
    return resources
