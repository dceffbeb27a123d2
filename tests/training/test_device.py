"""Where training runs, tested without a GPU: the decisions (device, process-group backend, which
precisions a device allows) are pure functions of what the machine offers, so every branch is
exercised with the facts of a CPU box, a two-GPU box and a pre-Ampere GPU box."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.config import RecipeError, load_recipe

REPO = Path(__file__).resolve().parents[2]
CPU_BOX = dict(cuda_devices=0, torch_version="2.13.0+cpu", torch_cuda=None)
TWO_H100 = dict(cuda_devices=2, cuda_bf16=True, cuda_capability="9.0", torch_version="2.13.0", torch_cuda="12.8")
ONE_T4 = dict(cuda_devices=1, cuda_bf16=False, cuda_capability="7.5", torch_version="2.13.0", torch_cuda="12.8")


def _facts(box: dict):
    from training.device import DeviceFacts

    return DeviceFacts(**box)


# -- the decisions ---------------------------------------------------------------------------------


def test_auto_takes_the_rank_s_own_gpu_and_nccl_else_the_cpu_and_gloo():
    from training.device import CPU_PLAN, DevicePlan, plan_device

    cpu_box, two_h100 = _facts(CPU_BOX), _facts(TWO_H100)
    assert plan_device("auto", cpu_box) == CPU_PLAN == DevicePlan("cpu", "gloo", "cpu")
    assert plan_device("auto", two_h100, local_rank=0) == DevicePlan("cuda:0", "nccl", "cuda")
    assert plan_device("auto", two_h100, local_rank=1) == DevicePlan("cuda:1", "nccl", "cuda")
    assert plan_device("cuda", two_h100, local_rank=1).device_type == "cuda"
    assert plan_device("cpu", two_h100, local_rank=1) == CPU_PLAN  # asked for: the GPUs stay idle


def test_impossible_devices_are_refused_with_what_to_set():
    from training.device import DeviceError, plan_device

    cpu_box, two_h100 = _facts(CPU_BOX), _facts(TWO_H100)
    with pytest.raises(DeviceError, match=r"torch 2.13.0\+cpu \(a CPU-only build\) sees no CUDA device: "
                                          r"set `device: auto` or `device: cpu`"):
        plan_device("cuda", cpu_box)
    with pytest.raises(DeviceError, match=r"LOCAL_RANK 2 has no GPU of its own: .* 2 CUDA device\(s\); "
                                          r".*torchrun --nproc_per_node 2"):
        plan_device("auto", two_h100, local_rank=2)
    with pytest.raises(DeviceError, match="'gpu' is not one of auto, cpu, cuda"):
        plan_device("gpu", two_h100)


def test_bf16_is_refused_only_on_gpus_without_native_bf16():
    from training.device import CPU_PLAN, plan_device, precision_problem

    cpu_box, two_h100, one_t4 = _facts(CPU_BOX), _facts(TWO_H100), _facts(ONE_T4)
    t4 = plan_device("cuda", one_t4)
    problem = precision_problem(t4, one_t4, precision="fp32", autocast_bf16=True, rollout_dtype="bfloat16")
    assert problem is not None
    assert "deepspeed.autocast_bf16, rollout_dtype bfloat16" in problem and "compute capability 7.5" in problem
    assert "set deepspeed.precision fp32, deepspeed.autocast_bf16 false and rollout_dtype float32" in problem
    assert precision_problem(t4, one_t4, precision="fp32", autocast_bf16=False, rollout_dtype="float32") is None
    h100 = plan_device("cuda", two_h100)
    assert precision_problem(h100, two_h100, precision="bf16", autocast_bf16=False, rollout_dtype="bfloat16") is None
    # bf16 runs on every CPU (emulated where the CPU lacks AVX512-BF16 / AMX): not refused
    assert precision_problem(CPU_PLAN, cpu_box, precision="bf16", autocast_bf16=False, rollout_dtype="bfloat16") is None


def test_recipe_device_and_precision_are_checked_when_the_recipe_is_parsed():
    with pytest.raises(RecipeError, match=r"deepspeed\.precision: .*fp16 is not supported .* use bf16 .* or fp32"):
        load_recipe("tiny", deepspeed={"precision": "fp16"})
    with pytest.raises(RecipeError, match=r"device: Input should be 'auto', 'cpu' or 'cuda'"):
        load_recipe("tiny", device="gpu")
    assert load_recipe("tiny").device == "auto" and load_recipe("smollm2").device == "auto"
    # where a run computes is not what it trains: the same run (and run name) on a CPU and a GPU
    assert load_recipe("tiny", device="cpu").fingerprint() == load_recipe("tiny", device="cuda").fingerprint()
    assert load_recipe("tiny").fingerprint() != load_recipe("tiny", seed=1).fingerprint()


def test_training_on_cuda_without_a_gpu_stops_in_one_line_before_any_work(tiny_home, tmp_path):
    import torch

    from tests.conftest import run_cli

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: device cuda is valid here")
    recipe = tmp_path / "on_gpu.yaml"
    recipe.write_text("policy: tiny\ndomains: [math_arith_easy]\nmax_steps: 1\ndevice: cuda\n")
    before = sorted(p.relative_to(tiny_home) for p in tiny_home.rglob("*"))
    out = run_cli("train", "--recipe", str(recipe), "--json", env={"ASSAY_HOME": str(tiny_home)}, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    [line] = [line for line in out.stderr.splitlines() if line.startswith("assay: error")]
    assert "device 'cuda' was asked for" in line and "`device: cpu`" in line
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert sorted(p.relative_to(tiny_home) for p in tiny_home.rglob("*")) == before  # no run folder, no rows
