"""Learned reward on a verifiable domain (issue 31): train a reward model on pairs whose truth the
domain's verifier knows, gate it on held-out prompts, run the label-shuffled control, and (with
``--grpo-steps``) train the policy with GRPO on the learned reward alone while the verifier watches.

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_reward_model --domain math_arith_easy --base smollm2 \\
        --wrong-per-item 2 --hack-families number_spray keyword_stuffing --policy-pairs smollm2 \\
        --autocast-bf16 --grpo-steps 40 --out bench/out/reward_proof.json

Pairs: :func:`training.verified_pairs.build_verified_pairs` over the domain's train items (the
reference answer against near-miss wrong answers; optionally against hacks of some families built
from the prompt, and against the policy's own sampled completions, every pair confirmed by the
verifier). The reward model and the control are trained with the same settings on the same split
(by prompt, same seed), the control on label-shuffled training pairs; both are judged by
:func:`quality.reward_gate.check_reward` on the same held-out pairs, with the default bar. The
report gives the held-out accuracy per pair source too (near misses are the hard part; hacks and
the policy's prose are easier), and which probe families were trained against.

GRPO (``--grpo-steps N``, only when the reward model passed its gate, as the trainer requires): a
plugin domain ``<domain>_learned`` (the same items and verifier, declaring
``LearnedReward(reward_model=<the new id>)``, weight 1.0: the reward model is the whole reward) is
trained with ``assay train --recipe smollm2``; the verifier's score and the learned reward are read
per step from the lake's ``training_history`` (and the reward-hacking watch's verdicts); the base
policy and the new checkpoint are swept greedily on every eval item of ``<domain>`` with its
verifier, and compared item by item with the paired test promotion uses.

Everything goes into a fresh ASSAY_HOME (lake and MLflow), as the CLI would write it. Prints one
JSON document with the figures (and writes it to ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PLUGIN = '''"""{domain} with a learned reward (bench.bench_reward_model): the same items and verifier, rewarded
by reward model {reward_model} alone; the verifier stays the gold signal."""
import dataclasses

from domains import LearnedReward
from domains.builtin.math_arith import DOMAINS

DOMAIN = dataclasses.replace(next(d for d in DOMAINS if d.name == {domain!r}), name={name!r},
                             learned_reward=LearnedReward(reward_model={reward_model!r}))
'''


def _cpu() -> dict:
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("model name")), "")
    return {"model": model or platform.processor(), "cores": os.cpu_count(), "avx512_bf16": "avx512_bf16" in flags,
            "load_at_start": os.getloadavg()}


def _by_source(gate, pairs) -> dict:
    """Held-out accuracy per pair source (verified near misses, hack:<family>, policy, ...)."""
    source = {p.id: str(p.metadata.get("source")) for p in pairs}
    tally = defaultdict(lambda: [0, 0])
    for pair_id, chosen, rejected in gate.per_pair:
        tally[source.get(pair_id, "?")][0] += chosen > rejected
        tally[source.get(pair_id, "?")][1] += 1
    return {k: {"right": r, "pairs": n, "accuracy": round(r / n, 3)} for k, (r, n) in sorted(tally.items())}


def _cli(args: list[str], env: dict, log_name: str, home: Path) -> dict:
    started = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", *args, "--json"], capture_output=True, text=True,
                         env=env, cwd=Path(__file__).resolve().parents[1])
    (home / f"{log_name}.stderr.txt").write_text(out.stderr)
    if out.returncode not in (0, 1):
        raise SystemExit(f"assay {' '.join(args)} failed ({out.returncode}): {out.stderr[-3000:]}")
    document = json.loads(out.stdout)
    print(f"{log_name}: {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    return document


def grpo_phase(args, lake, reward_domain: str, reward_model: str) -> dict:
    """GRPO on the learned reward, then base vs new checkpoint swept with the verifier."""
    import polars as pl

    from evaluation.regression import compare_results
    from evaluation.results import compared_rows
    from storage.tables import TRAINING_HISTORY, conform

    plugins = Path(lake.home) / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / f"{reward_domain}.py").write_text(PLUGIN.format(domain=args.domain, name=reward_domain,
                                                                reward_model=reward_model))
    env = {**os.environ, "ASSAY_HOME": str(lake.home), "ASSAY_DOMAINS_PATH": str(plugins),
           "DAGSTER_HOME": str(Path(lake.home) / "dagster")}
    started = time.perf_counter()
    trained = _cli(["train", "--recipe", args.grpo_recipe, "--domains", reward_domain, "--steps", str(args.grpo_steps),
                    "--no-progress"], env, "train", Path(lake.home))
    train_seconds = time.perf_counter() - started
    history = conform(lake.read("training_history"), TRAINING_HISTORY).filter(
        pl.col("domain") == reward_domain).sort("step")
    curve = history.select("step", "learned_mean", "score_mean", "accuracy", "reward_hacking", "kl").to_dicts()
    sweep = ["--domains", args.domain, "--samples", "1", "--max-new-tokens", str(args.sweep_tokens),
             "--temperature", "0"] + (["--limit", str(args.sweep_items)] if args.sweep_items else [])
    base_ref = f"base-{args.grpo_recipe}"
    _cli(["sweep", "--checkpoint", base_ref, *sweep], env, "sweep_base", Path(lake.home))
    _cli(["sweep", "--checkpoint", trained["checkpoint"], *sweep], env, "sweep_trained", Path(lake.home))
    new, base = compared_rows(lake, trained["checkpoint"], base_ref, args.domain)
    report = compare_results(base, new, protected=[args.domain], baseline_name=base_ref,
                             candidate_name=trained["checkpoint"])
    d = report.domains[0]

    def window(rows, key, first):
        values = [r[key] for r in (rows[:5] if first else rows[-5:]) if r[key] is not None]
        return round(sum(values) / len(values), 3) if values else None

    return {
        "reward_domain": reward_domain, "reward_model": reward_model, "recipe": args.grpo_recipe,
        "steps": trained.get("steps"), "train_seconds": round(train_seconds, 1), "checkpoint": trained["checkpoint"],
        "mlflow_run_id": trained.get("mlflow_run_id"), "notes": trained.get("notes"),
        "learned_mean_first5": window(curve, "learned_mean", True), "learned_mean_last5": window(curve, "learned_mean", False),
        "verifier_mean_first5": window(curve, "score_mean", True), "verifier_mean_last5": window(curve, "score_mean", False),
        "reward_hacking_flags": [r["step"] for r in curve if r["reward_hacking"] == 1.0],
        "reward_hacking_judged": sum(r["reward_hacking"] is not None for r in curve),
        "curve": curve,
        "eval": {"domain": args.domain, "items": d.n, "base_accuracy": round(float(base["score"].mean()), 3),
                 "trained_accuracy": round(float(new["score"].mean()), 3), "delta": round(d.delta, 3),
                 "ci": [round(d.ci_low, 3), round(d.ci_high, 3)], "p_drop": d.p, "test": d.test,
                 "items_gained": d.items_gained, "items_lost": d.items_lost, "verdict": d.verdict,
                 "sweep_tokens": args.sweep_tokens},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="math_arith_easy")
    parser.add_argument("--base", default="smollm2")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--wrong-per-item", type=int, default=3)
    parser.add_argument("--hack-families", nargs="*", default=[], metavar="FAMILY",
                        help="train against hacks of these families too (the gate still probes every family)")
    parser.add_argument("--policy-pairs", default="", metavar="POLICY",
                        help="also pair against this policy's own completions (e.g. smollm2)")
    parser.add_argument("--samples", type=int, default=4, help="with --policy-pairs: completions per item")
    parser.add_argument("--pair-tokens", type=int, default=32,
                        help="with --policy-pairs: tokens per completion (the smollm2 recipe's max_completion_length)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--autocast-bf16", action="store_true")
    parser.add_argument("--home", default=None, help="ASSAY_HOME to write into (default: a fresh temporary one)")
    parser.add_argument("--no-control", action="store_true", help="train and gate the reward model only")
    parser.add_argument("--grpo-steps", type=int, default=0, help="then GRPO on the learned reward for this many steps "
                                                                  "(only if it passed its gate)")
    parser.add_argument("--grpo-recipe", default="smollm2")
    parser.add_argument("--sweep-items", type=int, default=0, help="eval items per sweep (0: all of them)")
    parser.add_argument("--sweep-tokens", type=int, default=32, help="new tokens per sweep answer")
    parser.add_argument("--gate", default="{}", metavar="JSON",
                        help="the gate's settings (quality.reward_gate_config.RewardGateConfig fields; default: its "
                             "defaults, the bar the figures are quoted against)")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file (stdout can carry "
                                                    "third-party warnings, e.g. DeepSpeed's accelerator line)")
    args = parser.parse_args(argv)

    from domains import get_registry
    from generation.reward_scorer import RewardScorer
    from quality.reward_gate import check_reward, record_reward_gate
    from quality.reward_gate_config import RewardGateConfig
    from storage.lake import Lake
    from storage.preference_pairs import pairs_fingerprint, read_pairs
    from training.reward_config import RewardTrainConfig, VerifiedPairsConfig
    from training.reward_model import train_reward_model
    from training.verified_pairs import build_verified_pairs

    gate_config = RewardGateConfig(**json.loads(args.gate))
    lake = Lake.at(args.home or tempfile.mkdtemp(prefix="bench-reward-"))
    # with GRPO the reward model belongs to the plugin domain that declares it
    reward_domain = f"{args.domain}_learned" if args.grpo_steps else args.domain
    started = time.perf_counter()
    pairs_config = VerifiedPairsConfig(items=args.items, wrong_per_item=args.wrong_per_item,
                                       hack_families=args.hack_families, policy=args.policy_pairs,
                                       samples=args.samples, max_new_tokens=args.pair_tokens)
    built = build_verified_pairs(get_registry().get(args.domain), pairs_config, home=str(lake.home))
    report = {"domain": args.domain, "base": args.base, "pairs": built.summary(),
              "pairs_seconds": round(time.perf_counter() - started, 1), "pairs_config": pairs_config.model_dump(),
              "gate_config": gate_config.model_dump(),
              "home": str(lake.home), "threads": os.environ.get("OMP_NUM_THREADS"), "cpu": _cpu(), "runs": {}}
    print(json.dumps({"pairs": report["pairs"]}), file=sys.stderr, flush=True)
    def train_and_gate(label: str, shuffle: bool) -> dict:
        config = RewardTrainConfig(base=args.base, epochs=args.epochs, batch_size=args.batch_size,
                                   learning_rate=args.learning_rate, max_length=args.max_length,
                                   autocast_bf16=args.autocast_bf16, shuffle_labels=shuffle)
        record = train_reward_model(lake, lake.mlflow_uri, reward_domain, built.pairs, config,
                                    pairs_source=f"verified:{args.domain}",
                                    log=lambda m: print(m, file=sys.stderr, flush=True))
        started = time.perf_counter()
        heldout = read_pairs(record.heldout_path)
        gate = check_reward(RewardScorer.load(record.path), heldout, gate_config)
        gate_seconds = time.perf_counter() - started
        record_reward_gate(lake, lake.mlflow_uri, gate, domain=reward_domain, reward_model=record.reward_model,
                           pairs_source=str(record.heldout_path), pairs_fingerprint=pairs_fingerprint(heldout))
        report["runs"][label] = {
            "reward_model": record.reward_model, "train_pairs": record.train_pairs,
            "heldout_pairs": record.heldout_pairs, "steps": record.steps, "train_seconds": round(record.train_seconds, 1),
            "final_loss": record.final_loss, "train_accuracy": record.train_accuracy,
            "gate_seconds": round(gate_seconds, 1), "passed": gate.passed, "reasons": gate.reasons,
            "heldout_by_source": _by_source(gate, heldout), "calibration_figures": gate.calibration,
            **{c.name: {"observed": c.observed, "ci": [c.ci_low, c.ci_high], "threshold": c.threshold,
                        "passed": c.passed} for c in gate.criteria}}
        print(json.dumps({label: report["runs"][label]}, default=str), file=sys.stderr, flush=True)
        return report["runs"][label]

    # the control last: GRPO (on the reward model's verdict) need not wait for it
    model = train_and_gate("reward_model", False)
    if args.grpo_steps:
        if model["passed"]:
            report["grpo"] = grpo_phase(args, lake, reward_domain, model["reward_model"])
        else:
            report["grpo"] = {"skipped": "the reward model failed its gate, so GRPO refuses it: " +
                                         "; ".join(model["reasons"])}
        print(json.dumps({"grpo": {k: v for k, v in report["grpo"].items() if k != "curve"}}, default=str),
              file=sys.stderr, flush=True)
    if not args.no_control:
        train_and_gate("shuffled_control", True)
    report["load_at_end"] = os.getloadavg()
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
