"""The Dagster instance Assay runs on: its ``dagster.yaml`` and its concurrency limits, in one place.

Heavy work must not pile up on a small machine: a sensor that finds four new checkpoints asks for
four evaluation runs at once. So the instance queues runs (``QueuedRunCoordinator``) and caps them:

- at most ``ASSAY_MAX_CONCURRENT_RUNS`` runs in progress (default: the number of cores);
- concurrency pools, which limit the steps of the assets in them across all runs, whoever started
  them (``make ui``'s sensor and schedule, a backfill, ``assay demo``, ``dagster asset materialize``):
  ``trainer`` (``policy_checkpoint``; default 1: one GRPO run at a time), ``sweep``
  (``checkpoint_sweep``; default max(1, cores // 2)), ``ingest`` (``domain_samples``,
  ``gated_samples``; default max(1, cores // 2)), ``maintenance`` (``lake_maintenance``; default 1:
  two would race each other's compactions). Set ``ASSAY_POOL_TRAINER``, ``ASSAY_POOL_SWEEP``,
  ``ASSAY_POOL_INGEST``, ``ASSAY_POOL_MAINTENANCE`` to change them. A queued run whose first step is in a full pool stays
  queued until a slot frees; any other pool falls back to ``default_limit: 1``.

These environment variables are read here and nowhere else (:meth:`ConcurrencySettings.from_env`).
``dagster.yaml`` carries the run queue and pool granularity; per-pool limits live in the instance's
storage, so :func:`prepare_instance` writes them there (``assay demo`` and ``make ui`` call it).
A ``dagster.yaml`` written by Assay starts with ``# assay-managed``; Assay rewrites it when the
settings change and upgrades one written by an older Assay. Delete that first line to manage the
file yourself: Assay then leaves it alone and says so if it sets no limits.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Callable, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from assets.pools import POOL_INGEST, POOL_MAINTENANCE, POOL_SWEEP, POOL_TRAINER, POOLS  # noqa: E402,F401 (the names; limits here)

MANAGED_MARKER = "# assay-managed: v2"
# What Assay wrote before it configured concurrency: upgraded in place.
LEGACY_ASSAY_YAML = "telemetry:\n  enabled: false\n"

# Tags on runs that Assay executes in its own process (assay demo): if that process dies without
# ending the run, prepare_instance marks the run failed and frees the pool slots it held.
HOST_TAG, PID_TAG, PID_START_TAG = "assay/host", "assay/pid", "assay/pid_start"


class InstanceConfigError(ValueError):
    """A concurrency setting that cannot be used, with how to fix it."""


def _cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class ConcurrencySettings(BaseModel):
    """How much heavy work runs at once on this Dagster instance (read from the environment by
    :meth:`from_env`; :meth:`defaults` sizes it to the machine)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_concurrent_runs: int = Field(description="runs in progress at once (ASSAY_MAX_CONCURRENT_RUNS; default: "
                                                 "the number of cores)")
    pools: dict[str, int] = Field(default_factory=dict, description="steps at once per concurrency pool "
                                                                    "(ASSAY_POOL_TRAINER, _SWEEP, _INGEST, _MAINTENANCE)")

    @field_validator("max_concurrent_runs")
    @classmethod
    def _some_runs(cls, value):
        if value < 1:
            raise ValueError(f"max_concurrent_runs must be >= 1, got {value} (set ASSAY_MAX_CONCURRENT_RUNS to a "
                             "whole number >= 1, or unset it)")
        return value

    @field_validator("pools")
    @classmethod
    def _known_pools(cls, pools):
        unknown = sorted(set(pools) - set(POOLS))
        if unknown:
            raise ValueError(f"unknown pool(s) {unknown}; Assay's pools are {', '.join(POOLS)}")
        small = {pool: limit for pool, limit in pools.items() if limit < 1}
        if small:
            raise ValueError(f"pool limits must be >= 1, got {small}")
        return pools

    @classmethod
    def defaults(cls, cores: int | None = None) -> "ConcurrencySettings":
        cores = cores or _cores()
        half = max(1, cores // 2)
        return cls(max_concurrent_runs=cores, pools={POOL_TRAINER: 1, POOL_SWEEP: half, POOL_INGEST: half,
                                                          POOL_MAINTENANCE: 1})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "ConcurrencySettings":
        environ = os.environ if environ is None else environ
        default = cls.defaults()

        def read(name: str, fallback: int) -> int:
            text = environ.get(name, "").strip()
            if not text:
                return fallback
            try:
                value = int(text)
            except ValueError:
                value = 0
            if value < 1:
                raise InstanceConfigError(f"{name}={text!r}: must be a whole number >= 1 (e.g. {name}={fallback}); "
                                          f"unset it for the default {fallback}")
            return value

        return cls(max_concurrent_runs=read("ASSAY_MAX_CONCURRENT_RUNS", default.max_concurrent_runs),
                   pools={pool: read(f"ASSAY_POOL_{pool.upper()}", default.pools[pool]) for pool in POOLS})

    def describe(self) -> str:
        return (f"at most {self.max_concurrent_runs} runs at once; pools "
                + ", ".join(f"{pool}={limit}" for pool, limit in self.pools.items()))


def dagster_yaml(settings: ConcurrencySettings, postgres_url: str | None = None) -> str:
    """The ``dagster.yaml`` Assay writes (Dagster 1.13 ``concurrency:`` schema); with
    ``postgres_url`` (the team profile) runs, events and schedules live in that PostgreSQL
    database (``dagster-postgres``), so every machine of the team sees one instance."""
    storage = "" if postgres_url is None else f"""storage:
  postgres:
    postgres_url: {postgres_url}
"""
    return f"""{MANAGED_MARKER}
# Written by Assay (pipelines/instance.py); it rewrites this file when the settings change.
# Change the limits with ASSAY_MAX_CONCURRENT_RUNS, ASSAY_POOL_TRAINER, ASSAY_POOL_SWEEP and
# ASSAY_POOL_INGEST (per-pool limits live in the instance storage; `make ui` and `assay demo` set
# them). To manage this file yourself, delete its first line.
telemetry:
  enabled: false
run_coordinator:
  module: dagster
  class: QueuedRunCoordinator
concurrency:
  runs:
    max_concurrent_runs: {settings.max_concurrent_runs}
  pools:
    granularity: op
    default_limit: 1
run_monitoring:
  enabled: true
  free_slots_after_run_end_seconds: 60
{storage}"""


def write_dagster_yaml(folder: Path, settings: ConcurrencySettings,
                       note: Callable[[str], None] | None = None, postgres_url: str | None = None) -> Path:
    """Create, upgrade or leave ``folder/dagster.yaml``; say on ``note`` what was done and why."""
    note = note or (lambda message: print(f"assay: {message}", file=sys.stderr))
    path = folder / "dagster.yaml"
    wanted = dagster_yaml(settings, postgres_url)
    if not path.exists():
        path.write_text(wanted)
        return path
    current = path.read_text()
    if current == wanted:
        return path
    if current.startswith(MANAGED_MARKER):
        path.write_text(wanted)
        note(f"updated {path}: {settings.describe()}")
    elif current == LEGACY_ASSAY_YAML:
        path.write_text(wanted)
        note(f"upgraded {path} (written by an older Assay, with no run queue limits): {settings.describe()}")
    elif "concurrency" not in _yaml_keys(current) and "run_queue" not in _yaml_keys(current):
        note(f"warning: {path} is not managed by Assay and sets no run queue or pool limits, so a "
             f"sensor may start many heavy runs at once: delete it to let Assay write one, or add a "
             f"`concurrency:` section (see README, 'Concurrency')")
    return path


def _yaml_keys(text: str) -> set[str]:
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return set()
    return set(data) if isinstance(data, dict) else set()


def dagster_home(home: str | os.PathLike | None = None, settings: ConcurrencySettings | None = None) -> Path:
    """``$DAGSTER_HOME`` if set, else ``$ASSAY_HOME/dagster``; created, with Assay's dagster.yaml."""
    from storage.lake import resolve_home

    from storage.deployment import load_profile

    path = Path(os.environ.get("DAGSTER_HOME") or resolve_home(home) / "dagster")
    path.mkdir(parents=True, exist_ok=True)
    profile = load_profile()
    write_dagster_yaml(path, settings or ConcurrencySettings.from_env(),
                       postgres_url=profile.database_url("dagster") if profile.shared else None)
    return path


def _process_start(pid: int) -> str | None:
    """The start time of ``pid`` in clock ticks since boot (/proc), to tell a reused pid apart."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def own_run_tags() -> dict[str, str]:
    """Tags for a run this process executes in-process, so a later Assay can tell if it died."""
    pid = os.getpid()
    return {HOST_TAG: socket.gethostname(), PID_TAG: str(pid), PID_START_TAG: _process_start(pid) or ""}


def _is_dead(tags: Mapping[str, str]) -> bool:
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False  # not ours to judge
    start = _process_start(int(tags[PID_TAG]))
    return start is None or start != tags.get(PID_START_TAG)


def apply_pool_limits(instance, settings: ConcurrencySettings) -> dict[str, int]:
    """Set each pool's limit in the instance storage; returns the pools whose limit changed."""
    storage = instance.event_log_storage
    current = {pool.name: pool.limit for pool in storage.get_pool_limits() if not pool.from_default}
    changed = {}
    for pool, limit in settings.pools.items():
        if current.get(pool) != limit:
            storage.set_concurrency_slots(pool, limit)
            changed[pool] = limit
    return changed


def release_abandoned_slots(instance) -> list[str]:
    """Free pool slots held by runs that ended, and end (as failed) Assay's in-process runs whose
    process is gone (killed demo): a slot they kept would block that pool for good."""
    import dagster as dg

    storage = instance.event_log_storage
    released = []
    for run in instance.get_runs(dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED],
                                               tags={HOST_TAG: socket.gethostname()})):
        if _is_dead(run.tags):
            instance.report_run_failed(run, message=f"the Assay process running it (pid {run.tags[PID_TAG]}) is gone")
            released.append(run.run_id)
    for run_id in storage.get_concurrency_run_ids():
        record = instance.get_run_record_by_id(run_id)
        if record is None or record.dagster_run.is_finished:
            storage.free_concurrency_slots_for_run(run_id)
            released.append(run_id)
    return sorted(set(released))


def prepare_instance(instance, settings: ConcurrencySettings | None = None,
                     note: Callable[[str], None] | None = None) -> None:
    """Pool limits into the storage, and slots of dead runs released."""
    note = note or (lambda message: print(f"assay: {message}", file=sys.stderr))
    settings = settings or ConcurrencySettings.from_env()
    changed = apply_pool_limits(instance, settings)
    if changed:
        note("pool limits set: " + ", ".join(f"{pool}={limit}" for pool, limit in changed.items()))
    released = release_abandoned_slots(instance)
    if released:
        note(f"released pool slots of {len(released)} run(s) that ended or whose process died: "
             + ", ".join(r[:8] for r in released))


def open_instance(home: str | os.PathLike | None = None):
    """The persistent instance under :func:`dagster_home`, with Assay's limits applied."""
    import dagster as dg

    settings = ConcurrencySettings.from_env()
    instance = dg.DagsterInstance.from_config(str(dagster_home(home, settings)))
    prepare_instance(instance, settings)
    return instance


def main() -> int:
    """``python -m pipelines.instance`` (``make ui`` runs it before ``dagster dev``)."""
    try:
        settings = ConcurrencySettings.from_env()
        instance = open_instance()
    except InstanceConfigError as exc:
        print(f"assay: error: {exc}", file=sys.stderr)
        return 2
    with instance:
        print(f"Dagster instance {instance.root_directory}: runs queue, {settings.describe()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
