"""Joint multi-domain GRPO of SmolLM2-135M-Instruct: difficulty measured on the policy vs the
heuristic difficulty gate, the same compute budget, one command.

    OMP_NUM_THREADS=1 ASSAY_HOME=<home> python -m bench.bench_joint --minutes 30

Arms (one process each, for the same wall-clock budget: at the same time, one core each, or with
``--sequential`` one after the other with the threads the bench was given, so each gets the same
compute; steps differ because skipped zero-variance groups cost nothing):

- ``policy``: every candidate train row's pass rate under the base policy, K samples drawn with the
  rollouts' own sampling (:func:`assets.learnability_rates.measure_for_training`, cached in lake table
  ``pass_rates``) and updated online by every rollout group; rows drawn ~ p(1-p), each at most
  once per epoch, those always or never passed only at the exploration weight; domains by their
  summed p(1-p) (``mixture: {strategy: learnability, items: learnability}``,
  :mod:`training.learnability`).
- ``heuristic``: the rows the heuristic difficulty gate keeps in band
  (:func:`quality.difficulty.estimate_difficulty` without a policy estimator, the gate's
  function), each row once per epoch, domains by the recipe's size-temperature mixture.

Both arms start from the same candidate rows (each domain's train split, ``--train-rows`` per
domain, seed 0) and the smollm2 recipe's optimisation settings. Afterwards every core domain is
swept greedily on held-out eval items (``--eval-items`` each, the sweep defaults otherwise: 256
new tokens, bf16) for the base policy and both checkpoints, and each checkpoint is compared with
the base: improvement per training domain by a one-sided paired test (exact for binary K=1
scores), Benjamini-Hochberg across the training domains ("improved": q <= 0.05 and delta > 0);
regressions by the platform's own report (:func:`evaluation.promotion.compare_checkpoints`) on
every core domain. Prints one JSON document (``--json``) or a table; ``--out`` writes it to a file.

In-loop validation (issue 42, :mod:`training.validation`): each arm validates every ``--eval-every``
steps (and at step 0 and the step its time budget stops it) on the first ``--val-items`` held-out
eval items of every training domain (and the protected ones, and ``--watch``), greedy,
``--val-tokens`` new tokens, with ``validation.forgetting: warn`` (watch, never intervene). The result
holds each domain's validation curve, what the validations cost (``validation_s`` against the run's
seconds), and the in-loop verdict at the last validation (the same one-sided paired test of
improvement and BH as the sweep's, on the validation items) beside the final sweep's: does the
in-loop validation predict the final verdict? ``--arms heuristic`` runs one arm (the 60-minute proof).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

TRAIN_DOMAINS = ("general_qa", "safety_refusal", "scene3d", "logic", "math_arith_easy")
ARMS = ("policy", "heuristic")
Q_LEVEL = 0.05


def _mixture(arm: str) -> dict:
    if arm == "policy":
        return {"strategy": "learnability", "temperature": 2.0, "items": "learnability", "pass_rate_samples": 8}
    return {"strategy": "temperature", "temperature": 2.0}


def arm_config(arm: str, args: argparse.Namespace):
    from training.config import load_recipe

    validation = {"eval_every": args.eval_every, "items": args.val_items, "max_new_tokens": args.val_tokens or None,
                  "forgetting": "warn", **({"watch": list(args.watch)} if args.watch else {})}
    return load_recipe("smollm2", domains=list(args.domains), max_steps=args.max_steps, seed=0,
                       prompts_per_step=args.prompts_per_step, max_completion_length=args.completion_tokens,
                       train_samples_per_domain=args.train_rows, mixture=_mixture(arm),
                       run_name=f"joint-{arm}-{args.tag}", save_steps=0, rollout={"backend": args.backend},
                       validation=validation)


def heuristic_registry(domains):
    """The registry with each training domain's train split cut to the heuristic gate's band."""
    import polars as pl

    from domains import get_registry
    from domains.registry import Registry
    from quality.difficulty import estimate_difficulty, register_pass_rate_estimator

    register_pass_rate_estimator(None)  # the heuristic, as the gate uses it without a policy
    base = get_registry()
    registry = Registry()
    for name in domains:
        domain = base.get(name)
        domain = dataclasses.replace(domain, samples=_in_band_samples(domain, estimate_difficulty, pl))
        registry.add_module(type("M", (), {"DOMAIN": domain}), base.sources[name])
    return registry


def _in_band_samples(domain, estimate, pl):
    original = domain.samples

    def samples(split, n, seed):
        rows = list(original(split, n, seed))
        if split != "train" or not rows:
            yield from rows
            return
        frame = pl.DataFrame({"id": [r["id"] for r in rows], "prompt": [r["prompt"] for r in rows],
                              "answer": [r["answer"] for r in rows],
                              "metadata": [json.dumps(r.get("metadata") or {}) for r in rows]})
        keep = set(estimate(domain, frame).filter(pl.col("in_band"))["id"].to_list())
        yield from (r for r in rows if r["id"] in keep)

    return samples


# -- phases ----------------------------------------------------------------------------------------

def measure(args: argparse.Namespace, log) -> dict:
    from assets.learnability_rates import measure_for_training
    from pipelines.settings import open_lake

    lake = open_lake(write=True)
    started = time.perf_counter()
    results = measure_for_training(lake, lake.mlflow_uri, arm_config("policy", args), allow_generate=True,
                                   backend=args.backend, log=log)
    return {"seconds": round(time.perf_counter() - started, 1),
            "domains": {name: r.summary() for name, r in results.items()}}


def train_arm(args: argparse.Namespace) -> int:
    from pipelines.settings import open_lake
    from training.trainer import train

    registry = heuristic_registry(args.domains) if args.arm == "heuristic" else None
    lake = open_lake(write=True)
    result = train(arm_config(args.arm, args), lake, allow_generate=True, registry=registry, progress=False,
                   log=lambda m: print(f"[{args.arm}] {m}", file=sys.stderr, flush=True),
                   time_budget_s=args.minutes * 60)
    history = [h for h in result.history if h["domain"] != "_all" and h.get("reward_mean") is not None]  # drawn
    overall = [h for h in result.history if h["domain"] == "_all"]
    out = {"arm": args.arm, "checkpoint": result.checkpoint, "steps": result.steps_done,
           "seconds": round(result.seconds, 1), "mlflow_run_id": result.mlflow_run_id,
           "rows": {d: info["rows"] for d, info in result.data.items()},
           "zero_var_frac": _mean([h["zero_var_frac"] for h in overall]),
           "per_domain": _per_domain(history)}
    state = json.loads((lake.home / "runs" / result.run_name / "state.json").read_text())
    out.update(_validation_record(result, state, args.domains))
    if state.get("sampler") and state["sampler"].get("estimates"):  # where the online pass-rate estimates ended (learnability arm)
        from training.learnability import PassRateTracker

        tracker = PassRateTracker({d: [0.0] * len(v) for d, v in state["sampler"]["estimates"]["passes"].items()}, 1)
        tracker.load_state_dict(state["sampler"]["estimates"])
        out["final_estimates"] = tracker.summary()
    Path(args.result).write_text(json.dumps(out, indent=1))
    return 0


def _validation_record(result, state: dict, domains) -> dict:
    """The in-loop validation of a run: each domain's curve, what the validations cost, and the verdict
    of its last validation against step 0 (improvement per training domain, as the sweep's)."""
    validation = state.get("validation") or {}
    curves: dict[str, list] = {}
    for h in result.history:
        if h["domain"] != "_all" and h.get("val_score") is not None:
            curves.setdefault(h["domain"], []).append([h["step"], round(h["val_score"], 4),
                                                       None if h.get("val_q") is None else float(f"{h['val_q']:.3g}")])
    overall = [h for h in result.history if h["domain"] == "_all"]
    spent = sum(h.get("validation_s") or 0.0 for h in overall)
    steps = sum(h.get("step_s") or 0.0 for h in overall)
    latest = validation.get("latest") or {}
    return {"validation": {
        "curves": curves, "seconds": round(spent, 1), "validations": sum(1 for h in overall if h.get("validation_s")),
        "share_of_run": round(spent / result.seconds, 4) if result.seconds else None,
        "share_of_steps_and_validation": round(spent / (spent + steps), 4) if spent + steps else None,
        "last_step": latest.get("step"), "flagged_ever": validation.get("flagged_ever", []),
        "in_loop": improvement_tests(validation.get("start", {}), latest.get("scores", {}), domains)
        if latest else []}}


def _mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _per_domain(history: list[dict]) -> dict:
    out = {}
    for domain in sorted({h["domain"] for h in history}):
        rows = [h for h in history if h["domain"] == domain]
        tenth = max(1, len(rows) // 10)
        out[domain] = {"prompts": len(rows), "zero_var_frac": _mean([h["zero_var_frac"] for h in rows]),
                       "reward_first": _mean([h["reward_mean"] for h in rows[:tenth]]),
                       "reward_last": _mean([h["reward_mean"] for h in rows[-tenth:]]),
                       "kl_last": _mean([h["kl"] for h in rows[-tenth:]])}
    return out


def sweep(checkpoint: str, domains, args: argparse.Namespace, log, limit: int) -> None:
    from domains import get_registry
    from evaluation.sweep import engine_factory_for, run_sweep
    from evaluation.sweep_config import SweepConfig
    from pipelines.settings import open_lake
    from generation.checkpoints import ensure_checkpoint
    from generation.prompts import prompt_format_of_folder

    lake = open_lake(write=True)
    record = ensure_checkpoint(checkpoint, lake, lake.mlflow_uri)
    registry = get_registry()
    factory = engine_factory_for(record.path, lake, backend=args.backend, dtype="bfloat16", log=log)
    run_sweep(lake, record.checkpoint, [registry.get(d) for d in domains], factory,
              SweepConfig(limit=limit, batch_items=32, progress=False),
              log=log, prompt_format=prompt_format_of_folder(record.path))


def _sweep_all(checkpoint: str, core, args: argparse.Namespace, log) -> None:
    sweep(checkpoint, list(args.domains), args, log, args.eval_items)
    sweep(checkpoint, [d for d in core if d not in args.domains], args, log, args.other_items)


def improvements(candidate: str, baseline: str, domains) -> list[dict]:
    """Per training domain: one-sided paired test of 'candidate better', BH across the domains."""
    import polars as pl

    from evaluation.results import comparable_results
    from pipelines.settings import open_lake

    cand, base = comparable_results(open_lake(), candidate, baseline)

    def per_item(frame) -> dict[str, dict[str, float]]:
        means = frame.group_by("domain", "item_id").agg(pl.col("score").mean())
        out: dict[str, dict[str, float]] = {}
        for domain, item, score in means.iter_rows():
            out.setdefault(domain, {})[item] = score
        return out

    return improvement_tests(per_item(base), per_item(cand), domains)


def improvement_tests(base: dict, trained: dict, domains) -> list[dict]:
    """Per domain (``{domain: {item_id: mean score}}`` on each side, the items both scored): one-sided
    paired test of 'trained better' (exact for binary scores), BH across the domains."""
    import numpy as np

    from storage.paired_statistics import benjamini_hochberg, paired_test

    rows = []
    for domain in domains:
        items = sorted(set(base.get(domain, {})) & set(trained.get(domain, {})))
        if not items:
            continue
        bm = np.array([base[domain][i] for i in items], dtype=float)
        cm = np.array([trained[domain][i] for i in items], dtype=float)
        binary = bool(np.isin(bm, (0.0, 1.0)).all() and np.isin(cm, (0.0, 1.0)).all())
        better = paired_test(cm, bm, margin=0.0, binary_single_sample=binary)  # H1: base < trained
        rows.append({"domain": domain, "n": len(items), "base": float(bm.mean()), "trained": float(cm.mean()),
                     "delta": float(cm.mean() - bm.mean()), "ci_low": -better.ci_high, "ci_high": -better.ci_low,
                     "p_improved": better.p, "mde": better.mde, "gained": int(((cm > bm)).sum()),
                     "lost": int(((cm < bm)).sum())})
    qs = benjamini_hochberg([r["p_improved"] for r in rows]) if rows else []
    for row, q in zip(rows, qs):
        row["q"] = float(q)
        row["improved"] = bool(q <= Q_LEVEL and row["delta"] > 0)
    return rows


def prediction(info: dict) -> dict:
    """The in-loop validation's last verdict beside the final sweep's, per training domain: improved
    (BH q <= Q_LEVEL and a gain) by each, whether they agree, and the deltas (in-loop on the validation
    items at the last validation, the sweep on its held-out items)."""
    in_loop = {r["domain"]: r for r in (info.get("validation") or {}).get("in_loop", [])}
    rows = []
    for final in info["improvement"]:
        loop = in_loop.get(final["domain"])
        rows.append({"domain": final["domain"], "final_improved": final["improved"],
                     "final_delta": round(final["delta"], 4), "final_q": float(f"{final['q']:.3g}"),
                     "in_loop_improved": None if loop is None else loop["improved"],
                     "in_loop_delta": None if loop is None else round(loop["delta"], 4),
                     "in_loop_q": None if loop is None else float(f"{loop['q']:.3g}"),
                     "agree": None if loop is None else loop["improved"] == final["improved"]})
    judged = [r for r in rows if r["agree"] is not None]
    return {"domains": rows, "agree": sum(r["agree"] for r in judged), "of": len(judged),
            "delta_correlation": _correlation([r["in_loop_delta"] for r in judged], [r["final_delta"] for r in judged])}


def _correlation(a: list[float], b: list[float]) -> float | None:
    if len(a) < 3:
        return None
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    sa = sum((x - ma) ** 2 for x in a) ** 0.5
    sb = sum((y - mb) ** 2 for y in b) ** 0.5
    return None if sa == 0 or sb == 0 else round(sum((x - ma) * (y - mb) for x, y in zip(a, b)) / (sa * sb), 3)


def regressions(candidate: str, baseline: str) -> dict:
    from evaluation.promotion import compare_checkpoints
    from pipelines.settings import open_lake

    report = compare_checkpoints(open_lake(write=True), candidate, baseline, protected=())
    return {"regressed": [d.domain for d in report.domains if d.verdict == "regression"],
            "warned": [d.domain for d in report.domains if d.verdict == "warn"],
            "underpowered": [d.domain for d in report.domains if d.verdict == "underpowered"],
            "domains": [{"domain": d.domain, "delta": d.delta, "ci_low": d.ci_low, "ci_high": d.ci_high,
                         "q": d.q, "mde": d.mde, "verdict": d.verdict} for d in report.domains]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_joint", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--domains", type=lambda s: s.split(","), default=list(TRAIN_DOMAINS),
                        help="comma-separated training domains (default: %(default)s)")
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock training budget per arm")
    parser.add_argument("--max-steps", type=int, default=1000, help="step cap per arm (the budget usually stops first)")
    parser.add_argument("--prompts-per-step", type=int, default=2)
    parser.add_argument("--completion-tokens", type=int, default=32, help="rollout completion length")
    parser.add_argument("--train-rows", type=int, default=128, help="candidate train rows per domain")
    parser.add_argument("--eval-items", type=int, default=200, help="held-out eval items per training domain")
    parser.add_argument("--other-items", type=int, default=100,
                        help="held-out eval items per other core domain (the regression check)")
    parser.add_argument("--backend", choices=("torch", "vllm", "auto"), default="auto")
    parser.add_argument("--eval-every", type=int, default=10,
                        help="in-loop validation every N steps (and at step 0 and the last step); 0: none")
    parser.add_argument("--val-items", type=int, default=50, help="held-out items per validated domain in the loop")
    parser.add_argument("--val-tokens", type=int, default=0,
                        help="greedy new tokens of an in-loop validation answer (0: the rollouts' --completion-tokens)")
    parser.add_argument("--watch", type=lambda s: [d for d in s.split(",") if d], default=[],
                        help="domains validated in the loop besides the trained ones (default: the protected ones)")
    parser.add_argument("--arms", type=lambda s: s.split(","), default=list(ARMS))
    parser.add_argument("--tag", default="b1", help="names the runs (same tag: resume; a finished arm is reused)")
    parser.add_argument("--sequential", action="store_true",
                        help="train the arms one after the other (each arm's trainer and vLLM engine take ~12 GB: "
                             "two at once need more than 24 GB)")
    parser.add_argument("--out", help="write the JSON result here too")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--arm", help=argparse.SUPPRESS)     # internal: train one arm in this process
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--sweep-checkpoint", help=argparse.SUPPRESS)  # internal: sweep one checkpoint
    args = parser.parse_args(argv)
    if args.arm:
        return train_arm(args)
    if args.sweep_checkpoint:
        from pipelines.demo import select_domains

        _sweep_all(args.sweep_checkpoint, select_domains("core"), args,
                   lambda m: print(f"[sweep {args.sweep_checkpoint}] {m}", file=sys.stderr, flush=True))
        return 0

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    started = time.time()
    out: dict = {"command": "python -m bench.bench_joint " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "domains": args.domains, "minutes": args.minutes, "loadavg_start": os.getloadavg()}
    if "policy" in args.arms:
        log("== pass rates of the base policy on the candidate train rows")
        out["pass_rates"] = measure(args, log)
    home = Path(os.environ.get("ASSAY_HOME", ".assay"))
    results = {arm: home / f"bench_joint_{arm}_{args.tag}.json" for arm in args.arms}
    todo = [arm for arm in args.arms if not results[arm].exists()]  # a finished arm of this tag is kept
    # at the same time: one thread each; one after the other: each arm gets the threads the bench was given
    threads = os.environ.get("OMP_NUM_THREADS", "1") if args.sequential else "1"
    log(f"== training {', '.join(todo) or 'nothing (all arms done)'} for {args.minutes} min each, "
        + (f"{threads} thread(s) each, one after the other" if args.sequential else "one core each, at the same time"))
    procs = {}
    for arm in todo:
        cmd = [sys.executable, "-m", "bench.bench_joint", "--arm", arm, "--result", str(results[arm])]
        for name in ("minutes", "max_steps", "prompts_per_step", "completion_tokens", "train_rows", "backend", "tag",
                     "eval_every", "val_items", "val_tokens"):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        if args.watch:
            cmd += ["--watch", ",".join(args.watch)]
        cmd += ["--domains", ",".join(args.domains)]
        procs[arm] = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": threads})
        if args.sequential and procs[arm].wait() != 0:
            raise SystemExit(f"arm {arm} failed (exit {procs[arm].returncode})")
    for arm, proc in procs.items():
        if proc.wait() != 0:
            raise SystemExit(f"arm {arm} failed (exit {proc.returncode})")
    out["arms"] = {arm: json.loads(results[arm].read_text()) for arm in args.arms}
    out["loadavg_after_training"] = os.getloadavg()
    # training first (its budget is wall-clock), then the base and the checkpoints are swept together
    log("== sweeps of the base policy (cached when done before) and the checkpoints, at the same time, one core each")
    sweeps = []
    for checkpoint in ["base-smollm2", *(info["checkpoint"] for info in out["arms"].values())]:
        cmd = [sys.executable, "-m", "bench.bench_joint", "--sweep-checkpoint", checkpoint,
               "--domains", ",".join(args.domains), "--eval-items", str(args.eval_items),
               "--other-items", str(args.other_items), "--backend", args.backend]
        sweeps.append(subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    if any(proc.wait() != 0 for proc in sweeps):
        raise SystemExit("a checkpoint sweep failed")
    for arm, info in out["arms"].items():
        info["improvement"] = improvements(info["checkpoint"], "base-smollm2", args.domains)
        info["regression"] = regressions(info["checkpoint"], "base-smollm2")
        info["improved_domains"] = [r["domain"] for r in info["improvement"] if r["improved"]]
        info["prediction"] = prediction(info)
    out["seconds"] = round(time.time() - started, 1)
    text = json.dumps(out, indent=1, default=str)
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        print(text)
    else:
        for arm, info in out["arms"].items():
            print(f"{arm}: {info['steps']} steps, zero-variance groups {info['zero_var_frac']:.0%}, improved "
                  f"{info['improved_domains']}, regressed {info['regression']['regressed']}")
            for r in info["improvement"]:
                print(f"  {r['domain']:16s} {r['base']:.3f} -> {r['trained']:.3f} ({r['delta']:+.3f}, 95% CI "
                      f"[{r['ci_low']:+.3f}, {r['ci_high']:+.3f}], q {r['q']:.3g}, n {r['n']})")
            validation = info.get("validation") or {}
            if validation:
                print(f"  in-loop validation: {validation['validations']} validations, {validation['seconds']} s "
                      f"({validation['share_of_run']:.1%} of the run); agrees with the final sweep on "
                      f"{info['prediction']['agree']} of {info['prediction']['of']} domains "
                      f"(delta correlation {info['prediction']['delta_correlation']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
