"""The fast_variant asset and the champion's fast-variant sensor, through Dagster's own entry points,
with real local resources and the wide tiny checkpoint (tests/conftest.py)."""

from __future__ import annotations

import shutil

import dagster as dg
import pytest

from tests.conftest import write_plugin

CONFIG = {"method": "spec-ngram", "domains": ["plug"], "limit": 6, "max_new_tokens": 6, "speed_prompts": 2,
          "speed_batch1_prompts": 1, "speed_new_tokens": 4, "dtype": "float32", "min_speedup": 0.01}


@pytest.fixture
def env(tiny_home, tiny_checkpoint, tmp_path, monkeypatch):
    from domains import get_registry
    from storage.lake import Lake
    from generation.checkpoints import register_checkpoint

    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plug")
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    get_registry(reload=True)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    lake = Lake.at(tiny_home)
    folder = tiny_home / "checkpoints" / "wide-step000001"
    shutil.copytree(tiny_checkpoint, folder)
    register_checkpoint(lake, lake.mlflow_uri, checkpoint="wide-step000001", path=folder, run_id=None, step=1,
                        recipe="tiny", base_model="tiny", domains=[])
    yield lake
    get_registry(reload=True)


def test_fast_variant_materializes_a_refusal_with_its_evidence(env, tiny_home):
    from assets.variants import fast_variant
    from assets.resources import default_resources
    from pipelines.sensors import new_checkpoint_sensor

    lake = env
    resources = default_resources(str(tiny_home))
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoint", ["wide-step000001"])
        result = dg.materialize([fast_variant], partition_key="wide-step000001", instance=instance,
                                resources=resources, run_config={"ops": {"fast_variant": {"config": CONFIG}}},
                                raise_on_error=False)
        assert result.success
        meta = result.asset_materializations_for_node("fast_variant")[0].metadata
        assert meta["variant"].value == "wide-step000001--spec-ngram"
        assert meta["equivalent"].value is False and meta["fast_alias"].value is False
        assert "underpowered" in meta["domains"].value and "plug" in meta["domains"].value
        assert meta["speedup_batch1"].value > 0
        (check,) = result.get_asset_check_evaluations()
        assert check.check_name == "variant_equivalent" and not check.passed
        assert check.severity == dg.AssetCheckSeverity.WARN
        # the variant is a checkpoint in MLflow: the new-checkpoint sensor makes it a partition to evaluate
        found = new_checkpoint_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert "wide-step000001--spec-ngram" in [r.partition_key for r in found.run_requests]
    assert lake.read("variants")["variant"].to_list() == ["wide-step000001--spec-ngram"]


def test_champion_fast_variant_sensor_requests_the_new_champion(env, tiny_home):
    from evaluation.promotion import PromotionDecision, apply_promotion
    from assets.resources import default_resources
    from pipelines.sensors import champion_fast_variant_sensor

    lake = env
    resources = default_resources(str(tiny_home))
    with dg.instance_for_test() as instance:
        idle = champion_fast_variant_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert not idle.run_requests  # no champion yet: nothing to make fast
        apply_promotion(lake, lake.mlflow_uri, PromotionDecision("wide-step000001", None, True, "first champion"))
        fired = champion_fast_variant_sensor(dg.build_sensor_context(instance=instance, resources=resources,
                                                                     cursor=idle.cursor))
        assert [r.partition_key for r in fired.run_requests] == ["wide-step000001"]
        assert fired.cursor == "wide-step000001"
        again = champion_fast_variant_sensor(dg.build_sensor_context(instance=instance, resources=resources,
                                                                     cursor=fired.cursor))
        assert not again.run_requests
    assert champion_fast_variant_sensor.default_status == dg.DefaultSensorStatus.STOPPED
