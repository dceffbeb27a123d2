"""The DeepSpeed engine: process-group setup, the DeepSpeed config from a recipe, initialize.

Where a process trains is decided by :mod:`generation.device` from the recipe's ``device`` and this
process's ``LOCAL_RANK``: the CPU with gloo, or its own GPU with NCCL (``torch.cuda.set_device``
before the group exists, so NCCL collectives and ``broadcast_object_list`` use that GPU).
DeepSpeed's accelerator is set to match (``DS_ACCELERATOR``) before DeepSpeed is imported.

On CPU: without a launcher the RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* variables are set here for one
process (otherwise DeepSpeed goes looking for mpi4py). Its shared-memory comm op would be
JIT-compiled with g++ on first use (~60 s): it is marked incompatible so gloo is used without
compiling anything. fp16 does not run on CPU: precision is fp32 or bf16.

The optimizer, on every device, is plain ``torch.optim.AdamW`` handed to ``deepspeed.initialize``:
nothing to compile (FusedAdam and DeepSpeedCPUAdam JIT-build for minutes, and need nvcc on a GPU
machine); on CUDA torch picks its multi-tensor (foreach) kernels by itself. ZeRO-1/2/3 keep their
fp32 partitions on the engine's device and step them with it.

Two processes: ``torchrun --nproc_per_node 2 -m training.run_grpo --recipe ...`` (each rank sets
OMP_NUM_THREADS=1 on CPU; on a GPU machine one process per GPU); the launcher's environment is
used as is.
"""

from __future__ import annotations

import logging
import os

from training.config import GRPOConfig
from generation.device import DeviceError, DevicePlan, plan_device, precision_problem, probe_facts


from generation.vllm_server import free_port  # noqa: E402 (re-exported: training.engine.free_port)


def local_rank() -> int:
    """This process's rank on its node (the launcher's LOCAL_RANK; 0 for one process)."""
    return int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", "0")))


def device_plan(requested: str = "auto") -> DevicePlan:
    """Where this process trains for a recipe's ``device`` (see :mod:`generation.device`)."""
    return plan_device(requested, probe_facts(), local_rank())


def check_device(config: GRPOConfig) -> DevicePlan:
    """The plan for ``config`` on this machine; raises :class:`DeviceError` with the fix when the
    device or its precision cannot run here (before any rows are loaded or models built)."""
    facts = probe_facts()
    plan = plan_device(config.device, facts, local_rank())
    ds = config.deepspeed
    problem = precision_problem(plan, facts, precision=ds.precision, autocast_bf16=ds.autocast_bf16,
                                rollout_dtype=config.rollout_dtype)
    if problem:
        raise DeviceError(problem)
    return plan


def precision_for_device(config: GRPOConfig, plan: DevicePlan) -> tuple[GRPOConfig, str | None]:
    """``config`` as it will run on ``plan``'s device, and a note when that differs from the recipe:
    on a CPU without native bf16 its bf16 settings run in fp32 (:func:`generation.device.cpu_precision`;
    the run is named after what it trains, so it is another run than the bf16 one)."""
    from generation.device import cpu_precision

    ds = config.deepspeed
    changes, note = cpu_precision(plan, probe_facts(), precision=ds.precision, autocast_bf16=ds.autocast_bf16,
                                  rollout_dtype=config.rollout_dtype)
    if not changes:
        return config, None
    deepspeed = ds.model_copy(update={k.split(".", 1)[1]: v for k, v in changes.items() if k.startswith("deepspeed.")})
    top = {k: v for k, v in changes.items() if "." not in k}
    return config.model_copy(update={"deepspeed": deepspeed, **top}), note


def setup_distributed(device: str = "auto") -> tuple[int, int]:
    """Environment for DeepSpeed (one process unless a launcher set it), the process group on the
    planned device (gloo on CPU, NCCL on this rank's GPU); returns (rank, world)."""
    import torch

    # one process: no other rank has to agree on the port, so it picks a free one itself, even when
    # RANK/WORLD_SIZE=1/MASTER_PORT came with the environment (a parent that trained in-process
    # passes them on, and its group still holds that port)
    # (under torchrun the store is its agent's, at its port: left alone whatever the world size)
    alone = "TORCHELASTIC_RUN_ID" not in os.environ and ("RANK" not in os.environ
                                                         or os.environ.get("WORLD_SIZE", "1") == "1")
    if alone:  # the port is chosen just before the group binds it (below): another process may take it
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1"})
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    plan = device_plan(device)
    chosen = os.environ.setdefault("DS_ACCELERATOR", plan.accelerator)
    if chosen != plan.accelerator:
        raise DeviceError(f"DS_ACCELERATOR={chosen} but this run trains on {plan.device}: unset DS_ACCELERATOR "
                          f"or set the recipe's device to match it")
    import deepspeed
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    try:
        from deepspeed.utils import logger as ds_logger

        ds_logger.setLevel(logging.WARNING)
    except ImportError:
        pass
    if get_accelerator().device_name() != plan.accelerator:  # chosen once per process, at first use
        raise DeviceError(f"DeepSpeed already runs on its {get_accelerator().device_name()} accelerator in this "
                          f"process; train on {plan.device} in a fresh process")
    if plan.accelerator == "cuda":
        torch.cuda.set_device(torch.device(plan.device))
    else:
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # skip the g++ JIT build
    if not torch.distributed.is_initialized():
        for attempt in range(4):
            if alone:
                os.environ["MASTER_PORT"] = str(free_port())
            try:
                deepspeed.init_distributed(dist_backend=plan.backend, verbose=False)
                break
            except torch.distributed.DistNetworkError as error:
                # a free port found here can be taken by another process (a vLLM engine opens many)
                # before the store binds it: for a process alone, another port; a launcher's is fixed
                if not alone or "EADDRINUSE" not in str(error) or attempt == 3:
                    raise
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def engine_device(engine):
    """The ``torch.device`` an engine (or a plain module) computes on: every tensor of a step goes there."""
    device = getattr(engine, "device", None)
    if device is not None:
        import torch

        return torch.device(device)
    return next(engine.parameters()).device


def deepspeed_config(config: GRPOConfig, world_size: int, micro_batch: int) -> dict:
    ds = config.deepspeed
    gas = ds.gradient_accumulation_steps
    return {
        "train_micro_batch_size_per_gpu": micro_batch,
        "gradient_accumulation_steps": gas,
        "train_batch_size": micro_batch * gas * world_size,
        "gradient_clipping": config.max_grad_norm,
        "zero_optimization": {"stage": ds.zero_stage},
        "bf16": {"enabled": ds.precision == "bf16"},
        "fp16": {"enabled": False},
        "steps_per_print": 10 ** 9,
        "wall_clock_breakdown": False,
        "zero_allow_untested_optimizer": True,
    }


def build_engine(model, config: GRPOConfig, world_size: int):
    """``deepspeed.initialize`` with torch AdamW and a linear-warmup schedule; returns the engine."""
    import deepspeed
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay,
                                  betas=(config.adam_beta1, config.adam_beta2))
    warmup = config.warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0)
    micro = max(1, config.prompts_per_step * config.num_generations // config.deepspeed.gradient_accumulation_steps)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler,
                                           config=deepspeed_config(config, world_size, micro))
    return engine
