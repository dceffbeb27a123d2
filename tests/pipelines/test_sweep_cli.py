"""`assay sweep` as a user runs it: a plugin domain, the real tiny policy, a cached re-run."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.conftest import run_cli, write_plugin


@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory):
    from training.policy import ensure_tiny

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
