"""The Dagster instance Assay creates queues runs and limits pools: one trainer, sweeps by cores.

Real Dagster throughout: the generated dagster.yaml loaded by ``DagsterInstance.from_config``, real
pool slots claimed by two concurrent processes, and the real queued-run daemon deciding what to
launch (its launcher records launches instead of starting processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import dagster as dg
import pytest

from pipelines.instance import (LEGACY_ASSAY_YAML, MANAGED_MARKER, POOL_INGEST, POOL_MAINTENANCE, POOL_SWEEP,
                                POOL_TRAINER,
                                ConcurrencySettings, InstanceConfigError, dagster_home, prepare_instance)
from tests.conftest import REPO

POOL_ENV = ("ASSAY_MAX_CONCURRENT_RUNS", "ASSAY_POOL_TRAINER", "ASSAY_POOL_SWEEP", "ASSAY_POOL_INGEST",
            "ASSAY_POOL_MAINTENANCE")


@pytest.fixture
def dagster_dir(assay_home, monkeypatch):
    for name in POOL_ENV:
        monkeypatch.delenv(name, raising=False)
    return assay_home / "dagster"


def _pool_limits(instance) -> dict[str, int]:
    return {p.name: p.limit for p in instance.event_log_storage.get_pool_limits()}


def test_generated_instance_queues_runs_with_pool_limits(dagster_dir, monkeypatch):
    monkeypatch.setenv("ASSAY_MAX_CONCURRENT_RUNS", "3")
    monkeypatch.setenv("ASSAY_POOL_SWEEP", "2")
    path = dagster_home()
    assert path == dagster_dir and (path / "dagster.yaml").read_text().startswith(MANAGED_MARKER)
    with dg.DagsterInstance.from_config(str(path)) as instance:
        assert isinstance(instance.run_coordinator, dg.QueuedRunCoordinator)
        config = instance.get_concurrency_config()
        assert config.run_queue_config.max_concurrent_runs == 3
        assert config.run_queue_config.should_block_op_concurrency_limited_runs
        assert config.pool_config.default_pool_limit == 1  # any other pool: one at a time
        assert config.pool_config.pool_granularity.value == "op"
        prepare_instance(instance, note=lambda _: None)
        default_ingest = ConcurrencySettings.defaults().pools[POOL_INGEST]
        assert _pool_limits(instance) == {POOL_TRAINER: 1, POOL_SWEEP: 2, POOL_INGEST: default_ingest,
                                          POOL_MAINTENANCE: 1}


def test_defaults_scale_with_cores_and_bad_values_say_how_to_fix():
    small, big = ConcurrencySettings.defaults(cores=2), ConcurrencySettings.defaults(cores=16)
    assert (small.max_concurrent_runs, dict(small.pools)) == (2, {POOL_TRAINER: 1, POOL_SWEEP: 1, POOL_INGEST: 1,
                                                                             POOL_MAINTENANCE: 1})
    assert (big.max_concurrent_runs, big.pools[POOL_TRAINER], big.pools[POOL_SWEEP]) == (16, 1, 8)
    assert ConcurrencySettings.from_env({"ASSAY_POOL_TRAINER": "2"}).pools[POOL_TRAINER] == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(InstanceConfigError, match=f"ASSAY_POOL_SWEEP='{bad}': must be a whole number >= 1"):
            ConcurrencySettings.from_env({"ASSAY_POOL_SWEEP": bad})
    out = subprocess.run([sys.executable, "-m", "pipelines.instance"], capture_output=True, text=True, cwd=REPO,
                         env={**os.environ, "ASSAY_MAX_CONCURRENT_RUNS": "lots"}, timeout=120)
    assert out.returncode == 2 and "ASSAY_MAX_CONCURRENT_RUNS='lots'" in out.stderr


def test_old_yaml_is_upgraded_a_changed_setting_rewrites_and_a_users_file_is_left_alone(dagster_dir, monkeypatch):
    notes = []
    dagster_dir.mkdir(parents=True, exist_ok=True)
    config = dagster_dir / "dagster.yaml"
    config.write_text(LEGACY_ASSAY_YAML)  # what Assay wrote before this change
    from pipelines.instance import write_dagster_yaml

    write_dagster_yaml(dagster_dir, ConcurrencySettings.defaults(cores=2), note=notes.append)
    assert config.read_text().startswith(MANAGED_MARKER) and "QueuedRunCoordinator" in config.read_text()
    assert "upgraded" in notes[-1] and "older Assay" in notes[-1]

    write_dagster_yaml(dagster_dir, ConcurrencySettings(max_concurrent_runs=5, pools={}), note=notes.append)
    assert "max_concurrent_runs: 5" in config.read_text() and "updated" in notes[-1]

    mine = "telemetry:\n  enabled: true\nrun_launcher:\n  module: dagster\n  class: DefaultRunLauncher\n"
    config.write_text(mine)
    write_dagster_yaml(dagster_dir, ConcurrencySettings.defaults(cores=2), note=notes.append)
    assert config.read_text() == mine
    assert "not managed by Assay" in notes[-1] and "delete it" in notes[-1]


PROBE = """
import glob, json, os, sys, time
import dagster as dg
from pipelines.instance import POOL_TRAINER

@dg.asset(pool=POOL_TRAINER)
def probe():
    start = time.time()
    open(f"{sys.argv[2]}.started.{os.getpid()}", "a").close()
    # hold the slot until the other probe runs too (it can only while a slot is free), at most 15 s:
    # waits on the other, not a fixed sleep, so a slow start on a loaded machine cannot hide an overlap
    while len(glob.glob(sys.argv[2] + ".started.*")) < 2 and time.time() - start < 15:
        time.sleep(0.05)
    with open(sys.argv[2], "a") as f:
        f.write(json.dumps([start, time.time()]) + "\\n")

with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
    assert dg.materialize([probe], instance=instance).success
"""


@pytest.mark.parametrize("limit", [1, 2])
def test_two_processes_share_the_trainer_pool(dagster_dir, monkeypatch, tmp_path, limit):
    """Two processes materialize an asset of pool 'trainer' at once: with limit 1 the second waits
    for the first (no overlap); with limit 2 they overlap (so the check can fail)."""
    monkeypatch.setenv("ASSAY_POOL_TRAINER", str(limit))
    from pipelines.instance import open_instance

    open_instance().dispose()  # dagster.yaml + pool limits, as `make ui` and `assay demo` do
    probe, spans = tmp_path / "probe.py", tmp_path / "spans.jsonl"
    probe.write_text(PROBE)
    def start():
        return subprocess.Popen([sys.executable, str(probe), str(dagster_dir), str(spans)], cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=subprocess.PIPE, text=True)

    # The second process starts once the first holds its slot: two claims of the last slot in the
    # same instant can both succeed on Dagster's SQLite storage (no row locks; README, Concurrency).
    procs = [start()]
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("spans.jsonl.started.*")) and procs[0].poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    procs.append(start())
    for proc in procs:
        assert proc.wait(timeout=180) == 0, proc.stderr.read()[-2000:]
    (a_start, a_end), (b_start, b_end) = sorted(json.loads(line) for line in spans.read_text().splitlines())
    overlap = a_end > b_start
    assert overlap == (limit > 1), f"spans {a_start:.2f}-{a_end:.2f} and {b_start:.2f}-{b_end:.2f} with limit {limit}"


def test_queued_training_runs_launch_one_at_a_time(dagster_dir):
    """Two queued runs of training_job (pool 'trainer'): the real queued-run daemon launches one
    and keeps the other queued, naming the pool."""
    from dagster._core.test_utils import create_test_daemon_workspace_context
    from dagster._core.workspace.load_target import ModuleTarget
    from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

    path = dagster_home()
    # Assay's file, with a launcher that records launches instead of starting training processes;
    # without the marker line Assay leaves the edited file alone
    text = (path / "dagster.yaml").read_text().replace(MANAGED_MARKER + "\n", "")
    (path / "dagster.yaml").write_text(text + "run_launcher:\n  module: dagster._core.test_utils\n"
                                              "  class: MockedRunLauncher\n")
    target = ModuleTarget(module_name="pipelines.definitions", attribute="defs", working_directory=str(REPO),
                          location_name="assay")
    with dg.DagsterInstance.from_config(str(path)) as instance:
        prepare_instance(instance, note=lambda _: None)
        with create_test_daemon_workspace_context(target, instance) as workspace:
            remote = (workspace.create_request_context().get_code_location("assay")
                      .get_repository("__repository__").get_full_job("training_job"))
            from pipelines.definitions import defs

            job = defs.resolve_job_def("training_job")
            for _ in range(2):
                run = instance.create_run_for_job(job, remote_job_origin=remote.get_remote_origin(),
                                                  job_code_origin=remote.get_python_origin(),
                                                  status=dg.DagsterRunStatus.NOT_STARTED)
                instance.submit_run(run.run_id, workspace.create_request_context())
            list(QueuedRunCoordinatorDaemon(interval_seconds=1).run_iteration(workspace))
            statuses = sorted(r.status.value for r in instance.get_runs())
            launched = instance.run_launcher.queue()
    assert statuses == ["QUEUED", "STARTING"], statuses
    assert len(launched) == 1


def test_slots_of_a_killed_in_process_run_are_released(dagster_dir):
    """A demo killed mid-step (SIGKILL, OOM) leaves its run STARTED and its pool slot claimed, which
    would block that pool for good. The next Assay start ends such runs and frees their slots; a
    live process's run is left alone."""
    import socket

    from dagster._core.test_utils import create_run_for_test

    from pipelines.instance import HOST_TAG, PID_START_TAG, PID_TAG, own_run_tags

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with dg.DagsterInstance.from_config(str(dagster_home())) as instance:
        prepare_instance(instance, note=lambda _: None)
        storage = instance.event_log_storage
        killed = create_run_for_test(instance, job_name="training_job", status=dg.DagsterRunStatus.STARTED,
                                     tags={HOST_TAG: socket.gethostname(), PID_TAG: str(dead.pid), PID_START_TAG: "1"})
        alive = create_run_for_test(instance, job_name="training_job", status=dg.DagsterRunStatus.STARTED,
                                    tags=own_run_tags())
        assert storage.claim_concurrency_slot(POOL_TRAINER, killed.run_id, "policy_checkpoint").is_claimed
        assert not storage.claim_concurrency_slot(POOL_TRAINER, alive.run_id, "policy_checkpoint").is_claimed

        notes = []
        prepare_instance(instance, note=notes.append)
        assert instance.get_run_by_id(killed.run_id).status == dg.DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(alive.run_id).status == dg.DagsterRunStatus.STARTED
        assert storage.get_concurrency_info(POOL_TRAINER).active_run_ids <= {alive.run_id}
        assert any(killed.run_id[:8] in n for n in notes)
