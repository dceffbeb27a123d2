"""An ingest run of several domains commits as one unit (issue 30): one commit of table ``ingest``
on the team lake however many domains and batches; a run killed before its commit leaves none
of its batches (and every batch it would have replaced as it was), and running it again ingests
all of them; held batches count for the gates of the batches after them, so a unit admits and
quarantines exactly what the same batches written one by one would. The lakes are real (local
folders, or the team profile's Iceberg lake on PostgreSQL and moto's S3 server)."""

from __future__ import annotations

import polars as pl
import pytest

from tests.conftest import kill_when_stalled
from tests.quality.ingest_child import TRAIN_N, domains


def _unit(lake, names: str, **kwargs):
    from quality.ingest import ingest_generated_many

    return ingest_generated_many(lake, domains(names, **kwargs), train_n=TRAIN_N)


def _one_by_one(lake, names: str, **kwargs):
    """The same batches as :func:`_unit`, each written on its own as it is gated (no unit)."""
    from quality.ingest import generated_records, ingest_records

    out = {}
    for domain in domains(names, **kwargs):
        out[domain.name] = {split: ingest_records(lake, domain, generated_records(domain, split, n, 0),
                                                  source=f"generated:{domain.name}:{split}:seed=0",
                                                  batch=f"generated-{split}", default_split=split)
                            for split, n in (("eval", domain.eval_size), ("train", TRAIN_N))}
    return out


def _summaries(reports) -> dict:
    return {(d, split): r.summary() for d, splits in reports.items() for split, r in splits.items()}


def _rows(lake, frame: str) -> list[tuple]:
    rows = lake.read("ingest", frame)
    return sorted(rows.select("domain", "batch", "id").rows()) if rows.height else []


def _lake(kind: str, request, home):
    from storage.deployment import open_lake
    from storage.lake import Lake

    if kind == "team":
        request.getfixturevalue("team_env")
        return open_lake(write=True)
    return Lake.at(home)


def test_a_unit_admits_and_quarantines_what_batches_written_one_by_one_would(assay_home):
    from storage.lake import Lake

    unit, alone = Lake.at(assay_home / "unit"), Lake.at(assay_home / "alone")
    for _ in range(2):  # a first ingest, then one replacing every batch
        # domain c's train items repeat domain a's eval items: a held batch must count as admitted
        got, expected = _unit(unit, "abc", shared="c"), _one_by_one(alone, "abc", shared="c")
        assert _summaries(got) == _summaries(expected)
        assert got["c"]["train"].reasons == {"duplicate": TRAIN_N - 2}  # 4 repeats of a's 4 eval items
        assert got["a"]["train"].quarantined == got["b"]["train"].quarantined == 0
        for frame in ("samples", "quarantine"):
            assert _rows(unit, frame) == _rows(alone, frame)
    assert len(_rows(unit, "samples")) == 3 * 4 + 2 * TRAIN_N + 2


def test_a_team_ingest_of_several_domains_is_one_commit_of_the_ingest_table(team_env, assay_home):
    from storage.deployment import open_lake

    lake = open_lake(write=True)
    reports = _unit(lake, "abcd")
    table = lake.iceberg_table("ingest")
    assert len(table.snapshots()) == 1  # 4 domains x (eval, train): 8 batches in one snapshot
    assert lake.read("ingest", "samples").group_by("domain", "batch").len().sort("domain", "batch").rows() == [
        (d, f"generated-{split}", n) for d in "abcd" for split, n in (("eval", 4), ("train", TRAIN_N))]
    for name, splits in reports.items():
        for split, report in splits.items():
            key = {"domain": name, "batch": f"generated-{split}"}
            assert report.path == lake.location("ingest", key)
            manifest = lake.manifest("ingest", key)  # committed in that same snapshot
            assert {k: manifest[k] for k in report.summary()} == report.summary()
            assert manifest["source"] == f"generated:{name}:{split}:seed=0"
    commits = len(table.metadata.metadata_log)
    again = _unit(lake, "abcd")  # replacing all eight batches: still one commit
    assert _summaries(again) == _summaries(reports)
    assert len(lake.iceberg_table("ingest").metadata.metadata_log) == commits + 1
    assert lake.read("ingest", "samples").height == 4 * (4 + TRAIN_N)


def _killed_child(names: str, stall_on: str) -> None:
    kill_when_stalled("tests.quality.ingest_child", names, stall_on)


@pytest.mark.parametrize("kind", ["local", "team"])
def test_an_ingest_killed_midway_shows_no_batch_of_its_unit_and_a_rerun_ingests_all(kind, request, assay_home):
    lake = _lake(kind, request, assay_home)
    _unit(lake, "a")  # an earlier version of a's two batches, which the killed run was replacing
    before = lake.read("ingest", "samples").select("domain", "batch", "id", "ingested_at").sort("batch", "id")
    # a and b gated and held, c generating when the process is killed: nothing of the unit committed
    _killed_child("abc", "c")
    after = lake.read("ingest", "samples").select("domain", "batch", "id", "ingested_at").sort("batch", "id")
    assert after.rows() == before.rows()  # a's batches as they were (same versions), no b
    assert lake.read("ingest", "quarantine").height == 0
    if kind == "team":
        assert len(lake.iceberg_table("ingest").snapshots()) == 1  # only the earlier ingest's commit
    rerun = _unit(lake, "abc")
    assert {d: (s["eval"].admitted, s["train"].admitted) for d, s in rerun.items()} == {
        d: (4, TRAIN_N) for d in "abc"}
    samples = lake.read("ingest", "samples")
    assert samples.group_by("domain").len().sort("domain").rows() == [(d, 4 + TRAIN_N) for d in "abc"]
    assert samples.filter(pl.col("domain") == "a")["ingested_at"].unique().to_list() != \
        before["ingested_at"].unique().to_list()  # a's batches replaced by the rerun
