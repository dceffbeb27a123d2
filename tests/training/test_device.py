"""Where training runs, tested without a GPU.

Three kinds of evidence, none of which pretends a CUDA device exists:

- the decisions (device, process-group backend, which precisions a device allows) are pure
  functions of what the machine offers, so every branch is exercised with the facts of a CPU box,
  a two-GPU box and a pre-Ampere GPU box;
- the step's tensors follow the engine's device: the real tiny Llama is moved to torch's ``meta``
  device (a real device that exists on every machine, whose tensors hold no data) and a
  micro-batch is prepared for it. A tensor made without ``device=`` would land on the CPU and the
  test sees it (and the forward would refuse to mix devices);
- a source check that every tensor factory on the trainer's and the decode loop's paths names its
  device, so a code path the meta test cannot run (the decode loop reads tokens back, which meta
  tensors cannot) is still held to the rule.
"""

from __future__ import annotations

import ast
import contextlib
from pathlib import Path

import pytest

from training.config import RecipeError, load_recipe

REPO = Path(__file__).resolve().parents[2]
CPU_BOX = dict(cuda_devices=0, torch_version="2.13.0+cpu", torch_cuda=None)
TWO_H100 = dict(cuda_devices=2, cuda_bf16=True, cuda_capability="9.0", torch_version="2.13.0", torch_cuda="12.8")
ONE_T4 = dict(cuda_devices=1, cuda_bf16=False, cuda_capability="7.5", torch_version="2.13.0", torch_cuda="12.8")


def _facts(box: dict):
    from generation.device import DeviceFacts

    return DeviceFacts(**box)


# -- the decisions ---------------------------------------------------------------------------------


def test_auto_takes_the_rank_s_own_gpu_and_nccl_else_the_cpu_and_gloo():
    from generation.device import CPU_PLAN, DevicePlan, plan_device

    cpu_box, two_h100 = _facts(CPU_BOX), _facts(TWO_H100)
    assert plan_device("auto", cpu_box) == CPU_PLAN == DevicePlan("cpu", "gloo", "cpu")
    assert plan_device("auto", two_h100, local_rank=0) == DevicePlan("cuda:0", "nccl", "cuda")
    assert plan_device("auto", two_h100, local_rank=1) == DevicePlan("cuda:1", "nccl", "cuda")
    assert plan_device("cuda", two_h100, local_rank=1).device_type == "cuda"
    assert plan_device("cpu", two_h100, local_rank=1) == CPU_PLAN  # asked for: the GPUs stay idle


def test_impossible_devices_are_refused_with_what_to_set():
    from generation.device import DeviceError, plan_device

    cpu_box, two_h100 = _facts(CPU_BOX), _facts(TWO_H100)
    with pytest.raises(DeviceError, match=r"torch 2.13.0\+cpu \(a CPU-only build\) sees no CUDA device: "
                                          r"set `device: auto` or `device: cpu`"):
        plan_device("cuda", cpu_box)
    with pytest.raises(DeviceError, match=r"LOCAL_RANK 2 has no GPU of its own: .* 2 CUDA device\(s\); "
                                          r".*torchrun --nproc_per_node 2"):
        plan_device("auto", two_h100, local_rank=2)
    with pytest.raises(DeviceError, match="'gpu' is not one of auto, cpu, cuda"):
        plan_device("gpu", two_h100)


def test_bf16_runs_as_fp32_on_a_cpu_that_would_only_emulate_it():
    from generation.device import CPU_PLAN, cpu_precision, plan_device

    emulating = _facts({**CPU_BOX, "cpu_bf16": False})
    changes, note = cpu_precision(CPU_PLAN, emulating, precision="bf16", autocast_bf16=True, rollout_dtype="bfloat16")
    assert changes == {"deepspeed.precision": "fp32", "deepspeed.autocast_bf16": False, "rollout_dtype": "float32"}
    assert "no native bfloat16" in note and "ASSAY_EMULATED_BF16=1" in note
    assert cpu_precision(CPU_PLAN, emulating, precision="fp32", autocast_bf16=False, rollout_dtype="float32") == ({}, None)
    native = _facts({**CPU_BOX, "cpu_bf16": True})
    assert cpu_precision(CPU_PLAN, native, precision="bf16", autocast_bf16=True, rollout_dtype="bfloat16") == ({}, None)
    gpu = _facts({**TWO_H100, "cpu_bf16": False})  # the GPU computes bf16, whatever the host CPU
    assert cpu_precision(plan_device("cuda", gpu), gpu, precision="bf16", autocast_bf16=True,
                         rollout_dtype="bfloat16") == ({}, None)


def test_engine_dtype_follows_the_cpu_and_the_override(monkeypatch):
    import generation.device as device

    monkeypatch.setattr(device, "cpu_computes_bf16", lambda: False)
    heard = []
    assert device.engine_dtype("bfloat16", "cpu", log=heard.append) == "float32" and "no native" in heard[0]
    assert device.engine_dtype("bfloat16", "cuda") == "bfloat16"  # a GPU engine: as asked
    assert device.engine_dtype("float32", "cpu") == "float32"
    monkeypatch.setattr(device, "cpu_computes_bf16", lambda: True)
    assert device.engine_dtype("bfloat16", "cpu") == "bfloat16"
    monkeypatch.undo()
    monkeypatch.setenv("ASSAY_EMULATED_BF16", "1")
    assert device.cpu_computes_bf16() is True


def test_a_bf16_recipe_trains_in_fp32_on_a_cpu_that_would_emulate_it(tiny_home, monkeypatch):
    """The trainer runs the recipe's bf16 settings in fp32 there, says so, and names the run after what it trains."""
    import generation.device as device
    from pipelines.settings import open_lake
    from training.trainer import train

    monkeypatch.setattr(device, "cpu_computes_bf16", lambda: False)
    config = load_recipe("tiny", deepspeed={"autocast_bf16": True}, rollout_dtype="bfloat16", max_steps=1,
                         train_samples_per_domain=4, prompts_per_step=1, num_generations=2, max_completion_length=4)
    heard = []
    result = train(config, open_lake(write=True), allow_generate=True, progress=False, log=heard.append)
    assert any("no native bfloat16" in m and "deepspeed.autocast_bf16" in m for m in heard), heard
    fp32 = load_recipe("tiny", deepspeed={"autocast_bf16": False}, rollout_dtype="float32", max_steps=1,
                       train_samples_per_domain=4, prompts_per_step=1, num_generations=2, max_completion_length=4)
    assert result.run_name.startswith(f"tiny-{fp32.fingerprint()}-")  # the run it really is: fp32


def test_bf16_is_refused_only_on_gpus_without_native_bf16():
    from generation.device import CPU_PLAN, plan_device, precision_problem

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


# -- the step's tensors follow the engine's device -------------------------------------------------


def _tiny_on(device: str, home):
    """The real tiny Llama (eager attention: sdpa's mask helper reads a value, which meta cannot)."""
    from transformers import AutoModelForCausalLM

    from generation.policy import load_tokenizer, policy_path

    path = policy_path("tiny", home)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager").to(device)
    return model, load_tokenizer(str(path), home)


def _rollouts():
    from training.trainer import Rollout

    return [Rollout("d", {}, [5, 6, 7], [8, 9], "", "stop", advantage=0.5),
            Rollout("d", {}, [5], [8, 9, 10], "", "length", advantage=-0.5)]


def test_build_batch_makes_every_tensor_on_the_given_device():
    import torch

    from training.trainer import build_batch

    on_meta = build_batch(_rollouts(), 0, mask_truncated=True, device=torch.device("meta"))
    assert [t.device.type for t in on_meta[:4]] == ["meta"] * 4
    ids, attn, positions, mask, width = build_batch(_rollouts(), 0, mask_truncated=True, device="cpu")
    assert ids.tolist() == [[5, 6, 7, 8, 9, 0], [0, 0, 5, 8, 9, 10]] and width == 3
    assert attn.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert positions.tolist() == [[0, 1, 2, 3, 4, 4], [0, 0, 0, 1, 2, 3]]
    assert mask.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]  # the truncated row is masked out


def test_a_micro_batch_and_the_padding_batch_live_on_the_engine_s_device(tiny_home):
    import torch

    from pipelines.settings import open_lake
    from training.trainer import GRPOTrainer

    config = load_recipe("tiny", num_iterations=2, beta=0.04, run_name="meta")  # old and reference log-probs
    trainer = GRPOTrainer(config, open_lake(), open_lake().mlflow_uri)
    policy, trainer.tokenizer = _tiny_on("meta", tiny_home)
    reference, _ = _tiny_on("meta", tiny_home)
    batch = trainer._micro_batch(_rollouts(), policy, reference, contextlib.nullcontext)
    tensors = {name: getattr(batch, name) for name in
               ("ids", "attention", "positions", "loss_mask", "ref_logp", "old_logp", "advantages")}
    assert {name: t.device.type for name, t in tensors.items()} == {name: "meta" for name in tensors}
    padding = trainer._padding_batch(policy, reference, contextlib.nullcontext)
    assert padding.rollouts == [] and padding.ids.shape == (1, 2) and padding.ids.device.type == "meta"
    assert padding.loss_mask.device.type == "meta" and padding.advantages.device.type == "meta"

    # the same on the CPU, where values can be read: the padding row counts nothing
    cpu_policy, _ = _tiny_on("cpu", tiny_home)
    padding = trainer._padding_batch(cpu_policy, None, contextlib.nullcontext)
    assert padding.loss_mask.tolist() == [[0.0]] and padding.advantages.tolist() == [0.0]
    assert padding.ids.tolist() == [[trainer.tokenizer.pad_token_id] * 2]
    assert torch.isfinite(padding.old_logp).all()


def test_autocast_follows_the_engine_s_device_type():
    import torch

    from pipelines.settings import open_lake
    from training.trainer import GRPOTrainer

    trainer = GRPOTrainer(load_recipe("tiny", deepspeed={"autocast_bf16": True}), open_lake(), "sqlite://")
    for device in ("cpu", "cuda"):  # only the context object is built: nothing runs on a GPU
        trainer.device = torch.device(device)
        with pytest.warns(UserWarning) if device == "cuda" and not torch.cuda.is_available() else contextlib.nullcontext():
            context = trainer._autocast()()
        assert context.device == device and context.fast_dtype == torch.bfloat16
    trainer = GRPOTrainer(load_recipe("tiny"), open_lake(), "sqlite://")
    assert trainer._autocast() is contextlib.nullcontext


# -- every tensor factory on the step's path names its device --------------------------------------

FACTORIES = {"tensor", "zeros", "ones", "full", "empty", "arange", "rand", "randn", "randint", "Generator",
             "as_tensor", "linspace", "eye"}
STEP_PATH = ("training/trainer.py", "generation/torch_engine.py", "training/losses.py")


def _factory_calls_without_device(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    missing = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)):
            missing.append(f"{path.name}:{node.lineno} torch.{node.func.attr}(...)")
    return missing


def test_every_tensor_factory_on_the_step_path_names_its_device():
    """``torch.zeros(...)`` without ``device=`` makes a CPU tensor, which then meets a model on
    ``cuda`` (the bug this rule prevents). ``*_like`` and ``new_*`` inherit their device and are
    fine; a tensor meant for the CPU says ``device="cpu"``."""
    missing = [call for name in STEP_PATH for call in _factory_calls_without_device(REPO / name)]
    assert missing == []


def test_the_source_check_sees_a_factory_without_a_device(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import torch\na = torch.zeros(3)\nb = torch.zeros(3, device=d)\nc = torch.zeros_like(b)\n")
    assert _factory_calls_without_device(sample) == ["sample.py:2 torch.zeros(...)"]


# -- ZeRO-3: the rollout copy is filled in groups of parameters --------------------------------------


def test_zero3_sync_groups_cover_every_parameter_in_order_within_the_budget():
    import torch

    from training.rollout_engine import _groups_by_size

    params = [torch.zeros(n, device="cpu") for n in (3, 4, 10, 1, 2)]
    pairs = [(p, p) for p in params]
    groups = _groups_by_size(pairs, budget=7)
    assert [[p.numel() for p, _ in g] for g in groups] == [[3, 4], [10], [1, 2]]
    assert [pair for g in groups for pair in g] == pairs
    sharded = torch.zeros(0, device="cpu")
    sharded.ds_numel = 6  # a ZeRO-3 parameter: an empty local tensor, its full size in ds_numel
    assert [len(g) for g in _groups_by_size([(p, p) for p in (sharded, sharded)], budget=7)] == [1, 1]



def test_zero3_rollout_copy_is_a_plain_tied_model_on_the_given_device(tiny_home):
    """Under ZeRO-3 the rollout copy is built from the config (the policy's parameters are shards):
    on the requested device, in the rollout dtype, its embeddings tied again, its buffers copied;
    once the parameters are loaded it computes what a plain copy of the policy computes."""
    import copy

    import torch

    from generation.policy import load_policy
    from training.rollout_engine import cast_model, zero3_rollout_copy

    model, tok = load_policy("tiny", home=tiny_home)
    on_meta = zero3_rollout_copy(model, torch.bfloat16, torch.device("meta"))
    assert {t.device.type for t in [*on_meta.parameters(), *on_meta.buffers()]} == {"meta"}

    clone = zero3_rollout_copy(model, torch.bfloat16, torch.device("cpu"))
    assert clone.lm_head.weight is clone.model.embed_tokens.weight
    assert [n for n, _ in clone.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(p.dtype == torch.bfloat16 and not p.requires_grad for p in clone.parameters())
    assert clone.config.use_cache and not clone.training and model.config is not clone.config
    with torch.no_grad():
        for dst, src in zip(clone.parameters(), model.parameters()):
            dst.copy_(src)
    # what a sweep's bf16 engine loads (rotary frequencies kept float32: training.rollout_engine.cast_model)
    reference, _ = load_policy("tiny", dtype="bfloat16", home=tiny_home)
    ids = torch.tensor([tok("What is 2 + 3?").input_ids], device="cpu")
    with torch.no_grad():
        assert torch.equal(clone(input_ids=ids).logits, reference.eval()(input_ids=ids).logits)
        assert torch.equal(cast_model(copy.deepcopy(model), torch.bfloat16)(input_ids=ids).logits,
                           reference(input_ids=ids).logits)
