"""Everything Assay keeps in MLflow, in one module. The store is the SQLite file under
``ASSAY_HOME`` (``Lake.mlflow_uri``) unless a deployment points elsewhere; every call names its
tracking URI (no global fluent run state).

- The experiment ``assay`` (:data:`EXPERIMENT`): :func:`experiment_id` gets or creates it, and is
  safe when several processes create it on a fresh store at once. Training, sweeps, the gate
  runs and the Dagster ``MlflowResource`` all log into it.
- The registered model ``assay-policy`` (:data:`REGISTERED_MODEL`): one version per checkpoint,
  tagged ``checkpoint=<id>`` and linked to a LoggedModel named after the checkpoint
  (:func:`register_model_version`, :func:`find_logged_model_id`, :func:`checkpoint_versions`).
- The alias ``champion`` (:data:`CHAMPION_ALIAS`) on it is the one source of truth for the
  champion (:func:`current_champion`). Only :func:`evaluation.promotion.apply_promotion` moves
  it (:func:`set_champion_alias`, under its compare-and-set lock); the lake's ``promotions``
  table is the record of each decision and why. The alias ``fast`` (:data:`FAST_ALIAS`) marks the
  certified fast variant of a checkpoint; only a certification moves it
  (:func:`evaluation.variants.certify_variant`), recorded in lake table ``variants``.
- Runs: :class:`Tracker` starts, resumes and finishes one run and logs params, metrics (in
  batches of at most 1000, MLflow's limit), text artifacts, files and a frame as a dataset input.
- MLflow's process-global tracking URI, which some registry calls read instead of the client's,
  is set only inside :func:`global_tracking_uri`, and put back after.

MLflow is imported inside the functions: CLI code imports this module, and ``assay --help``
must not pay for importing MLflow.
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping

if TYPE_CHECKING:  # pragma: no cover - types only
    import polars as pl
    from mlflow.entities.model_registry import ModelVersion
    from mlflow.tracking import MlflowClient

EXPERIMENT = "assay"
REGISTERED_MODEL = "assay-policy"
# learned reward models (training.reward_model): a registered model of their own, so a reward model
# is never taken for a policy ("latest", the champion) and a policy never for a reward model
REWARD_MODEL_REGISTRY = "assay-reward-model"
CHAMPION_ALIAS = "champion"
FAST_ALIAS = "fast"  # the certified fast variant (evaluation.variants), moved only by a certification
MLFLOW_UI_ENV = "ASSAY_MLFLOW_UI_URL"
DEFAULT_MLFLOW_UI = "http://localhost:5000"
MAX_METRICS_PER_BATCH = 1000  # MLflow's log_batch limits
MAX_PARAMS_PER_BATCH = 100
MAX_PARAM_LEN = 6000
MAX_DATASET_ROWS = 10_000  # a dataset input records a digest and a profile, not the data: a sample will do


def _quiet_mlflow() -> None:
    import logging

    for name in ("mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def client(tracking_uri: str) -> "MlflowClient":
    """A client of the store at ``tracking_uri`` (MLflow's and alembic's INFO chatter off)."""
    _quiet_mlflow()
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def experiment_id(tracking_uri: str, name: str = EXPERIMENT, artifact_root: str | None = None) -> str:
    """The id of experiment ``name``, created (artifacts under ``artifact_root``) when missing.

    Get-or-create is not atomic in MLflow: two processes that both find no experiment both
    create it, and the store's unique constraint rejects the second. That loser reads the
    winner's id instead of failing, so every caller gets the same id."""
    from mlflow.exceptions import MlflowException

    store = client(tracking_uri)
    found = store.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return store.create_experiment(name, artifact_location=artifact_root)
    except MlflowException:
        found = store.get_experiment_by_name(name)  # created by someone else since we looked
        if found is None:
            raise
        return found.experiment_id


def mlflow_ui_url() -> str:
    """Where ``mlflow ui`` serves, for links: ``$ASSAY_MLFLOW_UI_URL`` (``$ASSAY_MLFLOW_UI``, the
    name the Dagster resource used to read, still works), default ``http://localhost:5000``."""
    url = os.environ.get(MLFLOW_UI_ENV) or os.environ.get("ASSAY_MLFLOW_UI") or DEFAULT_MLFLOW_UI
    return url.rstrip("/")


def run_url(experiment: str, run_id: str) -> str:
    """A link to run ``run_id`` of experiment id ``experiment`` in the MLflow UI."""
    return f"{mlflow_ui_url()}/#/experiments/{experiment}/runs/{run_id}"


@contextmanager
def global_tracking_uri(tracking_uri: str) -> Iterator[None]:
    """Point MLflow's process-global tracking URI at ``tracking_uri`` for the ``with`` block.

    MLflow 3.17's SQL registry resolves a model version's LoggedModel through a default
    ``MlflowClient()`` (the global URI, default ``./mlflow.db`` in the working directory) when the
    version has no run id; without this the base pseudo-checkpoints would be looked up in the
    wrong store. Process-global: do not register from two threads of one process at once."""
    import mlflow

    previous = mlflow.get_tracking_uri() if mlflow.tracking.is_tracking_uri_set() else None
    mlflow.set_tracking_uri(tracking_uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(previous)  # None unsets it again


# -- the registered model and its champion ----------------------------------------------------------

def register_model_version(tracking_uri: str, checkpoint: str, source: str, *, run_id: str | None,
                           model_tags: Mapping[str, str], model_params: Mapping[str, str],
                           version_tags: Mapping[str, str], artifact_root: str | None = None,
                           registered_model: str = REGISTERED_MODEL) -> str:
    """A READY LoggedModel named ``checkpoint`` (``source_run_id`` = the training run) and a new
    version of ``registered_model`` (default :data:`REGISTERED_MODEL`; reward models go to
    :data:`REWARD_MODEL_REGISTRY`) linked to it, tagged ``checkpoint=<id>`` plus ``version_tags``.
    Returns the LoggedModel id."""
    from mlflow.exceptions import MlflowException

    store = client(tracking_uri)
    model = store.create_logged_model(experiment_id(tracking_uri, artifact_root=artifact_root), name=checkpoint,
                                      source_run_id=run_id, tags=dict(model_tags), params=dict(model_params))
    store.finalize_logged_model(model.model_id, "READY")
    try:
        store.create_registered_model(registered_model)
    except MlflowException:
        pass  # already there
    with global_tracking_uri(tracking_uri):
        store.create_model_version(registered_model, source=source, run_id=run_id,
                                   tags={"checkpoint": checkpoint, **version_tags}, model_id=model.model_id)
    return model.model_id


def find_logged_model_id(tracking_uri: str, checkpoint: str, experiment: str | None = None) -> str | None:
    """The LoggedModel registered for ``checkpoint`` (tag ``assay.checkpoint``, else its name), if any."""
    store = client(tracking_uri)
    experiment = experiment or experiment_id(tracking_uri)
    for filter_string in (f"tags.`assay.checkpoint` = '{checkpoint}'", f"name = '{checkpoint}'"):
        try:
            found = store.search_logged_models(experiment_ids=[experiment], filter_string=filter_string,
                                               max_results=1)
        except Exception:  # noqa: BLE001 - an unsupported filter on this store: try the next one
            continue
        if len(found):
            return found[0].model_id
    return None


def checkpoint_versions(tracking_uri: str, checkpoint: str | None = None) -> list["ModelVersion"]:
    """Versions of :data:`REGISTERED_MODEL` (only ``checkpoint``'s when given), oldest first;
    none when the model is not registered yet."""
    from mlflow.exceptions import MlflowException

    query = f"name = '{REGISTERED_MODEL}'" + (f" and tags.checkpoint = '{checkpoint}'" if checkpoint else "")
    try:
        versions = client(tracking_uri).search_model_versions(query)
    except MlflowException:
        return []
    return sorted(versions, key=lambda v: int(v.version))


def champion_version(tracking_uri: str) -> "ModelVersion | None":
    """The model version the alias ``champion`` points at, or None when it is unset."""
    return alias_version(tracking_uri, CHAMPION_ALIAS)


def current_champion(tracking_uri: str) -> str | None:
    """The checkpoint id the alias ``champion`` points at, or None when it is unset."""
    version = champion_version(tracking_uri)
    return (version.tags.get("checkpoint") or None) if version is not None else None


def set_champion_alias(tracking_uri: str, version: str | None) -> None:
    """Point the alias ``champion`` at model version ``version`` (None: remove the alias). Only
    the promotion calls this, under its lock (:func:`evaluation.promotion.apply_promotion`)."""
    store = client(tracking_uri)
    if version is None:
        store.delete_registered_model_alias(REGISTERED_MODEL, CHAMPION_ALIAS)
    else:
        store.set_registered_model_alias(REGISTERED_MODEL, CHAMPION_ALIAS, version)


def alias_version(tracking_uri: str, alias: str) -> "ModelVersion | None":
    """The model version ``alias`` points at, or None when it is unset."""
    from mlflow.exceptions import MlflowException

    try:
        return client(tracking_uri).get_model_version_by_alias(REGISTERED_MODEL, alias)
    except MlflowException:
        return None


def alias_checkpoint(tracking_uri: str, alias: str) -> str | None:
    version = alias_version(tracking_uri, alias)
    return (version.tags.get("checkpoint") or None) if version is not None else None


def set_alias(tracking_uri: str, alias: str, version: str) -> None:
    client(tracking_uri).set_registered_model_alias(REGISTERED_MODEL, alias, version)


def tag_model_version(tracking_uri: str, version: str, key: str, value: str) -> None:
    client(tracking_uri).set_model_version_tag(REGISTERED_MODEL, version, key, value)


# -- runs -----------------------------------------------------------------------------------------

@dataclass
class Tracker:
    """One MLflow run in experiment ``experiment``, addressed by id.

    ``start`` creates the run (or resumes ``resume_run_id``: a resumed training run keeps logging
    into the run it started), ``finish`` ends it. As a context manager, ``with tracker.run(...)``
    ends the run FAILED when the block raises and FINISHED otherwise, unless ``finish`` was called
    with another status inside the block."""

    tracking_uri: str
    artifact_root: str | None = None
    experiment: str = EXPERIMENT
    run_id: str | None = None
    _finished: bool = field(default=False, init=False, repr=False)

    def __post_init__(self) -> None:
        self.client = client(self.tracking_uri)

    def experiment_id(self) -> str:
        return experiment_id(self.tracking_uri, self.experiment, self.artifact_root)

    def start(self, run_name: str, params: Mapping[str, Any] | None = None, tags: Mapping[str, str] | None = None,
              resume_run_id: str | None = None) -> str:
        if resume_run_id:
            self.run_id = resume_run_id
            self.client.update_run(resume_run_id, status="RUNNING")
            return resume_run_id
        run = self.client.create_run(self.experiment_id(), run_name=run_name, tags=dict(tags or {}))
        self.run_id = run.info.run_id
        self._finished = False
        self.log_params(params or {})
        return self.run_id

    @contextmanager
    def run(self, run_name: str, params: Mapping[str, Any] | None = None,
            tags: Mapping[str, str] | None = None) -> Iterator["Tracker"]:
        self.start(run_name, params, tags)
        try:
            yield self
        except BaseException:
            if not self._finished:
                self.finish("FAILED")
            raise
        if not self._finished:
            self.finish("FINISHED")

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:MAX_PARAM_LEN]) for k, v in sorted(params.items())]
        for start in range(0, len(items), MAX_PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=items[start:start + MAX_PARAMS_PER_BATCH])

    def log_metrics(self, step: int, metrics: Mapping[str, float | None], *, model_id: str | None = None,
                    timestamp_ms: int | None = None) -> None:
        """Log ``metrics`` at ``step`` (None and NaN are skipped: a metric is computed or absent);
        ``model_id`` also records them on that LoggedModel; ``timestamp_ms`` defaults to now."""
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        items = [Metric(k, float(v), stamp, step, model_id=model_id) for k, v in metrics.items()
                 if v is not None and float(v) == float(v)]
        for start in range(0, len(items), MAX_METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=items[start:start + MAX_METRICS_PER_BATCH])

    def set_tags(self, tags: Mapping[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, str(value))

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_artifact(self, path: str, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, path, artifact_path=artifact_path)

    def log_dataset(self, frame: "pl.DataFrame", name: str, context: str = "validation",
                    max_rows: int = MAX_DATASET_ROWS) -> bool:
        """Record ``frame`` (its first ``max_rows`` rows) as a dataset input of the run, with
        ``context`` (training, validation...). An empty frame is not recorded (MLflow cannot
        profile one): returns whether it was."""
        if frame.height == 0:
            return False
        import mlflow
        from mlflow.entities import DatasetInput, InputTag

        dataset = mlflow.data.from_pandas(frame.head(max_rows).to_pandas(), name=name)
        self.client.log_inputs(self.run_id, datasets=[DatasetInput(
            dataset._to_mlflow_entity(), tags=[InputTag("mlflow.data.context", context)])])
        return True

    def finish(self, status: str = "FINISHED") -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, status=status)
            self._finished = True
