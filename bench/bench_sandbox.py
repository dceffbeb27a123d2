"""Sandbox cost: overhead per execution against a plain subprocess, and worker-pool throughput on
HumanEval's canonical solutions, each against its baseline measured in the same run.

1. Overhead. A tiny program (``print('hello')``) run N times per arm, the arms interleaved round by
   round so load drift on this shared machine hits both alike:
     plain     subprocess.run([python3, -E, -s, -B, main.py]) in a temp folder, minimal env
     sandbox   sandbox.run_program (bubblewrap as an unprivileged uid, rlimits, capped I/O)
   Same interpreter, same flags. Reported: median wall ms per arm, median of the per-round
   differences (the added cost), and CPU ms per run (children's rusage: bwrap + program).
2. Throughput. The 164 HumanEval canonical solutions, as the `code` domain scores them (the
   function-call harness in the sandbox, the verdict on the host), run by: plain subprocesses (1
   and W at a time, no isolation) and SandboxPool with 1 and W workers. Reported: executions/s,
   and how many passed (must be 164).
3. Code reward cost. N canonical solutions scored one at a time by the code reward before issue 10
   (everything in one sandboxed process, a nonce proving the tests finished: rebuilt here as the
   baseline) and by today's ``code.score`` (calls in the sandbox, verdict on the host),
   interleaved. Reported: median wall ms and mean CPU ms per execution, and the ratios.

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_sandbox [--runs 100] [--workers 2] [--code-reward 40]
     [--only overhead|throughput|code-reward] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import secrets
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from domains.builtin import code
from sandbox import ExecutionResult, Limits, SandboxPool, default_sandbox, run_program
from sandbox.runner import SANDBOX_ENV

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


def _plain_execution(request, interpreter: str) -> ExecutionResult:
    """``request`` run as a plain subprocess in a temp folder (no isolation), as an ExecutionResult."""
    with tempfile.TemporaryDirectory(prefix="bench-he-") as folder:
        (Path(folder) / "main.py").write_text(request.source)
        for name, data in request.files.items():
            (Path(folder) / name).write_text(data)
        started = time.perf_counter()
        done = subprocess.run([interpreter, "-E", "-s", "-B", "main.py", *request.argv], cwd=folder,
                              input=(request.stdin or "").encode(), capture_output=True, env=SANDBOX_ENV, timeout=30)
    return ExecutionResult(status="ok" if done.returncode == 0 else "error", returncode=done.returncode,
                           stdout=done.stdout.decode(errors="replace"), stderr=done.stderr.decode(errors="replace"),
                           duration_s=time.perf_counter() - started, isolation="none")


def throughput(workers: int, interpreter: str) -> dict:
    samples = [code.to_sample(p) for p in code.problems()]
    requests = [code._request(s["answer"], s) for s in samples]
    out: dict = {"programs": len(requests)}

    def plain_one(pair) -> float:
        sample, request = pair
        return code._judge(sample, _plain_execution(request, interpreter))[0]

    for parallel in sorted({1, workers}):
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=parallel) as executor:
            passed = sum(executor.map(plain_one, zip(samples, requests)))
        seconds = time.perf_counter() - start
        out[f"plain_x{parallel}"] = {"seconds": round(seconds, 2), "exec_per_s": round(len(requests) / seconds, 1),
                                     "passed": int(passed)}
        start = time.perf_counter()
        with SandboxPool(workers=parallel) as pool:
            results = pool.run_many(requests)
        passed = sum(code._judge(s, r)[0] for s, r in zip(samples, results))
        seconds = time.perf_counter() - start
        out[f"sandbox_pool_x{parallel}"] = {"seconds": round(seconds, 2), "exec_per_s": round(len(requests) / seconds, 1),
                                            "passed": int(passed)}
        out[f"ratio_x{parallel}"] = round(out[f"sandbox_pool_x{parallel}"]["exec_per_s"] / out[f"plain_x{parallel}"]["exec_per_s"], 2)
    return out


# The code reward before issue 10: prompt + completion + tests + check(entry_point) in ONE sandboxed
# process, proving completion by printing a nonce read from stdin (beaten by reading the nonce from
# the harness's frame, or by returning an object whose __eq__ is always True). Kept here only as
# the baseline of the cost comparison.
NONCE_HARNESS = """\
import os, sys


def _finish():
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    os.close(0)
    with open("solution.py", "rb") as handle:
        source = handle.read()
    os.unlink("solution.py")
    exec(compile(source, "solution.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    return nonce


_done = _finish()
sys.stdout.flush()
sys.stdout.write("\\n" + _done + "\\n")
"""


def _nonce_score(sample: dict) -> float:
    meta = sample["metadata"]
    program = f"{meta['code_prompt']}{sample['answer']}\n\n{meta['test']}\n\ncheck({meta['entry_point']})\n"
    nonce = secrets.token_hex(16)
    result = default_sandbox().run_program(NONCE_HARNESS, stdin=nonce + "\n", files={"solution.py": program},
                                           limits=code.scoring_limits())
    return 1.0 if result.status == "ok" and result.stdout.rstrip("\n").rsplit("\n", 1)[-1] == nonce else 0.0


def code_reward_cost(executions: int) -> dict:
    """Wall and CPU ms per scored completion, old nonce harness vs host-side verdict, on the same
    canonical solutions (the even-numbered problems from HumanEval/0: half eval, half train, the
    randomised tests of /32, /38 and /50 included), interleaved item by item. CPU counts the sandbox
    processes and this process (the host verdict runs here). The new path's one-time recording of
    each problem's calls is done before timing and reported apart."""
    even = [p for p in code.problems() if code.task_number(p["task_id"]) % 2 == 0]
    samples = [code.to_sample(p) for p in even][:executions]
    start = time.perf_counter()
    from domains.builtin import _humaneval_checks

    for sample in samples:
        _humaneval_checks.recording(code._problem_for(sample))
    recording_ms = (time.perf_counter() - start) * 1000
    for sample in samples[:3]:  # warm caches
        _nonce_score(sample), code.score(sample["answer"], sample)
    arms = {"nonce": ([], [], []), "host_verdict": ([], [], [])}
    for i, sample in enumerate(samples):
        order = [("nonce", lambda s=sample: _nonce_score(s)), ("host_verdict", lambda s=sample: code.score(s["answer"], s))]
        for name, fn in (order if i % 2 == 0 else order[::-1]):
            own0 = time.process_time()
            cpu0, t0 = _children_cpu(), time.perf_counter()
            value = fn()
            arms[name][0].append(time.perf_counter() - t0)
            arms[name][1].append(_children_cpu() - cpu0 + time.process_time() - own0)
            arms[name][2].append(value)
    ms = lambda xs: round(statistics.median(xs) * 1000, 1)  # noqa: E731
    out = {"executions_per_arm": len(samples), "recording_ms_once": round(recording_ms, 1)}
    for name, (walls, cpus, scores) in arms.items():
        out[name] = {"wall_ms_median": ms(walls), "cpu_ms_mean": round(statistics.mean(cpus) * 1000, 1),
                     "passed": int(sum(scores))}
    out["ratio_wall"] = round(out["host_verdict"]["wall_ms_median"] / out["nonce"]["wall_ms_median"], 2)
    out["ratio_cpu"] = round(out["host_verdict"]["cpu_ms_mean"] / out["nonce"]["cpu_ms_mean"], 2)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per arm for the overhead figure")
    parser.add_argument("--workers", type=int, default=2, help="pool size for the throughput figure")
    parser.add_argument("--code-reward", type=int, default=40, metavar="N",
                        help="completions per arm for the code reward's cost, old nonce harness vs host verdict")
    parser.add_argument("--only", choices=("overhead", "throughput", "code-reward"), action="append",
                        help="run only these parts (repeatable; default: all)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args()
    sandbox = default_sandbox()
    isolation = sandbox.isolation
    interpreter = sandbox._interpreter
    report = {"machine": f"{platform.node()} {os.cpu_count()} CPUs, kernel {platform.release()}",
              "isolation": isolation, "interpreter": interpreter, "load_before": os.getloadavg()[0]}
    parts = set(args.only or ("overhead", "throughput", "code-reward"))
    if "overhead" in parts:
        report["overhead"] = overhead(args.runs, interpreter)
    if "throughput" in parts:
        report["throughput"] = throughput(args.workers, interpreter)
    if "code-reward" in parts:
        report["code_reward"] = code_reward_cost(args.code_reward)
    report["load_after"] = os.getloadavg()[0]
    print(f"isolation: {isolation} ({interpreter}); load {report['load_before']:.1f} -> {report['load_after']:.1f}")
    if "overhead" in report:
        _print_overhead(report["overhead"])
    if "throughput" in report:
        _print_throughput(report["throughput"])
    if "code_reward" in report:
        c = report["code_reward"]
        print(f"code reward per execution ({c['executions_per_arm']} canonical solutions/arm, interleaved): "
              f"nonce harness {c['nonce']['wall_ms_median']} ms wall, {c['nonce']['cpu_ms_mean']} ms CPU; "
              f"host verdict {c['host_verdict']['wall_ms_median']} ms wall, {c['host_verdict']['cpu_ms_mean']} ms CPU; "
              f"ratio {c['ratio_wall']}x wall, {c['ratio_cpu']}x CPU; passed {c['nonce']['passed']} / "
              f"{c['host_verdict']['passed']}; one-time recording {c['recording_ms_once']} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


def _print_overhead(o: dict) -> None:
    print(f"overhead ({o['runs_per_arm']} runs/arm, interleaved): plain {o['plain_ms_median']} ms, sandbox "
          f"{o['sandbox_ms_median']} ms median; added {o['added_ms_median']} ms median (p90 {o['added_ms_p90']} ms); "
          f"CPU per run {o['plain_cpu_ms_mean']} -> {o['sandbox_cpu_ms_mean']} ms")


def _print_throughput(t: dict) -> None:
    for key, value in t.items():
        if isinstance(value, dict):
            print(f"  {key:<16} {value['exec_per_s']:>6} exec/s  {value['seconds']:>6} s  passed {value['passed']}/{t['programs']}")
    print("  sandbox/plain throughput: " + ", ".join(f"{k.split('_')[1]} {v}" for k, v in t.items() if k.startswith("ratio")))


if __name__ == "__main__":
    main()
