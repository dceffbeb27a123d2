"""``assay tasks check DIR``: every terminal task's oracle passes and a do-nothing agent fails."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.cli import EXIT_FAILED, CliError, add_json_flag, emit, with_examples

EXAMPLES = (
    "assay tasks check ./my_tasks                # a suite: a folder of task folders",
    "assay tasks check ./my_tasks/count_lines    # one task folder",
    'assay tasks check ./my_tasks --json         # [{"task", "oracle_passed", "do_nothing_failed", "ok", "detail"}]',
)
NOTE = """A task folder holds task.yaml (instruction, max_turns, timeout_s, tags, difficulty), files/ (the
episode's initial /work), solution.sh (the oracle) and tests/run.sh (the hidden tests; exit 0 =
solved). Exit codes: 0 every task is sound, 1 some task is broken, 2 DIR is not a task or suite. The
shipped tasks in domains/builtin/terminal_tasks/ are examples to copy."""


def register(subparsers) -> None:
    parser = subparsers.add_parser("tasks", help="check terminal task folders (oracle passes, doing nothing fails)",
                                   description="Terminal tasks: folders with an instruction, starting files, an "
                                               "oracle solution.sh and hidden tests/run.sh.")
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    check = sub.add_parser(
        "check", help="run each task's oracle and a do-nothing agent in the sandbox; both must be judged right",
        description="For every task in DIR: run solution.sh in a fresh terminal episode and the hidden tests "
                    "after it (they must pass), then an empty script (the tests must fail). A task failing "
                    "either is broken: its tests reward nothing or the wrong thing.")
    with_examples(check, *EXAMPLES, note=NOTE)
    check.add_argument("dir", metavar="DIR", help="a task suite (folder of task folders) or one task folder")
    check.add_argument("--workers", type=int, default=None, help="tasks checked at once (default: CPU count)")
    add_json_flag(check)
    check.set_defaults(handler=check_tasks)


def check_tasks(args: argparse.Namespace) -> int:
    from domains.task_folder import TASK_FILE, TaskFormatError, check_tasks as run_checks, load_task, load_task_suite

    folder = Path(args.dir)
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    try:
        tasks = [load_task(folder)] if (folder / TASK_FILE).is_file() else load_task_suite(folder)
    except TaskFormatError as exc:
        raise CliError(str(exc)) from None
    print(f"checking {len(tasks)} tasks in {folder}", file=sys.stderr)
    results = run_checks(tasks, workers=args.workers)

    def human(rows):
        lines = [f"{'ok    ' if r['ok'] else 'BROKEN'}  {r['task']}" + ("" if r["ok"] else f"\n        {r['detail']}")
                 for r in rows]
        return "\n".join(lines + [f"{sum(r['ok'] for r in rows)}/{len(rows)} tasks ok"])

    emit(args, results, human)
    return 0 if all(r["ok"] for r in results) else EXIT_FAILED
