"""The README's walk-through of "Bring your own environments" (issue 44), run as written: every command of
the README block that names this file, in order, in one shell, in a fresh ASSAY_HOME (one example per
source imported and checked, the imported domains carded and swept by the default policy). Then each
domain the block checks has results in the lake and opens on the dashboard's Domain page."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from tests.conftest import readme_block, user_shell

REPO = Path(__file__).resolve().parents[2]
MARKER = "tests/pipelines/test_byo_environments_readme.py runs this block as written"


def the_block() -> list[str]:
    return readme_block(MARKER)


def checked_domains(commands: list[str]) -> list[str]:
    """The domains the block checks, one `assay domains check NAME` per imported example."""
    return [m.group(1) for c in commands if (m := re.match(r"^(?:\.venv/bin/)?assay domains check (\w+)\b", c))]


def test_the_block_imports_and_checks_each_example_then_cards_and_sweeps_them():
    commands = the_block()
    imports = [c for c in commands if re.match(r"^(\.venv/bin/)?assay domains import ", c)]
    checked = checked_domains(commands)
    assert imports and len(imports) == len(checked), (imports, checked)
    assert "inspect" in {c.split()[3] for c in imports}
    assert any(" domains report " in f" {c} " for c in commands)
    assert any(c.split()[:3] == ["assay", "sweep", "--checkpoint"] and "base-smollm2" in c for c in commands)


@pytest.mark.slow  # imports and checks run in seconds; the sweep loads SmolLM2 (~1 min on CPU)
def test_the_readme_walk_through_of_imported_environments_runs_as_written(tmp_path, monkeypatch):
    commands = the_block()
    home = tmp_path / "home"
    env = user_shell(home)
    env["OMP_NUM_THREADS"] = "1"
    # one shell, as a reader pastes the block; stop at the first failure
    script = "set -e\n" + "\n".join(f"echo {shlex.quote('>>> ' + c)} >&2\n{c}" for c in commands)
    out = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]

    from storage.lake import Lake
    from tests.ui.conftest import fresh_app

    monkeypatch.setenv("ASSAY_HOME", str(home))
    lake = Lake.at(home)
    for name in checked_domains(commands):
        assert f"PASS  {name}" in out.stdout, out.stdout[-3000:]  # its self-test and its report card
        results = lake.read("results", where={"domain": name})
        assert results.height >= 1, f"{name}: the sweep wrote no results"
        at = fresh_app()
        at.query_params["domain"] = name
        at.run()
        at.switch_page("app_pages/domain.py").run()
        assert not at.exception, [e.value for e in at.exception]
        assert at.selectbox(key="domain_choice").value == name
