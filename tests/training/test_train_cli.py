"""`assay train` as a user runs it: JSON contract, resume after a real kill, two ranks with ZeRO-2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, run_cli, write_plugin


def _env(home, plugins) -> dict:
    return {"ASSAY_HOME": str(home), "ASSAY_DOMAINS_PATH": str(plugins), "OMP_NUM_THREADS": "1"}


def test_train_json_contract_and_clear_errors(tiny_home, tmp_path):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    out = run_cli("train", "--recipe", "tiny", "--domains", "plugged", "--steps", "2", "--json",
                  env=_env(tiny_home, plugins))
    assert out.returncode == 0, out.stderr[-2000:]
    payload = json.loads(out.stdout)
    assert set(payload) >= {"checkpoint", "mlflow_run_id", "history"}
    assert payload["checkpoint"].endswith("-step000002")
    assert [(h["step"], h["domain"]) for h in payload["history"]] == [(1, "plugged"), (2, "plugged")]
    assert set(payload["history"][0]) == {"step", "domain", "reward_mean", "kl", "loss"}
    assert payload["data_sources"] == {"plugged": "generated"}
    assert any("no train_set" in n and "generated" in n for n in payload["notes"])

    bad = run_cli("train", "--recipe", "tiny", "--domains", "nope", env=_env(tiny_home, plugins))
    assert bad.returncode == 2 and "unknown domain 'nope'" in bad.stderr
    bad = run_cli("train", "--recipe", "huge", env=_env(tiny_home, plugins))
    assert bad.returncode == 2 and "unknown recipe 'huge'" in bad.stderr


@pytest.mark.parametrize("run_name", ["my run", "../x"])
def test_unsafe_run_name_is_refused_before_any_training_step(tiny_home, tmp_path, run_name):
    before = sorted(p.relative_to(tiny_home) for p in tiny_home.rglob("*"))
    started = time.monotonic()
    out = run_cli("train", "--recipe", "tiny", "--domains", "math_arith_easy", "--steps", "2",
                  "--run-name", run_name, "--json", env={"ASSAY_HOME": str(tiny_home)}, timeout=120)
    elapsed = time.monotonic() - started
    assert out.returncode == 2, out.stderr[-2000:]
    [line] = [line for line in out.stderr.splitlines() if line.startswith("assay: error")]
    assert f"--run-name {run_name!r}" in line and "letters, digits, '_' and '-'" in line
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert elapsed < 15, f"took {elapsed:.1f} s: the name must be refused before any training"
    assert sorted(p.relative_to(tiny_home) for p in tiny_home.rglob("*")) == before  # no runs/, no ../x


@pytest.mark.slow
def test_killed_run_resumes_from_its_last_checkpoint(tiny_home, tmp_path):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    recipe = tmp_path / "slowish.yaml"
    text = (REPO / "training" / "recipes" / "tiny.yaml").read_text()
    assert "save_steps: 0\n" in text and "max_steps: 20\n" in text
    recipe.write_text(text.replace("save_steps: 0\n", "save_steps: 2\n").replace("max_steps: 20\n", "max_steps: 200\n"))
    args = [sys.executable, "-m", "pipelines.cli", "train", "--recipe", str(recipe), "--domains", "plugged",
            "--run-name", "killme", "--json"]
    env = {**os.environ, **_env(tiny_home, plugins)}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    state = tiny_home / "runs" / "killme" / "state.json"
    deadline = time.time() + 240
    while time.time() < deadline:
        if state.exists() and json.loads(state.read_text())["step"] >= 4:
            break
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    saved = json.loads(state.read_text())["step"]
    assert 4 <= saved < 200

    resumed = subprocess.run([*args[:-1], "--steps", "200", "--json"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    payload = json.loads(resumed.stdout)
    assert payload["resumed_from"] == saved and payload["steps"] == 200
    assert [h["step"] for h in payload["history"]] == list(range(1, 201))
    assert any(f"resuming run killme after step {saved}" in n for n in payload["notes"])


@pytest.mark.slow
def test_two_ranks_with_zero2_under_torchrun(tiny_home, tmp_path):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = subprocess.run(
        [torchrun, "--standalone", "--nproc_per_node", "2", "-m", "training.run_grpo", "--recipe", "tiny",
         "--domains", "plugged", "--steps", "3", "--set", "deepspeed.zero_stage=2", "--set", "save_steps=2"],
        cwd=REPO, env={**os.environ, **_env(tiny_home, plugins)}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads(out.stdout.strip().splitlines()[-1])
    assert payload["world_size"] == 2 and payload["steps"] == 3
    assert payload["checkpoint"].endswith("-step000003")
    assert (tiny_home / "checkpoints" / payload["checkpoint"] / "model.safetensors").exists()
