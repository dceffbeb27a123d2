"""`assay difficulty` as a user runs it: a plugin domain, the real tiny policy, a cached re-run, errors."""

from __future__ import annotations

import json

from tests.conftest import run_cli, write_plugin


def test_difficulty_cli_json_is_one_list_then_the_rerun_is_cached(tiny_home, tmp_path):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plug")
    env = {"ASSAY_DOMAINS_PATH": str(plugins)}
    args = ("difficulty", "plug", "--policy", "base-tiny", "--limit", "3", "--samples", "2",
            "--max-new-tokens", "8", "--dtype", "float32")
    first = run_cli(*args, "--json", env=env)
    assert first.returncode == 0, first.stderr
    rows = json.loads(first.stdout)  # exactly one document: a list of per-item objects
    assert isinstance(rows, list) and len(rows) == 3
    assert [r["id"] for r in rows] == ["plug-train-0", "plug-train-1", "plug-train-2"]
    for row in rows:
        assert set(row) == {"id", "pass_rate", "samples", "verdict"} and row["samples"] == 2
        assert row["pass_rate"] in (0.0, 0.5, 1.0)
        assert row["verdict"] == {0.0: "too_hard", 0.5: "in_band", 1.0: "too_easy"}[row["pass_rate"]]
    assert "3 computed, 0 cached" in first.stderr and "pass rates base-tiny plug" in first.stderr  # progress bar

    # no --policy and no champion: the base policy of the default recipe, base-tiny, all cached
    text = run_cli(*[a for a in args if a not in ("--policy", "base-tiny")], env=env)
    assert text.returncode == 0, text.stderr
    assert "plug on base-tiny" in text.stdout and "0 items computed, 3 cached" in text.stdout
    assert "in band" in text.stdout and text.stdout.count("plug-train-") == 3
    assert "loading" not in text.stderr.lower() and "generation engine" not in text.stderr  # no model load


def test_difficulty_cli_errors_are_one_line_and_exit_2(tiny_home, tmp_path):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plug")
    env = {"ASSAY_DOMAINS_PATH": str(plugins)}
    cases = [
        (("nosuch",), "unknown domain"),
        (("plug", "--samples", "0"), "--samples 0: samples must be a positive integer"),
        (("plug", "--policy", "nope-step000001"), "unknown checkpoint 'nope-step000001'"),
        (("plug", "--policy", "champion"), "no champion yet: use --policy base-smollm2"),
    ]
    for extra, message in cases:
        out = run_cli("difficulty", *extra, "--json", env=env)
        assert out.returncode == 2, (extra, out.stderr[-2000:])
        assert out.stdout == "", (extra, out.stdout)
        errors = [line for line in out.stderr.splitlines() if line.startswith("assay: error:")]
        assert len(errors) == 1 and message in errors[0], (extra, out.stderr[-2000:])
