"""Sweep, regression report, promotion, sensor and schedule through Dagster's own entry points,
with real local resources (lake + MLflow SQLite under a tmp ASSAY_HOME) and the real tiny policy."""

from __future__ import annotations

import datetime as dt
import shutil
from datetime import datetime, timezone

import dagster as dg
import polars as pl
import pytest

from tests.conftest import write_plugin

SWEEP_CONFIG = {"domains": ["plug"], "limit": 4, "samples": 2, "max_new_tokens": 8, "dtype": "float32",
                "batch_items": 2}


@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory):
    from generation.policy import ensure_tiny

    return ensure_tiny(tmp_path_factory.mktemp("tiny_assets_home"))


@pytest.fixture
def env(assay_home, tmp_path, tiny_built, monkeypatch):
    from domains import get_registry
    from storage.lake import Lake
    from generation.checkpoints import register_checkpoint

    shutil.copytree(tiny_built, assay_home / "models" / "tiny")
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plug")
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    get_registry(reload=True)
    lake = Lake.at(assay_home)
    # no MLFLOW_TRACKING_URI: storage.tracking scopes MLflow 3.17's global-URI lookup itself
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for name in ("base-tiny", "copy-step000001"):
        folder = assay_home / "checkpoints" / name
        shutil.copytree(tiny_built, folder)
        register_checkpoint(lake, lake.mlflow_uri, checkpoint=name, path=folder, run_id=None,
                            step=0 if name.startswith("base") else 1, recipe="tiny", base_model="tiny", domains=[])
    yield lake
    get_registry(reload=True)


def _materialize(assets, key, instance, home, run_config=None):
    from assets.resources import default_resources

    return dg.materialize(assets, partition_key=key, instance=instance, resources=default_resources(str(home)),
                          run_config=run_config or {}, raise_on_error=False)


def _write_fake_sweep(lake, checkpoint: str, scores: list[float], max_new_tokens: int | None = None):
    """A sweep of `plug` (8 items x K=2) written straight to the lake, as another harness would.
    With 8 items the exact sign-flip test can reach p = 1/256; with 4 it could not go below 1/16.
    ``max_new_tokens`` records a readable generation config (gen_params) with that length."""
    from evaluation.comparability import gen_identity
    from storage.tables import RESULTS, SWEEP_SUMMARY, conform

    config, params = ("g", None) if max_new_tokens is None else gen_identity(
        {"max_new_tokens": max_new_tokens, "temperature": 0.7, "top_p": 0.95, "prompt_format": "raw"})
    rows = pl.DataFrame({"checkpoint": checkpoint, "domain": "plug", "item_id": [f"plug-eval-{10000 + i}" for i in range(8)
                                                                             for _ in range(2)],
                         "sample_idx": [s for _ in range(8) for s in range(2)], "score": scores,
                         "completion": "", "latency_s": 0.1, "tokens": 1, "cluster_id": None,
                         "gen_config": config, "gen_params": params, "created_at": datetime.now(timezone.utc).isoformat()})

    lake.write_batch("results", {"checkpoint": checkpoint, "domain": "plug", "batch": "b1"}, {"part": conform(rows, RESULTS)})
    summary = pl.DataFrame([{"checkpoint": checkpoint, "domain": "plug", "n": 8, "k": 2, "gen_config": config,
                             "gen_params": params}])
    lake.write_batch("sweep_summary", {"checkpoint": checkpoint, "domain": "plug"}, {"part": conform(summary, SWEEP_SUMMARY)})


def test_not_comparable_domain_fails_the_blocking_check_and_is_refused(env, assay_home):
    """Champion swept at 64 tokens, candidate at 256: not compared, named, promotion refused."""
    from assets.regression import champion_promotion, regression_report
    from evaluation.promotion import PromotionDecision, apply_promotion
    from storage.tracking import current_champion

    lake = env
    apply_promotion(lake, lake.mlflow_uri, PromotionDecision("base-tiny", None, True, "first champion"))
    _write_fake_sweep(lake, "base-tiny", [1.0] * 16, max_new_tokens=64)
    _write_fake_sweep(lake, "copy-step000001", [1.0] * 16, max_new_tokens=256)
    (assay_home / "promotion.yaml").write_text("protected: [plug]\n")  # the team's policy file
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoint", ["copy-step000001"])
        result = _materialize([regression_report, champion_promotion], "copy-step000001", instance, assay_home)
    (check,) = result.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert check.metadata["not_comparable"].value == "plug (vs champion): max_new_tokens: 64 vs 256"
    assert "plug not comparable" in check.metadata["blocking"].value
    meta = result.asset_materializations_for_node("regression_report")[0].metadata
    assert "NOT COMPARABLE: max_new_tokens: 64 vs 256" in meta["vs_champion"].value
    assert f"source: {assay_home / 'promotion.yaml'}" in meta["promotion_policy"].value
    assert "protected: plug" in meta["promotion_policy"].value
    assert not result.asset_materializations_for_node("champion_promotion")  # blocked
    assert current_champion(lake.mlflow_uri) == "base-tiny"
    refusal = lake.read("promotions").filter(~pl.col("promoted")).row(0, named=True)
    assert refusal["candidate"] == "copy-step000001" and "max_new_tokens: 64 vs 256" in refusal["reason"]
    assert '"protected": ["plug"]' in refusal["policy"]


@pytest.mark.slow
def test_sensor_sweep_report_promotion_and_schedule(env, assay_home):
    lake = env
    with dg.instance_for_test() as instance:  # persistent (a schedule context needs an instance ref)
        _run_everything(lake, instance, assay_home)


def _run_everything(lake, instance, assay_home):
    from assets.evaluation import checkpoint_sweep
    from assets.regression import champion_promotion, regression_report
    from assets.resources import default_resources
    from pipelines.schedules import nightly_sweep_schedule
    from pipelines.sensors import new_checkpoint_sensor
    from storage.tracking import current_champion

    resources = default_resources(str(assay_home))

    # the sensor sees both registered checkpoints, adds their partitions, requests their evaluation
    ctx = dg.build_sensor_context(instance=instance, resources=resources)
    result = new_checkpoint_sensor(ctx)
    assert [r.partition_key for r in result.run_requests] == ["base-tiny", "copy-step000001"]
    assert result.dynamic_partitions_requests[0].partition_keys == ["base-tiny", "copy-step000001"]
    assert result.cursor == "2"
    instance.add_dynamic_partitions("checkpoint", ["base-tiny", "copy-step000001"])
    again = new_checkpoint_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor="2"))
    assert not again.run_requests

    everything = [checkpoint_sweep, regression_report, champion_promotion]
    config = {"ops": {"checkpoint_sweep": {"config": SWEEP_CONFIG}}}
    first = _materialize(everything, "base-tiny", instance, assay_home, config)
    assert first.success
    meta = first.asset_materializations_for_node("checkpoint_sweep")[0].metadata
    assert meta["samples_generated"].value == 8 and "plug" in meta["summary"].value
    assert current_champion(lake.mlflow_uri) == "base-tiny"  # the first champion

    second = _materialize(everything, "copy-step000001", instance, assay_home, config)
    assert second.success, [e.metadata for e in second.get_asset_check_evaluations()]
    (check,) = second.get_asset_check_evaluations()
    assert check.check_name == "no_domain_regression" and check.passed
    assert current_champion(lake.mlflow_uri) == "copy-step000001"
    # 4 items: a sign-flip test cannot go below 1/16, so `plug` (not protected) is underpowered, not "ok"
    assert lake.read("regression", where={"candidate": "copy-step000001"})["verdict"].to_list() == ["underpowered"]

    # a candidate that lost every item of a protected domain: the blocking check stops promotion
    _write_fake_sweep(lake, "copy-step000001", [1.0] * 16)  # replace the champion's sweep: all solved
    instance.add_dynamic_partitions("checkpoint", ["bad-step000002"])
    _write_fake_sweep(lake, "bad-step000002", [0.0] * 16)
    policy = assay_home / "strict.yaml"  # a policy file named by config
    policy.write_text("protected: [plug]\ndefault_margin: 0.0\n")
    refused = _materialize([regression_report, champion_promotion], "bad-step000002", instance, assay_home,
                           {"ops": {"regression_report": {"config": {"policy_path": str(policy)}},
                                    "champion_promotion": {"config": {"policy_path": str(policy)}}}})
    (check,) = refused.get_asset_check_evaluations()
    assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR
    assert not refused.asset_materializations_for_node("champion_promotion")  # blocked
    assert current_champion(lake.mlflow_uri) == "copy-step000001"
    decisions = lake.read("promotions").sort("created_at")
    assert decisions["promoted"].to_list() == [True, True, False]
    assert "plug" in decisions["reason"][-1]

    # nightly: champion and latest trained checkpoint (deduplicated)
    sched = dg.build_schedule_context(instance=instance, resources=resources,
                                      scheduled_execution_time=dt.datetime(2026, 11, 30, 2, tzinfo=dt.timezone.utc))
    requests = nightly_sweep_schedule(sched)
    assert [r.partition_key for r in requests] == ["copy-step000001"]
    assert requests[0].run_key == "nightly-20261130-copy-step000001"


def test_promotion_decides_on_the_stored_report_and_never_compares_again(env, assay_home):
    """champion_promotion reads regression_report's reports back: with the candidate's results gone
    after the report (a second comparison would fail: no sweep results), it still decides, on the
    report's champion; with no report materialized it fails, naming what to run."""
    from assets.regression import champion_promotion, regression_report
    from storage.tracking import current_champion

    _write_fake_sweep(env, "base-tiny", [1.0, 0.0] * 8)
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoint", ["base-tiny", "copy-step000001"])
        alone = _materialize([champion_promotion], "base-tiny", instance, assay_home)
        assert not alone.success
        failure = [e for e in alone.all_events if e.event_type_value == "STEP_FAILURE"][0]
        assert "materialize regression_report for partition base-tiny first" in str(failure.event_specific_data.error)

        assert _materialize([regression_report, champion_promotion], "base-tiny", instance, assay_home).success
        assert current_champion(env.mlflow_uri) == "base-tiny"
        _write_fake_sweep(env, "copy-step000001", [1.0] * 16)
        report = _materialize([regression_report], "copy-step000001", instance, assay_home)
        stored = report.asset_materializations_for_node("regression_report")[0].metadata["reports"].value
        assert stored["champion"] == "base-tiny" and stored["reports"]["champion"]["baseline"] == "base-tiny"
        shutil.rmtree(env.table_dir("results") / "checkpoint=copy-step000001")
        shutil.rmtree(env.table_dir("sweep_summary") / "checkpoint=copy-step000001")
        promoted = _materialize([champion_promotion], "copy-step000001", instance, assay_home)
        assert promoted.success
        meta = promoted.asset_materializations_for_node("champion_promotion")[0].metadata
        assert meta["previous_champion"].value == "base-tiny" and meta["promoted"].value is True
        assert current_champion(env.mlflow_uri) == "copy-step000001"
