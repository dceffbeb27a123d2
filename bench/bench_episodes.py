"""Terminal-agent throughput: episodes per second with a pool of sandboxes in flight against the
same episodes run one at a time, measured in the same run (issue 14).

Both arms run the same tasks (the built-in terminal suite's eval tasks, or ``--suite DIR``) with
the same policy, engine and greedy decoding, through :func:`generation.agent_loop.run_episodes`:

    pooled      all episodes at once: every turn, one ``generate`` call for the active episodes,
                then their commands run concurrently in a pool of ``--workers`` sandboxes
    sequential  one episode after another (one prompt per ``generate``, one sandbox at a time)

The arms alternate ``--rounds`` times (pooled, sequential, pooled, ...) so load drift on a shared
machine hits both alike. Reported per arm: episodes/s and commands/s (median over rounds), the
wall seconds, and the ratio pooled/sequential; plus how many episodes took the same actions in
both arms (greedy: all of them, unless a near-tie flips with the batch's shape) and their pass rate.
``--max-turns`` caps each task's turns (the work per episode is then bounded and equal in both).

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_episodes [--policy smollm2] [--backend auto]
     [--tasks 16] [--max-turns 4] [--max-new-tokens 64] [--workers 4] [--rounds 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from pathlib import Path

BUILTIN_SUITE = Path(__file__).resolve().parents[1] / "domains" / "builtin" / "terminal_tasks"


def eval_tasks(suite: Path, limit: int, max_turns: int):
    from domains.task_folder import load_task_suite, split_of

    tasks = load_task_suite(suite)
    splits = split_of([t.name for t in tasks])
    chosen = [t for t in tasks if splits[t.name] == "eval"][:limit]
    if not chosen:
        raise SystemExit(f"{suite} has no eval tasks")
    return [dataclasses.replace(t, spec=t.spec.model_copy(update={"max_turns": min(t.spec.max_turns, max_turns)}))
            for t in chosen]


def _commands(results) -> int:
    return sum(1 for r in results for t in r.turns if t.action == "command")


def run_arm(arm: str, engine, tasks, params, workers: int):
    from generation.agent_loop import run_episodes

    started = time.perf_counter()
    if arm == "pooled":
        results = run_episodes(engine, tasks, params, max_workers=workers)
    else:
        results = [run_episodes(engine, [task], params, max_workers=1)[0] for task in tasks]
    return results, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="smollm2", help="policy reference (built-in name, checkpoint id, folder)")
    parser.add_argument("--backend", choices=("torch", "vllm", "auto"), default="auto")
    parser.add_argument("--suite", type=Path, default=BUILTIN_SUITE, help="a task suite folder (default: built-in)")
    parser.add_argument("--tasks", type=int, default=16, help="eval tasks to run (default 16: all built-in ones)")
    parser.add_argument("--max-turns", type=int, default=4, help="turn cap per episode (default 4)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per assistant turn (default 64)")
    parser.add_argument("--workers", type=int, default=4, help="sandboxes in flight in the pooled arm (default 4)")
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two arms (default 2)")
    parser.add_argument("--json", help="write the result here too")
    args = parser.parse_args(argv)

    from generation.contract import SamplingParams
    from generation.factory import make_engine

    tasks = eval_tasks(args.suite, args.tasks, args.max_turns)
    home = os.environ.get("ASSAY_HOME", ".assay")
    engine = make_engine(args.policy, args.backend, home=home)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    print(f"{len(tasks)} tasks, {args.max_turns} turns at most, engine {getattr(engine, 'identity', engine)}",
          file=sys.stderr)
    run_arm("pooled", engine, tasks[:2], params, args.workers)  # warm-up: engine, sandbox, page cache
    load_start = os.getloadavg()
    seconds: dict[str, list[float]] = {"pooled": [], "sequential": []}
    last: dict = {}
    for round_ in range(args.rounds):
        for arm in ("pooled", "sequential"):
            results, wall = run_arm(arm, engine, tasks, params, args.workers)
            seconds[arm].append(wall)
            last[arm] = results
            print(f"round {round_ + 1} {arm}: {len(results)} episodes, {_commands(results)} commands, {wall:.1f} s",
                  file=sys.stderr)
    same = sum(1 for a, b in zip(last["pooled"], last["sequential"])
               if [(t.action, t.command) for t in a.turns] == [(t.action, t.command) for t in b.turns])
    out = {"command": "python -m bench.bench_episodes " + " ".join(argv if argv is not None else sys.argv[1:]),
           "engine": getattr(engine, "identity", str(engine)), "tasks": len(tasks), "max_turns": args.max_turns,
           "workers": args.workers, "rounds": args.rounds, "loadavg_start": load_start, "loadavg_end": os.getloadavg(),
           "same_actions": same, "pass_rate": sum(r.passed for r in last["pooled"]) / len(tasks)}
    for arm in ("pooled", "sequential"):
        wall = statistics.median(seconds[arm])
        out[arm] = {"seconds": [round(s, 2) for s in seconds[arm]], "episodes_per_s": round(len(tasks) / wall, 4),
                    "commands_per_s": round(_commands(last[arm]) / wall, 3),
                    "mean_turns": round(sum(len(r.turns) for r in last[arm]) / len(tasks), 2)}
    out["ratio_pooled_over_sequential"] = round(out["pooled"]["episodes_per_s"] / out["sequential"]["episodes_per_s"], 2)
    close = getattr(engine, "close", None)
    if close:
        close()
    text = json.dumps(out, indent=1)
    if args.json:
        Path(args.json).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
