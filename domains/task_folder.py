"""Terminal tasks as folders, and a folder of them as a domain.

Two formats load side by side (one per task folder):

- **Harbor's** (``task.toml``, ``instruction.md``, ``environment/Dockerfile``, ``tests/test.sh``,
  ``solution/solve.sh``): the field's format, run on the image its Dockerfile describes, built
  offline (:mod:`domains.importers.harbor`). The built-in suite uses it; new suites should.
- **Assay's older one** (issue 14, below): run on the host's ``/usr`` inside bubblewrap, so only
  tasks needing nothing beyond bash and python3 fit. It keeps loading, with a deprecation note once
  per suite; ``assay tasks migrate OLD NEW`` converts a suite to Harbor's format.

An older-format task is a folder (its name is the task's name)::

    count_lines/
      task.yaml       instruction (required), max_turns (default 20), timeout_s (whole episode,
                      default 300), tags (list), difficulty (a label such as easy/medium/hard)
      files/          the episode's initial working folder, /work (optional: empty without it)
      solution.sh     the oracle: run by bash in a fresh episode, it must solve the task
      tests/run.sh    the hidden tests: run after the episode in a fresh sandbox whose cwd is the
                      episode's final /work, tests/ read-only at a random path ("$(dirname "$0")");
                      exit 0 = solved. bash and python3 (standard library) are there.

A suite is a folder of task folders (each with a ``task.yaml`` or a ``task.toml``; sub-folders
whose name starts with ``.`` or ``_`` are ignored). On ``ASSAY_DOMAINS_PATH`` it registers as a domain named after
the folder (:func:`task_suite_domain`, loaded by :mod:`domains.registry`), with no code.

The domain's rows: ``id`` ``<suite>/<task>``, ``prompt`` the instruction, ``answer`` the text of
``solution.sh`` (Harbor: ``solution/solve.sh``), ``metadata`` (task, format, max_turns, timeout_s,
tags, difficulty). Splits: a task is in
eval when sha256 of its name falls in the lower ``EVAL_SHARE`` (half) of the hash range, else in
train: stable as a suite grows (adding a task moves no other). With two tasks or more both splits
are kept non-empty (the lowest hash moves to eval, or the highest to train); a one-task suite is
eval only, so its training split is empty.

``score(completion, sample)`` is the single-turn view: the completion is ONE bash script (the
contents of its fenced code blocks when it has any, e.g. a chat model's ```bash ... ```),
run in a fresh episode of the task, then the hidden tests: 1.0 if they pass, else 0.0 (a Harbor
task: its verifier's reward, the suite's declared metric). The oracle therefore scores 1.0 and the
empty answer 0.0, and the generic self-test (:mod:`quality.domain_check`) applies unchanged;
:func:`check_task` (``assay tasks check``) is added to it as check ``tasks_check``: on every task,
the oracle passes and doing nothing fails.

Every task, whatever its format, offers what the episode loops and the domain use: ``name``,
``spec`` (:class:`TaskSpec`), ``solution_text``, ``open_terminal()`` (a fresh episode: commands
via ``run``), ``judge(terminal)`` (the verdict on that episode: ``passed``, ``output``, and for a
Harbor task ``score`` and ``rewards``) and ``run_script(script, oracle=)``.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from domains.base import NAME_PATTERN, Domain, DomainError

TASK_FILE = "task.yaml"
HARBOR_TASK_FILE = "task.toml"
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
    """One loaded older-format task folder. ``files_dir`` is None when the task has no ``files/``."""

    name: str
    spec: TaskSpec
    folder: Path
    files_dir: Path | None
    solution: Path
    tests_dir: Path
    kind = "task.yaml"

    @property
    def solution_text(self) -> str:
        return self.solution.read_text(encoding="utf-8")

    def open_terminal(self):
        """A fresh episode over a copy of ``files/`` (:class:`sandbox.terminal.TerminalEpisode`)."""
        from sandbox.terminal import TerminalEpisode

        return TerminalEpisode(self.files_dir)

    def judge(self, terminal):
        """The hidden tests' verdict on the episode's final working folder."""
        from sandbox.terminal import run_hidden_tests

        return run_hidden_tests(terminal.workdir, self.tests_dir, timeout_s=max(10.0, self.spec.timeout_s / 4))

    def run_script(self, script: str, *, oracle: bool = False, timeout_s: float | None = None,
                   tests_timeout_s: float = 0.0):
        """``script`` as one bash command in a fresh episode (it may run for the task's
        ``timeout_s``), then the hidden tests: ``(CommandResult, TestVerdict)``."""
        from sandbox.terminal import DEFAULT_LIMITS, TerminalEpisode, run_hidden_tests

        seconds = float(timeout_s if timeout_s is not None else self.spec.timeout_s)
        limits = DEFAULT_LIMITS.replace(cpu_s=seconds)
        with TerminalEpisode(self.files_dir, limits=limits, command_timeout_s=seconds) as episode:
            command = episode.run(script)
            verdict = run_hidden_tests(episode.workdir, self.tests_dir,
                                       timeout_s=tests_timeout_s or HIDDEN_TESTS_TIMEOUT_S)
        return command, verdict


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


_NOTED: set[str] = set()
_NOTED_MUTEX = threading.Lock()


def _deprecation_note(suite: Path) -> None:
    """Say once per process and suite that the older format is deprecated (stderr: not a result)."""
    key = str(suite.resolve())
    with _NOTED_MUTEX:
        if key in _NOTED:
            return
        _NOTED.add(key)
    print(f"note: {suite} uses Assay's older terminal-task format (task.yaml), which is deprecated: "
          f"`assay tasks migrate {suite} NEW_FOLDER` converts it to Harbor's (task.toml)", file=sys.stderr)


def load_task(folder: Path | str, settings=None):
    """Load and validate one task folder of either format (a Harbor task when it holds task.toml:
    :func:`domains.importers.harbor.load_harbor_task`, with the suite's ``settings``);
    :class:`TaskFormatError` names the file and the fix."""
    folder = Path(folder)
    if (folder / HARBOR_TASK_FILE).is_file():
        from domains.importers.harbor import SuiteSettings, load_harbor_task

        return load_harbor_task(folder, settings or SuiteSettings.read(folder.parent))
    return _load_yaml_task(folder)


def _load_yaml_task(folder: Path) -> Task:
    import yaml

    if not folder.is_dir():
        raise TaskFormatError(f"{folder}: not a folder; a task is a folder holding {HARBOR_TASK_FILE} (Harbor's "
                              f"format) or {TASK_FILE}")
    if not TASK_NAME.match(folder.name):
        raise TaskFormatError(f"{folder}: task folder name {folder.name!r} must be letters, digits, '_', '-' or '.', "
                              "starting with a letter or digit; rename the folder")
    spec_path = folder / TASK_FILE
    if not spec_path.is_file():
        raise TaskFormatError(f"{spec_path}: missing; write one with at least `instruction: <what to do>` (Assay's "
                              f"older format), or the task in Harbor's format ({HARBOR_TASK_FILE}, instruction.md, "
                              "environment/Dockerfile, tests/test.sh, solution/solve.sh)")
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


def is_task_folder(folder: Path) -> bool:
    return (folder / TASK_FILE).is_file() or (folder / HARBOR_TASK_FILE).is_file()


def is_task_suite(folder: Path | str) -> bool:
    """True when ``folder`` holds task folders (at least one sub-folder with a ``task.yaml`` or a
    ``task.toml``)."""
    folder = Path(folder)
    try:
        return folder.is_dir() and not is_task_folder(folder) and any(is_task_folder(p)
                                                                      for p in _candidate_folders(folder))
    except OSError:
        return False


def load_task_suite(folder: Path | str) -> list:
    """Every task of a suite, sorted by name. Every sub-folder must be a valid task of either format
    (a folder whose name starts with ``.`` or ``_`` is ignored). A suite imported with ``assay tasks
    import harbor`` is checked against its import record (a task edited since is refused)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TaskFormatError(f"{folder}: not a folder; a task suite is a folder of task folders")
    if is_task_folder(folder):
        raise TaskFormatError(f"{folder}: this is one task, not a suite; put it in a folder of tasks "
                              "(the suite, named after the domain)")
    candidates = _candidate_folders(folder)
    if not any(is_task_folder(p) for p in candidates):
        raise TaskFormatError(f"{folder}: holds no task folders (each a folder with {HARBOR_TASK_FILE}, Harbor's "
                              f"format, or {TASK_FILE})")
    settings = None
    if any((p / HARBOR_TASK_FILE).is_file() for p in candidates):
        from domains.importers.harbor import SuiteSettings

        settings = SuiteSettings.read(folder)
    if any((p / TASK_FILE).is_file() and not (p / HARBOR_TASK_FILE).is_file() for p in candidates):
        _deprecation_note(folder)
    return [load_task(p, settings) for p in candidates]


# -- running a task ---------------------------------------------------------------------------------


def script_of(completion: str) -> str:
    """The bash script a single-turn completion stands for: its fenced code blocks joined, if it has
    any, else the whole text."""
    blocks = _FENCE.findall(completion)
    return "\n".join(blocks) if blocks else completion


def run_task_episode_script(task, script: str, *, oracle: bool = False):
    """Run ``script`` as one bash command in a fresh episode of ``task``, then its hidden tests:
    ``(CommandResult, verdict)`` (:meth:`Task.run_script`; a Harbor task: its verifier)."""
    return task.run_script(script, oracle=oracle)


def verdict_score(verdict) -> float:
    """The domain's score of a verdict: a Harbor task's reward, else 1.0 when the tests passed."""
    score = getattr(verdict, "score", None)
    return float(score) if score is not None else (1.0 if verdict.passed else 0.0)


def check_task(task) -> dict[str, Any]:
    """The oracle passes and a do-nothing agent (an empty script) fails:
    ``{"task", "oracle_passed", "do_nothing_failed", "ok", "detail"}``."""
    problems = []
    oracle_name = "solve.sh" if getattr(task, "kind", "") == "harbor" else SOLUTION_FILE
    if not getattr(task, "has_oracle", True):
        oracle_passed = False
        problems.append("no oracle (solution/solve.sh): nothing shows its verifier can pass; write one")
    else:
        try:
            command, verdict = run_task_episode_script(task, task.solution_text, oracle=True)
            oracle_passed = verdict.passed
            if not oracle_passed:
                problems.append(f"the oracle failed the tests ({oracle_name} exit {command.exit_code}, tests exit "
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


def check_tasks(tasks: Sequence, workers: int | None = None) -> list[dict[str, Any]]:
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


def task_row(suite: str, task) -> dict:
    spec = task.spec
    return {"id": f"{suite}/{task.name}", "prompt": spec.instruction, "answer": task.solution_text,
            "metadata": {"task": task.name, "format": task.kind, "max_turns": spec.max_turns,
                         "timeout_s": spec.timeout_s, "tags": list(spec.tags), "difficulty": spec.difficulty}}


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

    def task_of(sample: dict):
        task_name = (sample.get("metadata") or {}).get("task")
        if task_name not in by_name:
            raise DomainError(f"domain {name!r}: sample {sample.get('id')!r} names task {task_name!r}, which is "
                              f"not in {folder}")
        return by_name[task_name]

    def score(completion: str, sample: dict) -> float:
        task = task_of(sample)
        script = script_of(completion)
        # the reference answer run as itself is the oracle: a Harbor oracle sees its solution/ at /solution
        _, verdict = run_task_episode_script(task, script, oracle=script == task.solution_text)
        return verdict_score(verdict)

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
    formats = sorted({t.kind for t in tasks})
    if "harbor" in formats:
        tags.append("harbor")
    return Domain(
        name=name, owner=owner,
        description=f"terminal tasks from {folder} ({len(tasks)} tasks: {len(rows['train'])} train, "
                    f"{len(rows['eval'])} eval; format {', '.join(formats)}), scored by each task's hidden tests",
        tags=tuple(tags), samples=samples, score=score, score_many=score_many,
        eval_size=max(1, len(rows["eval"])), extra_checks=tasks_check, episode_task=task_of)


__all__ = ["EVAL_SHARE", "HARBOR_TASK_FILE", "Task", "TaskFormatError", "TaskSpec", "check_task", "check_tasks",
           "is_task_folder", "is_task_suite", "load_task", "load_task_suite", "run_task_episode_script", "script_of",
           "split_of", "task_suite_domain", "verdict_score"]
