"""Entry point for multi-process training under a launcher (the CLI runs one process).

    OMP_NUM_THREADS=1 torchrun --nproc_per_node 2 -m training.run_grpo --recipe tiny \\
        --domains math_arith_easy --steps 10 --set deepspeed.zero_stage=2

Each rank draws its own prompts of the step; DeepSpeed averages gradients over ranks (gloo on
CPU). Rank 0 tracks in MLflow, saves checkpoints and prints the result as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml


def _apply_set(data: dict, assignment: str) -> None:
    key, _, raw = assignment.partition("=")
    if not key or not _:
        raise SystemExit(f"--set expects key=value (dotted keys allowed), got {assignment!r}")
    target = data
    parts = key.split(".")
    for part in parts[:-1]:
        target = target.setdefault(part, {})
    target[parts[-1]] = yaml.safe_load(raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.run_grpo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="tiny")
    parser.add_argument("--domains", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--run-name", default=None)
    parser.add_argument("--set", action="append", default=[], help="override a recipe key, e.g. deepspeed.zero_stage=2")
    parser.add_argument("--require-train-set", action="store_true",
                        help="refuse domains without a gated train_set (the Dagster asset's rule) instead of "
                             "generating their train rows")
    parser.add_argument("--output", default=None, help="also write the result JSON to this file (rank 0)")
    args = parser.parse_args(argv)

    from storage.deployment import open_lake
    from training.config import parse_config, recipe_path
    from training.trainer import train

    path = recipe_path(args.recipe)
    data = yaml.safe_load(path.read_text()) or {}
    data.setdefault("recipe", path.stem)
    for assignment in args.set:
        _apply_set(data, assignment)
    overrides = {"domains": args.domains.split(",") if args.domains else None, "max_steps": args.steps,
                 "seed": args.seed, "run_name": args.run_name}
    data.update({k: v for k, v in overrides.items() if v is not None})
    config = parse_config(data, str(path))
    from training.data import TrainingDataError
    from training.rollout_engine import RolloutEngineError
    from generation.vllm_engine import VllmUnavailable
    from generation.device import DeviceError

    try:
        result = train(config, open_lake(write=True), allow_generate=not args.require_train_set, progress=False,
                       log=lambda m: print(m, file=sys.stderr, flush=True))
    except (TrainingDataError, RolloutEngineError, VllmUnavailable, DeviceError) as exc:  # one line a caller (the Dagster asset) shows as is
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    import torch.distributed as dist

    if not dist.is_initialized() or dist.get_rank() == 0:
        payload = result.summary()
        payload.update({"run_name": result.run_name, "steps": result.steps_done, "world_size":
                        dist.get_world_size() if dist.is_initialized() else 1,
                        "resumed_from": result.resumed_from, "data_sources": result.data_sources,
                        "data_fingerprint": result.data_fingerprint, "data": result.data,
                        "checkpoint_path": result.checkpoint_path, "seconds": round(result.seconds, 1)})
        print(json.dumps(payload))
        if args.output:
            Path(args.output).write_text(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
