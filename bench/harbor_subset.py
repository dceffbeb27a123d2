"""How much of a Harbor task collection runs here (issue 43): read-only, nothing built or run.

For every task folder under PATH (a folder holding task.toml): (1) its Dockerfile (or compose file,
or docker_image) falls in the supported subset (:func:`sandbox.dockerfile.plan_dockerfile`), (2) the
whole task does (task.toml's refusals too: multi-step, Windows, GPUs, MCP, ...), (3) it also has an
oracle (solution/solve.sh). Refusals are grouped by reason, with one example task each.

Run: .venv/bin/python -m bench.harbor_subset PATH [PATH ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path


def _reason(message: str) -> str:
    if "base image" in message:
        base = re.search(r"base image '([^']+)'", message).group(1)
        return "FROM " + re.sub(r":\d{8}$", ":<date>", base)
    if "multi-stage" in message:
        return "multi-stage build (a second FROM, COPY --from)"
    if "compose with several services" in message:
        return "docker-compose with several services"
    match = re.search(r"line \d+: (\S+)", message)
    tail = message.rsplit(": ", 1)[-1]
    tail = re.sub(r"\(/\S+\)", "", tail)[:90].strip()
    return (f"{match.group(1)}: " if match else "") + tail


def survey(root: Path) -> dict:
    from domains.importers import harbor
    from domains.importers.harbor_config import HarborConfigError, parse_task_toml

    tasks = sorted(p.parent for p in root.rglob("task.toml"))
    docker_ok = task_ok = with_oracle = 0
    docker_refusals: collections.Counter = collections.Counter()
    task_refusals: collections.Counter = collections.Counter()
    example: dict[str, str] = {}
    for task in tasks:
        try:
            config = parse_task_toml(task / "task.toml")
        except HarborConfigError as exc:
            key = "task.toml: " + str(exc).split(": ", 1)[-1][:90]
            task_refusals[key] += 1
            example.setdefault(key, task.name)
            continue
        try:
            harbor._plan(task, config)
        except harbor.HarborTaskError as exc:
            key = _reason(str(exc))
            docker_refusals[key] += 1
            example.setdefault(key, task.name)
            continue
        docker_ok += 1
        try:
            harbor._refusals(task, config)
        except harbor.HarborTaskError as exc:
            key = str(exc).split(": ", 1)[-1][:90]
            task_refusals[key] += 1
            example.setdefault(key, task.name)
            continue
        task_ok += 1
        with_oracle += (task / "solution" / "solve.sh").is_file()
    return {"root": str(root), "tasks": len(tasks), "dockerfile_in_subset": docker_ok, "task_in_subset": task_ok,
            "task_in_subset_with_oracle": with_oracle,
            "dockerfile_refusals": [{"reason": k, "tasks": v, "example": example[k]}
                                    for k, v in docker_refusals.most_common()],
            "task_refusals": [{"reason": k, "tasks": v, "example": example[k]} for k, v in task_refusals.most_common()]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    reports = [survey(path) for path in args.paths]
    for r in reports:
        n = max(1, r["tasks"])
        print(f"{r['root']}: {r['tasks']} tasks; Dockerfile in the subset {r['dockerfile_in_subset']} "
              f"({100 * r['dockerfile_in_subset'] / n:.1f}%); whole task {r['task_in_subset']} "
              f"({100 * r['task_in_subset'] / n:.1f}%), {r['task_in_subset_with_oracle']} of them with an oracle")
        for row in r["dockerfile_refusals"] + r["task_refusals"]:
            print(f"  {row['tasks']:6d}  {row['reason']}  (e.g. {row['example']})")
    if args.json:
        args.json.write_text(json.dumps(reports, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
