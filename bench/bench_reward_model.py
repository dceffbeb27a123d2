"""Learned reward on a verifiable domain (issue 31): train a reward model on pairs whose truth the
domain's verifier knows, gate it on held-out prompts, and run the label-shuffled control.

    OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_reward_model --domain math_arith_easy --base smollm2

Pairs: :func:`training.verified_pairs.build_verified_pairs` (the reference answer against near-miss
wrong answers, both confirmed by the verifier). The reward model and the control are trained with
the same settings, the control on label-shuffled training pairs; both are judged by
:func:`quality.reward_gate.check_reward` on the same held-out pairs (the split is by prompt, and
the same seed gives both runs the same split). Everything goes into a fresh ASSAY_HOME (lake and
MLflow), as the CLI would write it. Prints one JSON document with the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", default="math_arith_easy")
    parser.add_argument("--base", default="smollm2")
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--wrong-per-item", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=1e-5)
    parser.add_argument("--max-length", type=int, default=128)
    parser.add_argument("--home", default=None, help="ASSAY_HOME to write into (default: a fresh temporary one)")
    parser.add_argument("--no-control", action="store_true", help="train and gate the reward model only")
    parser.add_argument("--out", default=None, help="also write the JSON report to this file (stdout can carry "
                                                    "third-party warnings, e.g. DeepSpeed's accelerator line)")
    args = parser.parse_args(argv)

    from domains import get_registry
    from generation.reward_scorer import RewardScorer
    from quality.reward_gate import check_reward, record_reward_gate
    from storage.lake import Lake
    from storage.preference_pairs import pairs_fingerprint, read_pairs
    from training.reward_config import RewardTrainConfig, VerifiedPairsConfig
    from training.reward_model import train_reward_model
    from training.verified_pairs import build_verified_pairs

    lake = Lake.at(args.home or tempfile.mkdtemp(prefix="bench-reward-"))
    built = build_verified_pairs(get_registry().get(args.domain),
                                 VerifiedPairsConfig(items=args.items, wrong_per_item=args.wrong_per_item))
    report = {"domain": args.domain, "base": args.base, "pairs": built.summary(), "home": str(lake.home),
              "threads": os.environ.get("OMP_NUM_THREADS"), "runs": {}}
    for label, shuffle in (("reward_model", False), ("shuffled_control", True))[:1 if args.no_control else 2]:
        config = RewardTrainConfig(base=args.base, epochs=args.epochs, batch_size=args.batch_size,
                                   learning_rate=args.learning_rate, max_length=args.max_length, shuffle_labels=shuffle)
        record = train_reward_model(lake, lake.mlflow_uri, args.domain, built.pairs, config,
                                    pairs_source=f"verified:{args.domain}",
                                    log=lambda m: print(m, file=sys.stderr, flush=True))
        started = time.perf_counter()
        heldout = read_pairs(record.heldout_path)
        gate = check_reward(RewardScorer.load(record.path), heldout)
        gate_seconds = time.perf_counter() - started
        record_reward_gate(lake, lake.mlflow_uri, gate, domain=args.domain, reward_model=record.reward_model,
                           pairs_source=str(record.heldout_path), pairs_fingerprint=pairs_fingerprint(heldout))
        report["runs"][label] = {
            "reward_model": record.reward_model, "train_pairs": record.train_pairs,
            "heldout_pairs": record.heldout_pairs, "steps": record.steps, "train_seconds": round(record.train_seconds, 1),
            "final_loss": record.final_loss, "train_accuracy": record.train_accuracy,
            "gate_seconds": round(gate_seconds, 1), "passed": gate.passed, "reasons": gate.reasons,
            **{c.name: {"observed": c.observed, "ci": [c.ci_low, c.ci_high], "passed": c.passed}
               for c in gate.criteria}}
        print(json.dumps({label: report["runs"][label]}, default=str), file=sys.stderr, flush=True)
    text = json.dumps(report, indent=2, default=str)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
