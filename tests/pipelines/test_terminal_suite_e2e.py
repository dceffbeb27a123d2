"""A task folder dropped on ASSAY_DOMAINS_PATH, end to end through the CLI as a user runs it:
checked, trained on with multi-turn GRPO, swept as episodes for the base and the trained
checkpoint, compared, and shown on the dashboard's domain page. The tiny policy solves nothing
(its turns are noise), so the figures are zeros; the path is what is tested."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import run_cli

TASKS = Path(__file__).resolve().parents[2] / "domains" / "builtin" / "terminal_tasks"
UNSET = ("DS_ACCELERATOR", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@pytest.mark.slow
def test_a_dropped_task_suite_is_checked_trained_swept_compared_and_shown(tiny_home, tmp_path, monkeypatch):
    plugins = tmp_path / "plugins"
    suite = plugins / "shell_tasks"
    for name in ("create_hello_file", "count_lines", "make_directory", "first_line", "csv_filter_rows"):
        shutil.copytree(TASKS / name, suite / name)
    env = {"ASSAY_HOME": str(tiny_home), "ASSAY_DOMAINS_PATH": str(plugins)}

    checked = run_cli("tasks", "check", str(suite), "--json", env=env, unset=UNSET)
    assert checked.returncode == 0, checked.stderr[-2000:]

    trained = run_cli("train", "--recipe", "tiny", "--domains", "shell_tasks", "--steps", "2", "--json",
                      env=env, unset=UNSET, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    payload = json.loads(trained.stdout)
    checkpoint = payload["checkpoint"]
    assert payload["steps"] == 2 and checkpoint
    assert all(h["domain"] in ("shell_tasks", "_all") for h in payload["history"])

    for target in ("base-tiny", checkpoint):
        swept = run_cli("sweep", "--checkpoint", target, "--domains", "shell_tasks", "--max-new-tokens", "16",
                        "--no-mlflow", "--json", env=env, unset=UNSET, timeout=600)
        assert swept.returncode == 0, swept.stderr[-3000:]
        [domain] = json.loads(swept.stdout)["domains"]
        assert domain["domain"] == "shell_tasks" and domain["n"] >= 1 and domain["mean"] is not None

    from evaluation.promotion import compare_checkpoints
    from storage.lake import Lake

    lake = Lake.at(tiny_home)
    results = lake.read("results", where={"checkpoint": checkpoint, "domain": "shell_tasks"})
    episode = json.loads(results["completion"][0])  # each sample is an episode's transcript
    assert episode["end"] in ("done", "max_turns", "timeout") and episode["turns"]
    report = compare_checkpoints(lake, checkpoint, "base-tiny")
    [row] = report.to_frame().filter(pl.col("domain") == "shell_tasks").to_dicts()
    assert row["n"] >= 1 and row["verdict"]

    from tests.ui.conftest import fresh_app

    monkeypatch.setenv("ASSAY_HOME", str(tiny_home))
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    at = fresh_app()
    at.query_params["domain"] = "shell_tasks"
    at.run()
    at.switch_page("app_pages/domain.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.selectbox(key="domain_choice").value == "shell_tasks"
    assert "Latest regression verdict" in [h.value for h in at.header]
