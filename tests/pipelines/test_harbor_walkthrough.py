"""The README's Harbor walk-through (section "Terminal tasks"), run as written from a fresh
ASSAY_HOME: the example suite imported, its images built offline, checked (oracles pass, doing
nothing fails), the refused example refused before anything runs, a sweep of the suite with the
default policy (SmolLM2), and the domain on the dashboard's domain page."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from pytest_codeblocks import extract_from_file

from tests.conftest import user_shell
from tests.sandbox.sandbox_helpers import needs_images

REPO = Path(__file__).resolve().parents[2]
FIRST = "assay tasks import harbor examples/harbor_tasks --suite harbor_examples"


def walkthrough() -> list[str]:
    """The commands of the README block that starts the walk-through, as written."""
    for block in extract_from_file(REPO / "README.md"):
        if block.syntax == "bash" and FIRST in block.code:
            return [line.strip() for line in block.code.splitlines() if line.strip() and not line.startswith("#")]
    raise AssertionError("the README no longer holds the Harbor walk-through")


@pytest.mark.slow
@needs_images
def test_the_readme_walkthrough_imports_builds_checks_sweeps_and_shows_the_domain(tmp_path, monkeypatch):
    commands = walkthrough()
    assert [c.split()[:3] for c in commands] == [["assay", "tasks", "import"], ["assay", "tasks", "build"],
                                                 ["assay", "tasks", "check"], ["assay", "tasks", "check"],
                                                 ["assay", "sweep", "--checkpoint"]]
    home = tmp_path / "home"
    env = user_shell(home)
    done = [subprocess.run(["bash", "-c", command], cwd=REPO, env=env, capture_output=True, text=True, timeout=1500)
            for command in commands]
    imported, built, checked, refused, swept = done
    assert imported.returncode == 0 and "imported 3 tasks" in imported.stdout, imported.stderr[-2000:]
    assert built.returncode == 0 and built.stdout.count("image ") == 3, built.stderr[-3000:]
    assert checked.returncode == 0 and "3/3 tasks ok" in checked.stdout, checked.stdout + checked.stderr[-2000:]
    assert refused.returncode == 2 and refused.stdout == "", refused.stdout
    assert "line 6: FROM debian:bookworm-slim: a second FROM starts another stage" in refused.stderr, refused.stderr
    assert swept.returncode == 0, swept.stderr[-3000:]

    from storage.lake import Lake

    results = Lake.at(home).read("results", where={"domain": "harbor_examples"})
    assert results.height >= 1
    episode = json.loads(results["completion"][0])
    assert episode["turns"] and episode["end"] in ("done", "max_turns", "timeout") and "rewards" in episode

    from tests.ui.conftest import fresh_app

    monkeypatch.setenv("ASSAY_HOME", str(home))
    at = fresh_app()
    at.query_params["domain"] = "harbor_examples"
    at.run()
    at.switch_page("app_pages/domain.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="domain_choice").value == "harbor_examples"
