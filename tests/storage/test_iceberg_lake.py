"""The team profile's lake (storage/iceberg_lake.py) on a real PostgreSQL catalog and a real S3
server (moto): the local lake's contract (tests/storage/test_lake.py) holds, batches of several
frames commit whole, concurrent writers in several processes lose nothing, and a writer killed
mid-commit leaves nothing half-written."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import polars as pl
import pytest

from storage.deployment import load_profile, open_lake
from storage.iceberg_lake import IcebergLake
from storage.lake import Lake
from tests.conftest import REPO
from tests.storage.iceberg_writer_child import frames


@pytest.fixture
def lake(team_env, assay_home) -> IcebergLake:
    made = open_lake(write=True)
    assert isinstance(made, IcebergLake)
    return made


def test_the_profile_picks_the_iceberg_lake_and_mlflow_on_postgres_with_s3_artifacts(lake, team_env):
    assert lake.mlflow_uri.startswith("postgresql+psycopg2://") and lake.mlflow_uri.endswith("/assay_mlflow")
    assert lake.mlflow_artifacts == f"s3://{team_env['ASSAY_S3_BUCKET']}/mlartifacts"
    assert lake.root == f"s3://{team_env['ASSAY_S3_BUCKET']}/lake/{team_env['ASSAY_LAKE_CATALOG']}"


def test_batches_replace_delete_and_read_like_the_local_lake(lake, assay_home):
    local = Lake.at(assay_home / "local")
    writes = [("ingest", {"domain": "a", "batch": "b1"}, frames(1, 3)),
              ("ingest", {"domain": "b", "batch": "b1"}, frames(2, 2)),
              ("ingest", {"domain": "a", "batch": "b2"}, frames(3, 1)),
              ("ingest", {"domain": "a", "batch": "b1"}, frames(4, 2)),  # replaces the first
              ("results", {"checkpoint": "c1"}, {"part": pl.DataFrame({"score": [0.5, 1.0]})}),
              ("results", {"checkpoint": "c2"}, {"part": pl.DataFrame({"score": [0.0], "extra": ["new column"]})})]
    for table, partition, batch in writes:
        lake.write_batch(table, partition, batch)
        local.write_batch(table, partition, batch)
    assert lake.delete_partition("ingest", {"domain": "b", "batch": "b1"})
    assert local.delete_partition("ingest", {"domain": "b", "batch": "b1"})
    assert not lake.delete_partition("ingest", {"domain": "zz", "batch": "b1"})

    assert lake.tables() == local.tables() == ["ingest", "results"]
    assert sorted(lake.views()) == sorted(local.views()) == ["quarantine", "results", "samples"]
    query = "SELECT domain, batch, v, count(*) AS n FROM samples GROUP BY ALL ORDER BY ALL"
    assert lake.sql(query).rows() == local.sql(query).rows() == [("a", "b1", 4, 2), ("a", "b2", 3, 1)]
    # a column added by a later batch reads as null in older ones, as locally
    query = "SELECT checkpoint, score, extra FROM results ORDER BY score"
    assert lake.sql(query).rows() == local.sql(query).rows()
    assert lake.read("results", where={"checkpoint": "c2"})["extra"].to_list() == ["new column"]
    assert lake.read("ingest", "quarantine", where={"domain": "a"}, columns=["reasons"]).height == 3
    assert lake.read("ingest", "samples", where={"domain": "nope"}).height == 0
    assert lake.partition_values("ingest", "domain") == ["a"]  # (the local lake lists b's emptied folder too)
    assert lake.files("missing_table") == [] and lake.read("missing_table").height == 0


def test_a_read_is_a_snapshot_file_that_a_later_commit_does_not_change(lake):
    lake.write_batch("t", {"batch": "b"}, frames(1))
    first = lake.files("t", "samples")
    lake.write_batch("t", {"batch": "b"}, frames(2))
    second = lake.files("t", "samples")
    assert first != second  # a new snapshot, a new file
    assert pl.read_parquet(first[0])["v"].to_list() == [1] and pl.read_parquet(second[0])["v"].to_list() == [2]


def test_frames_of_one_table_that_disagree_on_a_column_type_are_refused_with_the_reason(lake):
    bad = {"samples": pl.DataFrame({"v": [1]}), "quarantine": pl.DataFrame({"v": ["one"]})}
    with pytest.raises(ValueError, match="disagree on a column's type"):
        lake.write_batch("t", {"batch": "b"}, bad)
    assert lake.read("t", "samples").height == 0  # nothing of it was committed


def _commits(lake, table) -> int:
    """How many catalog commits ``table`` has had: its metadata file's version number."""
    return int(lake.iceberg_table(table).metadata_location.rsplit("/", 1)[1].split("-", 1)[0])


def test_several_batches_commit_as_one_unit_and_read_like_the_local_lake(lake, assay_home):
    local = Lake.at(assay_home / "local")
    first = [({"domain": d, "batch": "b1"}, frames(i, 2)) for i, d in enumerate("abc", 1)]
    for target in (lake, local):
        target.write_batches("ingest", first)
    before = _commits(lake, "ingest")
    # one unit replacing a batch and adding two: one commit, old rows of the replaced batch gone
    second = [({"domain": "a", "batch": "b1"}, frames(7, 1)), ({"domain": "d", "batch": "b1"}, frames(8, 3)),
              ({"domain": "a", "batch": "b2"}, {"samples": pl.DataFrame({"v": [9], "kind": ["admitted"],
                                                                          "extra": ["x"]})})]
    for target in (lake, local):
        target.write_batches("ingest", second)
    assert _commits(lake, "ingest") == before + 1
    query = "SELECT domain, batch, v, count(*) AS n FROM samples GROUP BY ALL ORDER BY ALL"
    assert lake.sql(query).rows() == local.sql(query).rows() == [
        ("a", "b1", 7, 1), ("a", "b2", 9, 1), ("b", "b1", 2, 2), ("c", "b1", 3, 2), ("d", "b1", 8, 3)]
    assert lake.read("ingest", "samples", where={"domain": "a", "batch": "b2"})["extra"].to_list() == ["x"]
    assert lake.read("ingest", "quarantine", where={"domain": "d"}).height == 3
    assert lake.write_batches("ingest", []) == []


def test_manifests_of_a_unit_are_committed_with_it_and_read_back_like_the_local_lake(lake, assay_home):
    local = Lake.at(assay_home / "local")
    unit = [({"domain": "a", "batch": "b1"}, frames(1), {"source": "a.jsonl", "received": 1}),
            ({"domain": "b", "batch": "b1"}, frames(2)),  # no manifest: a pair, as sweeps write
            ({"domain": "c", "batch": "b1"}, frames(3), None),
            ({"domain": "d", "batch": "b1"}, {}, {"note": "a manifest alone"})]
    for target in (lake, local):
        target.write_batches("ingest", unit)
    assert len(lake.iceberg_table("ingest").snapshots()) == 1  # the manifests are in that one commit
    for target in (lake, local):
        assert target.manifest("ingest", {"domain": "a", "batch": "b1"}) == {"source": "a.jsonl", "received": 1}
        assert target.manifest("ingest", {"domain": "b", "batch": "b1"}) is None
        assert target.manifest("ingest", {"domain": "c", "batch": "b1"}) is None
        assert target.manifest("ingest", {"domain": "d", "batch": "b1"}) == {"note": "a manifest alone"}
        assert target.manifest("ingest", {"domain": "e", "batch": "b1"}) is None
        assert target.manifest("nothing", {"domain": "a", "batch": "b1"}) is None
    # a later unit replaces a's manifest and leaves b's and d's; write_batch's lone manifest reads back too
    for target in (lake, local):
        target.write_batches("ingest", [({"domain": "a", "batch": "b1"}, frames(4), {"received": 4}),
                                        ({"domain": "e", "batch": "b1"}, frames(5), {"received": 5})])
        target.write_batch("ingest", {"domain": "f", "batch": "b1"}, frames(6), {"received": 6})
        assert target.manifest("ingest", {"domain": "a", "batch": "b1"}) == {"received": 4}
        assert target.manifest("ingest", {"domain": "d", "batch": "b1"}) == {"note": "a manifest alone"}
        assert target.manifest("ingest", {"domain": "e", "batch": "b1"}) == {"received": 5}
        assert target.manifest("ingest", {"domain": "f", "batch": "b1"}) == {"received": 6}
    assert lake.iceberg_table("ingest").current_snapshot().summary["assay.manifest"] == '{"received": 6}'
    with pytest.raises(ValueError, match="partition, frames"):
        lake.write_batches("ingest", [({"domain": "g", "batch": "b1"}, frames(7), None, "extra")])


def test_a_unit_with_mixed_keys_or_a_key_twice_is_refused_before_anything_is_written(lake):
    with pytest.raises(ValueError, match="same partition keys"):
        lake.write_batches("t", [({"domain": "a", "batch": "b"}, frames(1)), ({"domain": "a"}, frames(2))])
    with pytest.raises(ValueError, match="appears twice"):
        lake.write_batches("t", [({"batch": "b"}, frames(1)), ({"batch": "b"}, frames(2))])
    with pytest.raises(ValueError, match="no frames"):
        lake.write_batches("t", [({"batch": "b"}, {})])
    assert lake.read("t", "samples").height == 0


def test_a_unit_killed_before_its_catalog_commit_shows_none_of_its_batches(lake):
    lake.write_batches("u", [({"domain": d, "batch": "b"}, frames(1)) for d in "ab"])
    child = _child("pause-unit", "u", "2")
    try:
        assert child.stdout.readline().strip() == "paused", child.stderr.read()
    finally:
        child.kill()
        child.wait()
    # all three batches' files were written; the catalog never pointed at them
    assert sorted(lake.read("u", "samples").select("domain", "v").rows()) == [("a", 1), ("b", 1)]
    assert lake.read("u", "quarantine").height == 2
    lake.write_batches("u", [({"domain": d, "batch": "b"}, frames(3)) for d in "abc"])  # no lock left behind
    assert sorted(lake.read("u", "samples").select("domain", "v").rows()) == [("a", 3), ("b", 3), ("c", 3)]


def _write_many(args) -> list[str]:
    worker, batches, env = args
    os.environ.update(env)  # importing tests.conftest in this fresh process cleared the profile
    lake = open_lake(write=True)
    for i in range(batches):
        lake.write_batch("shared", {"writer": f"w{worker}", "batch": f"b{i}"}, frames(worker * 100 + i, 2))
        lake.write_batch("shared", {"writer": "all", "batch": "same"}, frames(worker * 100 + i, 3))  # everyone replaces this
    return [f"w{worker}"]


def test_writers_in_several_processes_lose_nothing_and_a_shared_batch_stays_whole(lake, team_env):
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:  # polars' pool dies in a fork
        list(pool.map(_write_many, [(w, 4, team_env) for w in range(3)]))
    samples = lake.read("shared", "samples")
    quarantine = lake.read("shared", "quarantine")
    own = samples.filter(pl.col("writer") != "all")
    assert own.group_by("writer", "batch").len().height == 12 and own.height == 24  # every batch, whole
    shared_s = samples.filter(pl.col("writer") == "all")["v"].to_list()
    shared_q = quarantine.filter(pl.col("writer") == "all")["v"].to_list()
    assert len(shared_s) == 3 and len(set(shared_s)) == 1 and shared_q == shared_s  # one writer's version, both frames


def _child(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.storage.iceberg_writer_child", *args], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy())


def test_a_writer_killed_after_writing_its_files_before_the_catalog_commit_changes_nothing(lake):
    lake.write_batch("t", {"batch": "b"}, frames(1, 2))
    child = _child("pause", "t", "2")
    try:
        assert child.stdout.readline().strip() == "paused", child.stderr.read()
        # its data and metadata files are on object storage now; the catalog still points at version 1
        assert lake.read("t", "samples")["v"].to_list() == [1, 1]
    finally:
        child.kill()
        child.wait()
    assert lake.read("t", "samples")["v"].to_list() == [1, 1]
    assert lake.read("t", "quarantine")["v"].to_list() == [1, 1]
    lake.write_batch("t", {"batch": "b"}, frames(3))  # no lock left behind: the next writer commits
    assert lake.read("t", "samples")["v"].to_list() == [3]


def test_a_writer_killed_at_random_moments_never_leaves_a_half_batch_or_loses_a_commit(lake):
    rng = random.Random(5)
    committed = 0
    for _ in range(3):
        child = _child("loop", "k", "1000")
        time.sleep(rng.uniform(4.0, 8.0))  # process start and imports take ~3 s; then it commits
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        printed = [int(v) for v in out.split()]
        samples, quarantine = lake.read("k", "samples"), lake.read("k", "quarantine")
        if not printed and samples.height == 0:
            continue
        value = samples["v"][0]
        # the version visible is the last one it said it committed, or the one it committed and
        # was killed before saying so: never an older one, never a mix
        assert value in (printed[-1], printed[-1] + 1) if printed else value >= 1
        assert samples["v"].to_list() == quarantine["v"].to_list() == [value] * (value % 4 + 1)
        committed += len(printed)
    assert committed > 0, "the writer never committed before being killed: give it more time"


def _objects(lake, table) -> set[str]:
    from storage.lake_maintenance import table_objects

    return {info.path for info in table_objects(lake.iceberg_table(table))[1]}


def test_maintenance_expires_history_and_removes_orphans_but_never_what_is_young_or_live(lake):
    from storage.lake_maintenance import MaintenanceSettings, _referenced, maintain

    for value in (1, 2, 3):  # two replaced versions: their data files stay referenced by old snapshots
        lake.write_batch("m", {"batch": "b"}, frames(value, 2))
    lake.write_batch("m", {"batch": "other"}, frames(9))
    child = _child("pause", "m", "5")  # a writer killed before its commit leaves files nothing references
    try:
        assert child.stdout.readline().strip() == "paused", child.stderr.read()
    finally:
        child.kill()
        child.wait()
    objects = _objects(lake, "m")
    snapshots = len(lake.iceberg_table("m").snapshots())
    assert snapshots >= 4

    # everything is younger than the default grace: nothing goes
    [young] = maintain(lake, MaintenanceSettings(), ["m"])
    assert (young.snapshots_expired, young.orphans_removed) == (0, 0) and _objects(lake, "m") >= objects

    [report] = maintain(lake, MaintenanceSettings(keep_snapshots=1, grace_s=0), ["m"])
    tbl = lake.iceberg_table("m")
    assert report.snapshots_before >= snapshots and report.snapshots_expired == report.snapshots_before - 1
    assert len(tbl.snapshots()) == 1 and report.orphans_removed > 0
    left = _objects(lake, "m")
    assert left <= _referenced(tbl) | {tbl.metadata_location.split("://", 1)[1]}, left - _referenced(tbl)
    assert len(left) < len(objects)
    # what readers see is untouched, and writers go on
    assert sorted(lake.read("m", "samples")["v"].to_list()) == [3, 3, 9]
    assert lake.read("m", "quarantine").height == 3
    lake.write_batch("m", {"batch": "b"}, frames(4))
    assert sorted(lake.read("m", "samples")["v"].to_list()) == [4, 9]


def test_maintenance_of_the_local_lake_recovers_dead_writers_only(assay_home):
    from storage.lake_maintenance import maintain

    local = Lake.at(assay_home / "local")
    local.write_batch("t", {"batch": "b"}, frames(1))
    [report] = maintain(local)
    assert report.table == "(local lake)" and local.read("t", "samples")["v"].to_list() == [1]


def test_gate_results_is_unpartitioned_replaces_batches_reads_a_domain_and_compacts_into_one_file(lake, assay_home):
    from storage.iceberg_lake import UNPARTITIONED_TABLES
    from storage.lake_maintenance import MaintenanceSettings, _live_files, maintain

    assert "gate_results" in UNPARTITIONED_TABLES
    local = Lake.at(assay_home / "local")

    def gate(domain, evaluation, ok):
        return {"part": pl.DataFrame({"expectation": ["rows", "nulls"], "success": [ok, True],
                                      "note": [f"{domain}/{evaluation}", None]})}

    writes = [({"domain": d, "evaluation": e}, gate(d, e, True)) for d in ("a", "b", "c") for e in ("e1", "e2")]
    writes.append(({"domain": "b", "evaluation": "e1"}, gate("b", "e1", False)))  # replaces b/e1 whole
    for key, batch in writes:
        lake.write_batch("gate_results", key, batch)
        local.write_batch("gate_results", key, batch)
    tbl = lake.iceberg_table("gate_results")
    assert not tbl.spec().fields  # one group of files for the whole table
    query = "SELECT domain, evaluation, expectation, success, note FROM gate_results ORDER BY ALL"
    before = local.sql(query).rows()
    assert lake.sql(query).rows() == before and len(before) == 12
    assert sorted(lake.read("gate_results", where={"domain": "b"})["success"].to_list()) == [False, True, True, True]
    assert lake.read("gate_results", where={"domain": "b", "evaluation": "e1"})["success"].to_list() == [False, True]
    assert lake.read("gate_results", where={"domain": "zz"}).height == 0
    assert _live_files(tbl)[0] >= 6

    [report] = maintain(lake, MaintenanceSettings(compact_min_files=2, keep_snapshots=1, grace_s=0), ["gate_results"])
    assert report.partitions_compacted == 1 and report.data_files_after == 1
    assert lake.sql(query).rows() == before
    lake.write_batch("gate_results", {"domain": "a", "evaluation": "e1"}, gate("a", "e1", False))  # replace after it
    local.write_batch("gate_results", {"domain": "a", "evaluation": "e1"}, gate("a", "e1", False))
    assert lake.sql(query).rows() == local.sql(query).rows()


def test_a_new_snapshot_is_exported_from_local_copies_of_its_data_files_fetching_only_the_added_ones(lake):
    from storage.iceberg_lake import DATA_FILES_FOLDER

    for value, batch in enumerate("abc"):
        lake.write_batch("t", {"batch": batch}, frames(value, 2))
    assert sorted(lake.read("t", "samples")["v"].to_list()) == [0, 0, 1, 1, 2, 2]
    copies = lake.cache_dir / "t" / DATA_FILES_FOLDER
    assert len(list(copies.iterdir())) == 3  # one data file per batch, both frames in it

    lake.write_batch("t", {"batch": "a"}, frames(7))  # replaces a: a new data file, the old one left out
    lake.write_batch("t", {"batch": "d"}, frames(9))
    assert sorted(lake.read("t", "samples")["v"].to_list()) == [1, 1, 2, 2, 7, 9]
    assert lake.read("t", "quarantine", where={"batch": "a"})["v"].to_list() == [7]
    assert len(list(copies.iterdir())) == 5  # the two added files; the copies of b and c were reused
    # a copy gone (pruned by another reader) is fetched again
    for copy in copies.iterdir():
        copy.unlink()
    lake.write_batch("t", {"batch": "e"}, frames(5))
    assert sorted(lake.read("t", "samples")["v"].to_list()) == [1, 1, 2, 2, 5, 7, 9]
