"""Every command the README shows works as shown (issue 32): each command line of a ```bash block
in README.md and deploy/README.md is either run here, exactly as written, in a fresh ASSAY_HOME,
or its block says, in a comment line the reader sees, why it is not run here:

    # not run by the README test: <reason: a GPU, a cluster, another machine, a named test>

The blocks come from pytest-codeblocks' extractor (it handles indented fences in lists); its own
runner is not used because it runs a block as one script, and a block mixes cheap commands with
ones that need a GPU or a cluster.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from pytest_codeblocks import extract_from_file

from tests.conftest import SMOKE_RUN

REPO = Path(__file__).resolve().parents[2]
READMES = ("README.md", "deploy/README.md")
MARKER = re.compile(r"^\s*# not run by the README test: (\S.*)$")

# the README's smoke run (README.md, team-profile walk-through): run on the local profile here, once
# per session (tests/conftest.py's smoke_run); tests/pipelines/test_team_profile_e2e.py runs it on the team profile
TINY_DEMO = ".venv/bin/assay demo --recipe tiny --domains math_arith_easy --steps 2 --sweep-items 3"
# commands cheap enough to run here (seconds, or the tiny demo's minute); anything else needs a marker
RUNNABLE = (
    re.compile(r"^" + re.escape(TINY_DEMO) + r"$"),
    re.compile(r"^(\.venv/bin/)?assay domains list\b"),
    re.compile(r"^(\.venv/bin/)?assay sql \""),
    re.compile(r"^(\.venv/bin/)?assay( [\w-]+)* --help$"),
)


def readme_commands() -> list[tuple[str, int, str, str | None]]:
    """(readme, block line, command, the block's not-run reason or None) for each command line."""
    commands = []
    for readme in READMES:
        for block in extract_from_file(REPO / readme):
            if block.syntax != "bash":
                continue
            code = block.code.replace("\\\n", " ")  # a continued command is one command
            reasons = [m.group(1) for m in map(MARKER.match, code.splitlines()) if m]
            for line in code.splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    commands.append((readme, block.lineno, " ".join(line.split()), reasons[0] if reasons else None))
    return commands


def is_runnable(command: str) -> bool:
    # the trailing comment is for the reader; bash ignores it too
    bare = re.sub(r"\s+#.*$", "", command)
    return any(p.match(bare) for p in RUNNABLE)


COMMANDS = readme_commands()
RUN_HERE = [c for _, _, c, _ in COMMANDS if is_runnable(c)]


def test_every_readme_command_is_run_here_or_marked_with_a_reason():
    assert len(COMMANDS) > 20, COMMANDS  # the extractor found the blocks
    unmarked = [f"{readme}:{line}: {command}" for readme, line, command, reason in COMMANDS
                if not is_runnable(command) and reason is None]
    assert not unmarked, ("these README commands are neither run by this test nor marked "
                          "'# not run by the README test: <reason>' in their block:\n" + "\n".join(unmarked))
    assert TINY_DEMO in RUN_HERE, "the README's smoke run is no longer in a bash block as written"


def run_as_written(command: str, env: dict, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.slow
def test_the_readme_smoke_run_runs_every_stage_and_says_what_it_did_about_difficulty(smoke_run):
    # the session's shared smoke run (tests/conftest.py) is the README's command, as written
    assert SMOKE_RUN == TINY_DEMO
    tiny_demo = smoke_run
    assert tiny_demo.returncode == 0, tiny_demo.stderr[-3000:]
    for heading in ("== 1. Ingest and quality gates", "== 2. GRPO training", "== 3. Sweep", "== 4. Promotion"):
        assert heading in tiny_demo.stdout, tiny_demo.stdout[-3000:]
    said = "the tiny policy cannot measure difficulty (it is random and solves nothing): " \
           "math_arith_easy gated on the text heuristic"
    assert said in tiny_demo.stderr and said in tiny_demo.stdout, tiny_demo.stdout[-3000:]
    [estimate] = [line for line in tiny_demo.stdout.splitlines() if line.startswith("  math_arith_easy: ")]
    assert estimate.startswith("  math_arith_easy: heuristic") and "cannot measure difficulty" in estimate, estimate


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in RUN_HERE if c != TINY_DEMO])
def test_the_cheap_readme_commands_run_as_written_after_the_smoke_run(command, smoke_run):
    # in the smoke run's home, so `assay sql` finds the tables it queries
    assert smoke_run.returncode == 0, smoke_run.stderr[-2000:]
    out = run_as_written(command, smoke_run.env, timeout=120)
    assert out.returncode == 0, f"{command}\n{out.stderr[-2000:]}"
    assert out.stdout.strip(), command
