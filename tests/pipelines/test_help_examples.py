"""Every example an `assay ... --help` shows runs as written, and every command `assay demo` prints
under "Where to look next" runs, or, for a server (`make ui`, `make dashboard`, `mlflow ui`),
starts and answers on the address printed beside it (issue 32).

Examples are registered with :func:`pipelines.cli.with_examples`, which is what shows them in the
help text; the test walks the real parser, so a new example is run without touching this file.
Each example is its own test (a command whose examples build on each other, e.g. `assay reward
pairs` then `assay reward train`, is one test running them in order), so xdist spreads them over
its workers. Each runs in its own copy of the home of the README's smoke run (the first demo
example; the session runs it once for every test that checks it, tests/conftest.py's smoke_run),
in the state the smoke run left whatever ran before it, from a working folder holding a copy of
two shipped terminal tasks as the user's ``./my_tasks`` (Harbor's format), a suite of Assay's
older format as ``./old_tasks`` and the example environments of other frameworks as
``./examples/environments``. The demo's next steps run in the smoke
run's home itself, which they only read.
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
from tests.conftest import user_shell

REPO = Path(__file__).resolve().parents[2]
SMOKE_RUN = "assay demo --recipe tiny --domains math_arith_easy --steps 2 --sweep-items 3"
# the order examples are listed in: the smoke run first (EXAMPLES[0]); each test starts from the
# smoke run's state, so nothing else depends on it
ORDER = ("demo", "sql", "regress", "tasks", "domains", "difficulty", "train", "sweep", "variant")
# commands whose examples read what the earlier ones wrote: one test runs them in order (the regress
# example compares the files its `assay sql COPY` examples wrote; `assay reward check` reads the
# reward model `assay reward train` trained on the pairs `assay reward pairs` wrote)
SEQUENCES = ("assay regress", "assay reward")


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


def example_groups() -> list[tuple[str, list[str]]]:
    """(test id, the examples it runs in order): one per example, one per command of SEQUENCES;
    the smoke run (the session's shared one) is checked by its own test."""
    groups: dict[str, list[str]] = {}
    for index, (prog, example) in enumerate(EXAMPLES):
        if example.startswith(SMOKE_RUN):
            continue
        sequence = next((name for name in SEQUENCES if prog == name or prog.startswith(name + " ")), None)
        key = sequence.replace(" ", "-") if sequence else f"{prog.replace(' ', '-')}-{index}"
        groups.setdefault(key, []).append(example)
    return list(groups.items())


GROUPS = example_groups()


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


def test_every_example_is_run_by_one_test():
    run_here = [example for _, examples in GROUPS for example in examples]
    assert sorted(run_here) == sorted(e for _, e in EXAMPLES if not e.startswith(SMOKE_RUN)), run_here
    assert len(run_here) == len(EXAMPLES) - 1 and [e for _, e in EXAMPLES].count(EXAMPLES[0][1]) == 1
    regress = dict(GROUPS)["assay-regress"]  # in registration order: the COPY examples, then regress
    assert [e.split()[1] for e in regress] == ["sql", "sql", "regress"], regress
    reward = dict(GROUPS)["assay-reward"]
    assert [e.split()[2] for e in reward][:2] == ["pairs", "train"], reward


def _work_folder(path: Path) -> Path:
    from tests.conftest import write_task_suite

    for task in ("count_lines", "create_hello_file"):
        shutil.copytree(REPO / "domains" / "builtin" / "terminal_tasks" / task, path / "my_tasks" / task)
    write_task_suite(path, "old_tasks")  # a suite of Assay's older format, for `assay tasks migrate`
    # environments of other frameworks, for `assay domains import` (they read their data from their own folder)
    shutil.copytree(REPO / "examples" / "environments", path / "examples" / "environments",
                    ignore=shutil.ignore_patterns("__pycache__"))
    return path


@pytest.fixture
def user(tmp_path, smoke_run) -> dict:
    """A user's shell after the README's smoke run (a copy of the session's shared one's home,
    `assay` and `mlflow` on PATH), in a working folder holding a task suite."""
    assert smoke_run.returncode == 0, smoke_run.stderr[-3000:]
    home = smoke_run.copy_home(tmp_path / "home")
    return {"env": user_shell(home), "cwd": _work_folder(tmp_path / "work"), "smoke": smoke_run}


@pytest.fixture
def smoke_user(tmp_path, smoke_run) -> dict:
    """A user's shell in the session's shared smoke run's home itself (for what only reads it)."""
    return {"env": smoke_run.env, "cwd": _work_folder(tmp_path / "work"), "smoke": smoke_run}


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
def test_the_smoke_run_example_is_the_sessions_shared_smoke_run(smoke_run):
    # the session's shared smoke run ran this exact command (from the repository root)
    assert CONFTEST_SMOKE_RUN == ".venv/bin/" + SMOKE_RUN
    assert smoke_run.returncode == 0, smoke_run.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("examples", [examples for _, examples in GROUPS], ids=[key for key, _ in GROUPS])
def test_every_help_example_runs_as_written(examples, user):
    failures = []
    for example in examples:
        started = time.monotonic()
        out = run(example, user)
        print(f"{time.monotonic() - started:5.0f} s  exit {out.returncode}  {example}")
        # 0: done; 1: it ran and reported a finding (an underpowered variant is 'not shown equivalent');
        # 2 is bad input, and a traceback is a crash, whatever the exit code
        if out.returncode not in (0, 1) or "Traceback" in out.stderr or not out.stdout.strip():
            failures.append(f"{example}\n  exit {out.returncode}\n{out.stderr[-1500:]}")
    assert not failures, "\n\n".join(failures)


NEXT_STEP_KINDS = ["make ui", "make dashboard", "mlflow", "assay", "less"]


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(NEXT_STEP_KINDS)), ids=[k.replace(" ", "-") for k in NEXT_STEP_KINDS])
def test_every_next_step_of_the_demo_runs_as_written(index, smoke_user):
    smoke = smoke_user["smoke"]
    assert smoke.returncode == 0, smoke.stderr[-3000:]
    steps = where_to_look_next(smoke.stdout)
    kinds = [" ".join(c.split()[:2]) if c.startswith("make") else c.split()[0] for c, _ in steps]
    assert kinds == NEXT_STEP_KINDS, steps
    command, what = steps[index]
    url = re.search(r"https?://localhost:\d+", what)
    if command.startswith("mlflow ui"):
        url = f"http://localhost:{command.split('--port')[1].split()[0]}"
    elif url:
        url = url.group(0)
    if url:
        page = serve_and_ask(command, url, smoke_user)
        print(f"{command}: answered on {url} ({len(page)} bytes)")
    else:
        out = run(command, smoke_user, cwd=REPO, timeout=120)
        assert out.returncode == 0 and out.stdout.strip(), f"{command}\n  exit {out.returncode}\n{out.stderr[-1500:]}"
