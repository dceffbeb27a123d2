"""The DeepSpeed engine: process-group setup, the DeepSpeed config from a recipe, initialize.

On CPU: DeepSpeed picks its CPU accelerator and the gloo backend by itself;
without a launcher the RANK/WORLD_SIZE/LOCAL_RANK/MASTER_* variables are set here for one process
(otherwise it goes looking for mpi4py). Its shared-memory comm op would be JIT-compiled with g++
on first use (~60 s): it is marked incompatible so gloo is used without compiling anything. The
optimizer is plain ``torch.optim.AdamW`` handed to ``deepspeed.initialize`` (FusedAdam and
DeepSpeedCPUAdam compile for minutes). fp16 does not run on CPU: precision is fp32 or bf16.

Two processes: ``torchrun --nproc_per_node 2 -m training.run_grpo --recipe ...`` (each rank sets
OMP_NUM_THREADS=1); the launcher's environment is used as is.
"""

from __future__ import annotations

import logging
import os
import socket

from training.config import GRPOConfig


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup_distributed() -> tuple[int, int]:
    """Environment for DeepSpeed (one process unless a launcher set it), gloo on CPU; (rank, world)."""
    import torch

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())})
    os.environ.setdefault("LOCAL_RANK", os.environ["RANK"])
    on_gpu = torch.cuda.is_available()
    if not on_gpu:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import deepspeed.ops

    logging.getLogger("DeepSpeed").setLevel(logging.WARNING)
    try:
        from deepspeed.utils import logger as ds_logger

        ds_logger.setLevel(logging.WARNING)
    except ImportError:
        pass
    if not on_gpu:
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # skip the g++ JIT build
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if on_gpu else "gloo", verbose=False)
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


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
