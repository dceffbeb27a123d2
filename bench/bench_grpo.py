"""GRPO step throughput: Assay's DeepSpeed trainer vs TRL's GRPOTrainer, same run, same workload.

Workload (the GRPO target in bench/RESULTS.md): SmolLM2-135M-Instruct, math_arith_easy prompts (2-term single-digit chain
sums), 2 prompts x 8 generations per step, at most 32 new tokens, temperature 1.0, beta 0.04,
loss_type grpo, lr 1e-5, one process. Both trainers see the same model folder, the same prompt
pool and the same reward (the domain's scorer). Zero-variance-group skipping is turned off for
Assay here so both do the same compute per step.

Measured per trainer: seconds per optimizer step and completion tokens per second (completion
tokens generated in the step / step wall time), median over the steps after the first (warm-up).
Assay runs with each rollout engine (``rollout.backend``): the torch decode loop, all-fp32 (like
TRL here) and with the recipe's CPU settings (bf16 rollout copy + bf16 autocast for the update,
fp32 master weights); and a colocated vLLM engine, fp32 and bf16 (+ autocast), its weights loaded
from the policy after every optimizer step, truncated importance sampling on. Per Assay row, the
step's profile (medians): generation, policy forward/backward + optimizer (``update_s``), reference
forward (``ref_s``), weight sync into the rollout engine (``sync_s``), and the rest (scoring,
advantages, bookkeeping).

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_grpo --steps 4 --json
    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_grpo learn --steps 40   # accuracy before/after

TRL is a bench-only dependency (``pip install .[bench]``: trl 1.16.0, datasets; it leaves torch
alone). Without it the Assay rows are still measured and printed, and the output says TRL is
missing (``ratio_vs_trl`` is then null). ``--trl-vllm`` also tries TRL's own vLLM colocate mode and
reports why it does not run where it fails.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

DOMAIN = "math_arith_easy"
# TRL's vLLM colocate mode: vLLM's share of memory (on CPU, of the machine's RAM, the trainer's
# included; at 0.3 vLLM's CPU build found no room for a KV cache here)
TRL_VLLM_MEMORY = 0.5


def _load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def _prompts(n: int) -> list[dict]:
    from domains import get_registry

    return get_registry().get(DOMAIN).generate("train", n, seed=0)


PROFILE = ("generation_s", "update_s", "ref_s", "sync_s")


def run_assay(home: Path, steps: int, fast: bool, backend: str = "torch") -> dict:
    from pipelines.settings import open_lake
    from training.config import parse_config
    from training.trainer import train

    name = f"{'bf16' if fast else 'fp32'}-{backend}"
    config = parse_config({
        "recipe": "bench", "run_name": f"bench-{name}-{int(time.time())}",
        "policy": "smollm2", "domains": [DOMAIN], "max_steps": steps, "seed": 0,
        "prompts_per_step": 2, "num_generations": 8, "max_completion_length": 32, "temperature": 1.0,
        "learning_rate": 1e-5, "beta": 0.04, "loss_type": "grpo", "skip_zero_variance_groups": False,
        "train_samples_per_domain": 64, "rollout_dtype": "bfloat16" if fast else "float32",
        "rollout": {"backend": backend},
        "deepspeed": {"zero_stage": 0, "precision": "fp32", "autocast_bf16": fast},
    })
    result = train(config, open_lake(home, write=True), allow_generate=True, progress=False, log=lambda m: None)
    rows = [h for h in result.history if h["domain"] == "_all"][1:]  # drop the warm-up step
    seconds = [h["step_s"] for h in rows]
    tokens = [h["tokens_per_s"] * h["step_s"] for h in rows]
    label = {("torch", False): "assay fp32", ("torch", True): "assay bf16-rollout+autocast",
             ("vllm", False): "assay vllm-rollout fp32", ("vllm", True): "assay vllm-rollout bf16+autocast"}
    profile = {key: statistics.median(h[key] for h in rows) for key in PROFILE}
    profile["other_s"] = statistics.median(h["step_s"] - sum(h[k] for k in PROFILE) for h in rows)
    entry = {"trainer": label[(backend, fast)], "rollout_backend": backend,
             "s_per_step": statistics.median(seconds),
             "completion_tokens_per_s": statistics.median(t / s for t, s in zip(tokens, seconds)),
             "mean_completion_tokens": statistics.mean(t / 16 for t in tokens),
             "generation_s": profile["generation_s"], "steps": len(rows), "profile": profile,
             "wall_s_incl_setup": result.seconds}
    if backend == "vllm":
        entry["logp_gap_mean"] = statistics.mean(h["logp_gap_mean"] for h in rows)
        entry["is_ratio_range"] = [min(h["is_ratio_min"] for h in rows), max(h["is_ratio_max"] for h in rows)]
        entry["is_corrected_frac"] = statistics.mean(h["is_corrected_frac"] for h in rows)
    return entry


def trl_missing() -> str | None:
    """Why TRL cannot run here (None when it can)."""
    try:
        import datasets  # noqa: F401
        import trl  # noqa: F401
    except ImportError as exc:
        return f"TRL is missing ({exc}): pip install '.[bench]' (not into a shared environment) to compare"
    return None


def run_trl(model_dir: Path, steps: int, use_vllm: bool = False) -> dict:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from domains import get_registry

    domain = get_registry().get(DOMAIN)
    rows = _prompts(64)
    by_prompt = {r["prompt"]: r for r in rows}
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "key": r["prompt"]}
                                 for r in rows])

    def reward(prompts, completions, key, **_):
        out = []
        for completion, k in zip(completions, key):
            text = completion[0]["content"] if isinstance(completion, list) else completion
            out.append(domain.safe_score(text, by_prompt[k]))
        return out

    class Timer(TrainerCallback):
        def __init__(self):
            self.begin, self.seconds, self.lengths = None, [], []

        def on_step_begin(self, args, state, control, **kw):
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds.append(time.perf_counter() - self.begin)

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "completions/mean_length" in logs:
                self.lengths.append(logs["completions/mean_length"])

    with tempfile.TemporaryDirectory() as out:
        vllm = {"use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": TRL_VLLM_MEMORY} if use_vllm else {}
        args = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, per_device_train_batch_size=16,
                          num_generations=8, max_completion_length=32, temperature=1.0, beta=0.04,
                          loss_type="grpo", learning_rate=1e-5, max_steps=steps, logging_steps=1,
                          save_strategy="no", report_to=[], seed=0, dataloader_num_workers=0,
                          gradient_checkpointing=False,  # TRL turns it on by default; Assay's run has it off
                          **vllm)
        timer = Timer()
        trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[reward], args=args, train_dataset=dataset,
                              callbacks=[timer])
        trainer.train()
    seconds = timer.seconds[1:]
    lengths = timer.lengths[1:len(timer.seconds)]
    rates = [16 * length / s for length, s in zip(lengths, seconds)]
    return {"trainer": "trl GRPOTrainer fp32" + (" + vLLM colocate" if use_vllm else ""),
            "s_per_step": statistics.median(seconds),
            "completion_tokens_per_s": statistics.median(rates),
            "mean_completion_tokens": statistics.mean(lengths), "generation_s": None, "steps": len(seconds)}


def greedy_accuracy(policy: str, items: list[dict], home: Path) -> list[float]:
    """Per-item scores of greedy completions (32 new tokens, bf16) on the domain's eval items."""
    from domains import get_registry
    from generation.contract import SamplingParams
    from generation.factory import make_engine

    domain = get_registry().get(DOMAIN)
    engine = make_engine(policy, dtype="bfloat16", home=str(home), max_batch_size=50)
    prompts = [engine.format_prompt(item["prompt"]) for item in items]
    outputs = engine.generate(prompts, SamplingParams(max_new_tokens=32))
    return [domain.safe_score(out[0].text, item) for out, item in zip(outputs, items)]


def exact_mcnemar(before: list[float], after: list[float]) -> tuple[int, int, float]:
    """Discordant pairs (lost, gained) and the two-sided exact McNemar p (binomial on discordants)."""
    from scipy.stats import binomtest

    lost = sum(1 for b, a in zip(before, after) if b >= 1 and a < 1)
    gained = sum(1 for b, a in zip(before, after) if b < 1 and a >= 1)
    p = binomtest(gained, lost + gained, 0.5).pvalue if lost + gained else 1.0
    return lost, gained, p


def run_learning(steps: int, learning_rate: float | None, home: Path, prompts_per_step: int | None = None,
                 max_minutes: float | None = None) -> dict:
    """Eval accuracy on held-out items before vs after GRPO with the smollm2 recipe."""
    from domains import get_registry
    from pipelines.settings import open_lake
    from training.config import load_recipe
    from training.trainer import train

    items = get_registry().get(DOMAIN).eval_items()
    began = time.perf_counter()
    cache = home / "learn_before.json"  # the base model's scores do not change between attempts
    cached = json.loads(cache.read_text()) if cache.exists() else {}
    if cached.get("ids") == [item["id"] for item in items]:
        before, eval_s = cached["scores"], cached["seconds"]
    else:
        before = greedy_accuracy("smollm2", items, home)
        eval_s = time.perf_counter() - began
        cache.write_text(json.dumps({"ids": [item["id"] for item in items], "scores": before, "seconds": eval_s}))
    print(f"before: accuracy {sum(1 for x in before if x >= 1) / len(before):.3f} on {len(items)} eval items "
          f"({eval_s:.0f} s)", flush=True)
    config = load_recipe("smollm2", max_steps=steps, domains=[DOMAIN], learning_rate=learning_rate,
                         prompts_per_step=prompts_per_step)
    began = time.perf_counter()
    result = train(config, open_lake(home, write=True), allow_generate=True, progress=True, log=print,
                   time_budget_s=max_minutes * 60 if max_minutes else None)
    train_s = time.perf_counter() - began
    after = greedy_accuracy(result.checkpoint_path, items, home)
    lost, gained, p = exact_mcnemar(before, after)
    curve = [round(h["reward_mean"], 3) for h in result.history if h["domain"] == "_all"]
    acc = lambda xs: sum(1 for x in xs if x >= 1) / len(xs)  # noqa: E731
    return {"domain": DOMAIN, "eval_items": len(items), "steps": result.steps_done,
            "learning_rate": config.learning_rate, "accuracy_before": acc(before), "accuracy_after": acc(after),
            "improvement_points": 100 * (acc(after) - acc(before)), "items_lost": lost, "items_gained": gained,
            "mcnemar_p": p, "train_wall_s": round(train_s, 1), "eval_wall_s": round(eval_s, 1),
            "prompts_per_step": config.prompts_per_step, "num_generations": config.num_generations,
            "checkpoint": result.checkpoint, "mlflow_run_id": result.mlflow_run_id, "reward_curve": curve}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", nargs="?", choices=("throughput", "learn"), default="throughput",
                        help="throughput: Assay vs TRL step speed; learn: eval accuracy before/after GRPO")
    parser.add_argument("--steps", type=int, default=4, help="steps per trainer (the first is warm-up)")
    parser.add_argument("--learning-rate", type=float, default=None, help="learn mode: override the recipe's")
    parser.add_argument("--prompts-per-step", type=int, default=None, help="learn mode: override the recipe's")
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="learn mode: stop training (with a checkpoint) after this much wall time")
    parser.add_argument("--skip-fp32", action="store_true", help="only the fast Assay configurations")
    parser.add_argument("--backends", nargs="+", default=["torch", "vllm"], choices=("torch", "vllm"),
                        help="Assay rollout engines to measure")
    parser.add_argument("--trl-vllm", action="store_true", help="also try TRL's own vLLM colocate mode")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    from pipelines.console import stdout_for_result_only

    # DeepSpeed, TRL and vLLM print to stdout: only the result goes there (the rest to stderr)
    with stdout_for_result_only() as out:
        return _run(args, out)


def _run(args: argparse.Namespace, out) -> int:
    if args.mode == "learn":
        home = Path(os.environ.get("ASSAY_HOME") or tempfile.mkdtemp(prefix="bench_learn_"))
        os.environ["ASSAY_HOME"] = str(home)
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        print(json.dumps(run_learning(args.steps, args.learning_rate, home, args.prompts_per_step,
                                      args.max_minutes), indent=2), file=out)
        return 0
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    home = Path(os.environ.get("ASSAY_HOME") or tempfile.mkdtemp(prefix="bench_grpo_"))
    os.environ["ASSAY_HOME"] = str(home)
    from generation.policy import ensure_smollm2

    model_dir = ensure_smollm2(home)
    load_start = _load()
    results, notes = [], []
    missing = trl_missing()
    if missing:
        notes.append(missing)
    else:
        results.append(run_trl(model_dir, args.steps))
    for backend in args.backends:
        if not args.skip_fp32:
            results.append(run_assay(home, args.steps, fast=False, backend=backend))
        results.append(run_assay(home, args.steps, fast=True, backend=backend))
    if args.trl_vllm and not missing:
        try:
            results.append(run_trl(model_dir, args.steps, use_vllm=True))
        except Exception as exc:  # noqa: BLE001 - reported, not hidden: TRL's vLLM mode is a comparison point only
            notes.append(f"TRL's vLLM colocate mode did not run here: {type(exc).__name__}: "
                         f"{str(exc).splitlines()[0][:300]}")
    base = None if missing else results[0]["completion_tokens_per_s"]
    for r in results:
        r["ratio_vs_trl"] = r["completion_tokens_per_s"] / base if base else None
        # the rows sample different completions (lengths differ): the step-time ratio beside it
        r["step_time_ratio_vs_trl"] = results[0]["s_per_step"] / r["s_per_step"] if base else None
    load = {"omp_num_threads": os.environ["OMP_NUM_THREADS"], "load_start": load_start, "load_end": _load()}
    if args.json:
        print(json.dumps(results, indent=2), file=out)
        print(json.dumps({"notes": notes, **load}), file=sys.stderr)
    else:
        for note in notes:
            print(note, file=out)
        print(f"load average {load['load_start']} at start, {load['load_end']} at end, "
              f"OMP_NUM_THREADS={load['omp_num_threads']}", file=out)
        print(f"{'trainer':34s} {'s/step':>8s} {'tok/s':>8s} {'tokens':>7s} {'vs TRL':>7s}   "
              "profile s: generation / update / reference / sync / other", file=out)
        for r in results:
            ratio = f"{r['ratio_vs_trl']:6.2f}x" if r["ratio_vs_trl"] is not None else "    n/a"
            p = r.get("profile")
            shown = (f"{p['generation_s']:.2f} / {p['update_s']:.2f} / {p['ref_s']:.2f} / {p['sync_s']:.3f} / "
                     f"{p['other_s']:.2f}") if p else ""
            print(f"{r['trainer']:34s} {r['s_per_step']:8.2f} {r['completion_tokens_per_s']:8.1f} "
                  f"{r['mean_completion_tokens']:7.1f} {ratio}   {shown}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
