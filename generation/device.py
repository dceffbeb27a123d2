"""Where training runs: the device, the process-group backend, and the precisions that device allows.

A recipe's ``device`` is ``auto`` (a GPU when torch sees one, else the CPU), ``cpu`` or ``cuda``.
Each rank of a multi-GPU launch takes the GPU of its ``LOCAL_RANK``. The decisions are pure
functions of :class:`DeviceFacts` (what the machine offers), so every branch is tested on a
CPU-only machine; :func:`probe_facts` reads the facts from torch, at the edge.

- CPU: DeepSpeed's CPU accelerator and the gloo backend. bf16 is fast only where the CPU computes
  it (oneDNN's bf16 path: AVX-512 or AMX); on an AVX2-only CPU torch emulates it and a bf16 matmul
  was measured 51-80x slower than fp32 (AMD EPYC, AVX2, 2026-12-01). There every bf16 setting runs
  as fp32 (:func:`cpu_precision`, :func:`engine_dtype`), said once in the log; setting
  ``ASSAY_EMULATED_BF16=1`` keeps bf16 anyway (to reproduce a bf16 run bit for bit, slowly).
- CUDA: DeepSpeed's CUDA accelerator and NCCL, one GPU per rank. bf16 (DeepSpeed bf16 weights, bf16
  autocast, a bf16 rollout copy) needs native bfloat16, compute capability 8.0 or newer (A100, H100,
  L4, RTX 30xx and later); older GPUs are refused with what to set instead.
- fp16 is not offered anywhere: it needs a loss scaler this trainer does not configure, and
  DeepSpeed refuses it on CPU (see :class:`training.config.DeepSpeedSection`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from storage.errors import UserError

DeviceChoice = Literal["auto", "cpu", "cuda"]
DEVICE_CHOICES: tuple[str, ...] = ("auto", "cpu", "cuda")


class DeviceError(UserError, ValueError):
    """A device (or precision on that device) this machine cannot train on, with what to change."""


@dataclass(frozen=True)
class DeviceFacts:
    """What the machine offers, as torch sees it."""

    cuda_devices: int = 0                 # torch.cuda.device_count() when CUDA is usable, else 0
    cuda_bf16: bool = False               # native bfloat16 on those GPUs (compute capability >= 8.0)
    cuda_capability: str | None = None    # e.g. "7.5" (the first GPU's), for messages
    torch_version: str = ""
    torch_cuda: str | None = None         # torch.version.cuda: None for a CPU-only build of torch
    cpu_bf16: bool = True                 # the CPU computes bfloat16 natively (oneDNN: AVX-512 or AMX)


@dataclass(frozen=True)
class DevicePlan:
    """Where one training process runs."""

    device: str        # "cpu" or "cuda:<local rank>"
    backend: str       # torch.distributed backend: "gloo" (CPU) or "nccl" (CUDA)
    accelerator: str   # DeepSpeed accelerator (DS_ACCELERATOR): "cpu" or "cuda"

    @property
    def device_type(self) -> str:
        """``cpu`` or ``cuda``: what ``torch.autocast`` takes."""
        return self.accelerator


CPU_PLAN = DevicePlan(device="cpu", backend="gloo", accelerator="cpu")


def plan_device(requested: str, facts: DeviceFacts, local_rank: int = 0) -> DevicePlan:
    """The device for a process with ``local_rank`` when the recipe asks for ``requested``."""
    if requested not in DEVICE_CHOICES:
        raise DeviceError(f"device {requested!r} is not one of {', '.join(DEVICE_CHOICES)}: set `device: auto` "
                          "(a GPU when there is one) in the recipe")
    if requested == "cpu" or (requested == "auto" and facts.cuda_devices == 0):
        return CPU_PLAN
    if facts.cuda_devices == 0:
        build = "a CPU-only build" if not facts.torch_cuda else f"built for CUDA {facts.torch_cuda}"
        raise DeviceError(f"device 'cuda' was asked for, but torch {facts.torch_version} ({build}) sees no CUDA "
                          "device: set `device: auto` or `device: cpu` in the recipe, or run on a GPU machine")
    if not 0 <= local_rank < facts.cuda_devices:
        raise DeviceError(f"LOCAL_RANK {local_rank} has no GPU of its own: this machine has {facts.cuda_devices} "
                          f"CUDA device(s); start at most {facts.cuda_devices} process(es) per node "
                          f"(torchrun --nproc_per_node {facts.cuda_devices})")
    return DevicePlan(device=f"cuda:{local_rank}", backend="nccl", accelerator="cuda")


def precision_problem(plan: DevicePlan, facts: DeviceFacts, *, precision: str, autocast_bf16: bool,
                      rollout_dtype: str) -> str | None:
    """Why the recipe's precision cannot run on ``plan``'s device (None when it can), with the fix."""
    asked = [name for name, on in (("deepspeed.precision bf16", precision == "bf16"),
                                   ("deepspeed.autocast_bf16", autocast_bf16),
                                   ("rollout_dtype bfloat16", rollout_dtype == "bfloat16")) if on]
    if plan.accelerator == "cuda" and asked and not facts.cuda_bf16:
        capability = f"compute capability {facts.cuda_capability}" if facts.cuda_capability else "an older GPU"
        return (f"{', '.join(asked)} need(s) native bfloat16 on the GPU (compute capability 8.0+: A100, H100, L4, "
                f"RTX 30xx or later), and this one has {capability}: set deepspeed.precision fp32, "
                "deepspeed.autocast_bf16 false and rollout_dtype float32 in the recipe, or device: cpu")
    return None


def probe_facts() -> DeviceFacts:
    """What torch sees on this machine (imports torch)."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    capability = None
    bf16 = False
    if count:
        major, minor = torch.cuda.get_device_capability(0)
        capability = f"{major}.{minor}"
        bf16 = major >= 8  # native bf16 tensor cores; torch.cuda.is_bf16_supported() also counts emulation
    return DeviceFacts(cuda_devices=count, cuda_bf16=bf16, cuda_capability=capability,
                       torch_version=torch.__version__, torch_cuda=torch.version.cuda, cpu_bf16=cpu_computes_bf16())


EMULATED_BF16_ENV = "ASSAY_EMULATED_BF16"  # "1": keep bf16 on a CPU that only emulates it (read here only)


def cpu_computes_bf16() -> bool:
    """Whether this CPU runs bfloat16 matmuls natively (imports torch). ``ASSAY_EMULATED_BF16=1``
    says yes whatever the CPU (bf16 kept even where it is emulated)."""
    import os

    import torch

    if os.environ.get(EMULATED_BF16_ENV) == "1":
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())  # oneDNN's own test: AVX-512 core or AMX
    except (AttributeError, RuntimeError):
        try:
            flags = open("/proc/cpuinfo").read()
        except OSError:
            return True  # cannot tell: keep what was asked for
        return any(flag in flags for flag in ("avx512_bf16", "amx_bf16", "avx512bw"))


EMULATED_BF16_NOTE = ("this CPU has no native bfloat16 (torch would emulate it, tens of times slower than fp32): "
                      "running {what} in float32; set ASSAY_EMULATED_BF16=1 to keep bfloat16 anyway")


def engine_dtype(dtype: str, device: str = "cpu", log=None) -> str:
    """The dtype a generation engine on ``device`` runs ``dtype`` in: bfloat16 becomes float32 on a
    CPU that would only emulate it (``log`` hears why); anything else as asked."""
    if dtype != "bfloat16" or not str(device).startswith("cpu") or cpu_computes_bf16():
        return dtype
    if log is not None:
        log(EMULATED_BF16_NOTE.format(what="the generation engine"))
    return "float32"


def cpu_precision(plan: DevicePlan, facts: DeviceFacts, *, precision: str, autocast_bf16: bool,
                  rollout_dtype: str) -> tuple[dict, str | None]:
    """The training precision settings to run on ``plan``'s device: the recipe's, or on a CPU that
    would only emulate bf16 the same in fp32. Returns ``(changes, note)``: ``changes`` maps the
    recipe keys to override (``{}`` when nothing changes), ``note`` says why (None then)."""
    if plan.accelerator != "cpu" or facts.cpu_bf16:
        return {}, None
    changes: dict = {}
    if precision == "bf16":
        changes["deepspeed.precision"] = "fp32"
    if autocast_bf16:
        changes["deepspeed.autocast_bf16"] = False
    if rollout_dtype == "bfloat16":
        changes["rollout_dtype"] = "float32"
    if not changes:
        return {}, None
    return changes, EMULATED_BF16_NOTE.format(what=", ".join(f"{k} (asked: bf16)" for k in changes))
