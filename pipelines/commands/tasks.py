"""``assay tasks``: terminal task folders (Harbor's format, or Assay's older one).

- ``check DIR|SUITE``: every task's oracle passes and a do-nothing agent fails;
- ``import harbor PATH... [--suite NAME]``: Harbor task folders into ``$ASSAY_HOME/tasks/<suite>``,
  a terminal domain (refused before anything runs when a task or its Dockerfile is outside what
  runs here);
- ``build DIR|SUITE``: build the images the tasks' Dockerfiles describe, offline (cached per digest);
- ``migrate OLD NEW``: an older-format suite (task.yaml) rewritten in Harbor's format.
"""

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
NOTE = """A suite imported with `assay tasks import harbor` is checked by its name (DIR|SUITE). A Harbor task folder holds task.toml, instruction.md, environment/Dockerfile (built offline into an
image, cached per digest), tests/test.sh (writes /logs/verifier/reward.txt or reward.json) and
solution/solve.sh (the oracle). Assay's older format (deprecated: `assay tasks migrate`) holds task.yaml,
files/, solution.sh and tests/run.sh. Exit codes: 0 every task is sound, 1 some task is broken, 2 DIR is
not a task or suite (or a task is refused). The shipped tasks in domains/builtin/terminal_tasks/ are
examples to copy."""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "tasks", help="terminal task folders: import Harbor tasks, build their images, check, migrate",
        description="Terminal tasks: folders with an instruction, an environment, an oracle and hidden tests. "
                    "Harbor's format (task.toml) runs on the image its Dockerfile describes, built offline.")
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)

    check = sub.add_parser(
        "check", help="run each task's oracle and a do-nothing agent in the sandbox; both must be judged right",
        description="For every task: run the oracle in a fresh episode and the hidden tests after it (they must "
                    "pass), then an empty script (the tests must fail). A task failing either is broken: its tests "
                    "reward nothing or the wrong thing. A Harbor task's image is built first if missing.")
    with_examples(check, *EXAMPLES, note=NOTE)
    check.add_argument("dir", metavar="DIR|SUITE", help="a task suite (folder of task folders), one task folder, or "
                                                        "the name of an imported suite")
    check.add_argument("--workers", type=int, default=None, help="tasks checked at once (default: CPU count)")
    check.add_argument("--timeout-multiplier", type=float, default=None,
                       help="scale the Harbor tasks' agent and verifier timeouts (default: the suite's, else 1)")
    add_json_flag(check)
    check.set_defaults(handler=check_tasks)

    importer = sub.add_parser(
        "import", help="import tasks of another framework's format as a terminal domain",
        description="Import task folders of another framework's format. Everything is checked before anything is "
                    "copied or run: a task outside what runs here (a Dockerfile instruction, a multi-step task, a "
                    "compose file with several services...) is refused with its reason.")
    importer_sub = importer.add_subparsers(dest="import_format", metavar="FORMAT", required=True)
    harbor = importer_sub.add_parser(
        "harbor", help="Harbor / Terminal-Bench task folders (task.toml)",
        description="Copy Harbor task folders into $ASSAY_HOME/tasks/SUITE (a terminal domain named SUITE) with a "
                    "digest of each: a task edited afterwards is refused until imported again.")
    with_examples(harbor, "assay tasks import harbor ./my_tasks --suite shell_tasks   # a folder of task folders",
                  "assay tasks import harbor ./my_tasks/count_lines --suite one_task   # one task folder",
                  note="Then `assay tasks build SUITE` builds the images and `assay tasks check SUITE` runs the "
                       "oracles. The domain's score is the verifier's reward metric --reward-key (in [0, 1]).")
    harbor.add_argument("paths", nargs="+", metavar="PATH", help="a Harbor task folder, or a folder of them")
    harbor.add_argument("--suite", default=None, help="the domain's name (default: the folder the tasks came from)")
    harbor.add_argument("--reward-key", default="reward",
                        help="the metric of reward.json the domain scores by (reward.txt's number is 'reward')")
    harbor.add_argument("--timeout-multiplier", type=float, default=1.0,
                        help="scale every task's agent and verifier timeout (e.g. 2 on a slow machine)")
    harbor.add_argument("--replace", action="store_true", help="import again tasks the suite already holds")
    add_json_flag(harbor)
    harbor.set_defaults(handler=import_harbor)

    build = sub.add_parser(
        "build", help="build the images of Harbor tasks offline (cached per Dockerfile digest)",
        description="Build each Harbor task's image from its Dockerfile: the base from Debian's archive "
                    "(mmdebstrap), then every RUN/COPY/WORKDIR replayed (apt-get reaches Debian's archive, pip "
                    "PyPI). Cached in $ASSAY_IMAGE_CACHE, else $ASSAY_HOME/images; a cached image is not rebuilt.")
    with_examples(build, "assay tasks build ./my_tasks", "assay tasks build ./my_tasks/count_lines --json",
                  note="An imported suite is named as such: `assay tasks build SUITE`.")
    build.add_argument("dir", metavar="DIR|SUITE", help="a suite, one task folder, or an imported suite's name")
    add_json_flag(build)
    build.set_defaults(handler=build_images)

    migrate = sub.add_parser(
        "migrate", help="rewrite a suite of Assay's older format (task.yaml) in Harbor's format",
        description="Write NEW: one Harbor task folder per older-format task of OLD (same instruction, files at "
                    "/app of a debian:bookworm-slim image with python3, oracle, hidden tests, limits). The tests "
                    "run on a fresh copy of the image holding only the agent's /app, as before.")
    with_examples(migrate, "assay tasks migrate ./old_tasks ./old_tasks_harbor")
    migrate.add_argument("old", metavar="OLD", help="a suite (or one task folder) of the older format")
    migrate.add_argument("new", metavar="NEW", help="the folder to write (must not exist)")
    migrate.add_argument("--org", default="assay", help="the org of the tasks' [task] name (org/task)")
    add_json_flag(migrate)
    migrate.set_defaults(handler=migrate_tasks)


def _resolve(target: str) -> Path:
    """A path, else the name of a suite imported under $ASSAY_HOME/tasks."""
    path = Path(target)
    if path.exists():
        return path
    from domains.importers.harbor import imported_suites_root

    imported = imported_suites_root() / target
    if imported.is_dir():
        return imported
    raise CliError(f"{target}: not a folder, nor the name of a suite imported into {imported.parent} (import one "
                   "with `assay tasks import harbor PATH --suite NAME`)")


def _load(folder: Path) -> list:
    from domains.task_folder import TaskFormatError, is_task_folder, load_task, load_task_suite

    try:
        return [load_task(folder)] if is_task_folder(folder) else load_task_suite(folder)
    except TaskFormatError as exc:
        raise CliError(str(exc)) from None


def check_tasks(args: argparse.Namespace) -> int:
    from domains.task_folder import check_tasks as run_checks

    folder = _resolve(args.dir)
    if args.workers is not None and args.workers < 1:
        raise CliError(f"--workers must be >= 1, got {args.workers}")
    if args.timeout_multiplier is not None and not args.timeout_multiplier > 0:
        raise CliError(f"--timeout-multiplier must be positive, got {args.timeout_multiplier}")
    tasks = _load(folder)
    if args.timeout_multiplier is not None:
        tasks = [t.with_timeout_multiplier(args.timeout_multiplier) if hasattr(t, "with_timeout_multiplier") else t
                 for t in tasks]
    _build_all(tasks)
    print(f"checking {len(tasks)} tasks in {folder}", file=sys.stderr)
    results = run_checks(tasks, workers=args.workers)

    def human(rows):
        lines = [f"{'ok    ' if r['ok'] else 'BROKEN'}  {r['task']}" + ("" if r["ok"] else f"\n        {r['detail']}")
                 for r in rows]
        return "\n".join(lines + [f"{sum(r['ok'] for r in rows)}/{len(rows)} tasks ok"])

    emit(args, results, human)
    return 0 if all(r["ok"] for r in results) else EXIT_FAILED


def _build_all(tasks: list) -> list[dict]:
    """Build (or find cached) the image of every Harbor task, once per Dockerfile digest."""
    from domains.importers.harbor import HarborTaskError

    rows, seen = [], {}
    for task in tasks:
        if getattr(task, "kind", "") != "harbor":
            continue
        try:
            image = seen.get(task.plan.digest) or task.image()
        except HarborTaskError as exc:
            raise CliError(str(exc), code=EXIT_FAILED) from None
        task.built.setdefault("image", image)
        seen[task.plan.digest] = image
        rows.append({"task": task.name, "image": image.digest[:16], "base": image.record["base"],
                     "layers": len(image.layers), "bytes": image.record["bytes"], "seconds": image.record["seconds"],
                     "notes": list(task.notes)})
    return rows


def build_images(args: argparse.Namespace) -> int:
    tasks = _load(_resolve(args.dir))
    if not any(getattr(t, "kind", "") == "harbor" for t in tasks):
        raise CliError(f"{args.dir}: no Harbor task here (an older-format task runs on the host's /usr: nothing to "
                       "build; `assay tasks migrate` converts it)")
    rows = _build_all(tasks)

    def human(items):
        lines = [f"{r['task']}: image {r['image']} ({r['base']}, {r['layers']} layers, {r['bytes'] / 2**20:.0f} MB, "
                 f"built in {r['seconds']:.1f} s)" + "".join(f"\n    note: {n}" for n in r["notes"]) for r in items]
        return "\n".join(lines)

    emit(args, rows, human)
    return 0


def import_harbor(args: argparse.Namespace) -> int:
    from domains.importers.harbor import HarborTaskError, import_tasks
    from storage.home import resolve_home

    try:
        target, tasks = import_tasks(args.paths, home=resolve_home(), suite=args.suite, reward_key=args.reward_key,
                                     timeout_multiplier=args.timeout_multiplier, replace=args.replace)
    except HarborTaskError as exc:
        raise CliError(str(exc)) from None
    rows = [task.describe() for task in tasks]

    def human(items):
        lines = [f"imported {len(items)} tasks into {target} (domain {target.name!r})"]
        for r in items:
            lines.append(f"  {r['task']}: {r['base']}, {r['steps']} build steps, cpus {r['cpus']:g}, memory "
                         f"{r['memory_mb']} MB, agent {r['agent_timeout_s']:g} s, verifier {r['verifier']}, network "
                         f"{'on' if r['network'] else 'off'}" + "".join(f"\n    note: {n}" for n in r["notes"]))
        lines.append(f"next: `assay tasks build {target.name}` then `assay tasks check {target.name}`")
        return "\n".join(lines)

    emit(args, {"suite": target.name, "folder": str(target), "tasks": rows}, lambda p: human(p["tasks"]))
    return 0


def migrate_tasks(args: argparse.Namespace) -> int:
    from domains.importers.harbor import HarborTaskError, migrate_task
    from domains.task_folder import TASK_FILE, TaskFormatError, is_task_suite

    old, new = Path(args.old), Path(args.new)
    if new.exists():
        raise CliError(f"{new}: already exists; migrate into a new folder")
    if (old / TASK_FILE).is_file():
        pairs = [(old, new / old.name)]
    elif is_task_suite(old):
        pairs = [(p, new / p.name) for p in sorted(old.iterdir())
                 if p.is_dir() and not p.name.startswith((".", "_")) and (p / TASK_FILE).is_file()]
    else:
        raise CliError(f"{old}: neither an older-format task (task.yaml) nor a suite of them")
    if not pairs:
        raise CliError(f"{old}: holds no older-format task (task.yaml) to migrate")
    written = []
    try:
        for source, target in pairs:
            migrate_task(source, target, org=args.org)
            written.append({"task": source.name, "folder": str(target)})
    except (TaskFormatError, HarborTaskError) as exc:
        raise CliError(str(exc)) from None
    emit(args, written, lambda rows: "\n".join(f"{r['task']} -> {r['folder']}" for r in rows)
         + f"\nmigrated {len(rows)} tasks; check them with `assay tasks check {new}`")
    return 0
