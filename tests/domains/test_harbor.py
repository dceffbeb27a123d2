"""Harbor task folders as terminal domains (domains.importers.harbor): task.toml read with a typed
model, what is refused by name before anything runs, import with digests, rewards, migration of
Assay's older format. The runs are real (images from Debian's archive, bubblewrap)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from domains.importers.harbor import MANIFEST, SuiteSettings, import_tasks, load_harbor_task
from domains.importers.harbor_config import HarborConfigError, parse_task_toml
from domains.task_folder import TaskFormatError, check_task, load_task, task_suite_domain
from tests.conftest import write_task_suite
from tests.domains.harbor_helpers import TASK_TOML, write_harbor_suite, write_harbor_task
from tests.sandbox.sandbox_helpers import needs_images


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "task.toml"
    path.write_text(text)
    return path


# -- task.toml --------------------------------------------------------------------------------------


def test_deprecated_spellings_are_read_normalised_and_reported(tmp_path):
    config = parse_task_toml(_toml(tmp_path, 'version = "1.0"\nmulti_step_reward_mode = "mean"\n[environment]\n'
                                             'memory = "2G"\nstorage = "512M"\nallow_internet = false\n'))
    assert config.schema_version == "1.0"
    assert (config.environment.memory_mb, config.environment.storage_mb) == (2048, 512)
    assert config.environment.network_mode == "no-network"
    assert len(config.notes) == 5 and any("allow_internet = false read as network_mode" in n for n in config.notes)
    assert parse_task_toml(_toml(tmp_path, '[environment]\nallow_internet = true\n')).environment.network_mode == \
        "public"


def test_unknown_keys_are_listed_not_fatal(tmp_path):
    config = parse_task_toml(_toml(tmp_path, 'schema_version = "1.4"\nflavour = "x"\n[environment]\nfrobnicate = 1\n'
                                             '[agent]\ntimeout_sec = 5.0\nmood = "calm"\n[metadata]\nanything = 1\n'
                                             '[newsection]\nx = 1\n'))
    assert sorted(config.unknown_keys) == ["agent.mood", "environment.frobnicate", "flavour", "newsection"]
    assert config.agent.timeout_sec == 5.0 and config.metadata == {"anything": 1}  # metadata is free-form


@pytest.mark.parametrize("text, expected", [
    ('[environment]\ncpus = "lots"\n', "environment.cpus: Input should be a valid number"),
    ('schema_version = "2.0"\n', "schema_version '2.0' is not one this reader knows"),
    ('[environment]\nmemory = "lots"\n', "is not a size like '4G'"),
    ('[environment]\nmemory = "1G"\nmemory_mb = 4096\n', "disagree: keep memory_mb only"),
    ('[task]\nname = "no-org"\n', "[task] name must be 'org/name'"),
    ('[verifier]\nenvironment_mode = "both"\n', "verifier.environment_mode"),
    ("this is = not toml [", "not valid TOML"),
])
def test_a_bad_value_names_the_file_the_key_and_the_fix(tmp_path, text, expected):
    with pytest.raises(HarborConfigError) as info:
        parse_task_toml(_toml(tmp_path, text))
    assert expected in str(info.value) and str(tmp_path / "task.toml") in str(info.value)


# -- what is refused, before anything runs -----------------------------------------------------------


@pytest.mark.parametrize("change, expected", [
    ({"toml": TASK_TOML.format(name="t") + '\n[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n'},
     "multi-step task (2 [[steps]]: one, two) is not supported"),
    ({"toml": TASK_TOML.format(name="t").replace("cpus = 1", 'cpus = 1\nos = "windows"')}, "only Linux"),
    ({"toml": TASK_TOML.format(name="t").replace("cpus = 1", "cpus = 1\ngpus = 1")}, "GPUs/TPUs"),
    ({"toml": TASK_TOML.format(name="t").replace("cpus = 1", 'cpus = 1\nnetwork_mode = "allowlist"\n'
                                                             'allowed_hosts = ["pypi.org"]')},
     "network_mode 'allowlist' cannot be honoured"),
    ({"toml": TASK_TOML.format(name="t").replace("[verifier]", '[verifier]\nuser = "root"').replace(
        "[agent]", '[agent]\nuser = "agent"')}, "agent user 'agent' and verifier user 'root' differ"),
    ({"extra": {"environment/docker-compose.yaml": "services:\n  main:\n    build: .\n  db:\n    image: postgres\n"}},
     "compose with several services (db, main) is not supported"),
    ({"dockerfile": "FROM debian:bookworm-slim\nWORKDIR /app\nADD https://example.com/data.csv /app/\n"},
     "line 3: ADD https://example.com/data.csv /app/: ADD https://example.com/data.csv: downloading at build time"),
    ({"dockerfile": "FROM node:20\n"}, "line 1: FROM node:20"),
    ({"toml": TASK_TOML.format(name="t") + '\n[environment.env]\nKEY = "${ASSAY_T_UNSET}"\n'},
     "needs $ASSAY_T_UNSET from this machine's environment"),
])
def test_tasks_outside_what_runs_here_are_refused_by_name_before_anything_runs(tmp_path, monkeypatch, change,
                                                                               expected):
    store = tmp_path / "store"
    monkeypatch.setenv("ASSAY_IMAGE_CACHE", str(store))
    monkeypatch.delenv("ASSAY_T_UNSET", raising=False)
    folder = write_harbor_task(tmp_path / "suite", "t", **change)
    with pytest.raises(TaskFormatError) as info:
        load_task(folder)
    assert expected in str(info.value), str(info.value)
    with pytest.raises(Exception) as imported:
        import_tasks([folder], home=tmp_path / "home", suite="refused")
    assert expected in str(imported.value) and "nothing imported" in str(imported.value)
    assert not store.exists() and not (tmp_path / "home" / "tasks").exists()  # nothing built, nothing copied


def test_a_task_without_a_verifier_is_refused_and_one_without_an_oracle_is_loaded_unchecked(tmp_path):
    folder = write_harbor_task(tmp_path, "t")
    (folder / "tests" / "test.sh").unlink()
    with pytest.raises(TaskFormatError, match=r"test.sh: missing; write the verifier"):
        load_task(folder)
    folder = write_harbor_task(tmp_path, "u")
    (folder / "solution" / "solve.sh").unlink()
    task = load_task(folder)
    assert task.solution_text == "" and any("no oracle" in note for note in task.notes)


def test_the_task_reads_what_harbor_declares(tmp_path):
    text = TASK_TOML.format(name="t").replace("timeout_sec = 60.0", "timeout_sec = 90.0").replace(
        "[metadata]", '[metadata]\nmax_turns = 7\ncategory = "files"')
    task = load_harbor_task(write_harbor_task(tmp_path, "t", toml=text), SuiteSettings(timeout_multiplier=2.0))
    assert (task.spec.timeout_s, task.spec.max_turns, task.spec.difficulty) == (180.0, 7, "easy")
    assert task.spec.tags == ["test", "files"] and task.limits_spec == {"cpus": 1, "memory_mb": 256, "storage_mb": 64}
    assert task.describe()["verifier_timeout_s"] == 60.0 and not task.agent_network
    assert task.spec.instruction.startswith("Write the contents of /app/seed.txt")
    capped = dataclasses.replace(task, spec=task.spec.model_copy(update={"max_turns": 2}))  # as the trainer caps
    assert capped.spec.max_turns == 2 and capped.built is task.built and capped.name == "t"
    slower = task.with_timeout_multiplier(3.0)
    assert slower.spec.timeout_s == 270.0 and slower.describe()["verifier_timeout_s"] == 90.0


# -- runs --------------------------------------------------------------------------------------------


@needs_images
def test_a_harbor_suite_is_a_terminal_domain_scored_by_its_verifier(tmp_path):
    suite = write_harbor_suite(tmp_path)
    domain = task_suite_domain(suite)
    assert domain.episode_task is not None and {"terminal", "harbor"} <= set(domain.tags)
    rows = {r["metadata"]["task"]: r for r in domain.generate("eval", 10) + domain.generate("train", 10)}
    assert set(rows) == {"upper-a", "upper-b", "metrics"} and rows["metrics"]["metadata"]["format"] == "harbor"
    scores = domain.safe_score_many([rows[t]["answer"] for t in rows] + ["", "echo WRONG > /app/out.txt"],
                                    list(rows.values()) + [rows["upper-a"], rows["upper-b"]])
    assert scores == [1.0, 1.0, 1.0, 0.0, 0.0]
    checks = domain.extra_checks()["tasks_check"]
    assert checks["passed"], checks["detail"]


@needs_images
def test_named_metrics_are_kept_and_the_declared_one_is_the_score(tmp_path):
    suite = write_harbor_suite(tmp_path)
    task = load_harbor_task(suite / "metrics", SuiteSettings(reward_key="length"))
    with pytest.raises(Exception, match=r"reward length = 13 is outside \[0, 1\]"):
        task.run_script(task.solution_text, oracle=True)
    exact = load_harbor_task(suite / "metrics", SuiteSettings(reward_key="exact"))
    _, verdict = exact.run_script(exact.solution_text, oracle=True)
    assert verdict.rewards == {"reward": 1.0, "exact": 1.0, "length": 13.0} and verdict.score == 1.0 and verdict.passed
    _, verdict = load_harbor_task(suite / "metrics", SuiteSettings(reward_key="nope")).run_script("true")
    assert verdict.score == 0.0 and "not 'nope'" in verdict.error


@needs_images
def test_the_oracle_sees_its_solution_folder_and_the_agent_never_does(tmp_path):
    folder = write_harbor_task(tmp_path, "t", solve_sh="#!/bin/bash\nbash /solution/helper.sh\n",
                               extra={"solution/helper.sh": "tr a-z A-Z < /app/seed.txt > /app/out.txt\n"})
    task = load_harbor_task(folder)
    result = check_task(task)
    assert result["ok"], result
    command, verdict = task.run_script("ls /solution /tests 2>&1; bash /solution/solve.sh")
    assert "No such file or directory" in command.output and not verdict.passed


@needs_images
def test_an_imported_task_edited_afterwards_is_refused_until_imported_again(tmp_path):
    source = write_harbor_suite(tmp_path / "src")
    target, tasks = import_tasks([source], home=tmp_path / "home", suite="mine", timeout_multiplier=1.5)
    assert target == tmp_path / "home" / "tasks" / "mine" and len(tasks) == 3
    record = json.loads((target / MANIFEST).read_text())
    assert set(record["digests"]) == {"upper-a", "upper-b", "metrics"} and record["timeout_multiplier"] == 1.5
    assert len(task_suite_domain(target).eval_items()) >= 1
    (target / "upper-a" / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt  # lax\n")
    with pytest.raises(TaskFormatError) as info:
        task_suite_domain(target)
    assert "upper-a: edited since it was imported" in str(info.value) and "--replace" in str(info.value)
    with pytest.raises(Exception, match="already holds metrics, upper-a, upper-b: pass --replace"):
        import_tasks([source], home=tmp_path / "home", suite="mine")
    import_tasks([source / "upper-a"], home=tmp_path / "home", suite="mine", replace=True)
    assert task_suite_domain(target).name == "mine"
    assert "# lax" not in (target / "upper-a" / "tests" / "test.sh").read_text()  # the source's own again


@needs_images
def test_an_older_format_suite_migrates_and_still_checks(tmp_path, capsys):
    from domains.importers.harbor import migrate_task

    old = write_task_suite(tmp_path)
    domain = task_suite_domain(old)
    assert "uses Assay's older terminal-task format" in capsys.readouterr().err  # the deprecation note
    new = tmp_path / "migrated"
    for folder in sorted(p for p in old.iterdir() if p.is_dir()):
        migrate_task(folder, new / folder.name)
    migrated = task_suite_domain(new, name="shell_tasks_harbor")
    assert [t["id"].split("/")[1] for t in migrated.eval_items()] == [t["id"].split("/")[1] for t in
                                                                       domain.eval_items()]
    config = parse_task_toml(new / "count" / "task.toml")
    assert config.verifier.separate and config.artifact_sources == ["/app"] and config.agent.timeout_sec == 30.0
    results = [check_task(load_task(p)) for p in sorted(new.iterdir())]
    assert all(r["ok"] for r in results), results
