"""Every error a user can cause reaches the terminal as one line, `assay: error: ...` saying what to do,
with exit status 2 and nothing on stdout; a traceback is for bugs only. The library raises a
storage.errors.UserError where it detects the problem and pipelines.cli.main maps it once."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli, user_shell


def assert_user_error(out, *expected: str) -> str:
    """One `assay: error:` line holding every ``expected`` text, exit 2, no traceback, no stdout."""
    assert out.returncode == 2, (out.returncode, out.stderr[-3000:])
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert out.stdout == ""
    errors = [line for line in out.stderr.splitlines() if line.startswith("assay: error: ")]
    assert len(errors) == 1, out.stderr[-3000:]
    for text in expected:
        assert text in errors[0], (text, errors[0])
    return errors[0]


@pytest.mark.parametrize("args, expected", [
    (("train", "--steps", "x"), ("train: argument --steps: invalid int value: 'x'", "see `assay train --help`")),
    (("demo", "--domains"), ("demo: argument --domains: expected at least one argument", "`assay demo --help`")),
    (("sweep", "--domains", "math_arith_easy"), ("sweep: the following arguments are required: --checkpoint",)),
    (("domains", "atack"), ("domains: argument ACTION: invalid choice: 'atack'",)),
    (("nonsense",), ("argument COMMAND: invalid choice: 'nonsense'", "(see `assay --help`)")),
])
def test_a_bad_flag_is_one_error_line_naming_the_command_and_its_help(args, expected, assay_home):
    line = assert_user_error(run_cli(*args), *expected)
    assert "usage:" not in line


def test_a_run_name_that_exists_with_another_config_is_refused_without_a_traceback(smoke_run, tmp_path):
    """The issue's case: train a run named x, then the same command with another seed."""
    assert smoke_run.returncode == 0, smoke_run.stderr[-3000:]
    home = smoke_run.copy_home(tmp_path / "home")
    (name,) = [p.name for p in (home / "runs").iterdir() if (p / "state.json").exists()]
    out = run_cli("train", "--recipe", "tiny", "--domains", "math_arith_easy", "--steps", "2", "--run-name", name,
                  "--seed", "5", "--no-progress", env=user_shell(home), unset=("DS_ACCELERATOR",))
    assert_user_error(out, f"run {name!r} exists with a different config", "choose another run name (--run-name",
                      "delete that folder")


def test_a_missing_checkpoint_names_the_known_ones(assay_home):
    assert_user_error(run_cli("sweep", "--checkpoint", "no-such-ckpt", "--domains", "math_arith_easy", "--json"),
                      "unknown checkpoint 'no-such-ckpt'", "'champion'")


@pytest.mark.parametrize("args", [
    ("train", "--recipe", "tiny", "--domains", "math_arith_easy", "mathh", "--steps", "1"),
    ("demo", "--domains", "math_arith_easy,mathh"),
    ("sweep", "--checkpoint", "base-tiny", "--domains", "mathh"),
    ("domains", "attack", "mathh"),
])
def test_an_unknown_domain_is_named_with_the_known_ones(args, assay_home):
    assert_user_error(run_cli(*args), "unknown domain 'mathh' (known: code, ", "see `assay domains list`")


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: tmp / "absent.jsonl", "no such file"),
    (lambda tmp: (tmp / "rows.jsonl").mkdir() or tmp / "rows.jsonl", "is a folder: give the path of a file"),
    (lambda tmp: (tmp / "rows.parquet").write_text("not parquet") and tmp / "rows.parquet", "cannot read"),
])
def test_an_unreadable_input_file_says_why(make, expected, assay_home, tmp_path):
    path = make(tmp_path)
    assert_user_error(run_cli("ingest", "math_arith_easy", str(path)), expected, "rows" if "rows" in str(path)
                      else "absent")
    assert_user_error(run_cli("regress", "--baseline", str(path), "--candidate", str(path)), expected)


def test_an_unknown_recipe_and_a_bad_policy_file_are_user_errors(assay_home, tmp_path):
    assert_user_error(run_cli("train", "--recipe", str(tmp_path / "none.yaml")), "recipe file", "does not exist")
    policy = tmp_path / "promotion.yaml"
    policy.write_text("promote_when: sometimes\n")
    results = tmp_path / "r.jsonl"
    results.write_text(json.dumps({"domain": "math_arith_easy", "item_id": "a", "sample_idx": 0, "score": 1}) + "\n")
    assert_user_error(run_cli("regress", "--baseline", str(results), "--candidate", str(results), "--policy",
                              str(policy)), "promotion policy", "promote_when")


def test_a_bug_keeps_its_traceback(assay_home, tmp_path):
    """Only UserError is mapped: any other exception escaping a command is shown as the bug it is."""
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("import sys\n"
            "from pipelines import cli\n"
            "def boom(args):\n    raise ValueError('a bug, not a user error')\n"
            "parser = cli.build_parser()\n"
            "parser._subparsers._group_actions[0].choices['sql'].set_defaults(handler=boom)\n"
            "cli.build_parser = lambda: parser\n"
            "sys.exit(cli.main(['sql', 'SELECT 1']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 1
    assert "Traceback" in out.stderr and out.stderr.rstrip().endswith("ValueError: a bug, not a user error")
    assert "assay: error" not in out.stderr
