"""Every example an `assay ... --help` shows runs as written, and every command `assay demo` prints
under "Where to look next" runs, or, for a server (`make ui`, `make dashboard`, `mlflow ui`),
starts and answers on the address printed beside it (issue 32).

Examples are registered with :func:`pipelines.cli.with_examples`, which is what shows them in the
help text; the test walks the real parser, so a new example is run without touching this file.
They run in the home of the README's smoke run (the first demo example; the session runs it once for
every test that checks it, tests/conftest.py's smoke_run), from a
working folder holding a copy of two shipped terminal tasks as the user's ``./my_tasks``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from pipelines.cli import build_parser
from tests.conftest import SMOKE_RUN as CONFTEST_SMOKE_RUN

REPO = Path(__file__).resolve().parents[2]
SMOKE_RUN = "assay demo --recipe tiny --domains math_arith_easy --steps 2 --sweep-items 3"
# commands that read what earlier ones wrote run first: the regress example compares the smoke run's
# two checkpoints, before the train/sweep examples add more results
ORDER = ("demo", "sql", "regress", "tasks", "domains", "difficulty", "train", "sweep", "variant")


def parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases map to one parser
                yield from parsers(child)


def help_examples() -> list[tuple[str, str]]:
    """(the command's prog, example) for every example of every command, in running order."""
    found = [(p.prog, example) for p in parsers(build_parser()) for example in getattr(p, "examples", ())]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found, key=lambda pe: rank.get(pe[0].split()[1], len(ORDER)))


EXAMPLES = help_examples()


def test_examples_are_registered_shown_and_cover_the_commands():
    progs = {prog for prog, _ in EXAMPLES}
    assert {"assay demo", "assay sql", "assay regress", "assay sweep", "assay train", "assay variant",
            "assay difficulty", "assay domains attack", "assay tasks check"} <= progs, progs
    assert EXAMPLES[0] == ("assay demo", f"{SMOKE_RUN}   # a smoke run"), EXAMPLES[0]
    for p in parsers(build_parser()):
        text = p.format_help()
        for example in getattr(p, "examples", ()):
            assert f"\n  {example}\n" in text, f"{p.prog}: example not shown as one line:\n{text}"
            assert example.startswith(p.prog + " ") or example.startswith("assay sql "), (p.prog, example)
        # an example written into prose would not be run here
        assert not re.search(r"[Ee]xamples?: assay ", text), f"{p.prog}: use pipelines.cli.with_examples:\n{text}"


@pytest.fixture(scope="module")
def user(tmp_path_factory, smoke_run) -> dict:
    """A user's shell after the README's smoke run (the session's shared one: its home, `assay` and
    `mlflow` on PATH), in a working folder holding a task suite."""
    work = tmp_path_factory.mktemp("work")
    for task in ("count_lines", "create_hello_file"):
        shutil.copytree(REPO / "domains" / "builtin" / "terminal_tasks" / task, work / "my_tasks" / task)
    return {"env": smoke_run.env, "cwd": work, "smoke": smoke_run}


def run(command: str, user: dict, *, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd or user["cwd"], env=user["env"], capture_output=True,
                          text=True, timeout=timeout)


def where_to_look_next(summary: str) -> list[tuple[str, str]]:
    """(command, what it says it is) for each line under 'Where to look next:'."""
    lines = summary.split("Where to look next:\n", 1)[1].splitlines()
    return [tuple(re.split(r"\s{3,}", line.strip(), maxsplit=1)) for line in lines if line.startswith("  ")]


def answers(url: str, server: subprocess.Popen, timeout: float) -> str | None:
    """The first page ``url`` serves within ``timeout`` seconds; None if it never answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read(4096).decode(errors="replace")
        except OSError:
            time.sleep(1)
    return None


def serve_and_ask(command: str, url: str, user: dict) -> str:
    """Start the server as printed, wait until ``url`` answers, stop it (and its children)."""
    port = int(re.search(r":(\d+)", url).group(1))
    with urllib.request.socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} is already in use: stop what serves it"
    log = user["cwd"] / f"server-{port}.log"
    with open(log, "w") as out:
        server = subprocess.Popen(["bash", "-c", command], cwd=REPO, env=user["env"], stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        page = answers(url, server, timeout=180)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    assert page is not None, f"{command}: nothing answered on {url}:\n{log.read_text()[-3000:]}"
    return page


@pytest.mark.slow
def test_every_help_example_and_every_next_step_of_the_demo_runs_as_written(user):
    failures = []
    smoke = None
    for prog, example in EXAMPLES:
        if example.startswith(SMOKE_RUN):
            # the session's shared smoke run ran this exact command (from the repository root)
            assert CONFTEST_SMOKE_RUN == ".venv/bin/" + SMOKE_RUN
            smoke = user["smoke"]
            continue
        started = time.monotonic()
        out = run(example, user)
        print(f"{time.monotonic() - started:5.0f} s  exit {out.returncode}  {example}")
        # 0: done; 1: it ran and reported a finding (an underpowered variant is 'not shown equivalent');
        # 2 is bad input, and a traceback is a crash, whatever the exit code
        if out.returncode not in (0, 1) or "Traceback" in out.stderr or not out.stdout.strip():
            failures.append(f"{example}\n  exit {out.returncode}\n{out.stderr[-1500:]}")
    assert smoke is not None and smoke.returncode == 0, smoke.stderr[-3000:] if smoke else "no smoke run"

    steps = where_to_look_next(smoke.stdout)
    kinds = [" ".join(c.split()[:2]) if c.startswith("make") else c.split()[0] for c, _ in steps]
    assert kinds == ["make ui", "make dashboard", "mlflow", "assay", "less"], steps
    for command, what in steps:
        url = re.search(r"https?://localhost:\d+", what)
        if command.startswith("mlflow ui"):
            url = f"http://localhost:{command.split('--port')[1].split()[0]}"
        elif url:
            url = url.group(0)
        if url:
            page = serve_and_ask(command, url, user)
            print(f"{command}: answered on {url} ({len(page)} bytes)")
        else:
            out = run(command, user, cwd=REPO, timeout=120)
            if out.returncode != 0 or not out.stdout.strip():
                failures.append(f"{command}\n  exit {out.returncode}\n{out.stderr[-1500:]}")
    assert not failures, "\n\n".join(failures)
