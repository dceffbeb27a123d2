"""GRPO step throughput: Assay's DeepSpeed trainer vs TRL's GRPOTrainer, same run, same workload.

Workload (the GRPO target in bench/RESULTS.md): SmolLM2-135M-Instruct, math_arith_easy prompts (2-term single-digit chain
sums), 2 prompts x 8 generations per step, at most 32 new tokens, temperature 1.0, beta 0.04,
loss_type grpo, lr 1e-5, one process. Both trainers see the same model folder, the same prompt
pool and the same reward (the domain's scorer). Zero-variance-group skipping is turned off for
Assay here so both do the same compute per step.

Measured per trainer: seconds per optimizer step and completion tokens per second (completion
tokens generated in the step / step wall time), median over the steps after the first (warm-up).
Assay runs twice: all-fp32 (like TRL here), and its default CPU recipe settings (bf16 rollout
copy + bf16 autocast for the update, fp32 master weights).

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_grpo --steps 4
    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_grpo learn --steps 40   # accuracy before/after

TRL is a bench-only dependency (pip install trl==1.16.0; it leaves torch alone).
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


def _prompts(n: int) -> list[dict]:
    from domains import get_registry

    return get_registry().get(DOMAIN).generate("train", n, seed=0)


def run_assay(home: Path, steps: int, fast: bool) -> dict:
    from pipelines.settings import open_lake
    from training.config import parse_config
    from training.trainer import train

    config = parse_config({
        "recipe": "bench", "run_name": f"bench-{'fast' if fast else 'fp32'}-{int(time.time())}",
        "policy": "smollm2", "domains": [DOMAIN], "max_steps": steps, "seed": 0,
        "prompts_per_step": 2, "num_generations": 8, "max_completion_length": 32, "temperature": 1.0,
        "learning_rate": 1e-5, "beta": 0.04, "loss_type": "grpo", "skip_zero_variance_groups": False,
        "train_samples_per_domain": 64, "rollout_dtype": "bfloat16" if fast else "float32",
        "deepspeed": {"zero_stage": 0, "precision": "fp32", "autocast_bf16": fast},
    })
    result = train(config, open_lake(home, write=True), allow_generate=True, progress=False, log=lambda m: None)
    rows = [h for h in result.history if h["domain"] == "_all"][1:]  # drop the warm-up step
    seconds = [h["step_s"] for h in rows]
    tokens = [h["tokens_per_s"] * h["step_s"] for h in rows]
    return {"trainer": "assay " + ("bf16-rollout+autocast" if fast else "fp32"),
            "s_per_step": statistics.median(seconds),
            "completion_tokens_per_s": statistics.median(t / s for t, s in zip(tokens, seconds)),
            "mean_completion_tokens": statistics.mean(t / 16 for t in tokens),
            "generation_s": statistics.median(h["generation_s"] for h in rows), "steps": len(rows)}


def run_trl(model_dir: Path, steps: int) -> dict:
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
        args = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, per_device_train_batch_size=16,
                          num_generations=8, max_completion_length=32, temperature=1.0, beta=0.04,
                          loss_type="grpo", learning_rate=1e-5, max_steps=steps, logging_steps=1,
                          save_strategy="no", report_to=[], seed=0, dataloader_num_workers=0,
                          gradient_checkpointing=False)  # TRL turns it on by default; Assay's run has it off
        timer = Timer()
        trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[reward], args=args, train_dataset=dataset,
                              callbacks=[timer])
        trainer.train()
    seconds = timer.seconds[1:]
    lengths = timer.lengths[1:len(timer.seconds)]
    rates = [16 * length / s for length, s in zip(lengths, seconds)]
    return {"trainer": "trl GRPOTrainer fp32", "s_per_step": statistics.median(seconds),
            "completion_tokens_per_s": statistics.median(rates),
            "mean_completion_tokens": statistics.mean(lengths), "generation_s": None, "steps": len(seconds)}


def greedy_accuracy(policy: str, items: list[dict], home: Path) -> list[float]:
    """Per-item scores of greedy completions (32 new tokens, bf16) on the domain's eval items."""
    from domains import get_registry
    from training.generation import SamplingParams, make_engine

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
    parser.add_argument("--skip-fp32", action="store_true", help="only the fast Assay configuration")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    if args.mode == "learn":
        home = Path(os.environ.get("ASSAY_HOME") or tempfile.mkdtemp(prefix="bench_learn_"))
        os.environ["ASSAY_HOME"] = str(home)
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        print(json.dumps(run_learning(args.steps, args.learning_rate, home, args.prompts_per_step,
                                      args.max_minutes), indent=2))
        return 0
    import torch

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    home = Path(os.environ.get("ASSAY_HOME") or tempfile.mkdtemp(prefix="bench_grpo_"))
    os.environ["ASSAY_HOME"] = str(home)
    from training.policy import ensure_smollm2

    model_dir = ensure_smollm2(home)
    results = []
    results.append(run_trl(model_dir, args.steps))
    if not args.skip_fp32:
        results.append(run_assay(home, args.steps, fast=False))
    results.append(run_assay(home, args.steps, fast=True))
    base = results[0]["completion_tokens_per_s"]
    for r in results:
        r["ratio_vs_trl"] = r["completion_tokens_per_s"] / base
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(f"{'trainer':32s} {'s/step':>8s} {'tok/s':>8s} {'tokens':>7s} {'vs TRL':>7s}")
        for r in results:
            print(f"{r['trainer']:32s} {r['s_per_step']:8.2f} {r['completion_tokens_per_s']:8.1f} "
                  f"{r['mean_completion_tokens']:7.1f} {r['ratio_vs_trl']:6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
