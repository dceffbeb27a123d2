"""What in-loop validation costs a GRPO run (issue 42): SmolLM2 on the smollm2 recipe, validated on the
recipe's default schedule, every validation run (``--max-share 1``, the default here, so the unguarded
cost is measured; ``--max-share 0.15`` measures what the recipe default realises), against the same run's steps.

    OMP_NUM_THREADS=2 ASSAY_HOME=<home> python -m bench.bench_validation --steps 20 --json

The run validates its trained domains and the protected ones it watches (the recipe's defaults:
``validation.items`` 50 each, greedy, ``max_completion_length`` new tokens) at step 0 and every
``--eval-every`` steps (default: a tenth of ``--steps``, the recipe's default schedule). Reports each
validation's seconds (``validation_s``), each step's (``step_s``), the share validation took of this
run, and what the same schedule costs a run of the recipe's own length (``--recipe-steps``, default its
``max_steps``), with the CPU, the thread count and the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_validation", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--recipe", default="smollm2")
    parser.add_argument("--domains", type=lambda s: s.split(","), default=None,
                        help="comma-separated training domains (default: the recipe's)")
    parser.add_argument("--steps", type=int, default=20, help="steps to train (each validation is measured)")
    parser.add_argument("--eval-every", type=int, default=None, help="default: ceil(steps / 10), the default schedule")
    parser.add_argument("--recipe-steps", type=int, default=None,
                        help="the run length the projected share is for (default: the recipe's max_steps)")
    parser.add_argument("--max-share", type=float, default=1.0,
                        help="validation.max_share (default 1: every scheduled validation runs, the unguarded cost; "
                             "0.15: the recipe default, the realised share under its budget)")
    parser.add_argument("--tag", default="v1", help="names the run (same tag: the finished run is read back)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from pipelines.settings import open_lake
    from training.config import load_recipe
    from training.trainer import train

    recipe = load_recipe(args.recipe)
    every = args.eval_every or max(1, math.ceil(args.steps / 10))
    config = load_recipe(args.recipe, max_steps=args.steps, run_name=f"bench-validation-{args.tag}",
                         save_steps=0, domains=args.domains,
                         validation={"eval_every": every, "max_share": args.max_share})
    load_before = os.getloadavg()
    started = time.perf_counter()
    result = train(config, open_lake(write=True), allow_generate=True, progress=False,
                   log=lambda m: print(m, file=sys.stderr, flush=True))
    wall = time.perf_counter() - started
    overall = [h for h in result.history if h["domain"] == "_all"]
    steps = [h["step_s"] for h in overall if h.get("step_s")]
    spent, stepped = sum(h.get("validation_s") or 0.0 for h in overall), sum(steps)
    # validations: the steps with a validation score (step 0 included; its seconds sit on step 1's row)
    rounds = len({h["step"] for h in result.history if h["domain"] != "_all" and h.get("val_score") is not None})
    per_validation = spent / rounds if rounds else float("nan")
    recipe_steps = args.recipe_steps or recipe.max_steps
    recipe_every = max(1, math.ceil(recipe_steps / 10))
    recipe_validations = 1 + recipe_steps // recipe_every + (0 if recipe_steps % recipe_every == 0 else 1)
    out = {
        "command": "python -m bench.bench_validation " + " ".join(argv if argv is not None else sys.argv[1:]),
        "cpu": cpu_model(), "threads": os.environ.get("OMP_NUM_THREADS"), "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(), "recipe": args.recipe, "domains": list(config.domains),
        "validated": sorted({h["domain"] for h in result.history if h["domain"] != "_all"
                             and h.get("val_score") is not None}),
        "max_share": args.max_share, "items_per_domain": config.validation.items, "new_tokens": config.validation.max_new_tokens or
        config.max_completion_length, "steps": result.steps_done, "eval_every": every,
        "validations": rounds, "validation_seconds": round(spent, 1),
        "step_seconds": round(stepped, 1), "median_step_s": round(statistics.median(steps), 2) if steps else None,
        "seconds_per_validation": round(per_validation, 2),
        "share_of_steps_and_validation": round(spent / (spent + stepped), 4) if spent + stepped else None,
        "share_of_wall": round(spent / wall, 4),
        "projected": {"steps": recipe_steps, "eval_every": recipe_every, "validations": recipe_validations,
                      "share": round(recipe_validations * per_validation
                                     / (recipe_validations * per_validation + recipe_steps * stepped / len(steps)), 4)
                      if steps else None},
        "mlflow_run_id": result.mlflow_run_id,
    }
    text = json.dumps(out, indent=1)
    print(text if args.json else "\n".join(f"{k}: {v}" for k, v in out.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
