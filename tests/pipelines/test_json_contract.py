"""Every `assay ... --json` prints exactly one JSON document on stdout, run for real.

Each command runs in a subprocess as a user runs it (tiny policy, a plugin domain, the real
sandbox). ``json.loads(stdout)`` must succeed (one document, nothing before or after it) and hold
the documented keys; third-party noise (DeepSpeed's accelerator warning, tqdm bars, MLflow's
migrations) belongs on stderr. A command that gains ``--json`` without a case here fails
``test_every_json_command_is_covered``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import polars as pl
import pytest

from storage.preference_pairs import write_pairs
from tests.conftest import REPO, run_cli, write_plugin, write_task_suite
from tests.training.reward_pairs import toy_pairs

# DS_ACCELERATOR is set in this test process once any in-process training ran (training.engine);
# a user's shell does not have it, and without it DeepSpeed prints its accelerator warning.
UNSET = ("DS_ACCELERATOR",)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> dict:
    """An ASSAY_HOME with a plugin domain and one ingested file. The tiny policy is not pre-built:
    the first command that needs it builds it, as on a user's first run (and that path imports
    DeepSpeed before the trainer sets DS_ACCELERATOR, so DeepSpeed prints its warning)."""
    root = tmp_path_factory.mktemp("json_contract")
    assay_home = root / "home"
    write_plugin(root / "plugins", "plug")
    rows = root / "rows.jsonl"
    rows.write_text('{"prompt": "What is 1 plus 1?", "answer": "2"}\n{"prompt": "", "answer": "3"}\n')
    program = root / "hello.py"
    program.write_text("print('hi')\n")
    write_task_suite(root / "tasks")
    write_pairs(toy_pairs(60), root / "pairs.jsonl")
    rng = np.random.default_rng(0)
    for name, shift in (("base", 0.0), ("cand", -0.2)):
        pl.DataFrame([{"domain": "plug", "item_id": f"i{i}", "sample_idx": s,
                       "score": float(rng.random() < 0.6 + shift)} for i in range(40) for s in range(2)]
                     ).write_parquet(root / f"{name}.parquet")
    env = {"ASSAY_HOME": str(assay_home), "DAGSTER_HOME": str(assay_home / "dagster"),
           "ASSAY_DOMAINS_PATH": str(root / "plugins")}
    first = run_cli("ingest", "plug", str(rows), env=env, unset=UNSET)
    assert first.returncode == 0, first.stderr
    return {"env": env, "root": root}


def _files(home: dict, args: tuple[str, ...]) -> list[str]:
    return [a.format(root=home["root"]) for a in args]


REWARD_TRAIN = ("--base", "tiny", "--epochs", "1", "--batch-size", "16", "--learning-rate", "3e-3", "--max-length", "64")
# commands that read what others wrote: those run first, in order, in the same home (xdist may
# hand the cases to different workers, each with its own home)
TRAINED = (("reward", "train", "plug", "--pairs", "{root}/pairs.jsonl", *REWARD_TRAIN),)
# checked on the whole pairs file: a comparison needs 20 shared pairs, more than the 13 held out
CHECKED = (*TRAINED, ("reward", "check", "plug", "--pairs", "{root}/pairs.jsonl"))
PREPARE = {("reward", "check"): TRAINED, ("reward", "compare"): CHECKED, ("reward", "promote"): CHECKED,
           # an audit draws from a sweep's completions
           ("domains", "audit"): (("sweep", "--checkpoint", "base-tiny", "--domains", "plug", "--limit", "2", "--samples",
                                   "1", "--max-new-tokens", "4", "--dtype", "float32"),),
           # Harbor task folders, from the older-format suite (each case migrates into a folder of its own)
           ("tasks", "build"): (("tasks", "migrate", "{root}/tasks/shell_tasks", "{root}/harbor_build"),),
           ("tasks", "import", "harbor"): (("tasks", "migrate", "{root}/tasks/shell_tasks", "{root}/harbor_import"),)}

# command -> (arguments after the command, allowed exit codes, check of the parsed document)
CASES = {
    ("domains", "list"): ((), {0}, lambda d: {"name", "owner", "tags", "description"} <= set(d[0])
                          and "plug" in {r["name"] for r in d}),
    ("domains", "check"): (("plug",), {0}, lambda d: {"domain", "passed", "checks"} <= set(d) and d["passed"]),
    ("domains", "attack"): (("plug", "--items", "3"), {0}, lambda d: {"run", "passed", "domains"} <= set(d) and d["passed"]
                            and d["domains"][0]["domain"] == "plug" and d["domains"][0]["paid_families"] == []),
    ("domains", "report"): (("plug", "--items", "3", "--search-items", "2"), {0, 1},
                            lambda d: {"run", "passed", "totals", "cards"} <= set(d) and d["cards"][0]["domain"] == "plug"
                            and d["cards"][0]["oracle_pass"] == 1.0 and d["totals"]["carded"] == 1),
    # an Inspect task becomes a domain (the example the README imports; cwd is the repository)
    ("domains", "import"): (("inspect", "examples/environments/inspect/capitals.py", "--name", "json_capitals"), {0},
                            lambda d: {"name", "kind", "folder", "counts", "notes"} <= set(d)
                            and d["name"] == "json_capitals" and d["kind"] == "inspect"
                            and d["counts"]["train"] > 0 and d["counts"]["eval"] > 0),
    ("domains", "audit"): (("plug", "--checkpoint", "base-tiny", "--out", "{root}/audit.jsonl"), {0},
                           lambda d: {"file", "rows", "strata", "audit"} <= set(d) and d["rows"] >= 1),
    ("ingest",): (("plug", "{root}/rows.jsonl"), {0},
                  lambda d: set(d) == {"domain", "received", "admitted", "quarantined", "reasons"}
                  and d["received"] == 2),
    ("quarantine",): (("plug",), {0}, lambda d: d and set(d[0]) == {"id", "line", "source", "reasons"}),
    ("tasks", "check"): (("{root}/tasks/shell_tasks",), {0},
                         lambda d: [r["task"] for r in d] == ["count", "hello", "upper"]
                         and all(set(r) == {"task", "oracle_passed", "do_nothing_failed", "ok", "detail"} and r["ok"]
                                 for r in d)),
    ("tasks", "migrate"): (("{root}/tasks/shell_tasks", "{root}/harbor_migrate"), {0},
                           lambda d: sorted(r["task"] for r in d) == ["count", "hello", "upper"]),
    ("tasks", "build"): (("{root}/harbor_build",), {0},
                         lambda d: sorted(r["task"] for r in d) == ["count", "hello", "upper"]
                         and all(r["base"] == "debian:bookworm-slim" and r["layers"] >= 3 for r in d)),
    ("tasks", "import", "harbor"): (("{root}/harbor_import", "--suite", "shell_harbor"), {0},
                                    lambda d: d["suite"] == "shell_harbor" and len(d["tasks"]) == 3),
    ("sql",): (("SELECT count(*) AS n FROM samples",), {0}, lambda d: d[0]["n"] >= 1),
    ("sandbox", "run"): (("{root}/hello.py",), {0},
                         lambda d: set(d) == {"status", "returncode", "stdout", "stderr", "duration_s"}
                         and d["status"] == "ok" and d["stdout"] == "hi\n"),
    ("train",): (("--recipe", "tiny", "--domains", "plug", "--steps", "2"), {0},
                 lambda d: {"checkpoint", "mlflow_run_id", "history", "run_name", "steps", "checkpoint_path",
                            "notes"} <= set(d) and d["steps"] == 2),
    ("sweep",): (("--checkpoint", "base-tiny", "--domains", "plug", "--limit", "2", "--samples", "1",
                  "--max-new-tokens", "4", "--dtype", "float32"), {0},
                 lambda d: {"checkpoint", "domains", "generated", "cached", "mlflow_run_id"} <= set(d)
                 and d["domains"][0]["domain"] == "plug"),
    ("difficulty",): (("plug", "--policy", "base-tiny", "--limit", "2", "--samples", "2", "--max-new-tokens", "4",
                       "--dtype", "float32"), {0},
                      # the domain's admitted train rows: the one row `ingest` admitted above
                      lambda d: isinstance(d, list) and len(d) == 1
                      and all(set(r) == {"id", "pass_rate", "samples", "verdict"} and r["samples"] == 2 for r in d)),
    ("variant",): (("--from", "base-tiny", "--method", "spec-ngram", "--domains", "plug", "--limit", "3",
                    "--max-new-tokens", "4", "--speed-prompts", "2", "--speed-batch1-prompts", "1",
                    "--speed-new-tokens", "2", "--dtype", "float32"), {1},  # 3 items prove nothing: exit 1
                   lambda d: {"variant", "parent", "method", "speedup_batch1", "speedup_batch", "domains",
                              "fast_alias"} <= set(d) and d["domains"][0]["verdict"] == "underpowered"),
    ("regress",): (("--baseline", "{root}/base.parquet", "--candidate", "{root}/cand.parquet"), {0, 1},
                   lambda d: {"domains", "missing", "summary"} <= set(d) and d["domains"][0]["domain"] == "plug"),
    ("demo",): (("--recipe", "tiny", "--domains", "math_arith_easy", "--train-samples", "16", "--steps", "2",
                 "--sweep-items", "3", "--max-new-tokens", "4"), {0},
                lambda d: {"ok", "domains", "training", "evaluations", "event_log"} <= set(d) and d["ok"]),
    ("reward", "pairs"): (("plug", "--out", "{root}/plug_pairs.jsonl", "--items", "4"), {0},
                          lambda d: {"domain", "items", "pairs", "prompts", "skipped", "out"} <= set(d) and d["pairs"] > 0),
    ("reward", "train"): (("plug", "--pairs", "{root}/pairs.jsonl", *REWARD_TRAIN), {0},
                          lambda d: {"reward_model", "domain", "heldout_accuracy", "mlflow_run_id", "config"} <= set(d)
                          and d["domain"] == "plug"),
    ("reward", "check"): (("plug",), {0, 1},
                          lambda d: {"passed", "reasons", "criteria", "reward_model", "check"} <= set(d)
                          and any(c["criterion"] == "accuracy" for c in d["criteria"])),
    ("reward", "list"): ((), {0}, lambda d: isinstance(d, list)),
    # the newest check against itself: nothing to regress, so exit 0 and a verdict that says so
    ("reward", "compare"): (("plug", "latest", "latest"), {0},
                            lambda d: {"domain", "candidate", "baseline", "verdict", "n"} <= set(d)
                            and d["candidate"] == d["baseline"] and d["verdict"] != "regression"),
    # a tiny reward model trained for one epoch may fail its gate: then promotion is refused (exit 1)
    ("reward", "promote"): (("plug", "latest"), {0, 1},
                            lambda d: {"promoted", "reason", "decision", "candidate"} <= set(d)),
    ("reward", "judge"): (("plug", "--policy", "tiny", "--rubric", "The answer is the sum.", "--max-length", "64"),
                          {0}, lambda d: {"reward_model", "domain", "base_model"} <= set(d) and d["domain"] == "plug"),
}
SLOW = {("demo",)}  # a whole pipeline run (~30 s here); CI runs slow tests too


def _json_commands() -> set[tuple[str, ...]]:
    """Every (sub)command of the real parser that offers --json."""
    from pipelines.cli import build_parser

    found = set()

    def walk(parser, path):
        for action in parser._actions:
            if "--json" in action.option_strings:
                found.add(path)
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))

    walk(build_parser(), ())
    return found


def test_every_json_command_is_covered():
    assert _json_commands() == set(CASES)


@pytest.mark.parametrize("command", [pytest.param(c, id=" ".join(c), marks=[pytest.mark.slow] if c in SLOW else [])
                                     for c in CASES])
def test_json_stdout_is_exactly_one_document(home, command):
    args, codes, check = CASES[command]
    for step in PREPARE.get(command, ()):
        ready = run_cli(*_files(home, step), env=home["env"], unset=UNSET, timeout=600)
        assert ready.returncode in ({0, 1} if step[:2] == ("reward", "check") else {0}), ready.stderr[-3000:]
    out = run_cli(*command, *_files(home, args), "--json", env=home["env"], unset=UNSET, timeout=600)
    assert out.returncode in codes, out.stderr[-3000:]
    try:
        document = json.loads(out.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(f"stdout is not one JSON document ({exc}); it starts with {out.stdout[:300]!r}")
    assert check(document), json.dumps(document)[:2000]


def test_noise_from_python_c_and_children_goes_to_stderr():
    """The mechanism itself: print, a logging handler bound to sys.stdout before the command ran,
    a C-level write to fd 1, and a child process all end on stderr; stdout holds the result."""
    code = (
        "import logging, os, subprocess, sys\n"
        "from pipelines.cli import emit\n"
        "from pipelines.console import stdout_for_result_only\n"
        "log = logging.getLogger('thirdparty'); log.addHandler(logging.StreamHandler(sys.stdout))\n"
        "class A: json = True\n"
        "with stdout_for_result_only():\n"
        "    print('noise-print'); log.warning('noise-logging')\n"
        "    os.write(1, b'noise-fd1\\n')\n"
        "    subprocess.run(['echo', 'noise-child'])\n"
        "    sys.stdout.write('noise-buffered')\n"
        "    emit(A(), {'ok': 1})\n"
        "print('after')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == '{\n  "ok": 1\n}\nafter\n'
    for noise in ("noise-print", "noise-logging", "noise-fd1", "noise-child", "noise-buffered"):
        assert noise in out.stderr, (noise, out.stderr)


def test_in_process_main_writes_the_result_to_the_callers_stdout(capsys, assay_home):
    """Embedded use (sys.stdout is not fd 1, as under capsys): the result still reaches the
    caller's sys.stdout, noise printed meanwhile goes to stderr, and sys.stdout is restored."""
    import pipelines.commands.domains as domains_command
    from pipelines.cli import main

    before = sys.stdout
    original = domains_command.list_domains

    def noisy(args):
        print("noise-print")
        return original(args)

    domains_command.list_domains = noisy
    try:
        code = main(["domains", "list", "--json"])
    finally:
        domains_command.list_domains = original
    captured = capsys.readouterr()
    assert code == 0 and sys.stdout is before
    assert json.loads(captured.out)[0]["name"] and "noise-print" in captured.err
