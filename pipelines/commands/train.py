"""``assay train``: GRPO on DeepSpeed for a recipe, over one or more domains.

Rows come from the lake's ``train_set`` (gated rows) when a domain has one; a domain whose latest
gates failed is refused, naming the gates; a domain the gates never judged gets its train split
generated directly, and the CLI says so. Rerunning the same command on the same rows resumes the
run from its last checkpoint (a finished run returns its result at once); after new gated rows
arrive the default run name changes with them, so the same command trains a new run.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import EXIT_OK, CliError, add_json_flag, emit
from training.generation import BACKENDS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "train", help="GRPO-train a policy on domains (DeepSpeed, MLflow-tracked, resumable)",
        description="Train a policy with GRPO (group-relative advantages, clipped ratio, k3 KL to the "
                    "frozen reference) through DeepSpeed. Recipes: tiny (the project's tiny Llama, "
                    "seconds), smollm2 (SmolLM2-135M-Instruct), smollm2_joint (five domains, rows drawn by "
                    "learnability p(1-p) of their pass rate), smollm2_terminal (multi-turn GRPO over "
                    "terminal-agent episodes: commands trained on, tool outputs masked, reward = hidden "
                    "tests), or a YAML path (keys: see "
                    "training/config.py). Each run is one MLflow run; checkpoints are HF folders under "
                    "$ASSAY_HOME/checkpoints registered as MLflow models. Rerun the same command to "
                    "resume after a kill. Two processes: torchrun --nproc_per_node 2 -m "
                    "training.run_grpo --recipe ...",
        epilog="Example: assay train --recipe tiny --domains math_arith_easy --steps 10 --json")
    parser.add_argument("--recipe", default="tiny", help="tiny | smollm2 | path/to/recipe.yaml (default: tiny)")
    parser.add_argument("--domains", default=None, help="comma-separated domains (default: the recipe's)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's max_steps)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: the recipe's)")
    parser.add_argument("--run-name", default=None,
                        help="run name (default: recipe + config hash + data hash, so the same command on "
                             "the same rows resumes, and new rows start a new run)")
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="rollout engine, the recipe's rollout.backend (default: the recipe's, auto unless it says): "
                             "torch, vllm (one in-process engine, the policy's weights loaded into it after every "
                             "optimizer step, importance-sampling correction on) or auto (vLLM where installed, "
                             "serving the model and measured faster)")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop after the step that crosses this wall time, with a checkpoint; rerun to continue")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_json_flag(parser)
    parser.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError, get_registry
    from pipelines.settings import open_lake
    from training.config import RecipeError, load_recipe, name_problem
    from training.data import TrainingDataError
    from training.device import DeviceError
    from training.learnability import LearnabilityError, uses_pass_rates
    from training.policy import PolicyError
    from training.rollout_engine import RolloutEngineError
    from training.vllm_engine import VllmUnavailable

    if args.steps is not None and args.steps < 1:
        raise CliError(f"--steps must be >= 1, got {args.steps}")
    if args.run_name is not None and name_problem(args.run_name):
        raise CliError(f"--run-name {args.run_name!r} {name_problem(args.run_name)}")
    domains = [d.strip() for d in args.domains.split(",") if d.strip()] if args.domains else None
    try:
        config = load_recipe(args.recipe, domains=domains, max_steps=args.steps, seed=args.seed,
                             run_name=args.run_name, rollout={"backend": args.backend} if args.backend else None)
    except RecipeError as exc:
        raise CliError(str(exc)) from None
    registry = get_registry()
    for name in config.domains:
        if name not in registry:
            raise CliError(str(UnknownDomainError(name, registry.names)))
    if not config.domains:
        raise CliError("no domains to train on: pass --domains a,b (see `assay domains list`)")
    from training.engine import check_device

    try:  # a device (or precision) this machine lacks is refused before the lake is opened
        check_device(config)
    except DeviceError as exc:
        raise CliError(str(exc)) from None

    from training.trainer import train

    notes: list[str] = []

    def log(message: str) -> None:
        notes.append(message)
        print(message, file=sys.stderr)

    lake = open_lake(write=True)
    try:
        if uses_pass_rates(config):  # learnability sampling reads them; measure what the lake lacks
            from evaluation.pass_rates import PassRateError, measure_for_training
            from training.checkpoints import CheckpointError

            try:
                measure_for_training(lake, lake.mlflow_uri, config, registry=registry, allow_generate=True,
                                     backend=config.rollout.backend, log=log,
                                     progress=not args.no_progress and not args.json)
            except (PassRateError, CheckpointError) as exc:
                raise CliError(str(exc)) from None
        result = train(config, lake, allow_generate=True, registry=registry, log=log,
                       progress=not args.no_progress and not args.json,
                       time_budget_s=args.max_minutes * 60 if args.max_minutes else None)
    except (TrainingDataError, PolicyError, UnknownDomainError, RolloutEngineError, VllmUnavailable,
            DeviceError, LearnabilityError) as exc:
        raise CliError(str(exc)) from None
    payload = result.summary()
    payload.update({"run_name": result.run_name, "steps": result.steps_done, "resumed_from": result.resumed_from,
                    "checkpoint_path": result.checkpoint_path, "data_sources": result.data_sources,
                    "data_fingerprint": result.data_fingerprint,
                    "notes": notes, "seconds": round(result.seconds, 1)})

    def human(p: dict) -> str:
        lines = [*p["notes"], f"run {p['run_name']}: {p['steps']} steps (resumed from step {p['resumed_from']}), "
                 f"{p['seconds']} s", f"checkpoint {p['checkpoint']} at {p['checkpoint_path']}",
                 f"MLflow run {p['mlflow_run_id']}"]
        last: dict[str, dict] = {}
        for row in p["history"]:
            last[row["domain"]] = row
        for domain, row in last.items():
            kl = "n/a" if row["kl"] is None else f"{row['kl']:.4f}"
            lines.append(f"  {domain}: step {row['step']} reward {row['reward_mean']:.3f} kl {kl}")
        return "\n".join(lines)

    emit(args, payload, human)
    return EXIT_OK
