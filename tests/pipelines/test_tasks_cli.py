"""`assay tasks check` and terminal task suites through `assay domains list|check`, run for real
(subprocess CLI, real bubblewrap sandboxes)."""

from __future__ import annotations

import json

import pytest

from domains.task_folder import task_suite_domain
from tests.conftest import run_cli, write_task, write_task_suite
from tests.sandbox.sandbox_helpers import needs_bwrap

pytestmark = needs_bwrap
KEYS = {"task", "oracle_passed", "do_nothing_failed", "ok", "detail"}


def test_tasks_check_passes_a_sound_suite(tmp_path, assay_home):
    suite = write_task_suite(tmp_path)
    out = run_cli("tasks", "check", str(suite), "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["task"] for r in rows] == ["count", "hello", "upper"]
    assert all(set(r) == KEYS and r["ok"] and r["oracle_passed"] and r["do_nothing_failed"] for r in rows), rows
    one = run_cli("tasks", "check", str(suite / "count"))
    assert one.returncode == 0 and "1/1 tasks ok" in one.stdout, one.stderr


def test_tasks_check_reports_broken_tasks_with_exit_1(tmp_path, assay_home):
    suite = write_task_suite(tmp_path)
    (suite / "upper" / "solution.sh").write_text("echo nope > out.txt\n")
    write_task(suite, "lax", run_sh="true\n")
    out = run_cli("tasks", "check", str(suite), "--json")
    assert out.returncode == 1, out.stderr
    rows = {r["task"]: r for r in json.loads(out.stdout)}
    assert (rows["upper"]["oracle_passed"], rows["upper"]["ok"]) == (False, False)
    assert (rows["lax"]["do_nothing_failed"], rows["lax"]["ok"]) == (False, False)
    assert rows["count"]["ok"] and rows["hello"]["ok"]
    human = run_cli("tasks", "check", str(suite))
    assert human.returncode == 1 and "BROKEN  lax" in human.stdout and "2/4 tasks ok" in human.stdout


@pytest.mark.parametrize("make, message", [
    (lambda root: root / "missing", "not a folder"),
    (lambda root: root, "holds no task folders"),
    (lambda root: write_task(root / "s", "t", task_yaml="instruction: [\n").parent, "not valid YAML"),
])
def test_tasks_check_bad_input_is_exit_2(tmp_path, assay_home, make, message):
    target = make(tmp_path)
    out = run_cli("tasks", "check", str(target))
    assert out.returncode == 2 and message in out.stderr and out.stdout == "", out.stderr


def test_tasks_check_help_explains_the_format():
    out = run_cli("tasks", "check", "--help")
    assert out.returncode == 0 and "tests/run.sh" in out.stdout and "examples:\n  assay tasks check ./my_tasks" in out.stdout


def test_a_suite_on_the_path_is_listed_and_self_tested(tmp_path, assay_home):
    suite = write_task_suite(tmp_path / "plugins")
    env = {"ASSAY_DOMAINS_PATH": str(tmp_path / "plugins")}
    listed = run_cli("domains", "list", "--tag", "terminal", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert sorted(r["name"] for r in json.loads(listed.stdout)) == ["shell_tasks", "terminal"]  # + the built-in
    checked = run_cli("domains", "check", suite.name, "--samples", "2", "--json", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert report["passed"] and report["checks"]["tasks_check"]["passed"], report
    assert report["checks"]["reference_scores_1"]["passed"] and report["checks"]["corruptions_score_less"]["passed"]


def test_a_broken_task_the_sample_misses_still_fails_its_domain(tmp_path, assay_home):
    """The generic checks see only the sampled tasks; tasks_check sees every task."""
    suite = write_task_suite(tmp_path / "plugins")
    domain = task_suite_domain(suite)
    sampled = {r["metadata"]["task"] for split in ("eval", "train") for r in domain.generate(split, 1, seed=0 if split == "eval" else 1)}
    (unsampled,) = {"count", "hello", "upper"} - sampled
    (suite / unsampled / "solution.sh").write_text("true\n")  # its oracle no longer solves it
    checked = run_cli("domains", "check", suite.name, "--samples", "1", "--json",
                      env={"ASSAY_DOMAINS_PATH": str(tmp_path / "plugins")})
    assert checked.returncode == 1, checked.stderr
    report = json.loads(checked.stdout)
    failed = [name for name, check in report["checks"].items() if not check["passed"]]
    assert failed == ["tasks_check"], report
    assert f"{unsampled}: the oracle failed the tests" in report["checks"]["tasks_check"]["detail"]
