"""Training tests share one built tiny policy: building it takes seconds, copying it milliseconds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory) -> Path:
    from training.policy import ensure_tiny

    return ensure_tiny(tmp_path_factory.mktemp("tiny_home"))


@pytest.fixture(scope="session")
def empty_mlflow_db(tmp_path_factory) -> Path:
    """A migrated, empty MLflow SQLite store: creating one costs ~8 s of schema migrations."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def tiny_home(assay_home, tiny_source, empty_mlflow_db) -> Path:
    """An ASSAY_HOME whose models/tiny is already built and whose MLflow store exists."""
    target = assay_home / "models" / "tiny"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tiny_source, target)
    shutil.copy(empty_mlflow_db, assay_home / "mlflow.db")
    return assay_home
