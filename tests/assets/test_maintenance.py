"""The lake_maintenance asset (assets/maintenance.py), materialized for real by Dagster: on the
team profile (PostgreSQL catalog, moto's S3 server) it compacts, expires and removes orphans and
says so in its metadata, leaving what readers see unchanged; on the local profile it is a cheap
no-op that says why. Its schedule is on by default only where the lake is shared."""

from __future__ import annotations

import dagster as dg
import polars as pl

from tests.storage.iceberg_writer_child import frames


def _materialize(home, config: dict | None = None):
    from assets.maintenance import lake_maintenance
    from assets.resources import LakeResource

    with dg.instance_for_test() as instance:
        result = dg.materialize([lake_maintenance], resources={"lake": LakeResource(home=str(home))},
                                instance=instance,
                                run_config={"ops": {"lake_maintenance": {"config": config or {}}}})
    assert result.success
    [event] = result.get_asset_materialization_events()
    return {key: value.value for key, value in event.materialization.metadata.items()}


def test_maintenance_on_the_team_lake_compacts_expires_and_removes_orphans(team_env, assay_home):
    from storage.deployment import open_lake

    lake = open_lake(write=True)
    for i in range(4):  # four small files in one partition (checkpoint k): a sweep committed batch by batch
        lake.write_batch("r", {"checkpoint": "k", "domain": f"d{i}"}, frames(i))
    lake.write_batch("r", {"checkpoint": "other", "domain": "d0"}, frames(99))
    lake.write_batch("r", {"checkpoint": "k", "domain": "d0"}, frames(100))  # a replaced batch: an old file
    before = sorted(lake.read("r", "samples").select("checkpoint", "domain", "v").rows())
    snapshots = len(lake.iceberg_table("r").snapshots())

    meta = _materialize(assay_home, {"keep_snapshots": 1, "grace_s": 0.0, "compact_min_files": 3})
    assert meta["lake"] == "team" and "compaction" in meta["scope"]
    assert meta["snapshots_before"] == snapshots and meta["snapshots_after"] == 1
    assert meta["partitions_compacted"] == 1 and meta["compactions_lost"] == 0
    assert meta["data_files_before"] == 5 and meta["data_files_after"] == 2  # k as one file, other untouched
    assert meta["files_removed"] > 5  # the replaced and compacted files, their manifests, old metadata
    assert meta["seconds"] > 0 and "| r |" in meta["per_table"]
    assert sorted(lake.read("r", "samples").select("checkpoint", "domain", "v").rows()) == before
    assert lake.read("r", "quarantine").height == len(before)
    lake.write_batch("r", {"checkpoint": "k", "domain": "d1"}, frames(7))  # writers go on
    assert lake.read("r", "samples", where={"checkpoint": "k", "domain": "d1"})["v"].to_list() == [7]


def test_a_compaction_that_loses_the_race_to_a_writer_changes_nothing(team_env, assay_home):
    from storage.deployment import open_lake
    from storage.lake_maintenance import MaintenanceSettings, _compact

    lake = open_lake(write=True)
    for i in range(4):
        lake.write_batch("r", {"checkpoint": "k", "domain": f"d{i}"}, frames(i))
    stale = lake.iceberg_table("r")  # what maintenance loaded ...
    lake.write_batch("r", {"checkpoint": "k", "domain": "d9"}, frames(9))  # ... before a writer committed
    assert _compact(stale, MaintenanceSettings(compact_min_files=2)) == (0, 1)
    rows = lake.read("r", "samples").sort("domain")
    assert rows["domain"].to_list() == ["d0", "d1", "d2", "d3", "d9"]  # the writer's batch kept
    assert _compact(lake.iceberg_table("r"), MaintenanceSettings(compact_min_files=2)) == (1, 0)
    assert lake.read("r", "samples").sort("domain").equals(rows)


def test_maintenance_on_the_local_lake_is_cheap_and_says_so(assay_home):
    from storage.lake import Lake

    Lake.at(assay_home).write_batch("t", {"batch": "b"}, {"part": pl.DataFrame({"v": [1]})})
    meta = _materialize(assay_home)
    assert meta["lake"] == "local" and meta["tables"] == 0 and "nothing to expire or compact" in meta["scope"]
    assert meta["seconds"] < 5
    assert Lake.at(assay_home).read("t")["v"].to_list() == [1]


def test_the_schedule_is_on_by_default_only_where_the_lake_is_shared():
    from pipelines.jobs import lake_maintenance_job
    from pipelines.schedules import SCHEDULES, lake_maintenance_schedule, maintenance_status
    from storage.deployment import Profile

    assert lake_maintenance_schedule in SCHEDULES and lake_maintenance_schedule.job_name == lake_maintenance_job.name
    team = Profile(name="team", postgres_url="postgresql://u@h/p", s3_bucket="b")
    assert maintenance_status(team) == dg.DefaultScheduleStatus.RUNNING
    assert maintenance_status(Profile()) == dg.DefaultScheduleStatus.STOPPED
