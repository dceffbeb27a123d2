"""The Dagster code location: it loads, lists what it should, and materializes domain partitions."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg

from tests.conftest import PLUGIN_TEMPLATE, REPO, write_plugin

HEAVY = ("torch", "deepspeed", "great_expectations", "transformers", "mlflow", "inspect_ai", "lm_eval", "verifiers")


def _fresh_python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=REPO, timeout=120)


def test_definitions_load_without_heavy_imports(assay_home, tmp_path):
    write_plugin(tmp_path / "plugins", "unit_convert")
    code = (
        "import sys, pipelines.definitions as d\n"
        "keys = {k.to_user_string() for k in d.defs.resolve_asset_graph().get_all_asset_keys()}\n"
        "print(sorted(keys))\n"
        "from assets.partitions import domain_partitions\n"
        "print('unit_convert' in domain_partitions.get_partition_keys())\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = _fresh_python(code, {"ASSAY_DOMAINS_PATH": str(tmp_path / "plugins")})
    assert out.returncode == 0, out.stderr
    keys, has_plugin, heavy = out.stdout.strip().splitlines()[-3:]
    assert "domain_samples" in keys
    assert has_plugin == "True", "plugin domains must become partitions"
    assert heavy == "[]", f"definitions imported {heavy}"


def test_dagster_validate_cli(assay_home):
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "definitions", "validate",
                          "-w", "workspace.yaml"], capture_output=True, text=True, cwd=REPO,
                         env=dict(os.environ), timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr


def test_domain_partition_materializes_with_metadata(assay_home, tmp_path, monkeypatch):
    write_plugin(tmp_path / "plugins", "unit_convert")
    from domains import get_registry

    get_registry(str(tmp_path / "plugins"), reload=True)
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(tmp_path / "plugins"))
    import importlib

    import assets.ingest
    import assets.partitions
    from assets.resources import default_resources

    importlib.reload(assets.partitions)
    importlib.reload(assets.ingest)
    with dg.instance_for_test() as instance:  # an instance of its own, never a stale ambient one
        result = dg.materialize(
            [assets.ingest.domain_samples], partition_key="unit_convert",
            resources=default_resources(str(assay_home)), instance=instance,
            run_config={"ops": {"domain_samples": {"config": {"train_samples": 30}}}},
        )
    assert result.success
    [event] = result.get_asset_materialization_events()
    metadata = event.materialization.metadata
    assert metadata["train_admitted"].value == 30
    assert metadata["eval_admitted"].value == 200
    assert "What is" in metadata["preview"].value
    from storage.lake import Lake

    assert Lake.at(assay_home).sql("SELECT count(*) AS n FROM samples")["n"][0] == 230


def test_parallel_partition_runs_do_not_collide(assay_home, tmp_path):
    plugins = tmp_path / "plugins"
    names = [f"par_{i}" for i in range(4)]
    for i, name in enumerate(names):
        # distinct items per domain (the dedup gate compares rows across all domains): own numbers
        body = PLUGIN_TEMPLATE.format(name=name).replace(
            "k = base + seed * 1000 + i", f"k = base + seed * 1000 + i + {(i + 1) * 100_000}")
        write_plugin(plugins, name, body)
    env = {**os.environ, "ASSAY_DOMAINS_PATH": str(plugins), "ASSAY_HOME": str(assay_home),
           "DAGSTER_HOME": str(assay_home / "dagster")}
    # Create the instance's storage once, as `make ui`/`assay demo` do: Dagster's own SQLite
    # schema setup is not safe to race; the lake writes under test are.
    dg.DagsterInstance.from_config(str(assay_home / "dagster")).dispose()
    dagster = str(Path(sys.executable).parent / "dagster")

    def materialize(name: str):
        return subprocess.run([dagster, "asset", "materialize", "-m", "pipelines.definitions",
                               "--select", "domain_samples", "--partition", name],
                              capture_output=True, text=True, cwd=REPO, env=env, timeout=300)

    with ThreadPoolExecutor(len(names)) as pool:
        results = list(pool.map(materialize, names))
    for result in results:
        assert result.returncode == 0, result.stderr[-2000:]
    from storage.lake import Lake

    counts = Lake.at(assay_home).sql("SELECT domain, count(*) AS n FROM samples GROUP BY 1 ORDER BY 1")
    assert counts["domain"].to_list() == names
    assert set(counts["n"].to_list()) == {456}  # 256 train + 200 eval each


def test_heavy_assets_are_in_their_concurrency_pools():
    """One trainer at a time and sweeps limited by cores (pipelines.instance) only hold if every
    asset that trains or generates is in its pool: assets that run DeepSpeed in 'trainer', assets
    that generate with torch in 'sweep'; ingest and gates in 'ingest'."""
    import pipelines.definitions as d
    from pipelines.instance import POOL_INGEST, POOL_MAINTENANCE, POOL_SWEEP, POOL_TRAINER

    pools, kinds = {}, {}
    for assets_def in d.defs.assets:
        if isinstance(assets_def, dg.SourceAsset):  # observed, never run (the champion alias)
            continue
        for key in assets_def.keys:
            name = key.to_user_string()
            pools[name] = assets_def.op.pool
            kinds[name] = set(assets_def.specs_by_key[key].kinds)
    trainers = {n for n, k in kinds.items() if "deepspeed" in k}
    generators = {n for n, k in kinds.items() if "torch" in k} - trainers
    assert trainers == {"policy_checkpoint"} and generators == {"checkpoint_sweep", "policy_pass_rates", "fast_variant"}
    assert all(pools[n] == POOL_TRAINER for n in trainers)
    assert all(pools[n] == POOL_SWEEP for n in generators)
    assert pools == {"domain_samples": POOL_INGEST, "gated_samples": POOL_INGEST, "domain_train_set": None,
                     "policy_checkpoint": POOL_TRAINER, "checkpoint_sweep": POOL_SWEEP,
                     "policy_pass_rates": POOL_SWEEP,
                     "regression_report": None, "champion_promotion": None, "fast_variant": POOL_SWEEP,
                     "lake_maintenance": POOL_MAINTENANCE,
                     # scoring only (sandboxed code and terminal episodes), like the gates' self-test
                     "environment_report_card": POOL_INGEST}
