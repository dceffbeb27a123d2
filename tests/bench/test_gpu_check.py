"""The GPU check (`make gpu-check`, bench/gpu_check.py) on a machine without a GPU: its plan, its
refusal, and a rehearsal of its phases on the CPU with the tiny policy (the figures' plumbing)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _check(*args: str, env: dict | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    import os

    return subprocess.run([sys.executable, "-m", "bench.gpu_check", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_dry_run_prints_the_plan_and_touches_nothing(tmp_path):
    workdir = tmp_path / "work"
    out = _check("--dry-run", "--json", "--workdir", str(workdir), "--out", str(tmp_path / "results"))
    assert out.returncode == 0, out.stderr[-2000:]
    plan = json.loads(out.stdout)
    phases = {p["name"]: p for p in plan["phases"]}
    assert list(phases)[:2] == ["prepare", "train-torch"] and {"sweep-torch", "sweep-vllm"} <= set(phases)
    assert sum(p["budget_s"] for p in plan["phases"]) <= 450 < 8 * 60
    train = phases["train-torch"]["command"]
    assert train[1:4] == ["-m", "pipelines.cli", "train"]
    assert train[train.index("--recipe") + 1] == "smollm2" and train[train.index("--steps") + 1] == "6"
    assert float(train[train.index("--max-minutes") + 1]) * 60 < phases["train-torch"]["budget_s"]
    for backend in ("torch", "vllm"):
        sweep = phases[f"sweep-{backend}"]["command"]
        assert sweep[sweep.index("--backend") + 1] == backend and sweep[sweep.index("--checkpoint") + 1] == "base-smollm2"
        assert sweep[sweep.index("--domains") + 1:sweep.index("--samples")] == ["math_arith_easy", "gsm", "general_qa"]
    # sweeps cache per item, not per engine: each engine sweeps in its own ASSAY_HOME
    assert phases["sweep-torch"]["assay_home"] != phases["sweep-vllm"]["assay_home"]
    assert plan["outputs"] == [str(tmp_path / "results" / "gpu_check.json"), str(tmp_path / "results" / "gpu_check.md")]
    if not _cuda():
        assert plan["cuda"] is False and "no CUDA device here: the real run would exit 2" in plan["notes"]
    assert not workdir.exists() and not (tmp_path / "results").exists()


def test_without_a_gpu_it_exits_2_and_says_why(tmp_path):
    if _cuda():
        pytest.skip("this machine has a GPU")
    out = _check("--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "results"))
    assert out.returncode == 2 and out.stdout == ""
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("gpu-check: no CUDA device: torch ") and "a CPU-only build" in line and "--dry-run" in line
    assert not (tmp_path / "work").exists() and not (tmp_path / "results").exists()


def _options(**overrides) -> argparse.Namespace:
    base = dict(steps=6, domains=["math_arith_easy"], limit=24, samples=4, budget_s=450.0, backends=["torch", "vllm"],
                rehearse_on_cpu=False, zero_stages=[2, 3], zero_steps=3, random_weights=None)
    return argparse.Namespace(**{**base, **overrides})


def test_the_plan_follows_what_the_checkout_and_the_machine_offer(tmp_path):
    from bench.gpu_check import Facts, build_plan

    gpu = dict(cuda=True, device={"name": "NVIDIA H200"})
    phases, notes = build_plan(_options(), Facts(**gpu, vllm="0.32.0", train_backend_flag=True), tmp_path)
    by_name = {p.name: p for p in phases}
    assert [p.name for p in phases] == ["prepare", "train-torch", "train-vllm", "train-zero2", "train-zero3",
                                        "sweep-torch", "sweep-vllm"]
    command = by_name["train-vllm"].command
    assert command[command.index("--backend") + 1] == "vllm" and notes == []
    assert all(p.skip is None for p in phases)
    # the ZeRO runs: the smollm2 recipe with only the stage changed, written when the phase runs
    [(path, text)] = by_name["train-zero3"].files.items()
    assert path == str(tmp_path / "recipes" / "smollm2-zero3.yaml")
    command = by_name["train-zero3"].command
    assert command[command.index("--recipe") + 1] == path and command[command.index("--backend") + 1] == "torch"
    import yaml

    from training.config import load_recipe, parse_config

    zero3, smollm2 = parse_config(yaml.safe_load(text)), load_recipe("smollm2")
    assert zero3.deepspeed.zero_stage == 3 and zero3.recipe == "smollm2-zero3"
    assert zero3.model_dump(exclude={"recipe", "deepspeed"}) == smollm2.model_dump(exclude={"recipe", "deepspeed"})
    assert zero3.deepspeed.model_dump(exclude={"zero_stage"}) == smollm2.deepspeed.model_dump(exclude={"zero_stage"})

    # an `assay train` without --backend: no vLLM training run, said in a note
    phases, notes = build_plan(_options(), Facts(**gpu, vllm="0.32.0", train_backend_flag=False), tmp_path)
    assert "train-vllm" not in [p.name for p in phases] and "--backend" not in phases[1].command
    assert any("no --backend option yet" in n for n in notes)

    # no vLLM installed: its phases are planned but skipped, with what to do
    phases, _ = build_plan(_options(), Facts(**gpu, vllm=None, train_backend_flag=True), tmp_path)
    skipped = {p.name: p.skip for p in phases if p.skip}
    assert set(skipped) == {"train-vllm", "sweep-vllm"} and all("make install" in why for why in skipped.values())
    assert sum(p.budget_s for p in phases) == pytest.approx(450, abs=3)  # the others share the whole budget

    # a smaller budget shrinks every phase; the rehearsal trains and sweeps the tiny policy
    phases, _ = build_plan(_options(budget_s=225.0, rehearse_on_cpu=True, backends=["torch"], zero_stages=[]),
                           Facts(cuda=False, vllm=None), tmp_path)
    assert sum(p.budget_s for p in phases) == pytest.approx(225, abs=3)
    assert [p.name for p in phases] == ["prepare", "train-torch", "sweep-torch"]
    assert phases[1].command[phases[1].command.index("--recipe") + 1] == "tiny"
    assert "base-tiny" in phases[2].command


def test_random_weights_plan_builds_the_policy_and_keeps_every_group(tmp_path):
    """--random-weights (a GPU machine the real weights cannot reach): prepare builds the policy
    from the folder's config and tokenizer, every training run keeps all groups in the update
    (random weights score 0 everywhere: the default would skip every update), and a note says so."""
    import yaml

    from bench.gpu_check import Facts, build_plan
    from training.config import load_recipe, parse_config

    shape = tmp_path / "shape"
    phases, notes = build_plan(_options(backends=["torch"], random_weights=str(shape)),
                               Facts(cuda=True, vllm=None, train_backend_flag=True), tmp_path / "work")
    by_name = {p.name: p for p in phases}
    assert list(by_name) == ["prepare", "train-torch", "train-zero2", "train-zero3", "sweep-torch"]
    assert "random_policy" in by_name["prepare"].command[-1] and str(shape) in by_name["prepare"].command[-1]
    smollm2 = load_recipe("smollm2")
    for name, stage in (("train-torch", smollm2.deepspeed.zero_stage), ("train-zero2", 2), ("train-zero3", 3)):
        [(path, text)] = by_name[name].files.items()
        command = by_name[name].command
        assert command[command.index("--recipe") + 1] == path
        config = parse_config(yaml.safe_load(text))
        assert config.skip_zero_variance_groups is False and config.deepspeed.zero_stage == stage
        assert config.model_dump(exclude={"recipe", "deepspeed", "skip_zero_variance_groups"}) == \
            smollm2.model_dump(exclude={"recipe", "deepspeed", "skip_zero_variance_groups"})
    assert any(n.startswith("random weights in SmolLM2's shape") and "speed figures only" in n for n in notes)
    # without it the recipes are the shipped ones: train-torch names the recipe itself
    phases, _ = build_plan(_options(backends=["torch"]), Facts(cuda=True, vllm=None, train_backend_flag=True), tmp_path)
    assert phases[1].files == {} and phases[1].command[phases[1].command.index("--recipe") + 1] == "smollm2"


def test_random_policy_is_the_shape_with_seeded_random_weights(tiny_source, assay_home):
    import shutil

    import torch
    from safetensors.torch import load_file

    from bench.gpu_check import SHAPE_FILES, random_policy
    from generation.policy import policy_path

    shape = assay_home / "shape"
    shape.mkdir(parents=True)
    for name in SHAPE_FILES:
        if (tiny_source / name).exists():
            shutil.copy(tiny_source / name, shape / name)
    assert not list(shape.glob("*.safetensors"))
    built = random_policy(shape, "tiny")
    assert built == policy_path("tiny") == assay_home / "models" / "tiny"  # found before anything is built
    assert {p.name for p in shape.iterdir()} <= {p.name for p in built.iterdir()}
    mine, theirs = load_file(built / "model.safetensors"), load_file(tiny_source / "model.safetensors")
    assert mine.keys() == theirs.keys() and all(mine[k].shape == theirs[k].shape for k in mine)
    assert all(t.dtype == torch.float32 for t in mine.values())
    # seeded: a second build elsewhere draws the same weights
    shutil.rmtree(built)
    again = load_file(random_policy(shape, "tiny") / "model.safetensors")
    assert all(torch.equal(mine[k], again[k]) for k in mine)


def test_the_commit_is_unknown_without_git(monkeypatch):
    import bench.gpu_check as check

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(check.subprocess, "run", no_git)
    assert check._commit() == "unknown"


@pytest.mark.slow
def test_a_cpu_rehearsal_runs_the_phases_and_writes_the_report(tiny_home, tmp_path):
    """The phases end to end on the CPU with the tiny policy and the torch engine: the report's
    figures come from the runs (MLflow step metrics, the sweep's rows), and it says REHEARSAL."""
    workdir = tmp_path / "work"
    recorded = REPO / "bench" / "results" / "gpu_check.json"  # a real GPU run's figures, if any: left alone
    before = recorded.read_bytes() if recorded.exists() else None
    out = _check("--rehearse-on-cpu", "--backends", "torch", "--steps", "3", "--limit", "4", "--samples", "2",
                 "--domains", "math_arith_easy", "gsm", "--workdir", str(workdir), "--budget-s", "900", "--json",
                 timeout=1000)  # a generous budget: on a loaded machine the default 450 s cut phases short
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["rehearsal"] is True and report["policy"] == "tiny"
    assert [(p["name"], p["status"]) for p in report["phases"]] == [
        (name, "ok") for name in ("prepare", "train-torch", "train-zero2", "train-zero3", "sweep-torch")]
    assert [(report["training"][k]["zero_stage"], report["training"][k]["steps"]) for k in ("zero2", "zero3")] == \
        [(2, 3), (3, 3)]
    train = report["training"]["torch"]
    assert train["steps"] == 3 and train["rollout_engine"] == "torch" and train["step_s"] > 0
    assert 0 < train["generation_s"] <= train["step_s"] and train["tokens_per_s"] > 0
    sweep = report["sweep"]["torch"]
    assert set(sweep["domains"]) == {"math_arith_easy", "gsm"} and all(d["n"] == 4 and d["k"] == 2
                                                                       for d in sweep["domains"].values())
    assert sweep["completion_tokens"] > 0 and sweep["tokens_per_s"] > 0
    written = json.loads((workdir / "results" / "gpu_check.json").read_text())
    assert written["training"] == report["training"]
    table = (workdir / "results" / "gpu_check.md").read_text()
    assert table.startswith("**CPU REHEARSAL with the tiny policy") and "| math_arith_easy |" in table
    assert "| torch, ZeRO-3, cpu | 3 |" in table and all(t["device"] == "cpu" for t in report["training"].values())
    assert (recorded.read_bytes() if recorded.exists() else None) == before
