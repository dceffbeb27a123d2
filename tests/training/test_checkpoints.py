"""Checkpoint registry: base pseudo-checkpoints, lake rows, MLflow models, and reference resolution."""

from __future__ import annotations

import pytest

from pipelines.settings import open_lake
from generation.checkpoints import (CheckpointError, checkpoint_id, ensure_base_checkpoint, ensure_checkpoint,
                                    list_checkpoints, register_checkpoint, resolve_checkpoint)


def test_base_checkpoint_is_registered_once_and_resolvable(tiny_home):
    lake = open_lake()
    first = ensure_base_checkpoint("tiny", lake, lake.mlflow_uri)
    again = resolve_checkpoint("base-tiny", lake, lake.mlflow_uri)
    assert first.checkpoint == again.checkpoint == "base-tiny"
    assert [r.checkpoint for r in list_checkpoints(lake)] == ["base-tiny"]
    assert first.path == str((tiny_home / "models" / "tiny").resolve()) and first.mlflow_model_id
    assert not (tiny_home / "models" / "tiny" / "assay_checkpoint.json").exists()
    with pytest.raises(CheckpointError, match="no base model for recipe 'huge'"):
        ensure_base_checkpoint("huge", lake, lake.mlflow_uri)


def test_resolving_never_writes_ensuring_registers_a_base(tiny_home):
    from mlflow.tracking import MlflowClient

    lake = open_lake()
    with pytest.raises(CheckpointError, match="'base-tiny' is not registered yet"):
        resolve_checkpoint("base-tiny", lake, lake.mlflow_uri)
    assert list_checkpoints(lake) == [] and not lake.files("checkpoints")
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    assert not client.search_model_versions("name='assay-policy'")
    record = ensure_checkpoint("base-tiny", lake, lake.mlflow_uri)
    assert [r.checkpoint for r in list_checkpoints(lake)] == ["base-tiny"] == [record.checkpoint]
    assert resolve_checkpoint("base-tiny", lake, lake.mlflow_uri) == record
    assert ensure_checkpoint("base-tiny", lake, lake.mlflow_uri) == record  # registered once


def test_latest_champion_and_unknown(tiny_home):
    import shutil

    from mlflow.tracking import MlflowClient

    lake = open_lake()
    with pytest.raises(CheckpointError, match="no trained checkpoint"):
        resolve_checkpoint("latest", lake, lake.mlflow_uri)
    for step in (1, 2):
        folder = lake.checkpoints_dir / checkpoint_id("run", step)
        shutil.copytree(tiny_home / "models" / "tiny", folder)
        register_checkpoint(lake, lake.mlflow_uri, checkpoint=checkpoint_id("run", step), path=folder,
                            run_id=None, step=step, recipe="tiny", base_model="tiny", domains=["a"])
    assert resolve_checkpoint("latest", lake, lake.mlflow_uri).checkpoint == "run-step000002"
    with pytest.raises(CheckpointError, match="no champion yet"):
        resolve_checkpoint("champion", lake, lake.mlflow_uri)
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    version = [v for v in client.search_model_versions("name='assay-policy'")
               if v.tags["checkpoint"] == "run-step000001"][0]
    client.set_registered_model_alias("assay-policy", "champion", version.version)
    assert resolve_checkpoint("champion", lake, lake.mlflow_uri).checkpoint == "run-step000001"
    with pytest.raises(CheckpointError, match="unknown checkpoint 'nope'"):
        resolve_checkpoint("nope", lake, lake.mlflow_uri)
    with pytest.raises(CheckpointError, match="has no config.json"):
        register_checkpoint(lake, lake.mlflow_uri, checkpoint="x", path=tiny_home, run_id=None, step=0,
                            recipe="tiny", base_model="tiny", domains=[])
