"""Terminal task folders (domains.task_folder): the format, suites as domains scored in real
sandboxes, registration from ASSAY_DOMAINS_PATH, and the check that every oracle passes and doing
nothing fails."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from domains import Domain, DomainError, load_registry
from domains.task_folder import (
    EVAL_SHARE, TaskFormatError, check_task, is_task_suite, load_task, load_task_suite,
    run_task_episode_script, script_of, split_of, task_suite_domain,
)
from tests.conftest import write_plugin, write_task, write_task_suite
from tests.sandbox.sandbox_helpers import needs_bwrap

# -- the format -------------------------------------------------------------------------------------


def test_load_task_reads_the_folder_with_defaults(tmp_path):
    task = load_task(write_task(tmp_path, "hello", files={"a.txt": "x"}))
    assert task.name == "hello" and task.spec.instruction == "Write HELLO to out.txt."
    assert (task.spec.max_turns, task.spec.timeout_s, task.spec.tags, task.spec.difficulty) == (20, 300.0, [], None)
    assert task.files_dir == tmp_path / "hello" / "files" and task.tests_dir == tmp_path / "hello" / "tests"
    assert task.solution_text == "echo HELLO > out.txt\n"
    assert load_task(write_task(tmp_path, "no_files")).files_dir is None


@pytest.mark.parametrize("task_yaml, expected", [
    ("max_turns: 3\n", r"task.yaml: instruction is required"),
    ("instruction: '   '\n", r"task.yaml: instruction: .*instruction is empty"),
    ("instruction: x\nmax_turns: 0\n", r"task.yaml: max_turns: .*greater than or equal to 1 \(got 0\)"),
    ("instruction: x\ntimeout_s: -5\n", r"task.yaml: timeout_s: .*greater than 0"),
    ("instruction: x\ntags: easy\n", r"task.yaml: tags: .*valid list"),
    ("instruction: x\nmax_turn: 3\n", r"task.yaml: unknown key 'max_turn' \(allowed: instruction, max_turns"),
    ("instruction: [unclosed\n", r"task.yaml: not valid YAML .*fix the syntax"),
    ("- just a list\n", r"task.yaml: must be a mapping"),
])
def test_bad_task_yaml_names_the_file_and_the_fix(tmp_path, task_yaml, expected):
    folder = write_task(tmp_path, "bad", task_yaml=task_yaml)
    with pytest.raises(TaskFormatError, match=expected) as info:
        load_task(folder)
    assert str(folder / "task.yaml") in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("missing, expected", [
    ("task.yaml", r"task.yaml: missing; write one with at least `instruction"),
    ("solution.sh", r"solution.sh: missing; write the bash script that solves the task"),
    ("tests/run.sh", r"run.sh: missing; write the hidden test script \(exit 0 = solved\)"),
])
def test_missing_files_name_the_file(tmp_path, missing, expected):
    folder = write_task(tmp_path, "gap")
    (folder / missing).unlink()
    with pytest.raises(TaskFormatError, match=expected):
        load_task(folder)


def test_suites_sorted_hidden_folders_ignored_broken_task_named(tmp_path):
    suite = write_task_suite(tmp_path)
    (suite / ".git").mkdir()
    (suite / "_drafts").mkdir()
    assert is_task_suite(suite) and not is_task_suite(suite / "hello") and not is_task_suite(tmp_path / "nope")
    assert [t.name for t in load_task_suite(suite)] == ["count", "hello", "upper"]
    (suite / "notes").mkdir()
    with pytest.raises(TaskFormatError, match=r"notes/task.yaml: missing"):
        load_task_suite(suite)
    with pytest.raises(TaskFormatError, match="this is one task, not a suite"):
        load_task_suite(suite / "hello")


def test_split_is_disjoint_complete_stable_and_never_empty():
    names = [f"task{i}" for i in range(200)]
    split = split_of(names)
    assert set(split) == set(names) and set(split.values()) == {"train", "eval"}
    share = sum(v == "eval" for v in split.values()) / len(names)
    assert abs(share - EVAL_SHARE) < 0.1
    # stable: adding tasks moves no existing task (the rule is per name, not by rank)
    bigger = split_of(names + [f"new{i}" for i in range(50)])
    assert all(bigger[n] == split[n] for n in names)
    for n in range(2, 8):  # small suites keep both splits
        assert set(split_of([f"t{i}" for i in range(n)]).values()) == {"train", "eval"}
    assert split_of(["only"]) == {"only": "eval"}


def test_script_of_takes_fenced_blocks_or_the_whole_text():
    assert script_of("echo hi") == "echo hi"
    assert script_of("Here:\n```bash\necho a\n```\nand\n```\necho b\n```\n") == "echo a\n\necho b\n"


# -- the domain (real sandboxes) ------------------------------------------------------------------


@needs_bwrap
def test_suite_domain_rows_tags_and_scores(tmp_path):
    suite = write_task_suite(tmp_path)
    domain = task_suite_domain(suite)
    assert isinstance(domain, Domain) and domain.name == "shell_tasks"
    assert domain.tags == ("terminal", "data", "easy", "text")
    train, evals = domain.generate("train", 10), domain.generate("eval", 10)
    assert len(train) + len(evals) == 3 and train and evals
    assert not {r["id"] for r in train} & {r["id"] for r in evals}
    rows = {r["id"]: r for r in train + evals}
    upper = rows["shell_tasks/upper"]
    assert upper["prompt"] == "Write the contents of a.txt in upper case to out.txt."
    assert upper["answer"] == "tr a-z A-Z < a.txt > out.txt\n"
    assert upper["metadata"] == {"task": "upper", "format": "task.yaml", "max_turns": 20, "timeout_s": 300.0,
                                 "tags": ["text", "easy"], "difficulty": "easy"}
    for row in rows.values():
        assert domain.safe_score(row["answer"], row) == 1.0  # the oracle
        assert domain.safe_score("", row) == 0.0  # doing nothing
    assert domain.safe_score("```bash\ntr a-z A-Z < a.txt > out.txt\n```", upper) == 1.0
    assert domain.safe_score("echo HELLO > out.txt", upper) == 1.0  # any script that solves it
    assert domain.safe_score("tr a-z A-Z < a.txt", upper) == 0.0  # printed, not written
    batch = [r for r in rows.values()] * 2
    completions = [r["answer"] for r in rows.values()] + ["true"] * 3
    assert domain.safe_score_many(completions, batch) == [1.0] * 3 + [0.0] * 3


@needs_bwrap
def test_run_task_episode_script_returns_the_command_and_the_verdict(tmp_path):
    task = load_task_suite(write_task_suite(tmp_path))[0]  # count
    command, verdict = run_task_episode_script(task, "wc -l < data.txt > count.txt; cat count.txt")
    assert command.output == "3\n" and command.exit_code == 0 and verdict.passed
    command, verdict = run_task_episode_script(task, "echo 4 > count.txt; exit 9")
    assert command.exit_code == 9 and not verdict.passed and verdict.exit_code == 1


def test_domain_name_comes_from_the_folder_and_is_validated(tmp_path):
    suite = write_task_suite(tmp_path, "Bad-Name")
    with pytest.raises(DomainError, match=r"'Bad-Name' is not lower_snake_case.*rename the folder"):
        task_suite_domain(suite)
    assert task_suite_domain(suite, name="renamed").name == "renamed"


@needs_bwrap
def test_check_task_catches_a_failing_oracle_and_tests_that_pass_on_nothing(tmp_path):
    good = load_task(write_task(tmp_path, "good"))
    wrong_oracle = load_task(write_task(tmp_path, "wrong_oracle", solution="echo HULLO > out.txt\n"))
    lax_tests = load_task(write_task(tmp_path, "lax_tests", run_sh="exit 0\n"))
    assert check_task(good) == {"task": "good", "oracle_passed": True, "do_nothing_failed": True, "ok": True,
                                "detail": "oracle passes, doing nothing fails"}
    broken = check_task(wrong_oracle)
    assert (broken["oracle_passed"], broken["do_nothing_failed"], broken["ok"]) == (False, True, False)
    assert "the oracle failed the tests" in broken["detail"]
    lax = check_task(lax_tests)
    assert (lax["oracle_passed"], lax["do_nothing_failed"], lax["ok"]) == (True, False, False)
    assert "doing nothing passes the tests" in lax["detail"]


# -- registration ---------------------------------------------------------------------------------


def test_suites_on_the_path_register_beside_module_plugins(tmp_path):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plug")
    write_task_suite(plugins, "inner_tasks")  # a suite inside a folder on the path
    direct = write_task_suite(tmp_path, "direct_tasks")  # a folder on the path that is a suite
    broken = write_task_suite(tmp_path / "more", "broken_tasks")
    (broken / "hello" / "solution.sh").unlink()
    registry = load_registry(f"{plugins}:{direct}:{tmp_path / 'more'}", include_builtins=False)
    assert registry.names == ["plug", "inner_tasks", "direct_tasks"]
    assert registry.sources["direct_tasks"] == str(direct)
    assert "terminal" in registry.get("inner_tasks").tags
    assert [(e.source, "solution.sh: missing" in e.reason) for e in registry.errors] == [(str(broken), True)]


def test_a_suite_named_like_a_registered_domain_is_reported(tmp_path):
    write_plugin(tmp_path / "plugins", "clash")
    write_task_suite(tmp_path / "plugins", "clash")
    registry = load_registry(str(tmp_path / "plugins"), include_builtins=False)
    assert registry.names == ["clash"] and "already registered" in registry.errors[0].reason


def test_copying_a_suite_is_all_it_takes(tmp_path):
    suite = write_task_suite(tmp_path / "a")
    shutil.copytree(suite, tmp_path / "b" / "copied_tasks")
    registry = load_registry(str(tmp_path / "b"), include_builtins=False)
    assert registry.names == ["copied_tasks"] and len(registry.get("copied_tasks").generate("eval", 10)) >= 1
