"""Harbor tasks offline (issue 43): what building an image costs, and what an episode on an image
costs against the host-root episodes of Assay's older task format, measured in the same run.

- builds: every image of the suites given (default: the built-in terminal suite and
  examples/harbor_tasks/) into a FRESH store (``--store DIR``, default a temporary folder, removed
  after): cold, base from the archive included. Reported per image: seconds, layers, MB (its layers'
  disk blocks), and the store's total (shared layers counted once).
- episodes: one built-in task twice, as a Harbor task (its image: id-mapped overlay, bubblewrap, the
  separate verifier) and as the same task in the older format (host /usr, a copied /work, the
  hidden tests on a copy), alternating ``--rounds`` times so load drift hits both: median ms to open
  and close an episode, to run one command (``true``; and ``cat`` of a task file), to judge, and
  for a whole oracle check (episode + oracle + verdict).

Run: .venv/bin/python -m bench.bench_harbor [--task count_lines] [--rounds 20] [--skip-builds]
     [--suite DIR ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUILTIN = REPO / "domains" / "builtin" / "terminal_tasks"
EXAMPLES = REPO / "examples" / "harbor_tasks"


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "?")
    return {"cpu": cpu, "cores": os.cpu_count(), "loadavg": Path("/proc/loadavg").read_text().strip()}


def cold_builds(suites: list[Path], store_root: Path) -> dict:
    from domains.task_folder import load_task_suite
    from sandbox.images import ImageStore, folder_bytes

    store = ImageStore(store_root)
    rows, seen = [], set()
    for suite in suites:
        for task in load_task_suite(suite):
            if task.plan.digest in seen:
                continue
            seen.add(task.plan.digest)
            built_before = {p.name for p in store.layers_dir.glob("*")} if store.layers_dir.exists() else set()
            started = time.monotonic()
            image = store.build(task.plan, timeout_s=1800)
            seconds = time.monotonic() - started
            new = [p for p in image.layer_paths if p.parent.name not in built_before]
            rows.append({"suite": suite.name, "task": task.name, "base": task.plan.base.reference,
                         "layers": len(image.layers), "new_layers": len(new), "seconds": round(seconds, 1),
                         "image_mb": round(image.record["bytes"] / 2**20, 1),
                         "new_mb": round(sum(folder_bytes(p) for p in new) / 2**20, 1)})
            print(f"  {rows[-1]}", file=sys.stderr)
    return {"images": rows, "store_mb": round(folder_bytes(store_root) / 2**20, 1),
            "seconds": round(sum(r["seconds"] for r in rows), 1)}


def older_format_copy(task_folder: Path, target: Path) -> Path:
    """The same task in Assay's older format (task.yaml, files/, solution.sh, tests/run.sh)."""
    import tomllib

    import yaml

    config = tomllib.loads((task_folder / "task.toml").read_text())
    target.mkdir(parents=True)
    spec = {"instruction": (task_folder / "instruction.md").read_text(),
            "max_turns": config["metadata"].get("max_turns", 20), "timeout_s": config["agent"]["timeout_sec"]}
    (target / "task.yaml").write_text(yaml.safe_dump(spec))
    shutil.copytree(task_folder / "environment" / "files", target / "files")
    shutil.copy(task_folder / "solution" / "solve.sh", target / "solution.sh")
    shutil.copytree(task_folder / "tests", target / "tests")
    return target


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 1)


def episode_overhead(task_name: str, rounds: int) -> dict:
    from domains.task_folder import check_task, load_task

    scratch = Path(tempfile.mkdtemp(prefix="bench-harbor-"))
    try:
        harbor = load_task(BUILTIN / task_name)
        harbor.image()  # built (or found) before timing
        older = load_task(older_format_copy(BUILTIN / task_name, scratch / task_name))
        arms = {"harbor image": harbor, "host root (older format)": older}
        times = {arm: {"open_close": [], "command_true": [], "command_cat": [], "judge": [], "oracle_check": []}
                 for arm in arms}
        for _ in range(rounds):
            for arm, task in arms.items():
                t = times[arm]
                started = time.perf_counter()
                terminal = task.open_terminal()
                opened = time.perf_counter()
                t0 = time.perf_counter()
                terminal.run("true")
                t["command_true"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                terminal.run("cat data.txt >/dev/null 2>&1; ls >/dev/null")
                t["command_cat"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                task.judge(terminal)
                t["judge"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                terminal.close()
                t["open_close"].append((opened - started) + (time.perf_counter() - t0))
                t0 = time.perf_counter()
                result = check_task(task)
                t["oracle_check"].append(time.perf_counter() - t0)
                assert result["ok"], result
        medians = {arm: {key: _ms(values) for key, values in t.items()} for arm, t in times.items()}
        return {"task": task_name, "rounds": rounds, "median_ms": medians}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="count_lines")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--suite", action="append", type=Path, default=None,
                        help="suites whose images to build cold (default: the built-in suite and the examples)")
    parser.add_argument("--store", type=Path, default=None, help="the fresh store to build into (default: temporary)")
    parser.add_argument("--skip-builds", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    report = {"machine_before": machine()}
    if not args.skip_builds:
        store = args.store or Path(tempfile.mkdtemp(prefix="bench-harbor-store-"))
        try:
            report["builds"] = cold_builds(args.suite or [BUILTIN, EXAMPLES], store)
        finally:
            if args.store is None:
                from sandbox.mounts import sweep_stale

                sweep_stale()
                shutil.rmtree(store, ignore_errors=True)
    report["episodes"] = episode_overhead(args.task, args.rounds)
    report["machine_after"] = machine()
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
