"""The Dagster training asset: trains in its own process on gated train sets, registers the checkpoint."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest

from quality import lake_tables
from quality.lake import Lake
from tests.conftest import write_plugin


def _write_train_set(home, domain: str, n: int = 16) -> None:
    rows = pl.DataFrame({
        "domain": [domain] * n, "id": [f"{domain}-{i}" for i in range(n)],
        "prompt": [f"What is {i} plus 1?" for i in range(n)], "answer": [str(i + 1) for i in range(n)],
        "metadata": [json.dumps({})] * n, "difficulty": [0.5] * n, "evaluation": ["e1"] * n,
        "gated_at": ["2026-11-29T00:00:00+00:00"] * n,
    })
    Lake.at(home).write_batch("train_set", {"domain": domain}, {"part": lake_tables.conform(rows, lake_tables.TRAIN_SET)})


def _materialize(home, run_config: dict, instance):
    from assets.training import policy_checkpoint
    from pipelines.resources import default_resources

    return dg.materialize([policy_checkpoint], resources=default_resources(str(home)), instance=instance,
                          run_config={"ops": {"policy_checkpoint": {"config": run_config}}}, raise_on_error=False)


@pytest.mark.slow  # two training subprocesses (~30 s on a quiet machine)
def test_policy_checkpoint_trains_on_the_train_set_and_adds_the_partition(tiny_home, tmp_path, monkeypatch):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    instance = dg.DagsterInstance.ephemeral()

    refused = _materialize(tiny_home, {"recipe": "tiny", "domains": ["plugged"], "steps": 2,
                                       "threads_per_process": 1}, instance)
    assert not refused.success
    failure = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "no train_set" in str(failure.event_specific_data.error.message) or \
        "no train_set" in json.dumps(str(failure.event_specific_data))

    _write_train_set(tiny_home, "plugged")
    result = _materialize(tiny_home, {"recipe": "tiny", "domains": ["plugged"], "steps": 2,
                                      "threads_per_process": 1}, instance)
    assert result.success
    meta = result.asset_materializations_for_node("policy_checkpoint")[0].metadata
    checkpoint = meta["checkpoint"].value
    assert checkpoint.endswith("-step000002") and meta["steps"].value == 2
    assert set(meta["final_reward"].value) == {"plugged"}
    assert instance.get_dynamic_partitions("checkpoint") == [checkpoint]
    records = Lake.at(tiny_home).read("checkpoints")
    assert records["checkpoint"].to_list() == [checkpoint]
    assert (tiny_home / "checkpoints" / checkpoint / "model.safetensors").exists()
