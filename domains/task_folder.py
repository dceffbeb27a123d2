"""Terminal tasks as folders, and a folder of them as a domain (issue 14's task format).

A task is a folder (its name is the task's name)::

    count_lines/
      task.yaml       instruction (required), max_turns (default 20), timeout_s (whole episode,
                      default 300), tags (list), difficulty (a label such as easy/medium/hard)
      files/          the episode's initial working folder, /work (optional: empty without it)
      solution.sh     the oracle: run by bash in a fresh episode, it must solve the task
      tests/run.sh    the hidden tests: run after the episode in a fresh sandbox whose cwd is the
                      episode's final /work, tests/ read-only at a random path ("$(dirname "$0")");
                      exit 0 = solved. bash and python3 (standard library) are there.

A suite is a folder of task folders (each with a ``task.yaml``; sub-folders whose name starts
with ``.`` or ``_`` are ignored). On ``ASSAY_DOMAINS_PATH`` it registers as a domain named after
the folder (:func:`task_suite_domain`, loaded by :mod:`domains.registry`), with no code.

The domain's rows: ``id`` ``<suite>/<task>``, ``prompt`` the instruction, ``answer`` the text of
``solution.sh``, ``metadata`` (task, max_turns, timeout_s, tags, difficulty). Splits: a task is in
eval when sha256 of its name falls in the lower ``EVAL_SHARE`` (half) of the hash range, else in
train: stable as a suite grows (adding a task moves no other). With two tasks or more both splits
are kept non-empty (the lowest hash moves to eval, or the highest to train); a one-task suite is
eval only, so its training split is empty.

``score(completion, sample)`` is the single-turn view: the completion is ONE bash script (the
contents of its fenced code blocks when it has any, e.g. a chat model's ```bash ... ```),
run in a fresh episode of the task, then the hidden tests: 1.0 if they pass, else 0.0. The
oracle therefore scores 1.0 and the empty answer 0.0, and the generic self-test
(:mod:`quality.domain_check`) applies unchanged; :func:`check_task` (``assay tasks check``) is
added to it as check ``tasks_check``: on every task, the oracle passes and doing nothing fails.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from domains.base import NAME_PATTERN, Domain, DomainError

TASK_FILE = "task.yaml"
SOLUTION_FILE = "solution.sh"
TESTS_DIR = "tests"
FILES_DIR = "files"
EVAL_SHARE = 0.5
HIDDEN_TESTS_TIMEOUT_S = 60.0
TASK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_FENCE = re.compile(r"```[ \t]*(?:bash|sh|shell|console)?[ \t]*\n(.*?)```", re.DOTALL)


class TaskFormatError(DomainError):
    """A task folder breaks the format; the message names the file and how to fix it."""


class TaskSpec(BaseModel):
    """``task.yaml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instruction: str = Field(description="what the agent must do (required, non-empty)")
    max_turns: int = Field(20, ge=1, description="commands the agent may run before the episode ends")
    timeout_s: float = Field(300.0, gt=0, description="seconds the whole episode may take")
    tags: list[str] = Field(default_factory=list, description="free labels, e.g. [csv, easy]")
    difficulty: str | None = Field(None, description="a label such as easy, medium or hard")

    @field_validator("instruction")
    @classmethod
    def _non_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("instruction is empty; write what the agent must do")
        return value


@dataclass(frozen=True)
class Task:
    """One loaded task folder. ``files_dir`` is None when the task has no ``files/``."""

    name: str
    spec: TaskSpec
    folder: Path
    files_dir: Path | None
    solution: Path
    tests_dir: Path

    @property
    def solution_text(self) -> str:
        return self.solution.read_text(encoding="utf-8")


def _spec_error(path: Path, exc: ValidationError) -> str:
    problems = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden":
            problems.append(f"unknown key {where!r} (allowed: {', '.join(TaskSpec.model_fields)})")
        elif error["type"] == "missing":
            problems.append(f"{where} is required (what the agent must do)")
        else:
            problems.append(f"{where}: {error['msg']} (got {error.get('input')!r})")
    return f"{path}: " + "; ".join(problems)


def load_task(folder: Path | str) -> Task:
    """Load and validate one task folder; :class:`TaskFormatError` names the file and the fix."""
    import yaml

    folder = Path(folder)
    if not folder.is_dir():
        raise TaskFormatError(f"{folder}: not a folder; a task is a folder holding {TASK_FILE}, {SOLUTION_FILE} "
                              f"and {TESTS_DIR}/run.sh")
    if not TASK_NAME.match(folder.name):
        raise TaskFormatError(f"{folder}: task folder name {folder.name!r} must be letters, digits, '_', '-' or '.', "
                              "starting with a letter or digit; rename the folder")
    spec_path = folder / TASK_FILE
    if not spec_path.is_file():
        raise TaskFormatError(f"{spec_path}: missing; write one with at least `instruction: <what to do>`")
    try:
        data = yaml.safe_load(spec_path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TaskFormatError(f"{spec_path}: not valid YAML ({' '.join(str(exc).split())[:200]}); "
                              "fix the syntax") from None
    if not isinstance(data, dict):
        raise TaskFormatError(f"{spec_path}: must be a mapping like `instruction: ...`, got {type(data).__name__}")
    try:
        spec = TaskSpec(**data)
    except ValidationError as exc:
        raise TaskFormatError(_spec_error(spec_path, exc)) from None
    solution = folder / SOLUTION_FILE
    if not solution.is_file():
        raise TaskFormatError(f"{solution}: missing; write the bash script that solves the task (the oracle)")
    try:
        solution.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise TaskFormatError(f"{solution}: not UTF-8 text; save it as UTF-8") from None
    tests_dir = folder / TESTS_DIR
    if not (tests_dir / "run.sh").is_file():
        raise TaskFormatError(f"{tests_dir / 'run.sh'}: missing; write the hidden test script (exit 0 = solved)")
    files_dir = folder / FILES_DIR
    if files_dir.exists() and not files_dir.is_dir():
        raise TaskFormatError(f"{files_dir}: must be a folder (the episode's initial working folder)")
    return Task(name=folder.name, spec=spec, folder=folder, files_dir=files_dir if files_dir.is_dir() else None,
                solution=solution, tests_dir=tests_dir)


def _candidate_folders(folder: Path) -> list[Path]:
    return sorted((p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))),
                  key=lambda p: p.name)


def is_task_suite(folder: Path | str) -> bool:
    """True when ``folder`` holds task folders (at least one sub-folder with a ``task.yaml``)."""
    folder = Path(folder)
    try:
        return folder.is_dir() and any((p / TASK_FILE).is_file() for p in _candidate_folders(folder))
    except OSError:
        return False


def load_task_suite(folder: Path | str) -> list[Task]:
    """Every task of a suite, sorted by name. Every sub-folder must be a valid task (a folder whose
    name starts with ``.`` or ``_`` is ignored)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskFormatError(f"{folder}: not a folder; a task suite is a folder of task folders")
    if (folder / TASK_FILE).is_file():
        raise TaskFormatError(f"{folder}: this is one task, not a suite; put it in a folder of tasks "
                              "(the suite, named after the domain)")
    candidates = _candidate_folders(folder)
    if not any((p / TASK_FILE).is_file() for p in candidates):
        raise TaskFormatError(f"{folder}: holds no task folders (each a folder with {TASK_FILE}, {SOLUTION_FILE}, "
                              f"{TESTS_DIR}/run.sh)")
    return [load_task(p) for p in candidates]


# -- running a task ---------------------------------------------------------------------------------


def script_of(completion: str) -> str:
    """The bash script a single-turn completion stands for: its fenced code blocks joined, if it has
    any, else the whole text."""
    blocks = _FENCE.findall(completion)
    return "\n".join(blocks) if blocks else completion


def run_task_episode_script(task: Task, script: str, *, timeout_s: float | None = None,
                            tests_timeout_s: float = HIDDEN_TESTS_TIMEOUT_S):
    """Run ``script`` as one bash command in a fresh episode of ``task``, then its hidden tests.

    Returns ``(CommandResult, TestVerdict)``. The script may run for the task's ``timeout_s``
    (its whole episode) unless ``timeout_s`` is given."""
    from sandbox.terminal import DEFAULT_LIMITS, TerminalEpisode, run_hidden_tests

    seconds = float(timeout_s if timeout_s is not None else task.spec.timeout_s)
    limits = DEFAULT_LIMITS.replace(cpu_s=seconds)
    with TerminalEpisode(task.files_dir, limits=limits, command_timeout_s=seconds) as episode:
        command = episode.run(script)
        verdict = run_hidden_tests(episode.workdir, task.tests_dir, timeout_s=tests_timeout_s)
    return command, verdict


def check_task(task: Task) -> dict[str, Any]:
    """The oracle passes and a do-nothing agent (an empty script) fails:
    ``{"task", "oracle_passed", "do_nothing_failed", "ok", "detail"}``."""
    problems = []
    try:
        command, verdict = run_task_episode_script(task, task.solution_text)
        oracle_passed = verdict.passed
        if not oracle_passed:
            problems.append(f"the oracle failed the tests (solution.sh exit {command.exit_code}, tests exit "
                            f"{verdict.exit_code}): {_tail(verdict.output)}")
    except Exception as exc:  # noqa: BLE001 - reported per task
        oracle_passed = False
        problems.append(f"running the oracle raised {type(exc).__name__}: {exc}")
    try:
        _, idle = run_task_episode_script(task, "")
        do_nothing_failed = not idle.passed
        if not do_nothing_failed:
            problems.append("doing nothing passes the tests: they check nothing the agent must do")
    except Exception as exc:  # noqa: BLE001
        do_nothing_failed = False
        problems.append(f"running the do-nothing agent raised {type(exc).__name__}: {exc}")
    ok = oracle_passed and do_nothing_failed
    return {"task": task.name, "oracle_passed": oracle_passed, "do_nothing_failed": do_nothing_failed, "ok": ok,
            "detail": "oracle passes, doing nothing fails" if ok else "; ".join(problems)}


def check_tasks(tasks: Sequence[Task], workers: int | None = None) -> list[dict[str, Any]]:
    """:func:`check_task` for each task, in parallel, in order."""
    if not tasks:
        return []
    with ThreadPoolExecutor(max_workers=_workers(len(tasks), workers)) as pool:
        return list(pool.map(check_task, tasks))


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else "..." + text[-limit:]


def _workers(n: int, workers: int | None) -> int:
    return max(1, min(n, workers or os.cpu_count() or 1))


# -- the domain -------------------------------------------------------------------------------------


def split_of(task_names: Sequence[str]) -> dict[str, str]:
    """``{task name: "train" | "eval"}``: see the module docstring for the rule."""
    position = {name: int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") / 2**64
                for name in task_names}
    split = {name: "eval" if u < EVAL_SHARE or len(position) == 1 else "train" for name, u in position.items()}
    if len(split) >= 2:
        if "eval" not in split.values():
            split[min(position, key=position.get)] = "eval"
        if "train" not in split.values():
            split[max(position, key=position.get)] = "train"
    return split


def task_row(suite: str, task: Task) -> dict:
    spec = task.spec
    return {"id": f"{suite}/{task.name}", "prompt": spec.instruction, "answer": task.solution_text,
            "metadata": {"task": task.name, "max_turns": spec.max_turns, "timeout_s": spec.timeout_s,
                         "tags": list(spec.tags), "difficulty": spec.difficulty}}


def task_suite_domain(folder: Path | str, *, name: str | None = None, owner: str = "task-suite",
                      workers: int | None = None) -> Domain:
    """The suite in ``folder`` as a :class:`~domains.Domain` (named after the folder unless ``name``)."""
    folder = Path(folder)
    name = name or folder.name
    if not NAME_PATTERN.match(name):
        raise DomainError(f"{folder}: a task suite's domain is named after its folder, and {name!r} is not "
                          "lower_snake_case (letters, digits, '_', starting with a letter): rename the folder, "
                          "e.g. 'shell_tasks'")
    tasks = load_task_suite(folder)
    by_name = {t.name: t for t in tasks}
    splits = split_of(list(by_name))
    rows = {split: [task_row(name, t) for t in tasks if splits[t.name] == split] for split in ("train", "eval")}

    def samples(split: str, n: int, seed: int):
        chosen = list(rows[split])
        if split == "train":  # training draws vary with the seed; eval is always in name order
            random.Random(seed).shuffle(chosen)
        return [dict(row, metadata=dict(row["metadata"])) for row in chosen[:n]]

    def task_of(sample: dict) -> Task:
        task_name = (sample.get("metadata") or {}).get("task")
        if task_name not in by_name:
            raise DomainError(f"domain {name!r}: sample {sample.get('id')!r} names task {task_name!r}, which is "
                              f"not in {folder}")
        return by_name[task_name]

    def score(completion: str, sample: dict) -> float:
        _, verdict = run_task_episode_script(task_of(sample), script_of(completion))
        return 1.0 if verdict.passed else 0.0

    def score_many(completions: Sequence[str], batch: Sequence[dict]) -> list[float]:
        if len(completions) != len(batch):
            raise ValueError(f"score_many got {len(completions)} completions for {len(batch)} samples")
        if not batch:
            return []
        with ThreadPoolExecutor(max_workers=_workers(len(batch), workers)) as pool:
            return list(pool.map(score, completions, batch))

    def tasks_check() -> dict[str, dict]:
        results = check_tasks(tasks, workers)
        broken = [f"{r['task']}: {r['detail']}" for r in results if not r["ok"]]
        detail = (f"{len(broken)} of {len(results)} tasks broken: " + " | ".join(broken[:3]) if broken
                  else f"all {len(results)} tasks: the oracle passes and doing nothing fails")
        return {"tasks_check": {"passed": not broken, "detail": detail}}

    tags = ["terminal", *sorted({tag for t in tasks for tag in t.spec.tags} - {"terminal"})]
    return Domain(
        name=name, owner=owner,
        description=f"terminal tasks from {folder} ({len(tasks)} tasks: {len(rows['train'])} train, "
                    f"{len(rows['eval'])} eval), scored by each task's hidden tests",
        tags=tuple(tags), samples=samples, score=score, score_many=score_many,
        eval_size=max(1, len(rows["eval"])), extra_checks=tasks_check, episode_task=task_of)


__all__ = ["EVAL_SHARE", "Task", "TaskFormatError", "TaskSpec", "check_task", "check_tasks", "is_task_suite",
           "load_task", "load_task_suite", "run_task_episode_script", "script_of", "split_of",
           "task_suite_domain"]
