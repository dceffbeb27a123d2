"""The `assay` CLI as a user runs it: JSON outputs parse, errors are one line with exit 2."""

from __future__ import annotations

import json
import sys

import pytest

from tests.conftest import run_cli, write_plugin


@pytest.fixture
def plugin_env(assay_home, tmp_path):
    folder = tmp_path / "plugins"
    write_plugin(folder, "unit_convert")
    write_plugin(folder, "zz_broken", "raise ValueError('bad plugin')\n")
    return {"ASSAY_HOME": str(assay_home), "ASSAY_DOMAINS_PATH": str(folder)}


def test_help_is_fast_and_imports_nothing_heavy():
    import subprocess

    code = ("import sys\nfrom pipelines.cli import build_parser\n"
            "try:\n    build_parser().parse_args(['--help'])\nexcept SystemExit:\n    pass\n"
            "print([m for m in ('torch','deepspeed','great_expectations','transformers','dagster','mlflow',"
            "'inspect_ai','lm_eval','verifiers','reasoning_gym') "
            "if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_every_command_has_help():
    from pipelines.cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert {"domains", "ingest", "quarantine", "sql"} <= set(commands)
    for name, sub in commands.items():
        assert sub.format_help().strip(), name


def test_domains_list_json_includes_plugins_and_reports_broken_ones(plugin_env):
    out = run_cli("domains", "list", "--json", env=plugin_env)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    by_name = {r["name"]: r for r in rows}
    assert by_name["unit_convert"] == {"name": "unit_convert", "owner": "plugins@example.com",
                                       "tags": ["test"], "description": "plugin test domain"}
    assert "zz_broken.py" in out.stderr and "bad plugin" in out.stderr


def test_ingest_quarantine_and_sql_round_trip(plugin_env, tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_text('{"prompt": "What is 1 plus 1?", "answer": "2"}\n{"prompt": "", "answer": "3"}\nnot json\n')
    out = run_cli("ingest", "unit_convert", str(src), "--json", env=plugin_env)
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary == {"domain": "unit_convert", "received": 3, "admitted": 1, "quarantined": 2,
                       "reasons": {"empty_field": 1, "malformed": 1}}

    out = run_cli("quarantine", "unit_convert", "--json", env=plugin_env)
    rows = json.loads(out.stdout)
    assert [(r["line"], r["reasons"]) for r in rows] == [(2, ["empty_field"]), (3, ["malformed"])]
    assert set(rows[0]) == {"id", "line", "source", "reasons"}

    out = run_cli("sql", "SELECT domain, count(*) AS n FROM samples GROUP BY 1", "--json", env=plugin_env)
    assert json.loads(out.stdout) == [{"domain": "unit_convert", "n": 1}]


@pytest.mark.parametrize("args, message", [
    (("ingest", "no_such_domain", "{file}"), "unknown domain 'no_such_domain'"),
    (("ingest", "unit_convert", "{missing}"), "no such file"),
    (("ingest", "unit_convert", "{txt}"), "unsupported file format '.txt'"),
    (("quarantine", "no_such_domain"), "unknown domain"),
    (("sql", "SELECT * FROM nowhere"), "nowhere"),
])
def test_errors_are_one_line_exit_2_and_write_nothing(plugin_env, tmp_path, assay_home, args, message):
    good = tmp_path / "ok.jsonl"
    good.write_text('{"prompt": "p", "answer": "a"}\n')
    txt = tmp_path / "rows.txt"
    txt.write_text("hello\n")
    filled = [a.format(file=good, missing=tmp_path / "absent.jsonl", txt=txt) for a in args]
    out = run_cli(*filled, "--json", env=plugin_env)
    assert out.returncode == 2
    assert out.stdout == ""
    error_lines = [line for line in out.stderr.splitlines() if line.startswith("assay: error")]
    assert len(error_lines) == 1 and message in error_lines[0], out.stderr
    assert not list((assay_home / "lake").rglob("*.parquet"))


def test_ingest_of_several_domain_file_pairs_is_one_run_with_one_summary_each(plugin_env, tmp_path, assay_home):
    from storage.lake import Lake

    first, second = tmp_path / "a.jsonl", tmp_path / "b.csv"
    first.write_text('{"prompt": "What is 2 plus 2?", "answer": "4"}\nnot json\n')
    second.write_text('prompt,answer\n"What is 2 plus 2?",4\n"Convert 3 km to m",3000\n')
    out = run_cli("ingest", "unit_convert", str(first), "unit_convert", str(second), "--json", env=plugin_env)
    assert out.returncode == 0, out.stderr
    # the second file's first row repeats the first file's admitted row: its batch, held with it, counts
    assert json.loads(out.stdout) == [
        {"domain": "unit_convert", "received": 2, "admitted": 1, "quarantined": 1, "reasons": {"malformed": 1}},
        {"domain": "unit_convert", "received": 2, "admitted": 1, "quarantined": 1, "reasons": {"duplicate": 1}}]
    assert Lake(assay_home).read("ingest", "samples").height == 2
    text = run_cli("ingest", "unit_convert", str(first), "unit_convert", str(second), env=plugin_env)
    assert text.returncode == 0 and len(text.stdout.strip().splitlines()) == 2, text.stdout
    assert text.stdout.startswith("unit_convert: received 2, admitted 0, quarantined 2"), text.stdout
    # a bad pair anywhere: nothing of the run is written
    before = Lake(assay_home).read("ingest", "samples").height
    for bad in ((str(first), "unit_convert"), ("unit_convert", str(tmp_path / "absent.jsonl"))):
        out = run_cli("ingest", "unit_convert", str(first), *bad, "--json", env=plugin_env)
        assert out.returncode == 2 and out.stdout == "", out.stderr
    assert Lake(assay_home).read("ingest", "samples").height == before
