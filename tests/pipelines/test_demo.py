"""`assay demo` as a user runs it (tiny recipe, one domain): its own progress and summary on the
console, Dagster's event stream in a log file under ASSAY_HOME, the runs in the instance."""

from __future__ import annotations

import re

import dagster as dg
import pytest

from tests.conftest import run_cli

# Dagster's console logger: "2026-11-30 19:49:36 +0000 - dagster - DEBUG - domain_pipeline_job - <run id> - ..."
DAGSTER_LINE = re.compile(r" - dagster - (DEBUG|INFO|WARNING|ERROR) - |\b(STEP_START|STEP_SUCCESS|RESOURCE_INIT_STARTED|"
                          r"ASSET_MATERIALIZATION|RUN_START|ENGINE_EVENT|LOGS_CAPTURED)\b")
EVENT_LOG_LINE = re.compile(r"Dagster's event log[^:]*: (\S+\.log)")


@pytest.mark.slow
def test_demo_prints_progress_and_summary_and_writes_dagster_events_to_a_file(smoke_run):
    # exactly the README's smoke run (issue 32: it used to block on the tiny policy's difficulty
    # measurement), run once per session for every test that checks it (tests/conftest.py)
    out, assay_home = smoke_run, smoke_run.home
    assert out.returncode == 0, out.stderr[-3000:]
    said = "the tiny policy cannot measure difficulty (it is random and solves nothing): math_arith_easy gated on the text heuristic"
    assert said in out.stderr and said in out.stdout, out.stdout[-3000:]
    noise = [line for line in (out.stdout + out.stderr).splitlines() if DAGSTER_LINE.search(line)]
    assert not noise, f"{len(noise)} Dagster event lines on the console, e.g. {noise[:3]}"

    # the summary on stdout, the progress on stderr
    for heading in ("== 1. Ingest and quality gates", "== 2. GRPO training", "== 3. Sweep", "== 4. Promotion"):
        assert heading in out.stdout
    assert "math_arith_easy" in out.stdout and "[1/3]" not in out.stdout
    for stage in ("[1/3] ingest + quality gates", "[2/3] GRPO training", "[3/3] sweep"):
        assert stage in out.stderr, out.stderr[-2000:]

    # the event log is named at the start and at the end, lies under ASSAY_HOME and holds every event
    named = EVENT_LOG_LINE.findall(out.stderr)
    assert len(named) == 2 and named[0] == named[1], out.stderr[:2000]
    log = (assay_home / "logs").resolve() / named[0].rsplit("/", 1)[1]
    assert str(log) == named[0] and log.is_file()
    text = log.read_text()
    assert " - DEBUG - " in text
    for job in ("domain_pipeline_job", "training_job", "checkpoint_evaluation_job"):
        assert re.search(rf"{job} - \S+ - .*STEP_SUCCESS", text), job
    assert str(log) in out.stdout  # the summary says where to look

    # the runs are in the persistent instance, so `make ui` shows them
    # (read right after the run: the --help examples add runs to this home later)
    assert sorted(job for job, _ in out.runs) == ["checkpoint_evaluation_job", "checkpoint_evaluation_job",
                                                  "domain_pipeline_job", "training_job"]
    assert all(status == dg.DagsterRunStatus.SUCCESS.name for _, status in out.runs), out.runs


@pytest.mark.parametrize("args, message", [
    (("--domains", "math_arith_easy,mathh"), "unknown domain 'mathh'"),
    (("--domains", "math_arith_easy", "--train-domain", "gsm"), "--train-domain 'gsm' is not among the demo's domains"),
    (("--domains", "math_arith_easy", "--recipe", "huge"), "unknown recipe 'huge'"),
    (("--domains", "math_arith_easy", "--recipe", "tiny", "--steps", "2", "--train-domain", "math_arith_eesy"),
     "unknown domain 'math_arith_eesy'"),
])
def test_demo_refuses_bad_names_before_any_stage_runs(assay_home, args, message):
    import time

    started = time.monotonic()
    out = run_cli("demo", *args, timeout=300)
    assert out.returncode == 2, out.stderr[-2000:]
    [line] = [line for line in out.stderr.splitlines() if line.startswith("assay: error")]
    assert message in line
    assert time.monotonic() - started < 30
    assert not (assay_home / "lake").exists() and not list((assay_home / "dagster").iterdir())


@pytest.mark.slow
def test_demo_gates_the_train_domain_on_the_policy_and_says_which_estimate_each_domain_used(tiny_home):
    """The demo's gate stage as `assay demo` runs it, on two domains: the train domain's difficulty
    is measured on the recipe's base policy (the tiny one, which fails every multi-digit sum: the
    blocking difficulty check says so, with what to do), the other domain's is the heuristic, and
    the summary names each domain's estimate."""
    out = run_cli("demo", "--recipe", "tiny", "--domains", "math_arith,strings", "--train-domain", "math_arith",
                  "--difficulty", "policy", "--train-samples", "16", "--skip-training", "--difficulty-samples", "2", "--max-new-tokens", "4",
                  "--json", timeout=900,
                  env={"ASSAY_HOME": str(tiny_home)}, unset=("DS_ACCELERATOR",))
    assert out.returncode == 0, out.stderr[-3000:]
    import json

    text = json.loads(out.stdout)["text"]
    assert "difficulty estimate per domain:" in text
    assert "math_arith: policy pass rate of base-tiny over K=2 samples (4 new tokens" in text, text
    assert "strings: heuristic" in text, text
    [math_line] = [line for line in text.splitlines() if line.startswith("math_arith ")]
    assert "blocked: difficulty_gate (ERROR): " in math_line and "mean pass rate 0.00 < 0.10" in math_line, math_line
    assert math_line.count("add easier items") == 1, math_line  # what to do, said once
    [other_line] = [line for line in text.splitlines() if line.startswith("strings ")]
    assert other_line.endswith("passed"), other_line


@pytest.mark.parametrize("recipe, difficulty, estimate", [
    ("smollm2", "auto", "policy"),   # a real run measures on its base policy (and blocks when out of band)
    ("smollm2", "policy", "policy"),
    ("tiny", "auto", "heuristic"),   # the smoke run: the random tiny policy cannot measure, said so
    ("tiny", "policy", "policy"),    # asked for, it still measures (and the gate blocks)
    ("tiny", "heuristic", "heuristic"),
])
def test_the_train_domain_is_measured_on_the_policy_except_for_the_tiny_smoke_run(recipe, difficulty, estimate):
    from pipelines.demo import DemoOptions, cannot_measure_note, difficulty_settings

    options = DemoOptions(recipe=recipe, difficulty=difficulty)
    assert difficulty_settings(options, "math_arith_easy")["estimate"] == estimate
    assert difficulty_settings(options, "gsm") == {"estimate": "heuristic"}  # not the train domain
    note = cannot_measure_note(options)
    assert bool(note) == (recipe == "tiny" and difficulty == "auto"), note
