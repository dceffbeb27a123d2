"""Sandbox cost: overhead per execution against a plain subprocess, and worker-pool throughput on
HumanEval's canonical solutions, each against its baseline measured in the same run.

1. Overhead. A tiny program (``print('hello')``) run N times per arm, the arms interleaved round by
   round so load drift on this shared machine hits both alike:
     plain     subprocess.run([python3, -E, -s, -B, main.py]) in a temp folder, minimal env
     sandbox   training.sandbox.run_program (bubblewrap as an unprivileged uid, rlimits, capped I/O)
   Same interpreter, same flags. Reported: median wall ms per arm, median of the per-round
   differences (the added cost), and CPU ms per run (children's rusage: bwrap + program).
2. Throughput. The 164 HumanEval canonical solutions with their tests, as the `code` domain scores
   them (harness + nonce), run by: plain subprocesses (1 and W at a time, no isolation) and
   SandboxPool with 1 and W workers. Reported: executions/s, and how many passed (must be 164).

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_sandbox [--runs 100] [--workers 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from domains.builtin import code
from training.sandbox import Limits, SandboxPool, default_sandbox, run_program
from training.sandbox.runner import SANDBOX_ENV

TINY = "print('hello')\n"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(fn) -> tuple[float, float]:
    cpu0, t0 = _children_cpu(), time.perf_counter()
    fn()
    return time.perf_counter() - t0, _children_cpu() - cpu0


def overhead(runs: int, interpreter: str) -> dict:
    folder = Path(tempfile.mkdtemp(prefix="bench-sandbox-"))
    (folder / "main.py").write_text(TINY)
    limits = Limits(cpu_s=10, wall_s=20)

    def plain():
        done = subprocess.run([interpreter, "-E", "-s", "-B", "main.py"], cwd=folder, capture_output=True, env=SANDBOX_ENV)
        assert done.returncode == 0 and done.stdout == b"hello\n", done

    def sandboxed():
        result = run_program(TINY, limits=limits)
        assert result.status == "ok" and result.stdout == "hello\n", result

    for _ in range(3):  # warm caches and the sandbox's one-time probe
        plain(), sandboxed()
    arms = {"plain": [], "sandbox": []}
    cpu = {"plain": [], "sandbox": []}
    for i in range(runs):
        order = [("plain", plain), ("sandbox", sandboxed)]
        for name, fn in (order if i % 2 == 0 else order[::-1]):
            wall, used = _timed(fn)
            arms[name].append(wall)
            cpu[name].append(used)
    added = [s - p for s, p in zip(arms["sandbox"], arms["plain"])]
    ms = lambda xs: round(statistics.median(xs) * 1000, 2)  # noqa: E731
    p90 = lambda xs: round(sorted(xs)[int(0.9 * (len(xs) - 1))] * 1000, 2)  # noqa: E731
    return {
        "runs_per_arm": runs,
        "plain_ms_median": ms(arms["plain"]), "plain_ms_p90": p90(arms["plain"]),
        "sandbox_ms_median": ms(arms["sandbox"]), "sandbox_ms_p90": p90(arms["sandbox"]),
        "added_ms_median": ms(added), "added_ms_p90": p90(added),
        "ratio_median": round(statistics.median(arms["sandbox"]) / statistics.median(arms["plain"]), 2),
        "plain_cpu_ms_mean": round(statistics.mean(cpu["plain"]) * 1000, 2),
        "sandbox_cpu_ms_mean": round(statistics.mean(cpu["sandbox"]) * 1000, 2),
    }


def throughput(workers: int, interpreter: str) -> dict:
    samples = [code.to_sample(p) for p in code.problems()]
    pairs = [code._request(s["answer"], s) for s in samples]
    out: dict = {"programs": len(pairs)}

    # Plain: the same harness, solution file and nonce, in a temp folder, no isolation.
    def plain_one(pair) -> float:
        request, nonce = pair
        with tempfile.TemporaryDirectory(prefix="bench-he-") as folder:
            (Path(folder) / "main.py").write_text(request.source)
            for name, data in request.files.items():
                (Path(folder) / name).write_text(data)
            done = subprocess.run([interpreter, "-E", "-s", "-B", "main.py"], cwd=folder, input=request.stdin.encode(),
                                  capture_output=True, env=SANDBOX_ENV, timeout=30)
        return 1.0 if done.returncode == 0 and done.stdout.decode().rstrip("\n").rsplit("\n", 1)[-1] == nonce else 0.0

    for parallel in sorted({1, workers}):
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=parallel) as executor:
            passed = sum(executor.map(plain_one, pairs))
        seconds = time.perf_counter() - start
        out[f"plain_x{parallel}"] = {"seconds": round(seconds, 2), "exec_per_s": round(len(pairs) / seconds, 1),
                                     "passed": int(passed)}
        start = time.perf_counter()
        with SandboxPool(workers=parallel) as pool:
            results = pool.run_many([request for request, _ in pairs])
        seconds = time.perf_counter() - start
        passed = sum(code._passed(r, nonce) for r, (_, nonce) in zip(results, pairs))
        out[f"sandbox_pool_x{parallel}"] = {"seconds": round(seconds, 2), "exec_per_s": round(len(pairs) / seconds, 1),
                                            "passed": int(passed)}
        out[f"ratio_x{parallel}"] = round(out[f"sandbox_pool_x{parallel}"]["exec_per_s"] / out[f"plain_x{parallel}"]["exec_per_s"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per arm for the overhead figure")
    parser.add_argument("--workers", type=int, default=2, help="pool size for the throughput figure")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    sandbox = default_sandbox()
    isolation = sandbox.isolation
    interpreter = sandbox._interpreter
    report = {"machine": f"{platform.node()} {os.cpu_count()} CPUs, kernel {platform.release()}",
              "isolation": isolation, "interpreter": interpreter, "load_before": os.getloadavg()[0]}
    report["overhead"] = overhead(args.runs, interpreter)
    report["throughput"] = throughput(args.workers, interpreter)
    report["load_after"] = os.getloadavg()[0]
    o, t = report["overhead"], report["throughput"]
    print(f"isolation: {isolation} ({interpreter}); load {report['load_before']:.1f} -> {report['load_after']:.1f}")
    print(f"overhead ({o['runs_per_arm']} runs/arm, interleaved): plain {o['plain_ms_median']} ms, sandbox "
          f"{o['sandbox_ms_median']} ms median; added {o['added_ms_median']} ms median (p90 {o['added_ms_p90']} ms); "
          f"CPU per run {o['plain_cpu_ms_mean']} -> {o['sandbox_cpu_ms_mean']} ms")
    for key, value in t.items():
        if isinstance(value, dict):
            print(f"  {key:<16} {value['exec_per_s']:>6} exec/s  {value['seconds']:>6} s  passed {value['passed']}/{t['programs']}")
    print("  sandbox/plain throughput: " + ", ".join(f"{k.split('_')[1]} {v}" for k, v in t.items() if k.startswith("ratio")))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
