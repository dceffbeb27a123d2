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

from pipelines.cli import EXIT_OK, CliError, add_domains_argument, add_json_flag, emit, with_examples
from generation.contract import BACKENDS
from training.forgetting import FORGETTING_MODES
from training.overoptimisation import REWARD_HACKING_MODES


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
                    "training.run_grpo --recipe ...; several machines: --hostfile (below).",
    )
    with_examples(parser, "assay train --recipe tiny --domains math_arith_easy --steps 10 --json",
                  note="Several machines: write a hostfile (one 'HOST slots=N' line per machine, N = its training "
               "processes, e.g. its GPUs; the first host hosts the rendezvous), put the same code, recipe and "
               "rows on every machine with one shared ASSAY_HOME, and run the same `assay train --hostfile "
               "hosts.txt ...` on each (it finds its own line by hostname, or pass --node-rank). Each runs "
               "torchrun with a c10d rendezvous at the first host's --rdzv-port; no ssh between machines is "
               "needed. --print-commands prints every node's command for a scheduler instead.")
    parser.add_argument("--recipe", default="tiny", help="tiny | smollm2 | path/to/recipe.yaml (default: tiny)")
    add_domains_argument(parser, "--domains", default=None, help="domains to train on (default: the recipe's)")
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
    parser.add_argument("--reward-hacking", choices=REWARD_HACKING_MODES, default=None,
                        help="the recipe's reward_hacking (default: the recipe's, warn unless it says): for domains "
                             "with a learned reward, when the reward model's mean rises while the verifier's falls "
                             "over the recipe's reward_hacking_window steps, warn flags it (MLflow, log, dashboard) "
                             "and trains on; stop flags it and ends the run after saving that step's checkpoint")
    parser.add_argument("--forgetting", choices=FORGETTING_MODES, default=None,
                        help="the recipe's validation.forgetting (default: the recipe's, warn unless it says): when a "
                             "validated domain (trained, or watched: the protected ones unless the recipe lists them) "
                             "falls significantly below its step-0 score on its held-out items, warn flags it (log, "
                             "MLflow, checkpoint, dashboard) and trains on; stop flags it and ends the run after saving "
                             "that step's checkpoint; reweight raises its mixture share until it recovers")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="stop after the step that crosses this wall time, with a checkpoint; rerun to continue")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    nodes = parser.add_argument_group(
        "several machines", "one run over the machines of a hostfile: this machine runs its line's torchrun "
                            "(training.multinode)")
    nodes.add_argument("--hostfile", default=None, metavar="PATH",
                       help="DeepSpeed-style hostfile: one 'HOST slots=N' line per machine ('#' comments allowed), "
                            "N training processes on it; the first host hosts the rendezvous")
    nodes.add_argument("--node-rank", type=int, default=None, metavar="K",
                       help="which line of the hostfile this machine is, from 0 (default: the line naming this "
                            "machine's hostname, FQDN, an address of it, or localhost)")
    nodes.add_argument("--rdzv-port", type=int, default=29400, metavar="PORT",
                       help="the rendezvous port on the first host; open it to the other machines (default: 29400)")
    nodes.add_argument("--print-commands", action="store_true",
                       help="print each node's command (or only --node-rank's) and exit, to launch the nodes "
                            "with your own scheduler")
    add_json_flag(parser)
    parser.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    # A user error the library detects (an unknown domain or recipe, a run name taken by another
    # config, a device this machine lacks, ...) is a storage.errors.UserError: pipelines.cli.main
    # prints it as `assay: error: ...` (exit 2). Only the engine failures below are translated here.
    from domains import UnknownDomainError, get_registry
    from pipelines.settings import open_lake
    from training.config import load_recipe, name_problem
    from training.learnability import uses_pass_rates
    from training.rollout_engine import RolloutEngineError
    from generation.vllm_engine import VllmUnavailable

    if args.steps is not None and args.steps < 1:
        raise CliError(f"--steps must be >= 1, got {args.steps}")
    if args.run_name is not None and name_problem(args.run_name):
        raise CliError(f"--run-name {args.run_name!r} {name_problem(args.run_name)}")
    domains = args.domains  # a list of names, or None: the recipe's
    if args.hostfile is None:
        for flag, value in (("--node-rank", args.node_rank is not None), ("--print-commands", args.print_commands)):
            if value:
                raise CliError(f"{flag} needs --hostfile")
    elif args.max_minutes is not None:
        raise CliError("--max-minutes is not supported with --hostfile (every node would have to stop after the "
                       "same step): use --steps, and rerun the same command to continue")
    config = load_recipe(args.recipe, domains=domains, max_steps=args.steps, seed=args.seed,
                         run_name=args.run_name, rollout={"backend": args.backend} if args.backend else None,
                         reward_hacking=args.reward_hacking,
                         validation={"forgetting": args.forgetting} if args.forgetting else None)
    registry = get_registry()
    for name in config.domains:
        if name not in registry:
            raise UnknownDomainError(name, registry.names)
    if not config.domains:
        raise CliError("no domains to train on: pass --domains a b (see `assay domains list`)")
    if args.print_commands:  # before the device check: the printing machine may not be a training one
        return _print_commands(args, domains)
    from training.engine import check_device

    check_device(config)  # a device (or precision) this machine lacks is refused before the lake is opened

    if args.hostfile is not None:
        return _train_on_nodes(args, config, domains, registry)

    from training.trainer import train

    notes: list[str] = []

    def log(message: str) -> None:
        notes.append(message)
        print(message, file=sys.stderr)

    lake = open_lake(write=True)
    try:
        if uses_pass_rates(config):  # learnability sampling reads them; measure what the lake lacks
            from assets.learnability_rates import measure_for_training
            from evaluation.pass_rates import PassRateError

            try:
                measure_for_training(lake, lake.mlflow_uri, config, registry=registry, allow_generate=True,
                                     backend=config.rollout.backend, log=log,
                                     progress=not args.no_progress and not args.json)
            except PassRateError as exc:
                raise CliError(str(exc)) from None
        result = train(config, lake, allow_generate=True, registry=registry, log=log,
                       progress=not args.no_progress and not args.json,
                       time_budget_s=args.max_minutes * 60 if args.max_minutes else None)
    except (RolloutEngineError, VllmUnavailable) as exc:
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
        if p.get("stopped"):
            lines.append(stopped_line(p["stopped"]))
        last: dict[str, dict] = {}
        for row in p["history"]:
            if row.get("reward_mean") is not None:  # a step the domain was drawn at (not only validated)
                last[row["domain"]] = row
        for domain, row in last.items():
            kl = "n/a" if row["kl"] is None else f"{row['kl']:.4f}"
            lines.append(f"  {domain}: step {row['step']} reward {row['reward_mean']:.3f} kl {kl}")
        lines += validation_lines(p.get("validation") or {})
        return "\n".join(lines)

    emit(args, payload, human)
    return EXIT_OK


def stopped_line(stopped: dict) -> str:
    """Why a stop ended the run, and the flag that trains on."""
    reasons = stopped.get("reasons") or [stopped["reason"]]
    words = {"reward_hacking": ("reward hacking", "--reward-hacking warn"), "forgetting": ("forgetting", "--forgetting warn")}
    return (f"STOPPED after step {stopped['step']} for {' and '.join(words[r][0] for r in reasons)} "
            f"({', '.join(stopped['domains'])}): rerun with {' '.join(words[r][1] for r in reasons)} to train on")


def validation_lines(validation: dict) -> list[str]:
    """The latest in-loop validation per domain and the forgetting flags (training.validation)."""
    if not validation:
        return []
    lines = [f"validation at step {validation['step']} (held-out items, greedy; change since step "
             f"{validation.get('start_step', 0)}, paired test, BH across domains):"]
    for r in validation["results"]:
        change = "" if r.get("delta") is None else (f" ({r['delta']:+.3f}, q {r['q']:.3g}"
                                                     + (", FORGETTING" if r.get("flagged") else "") + ")")
        lines.append(f"  {r['domain']}: {r['score']:.3f}{change} on {r['n']} items"
                     + ("" if r.get("trained") else " (watched)"))
    if validation.get("flagged_ever"):
        lines.append(f"forgetting flagged during the run: {', '.join(validation['flagged_ever'])}")
    return lines


# -- several machines (--hostfile) ---------------------------------------------------------------


def _measure_pass_rates(args: argparse.Namespace, config, registry, log) -> None:
    """What learnability sampling reads and the lake lacks (as a one-machine run measures it)."""
    from training.learnability import uses_pass_rates

    if not uses_pass_rates(config):
        return
    from assets.learnability_rates import measure_for_training
    from evaluation.pass_rates import PassRateError
    from pipelines.settings import open_lake

    lake = open_lake(write=True)
    try:
        measure_for_training(lake, lake.mlflow_uri, config, registry=registry, allow_generate=True,
                             backend=config.rollout.backend, log=log, progress=not args.no_progress and not args.json)
    except PassRateError as exc:
        raise CliError(str(exc)) from None


def _launches(args: argparse.Namespace, domains: list[str] | None, output: str | None):
    """The hostfile and every node's launch for these flags; a bad hostfile or flag is a CliError."""
    from training.multinode import HostfileError, node_launches, read_hostfile

    try:
        hostfile = read_hostfile(args.hostfile)
        launches = node_launches(hostfile, args.recipe, port=args.rdzv_port, output=output, domains=domains or (),
                                 steps=args.steps, seed=args.seed, run_name=args.run_name,
                                 require_train_set=False, backend=args.backend or "",
                                 reward_hacking=args.reward_hacking or "", forgetting=args.forgetting or "")
    except HostfileError as exc:
        raise CliError(str(exc)) from None
    if args.node_rank is not None and not 0 <= args.node_rank < len(launches):
        raise CliError(f"--node-rank {args.node_rank}: {args.hostfile} names {len(launches)} node(s), "
                       f"ranks 0-{len(launches) - 1}")
    return hostfile, launches


def _print_commands(args: argparse.Namespace, domains: list[str] | None) -> int:
    import shlex

    from pipelines.settings import resolve_home
    from training.launch import REPO_ROOT

    hostfile, launches = _launches(args, domains, output=None)
    if args.node_rank is not None:
        launches = [launches[args.node_rank]]
    home = resolve_home(None)
    rows = [{"node_rank": n.node_rank, "host": n.host, "slots": n.slots, "command": list(n.command),
             "shell": f"cd {shlex.quote(str(REPO_ROOT))} && ASSAY_HOME={shlex.quote(str(home))} "
                      f"{shlex.join(n.command)}"} for n in launches]

    def human(rows: list[dict]) -> str:
        lines = [f"# {hostfile.nnodes} node(s), {hostfile.world_size} ranks; run each line on its host "
                 f"(same code and ASSAY_HOME everywhere; port {args.rdzv_port} open on {hostfile.hosts[0].name}). "
                 "Rank 0 prints the result JSON on stdout."]
        for row in rows:
            lines += [f"# node {row['node_rank']}: {row['host']} slots={row['slots']}", row["shell"]]
        return "\n".join(lines)

    emit(args, rows, human)
    return EXIT_OK


def _train_on_nodes(args: argparse.Namespace, config, domains: list[str] | None, registry) -> int:
    """This machine's part of a multi-node run: its node's torchrun, in the foreground. The node
    whose ranks include rank 0 (decided at the rendezvous) prints the run's result. With
    learnability sampling, node 0 measures the pass rates the lake lacks before its torchrun starts
    (the other nodes wait at the rendezvous meanwhile, up to torchrun's join timeout of 600 s)."""
    import tempfile
    from pathlib import Path

    from pipelines.settings import resolve_home
    from training.launch import TrainingProcessError, run_training_process, training_env
    from training.multinode import HostfileError, this_node

    notes: list[str] = []

    def log(message: str) -> None:
        notes.append(message)
        print(message, file=sys.stderr)

    with tempfile.TemporaryDirectory() as tmp:
        output = str(Path(tmp) / "result.json")
        hostfile, launches = _launches(args, domains, output)
        if args.node_rank is None:
            try:
                node = launches[this_node(hostfile)]
            except HostfileError as exc:
                raise CliError(f"{exc} with --node-rank") from None
        else:
            node = launches[args.node_rank]
        log(f"node {node.node_rank} of {hostfile.nnodes} ({node.host}, slots={node.slots}, "
            f"{hostfile.world_size} ranks in all); rendezvous at {hostfile.hosts[0].name}:{args.rdzv_port}")
        if node.node_rank == 0:
            _measure_pass_rates(args, config, registry, log)
        # one home for every node: resolved here, since the training process runs from the repository
        env = training_env(resolve_home(None), threads_per_process=None)
        try:
            result = run_training_process(node.command, env, output, log=log, require_result=False)
        except TrainingProcessError as exc:
            for line in exc.tail[-10:]:
                print(f"  {line}", file=sys.stderr)
            raise CliError(f"node {node.node_rank} ({node.host}): {exc.reason}") from None
    if result is None:
        payload = {"node_rank": node.node_rank, "host": node.host, "ranks": node.slots, "rank0": False,
                   "world_size": hostfile.world_size, "notes": notes,
                   "result": "rank 0 ran on another node: its launcher printed the result"}
        emit(args, payload, lambda p: f"node {p['node_rank']} ({p['host']}) finished its {p['ranks']} rank(s) of "
                                      f"{p['world_size']}; {p['result']}")
        return EXIT_OK
    payload = {**result, "node_rank": node.node_rank, "host": node.host, "rank0": True, "notes": notes}

    def human(p: dict) -> str:
        return "\n".join([f"run {p['run_name']}: {p['steps']} steps on {p['world_size']} ranks "
                          f"(resumed from step {p['resumed_from']}), {p['seconds']} s",
                          f"checkpoint {p['checkpoint']} at {p['checkpoint_path']}",
                          f"MLflow run {p['mlflow_run_id']}",
                          *([stopped_line(p["stopped"])] if p.get("stopped") else []),
                          *validation_lines(p.get("validation") or {})])

    emit(args, payload, human)
    return EXIT_OK
