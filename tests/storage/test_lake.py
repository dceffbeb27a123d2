"""Lake: atomic batch writes, replacement, crash recovery, DuckDB views."""

from __future__ import annotations

import os

import polars as pl
import pytest

from storage.lake import Lake


def test_write_read_and_query(assay_home):
    lake = Lake.at()
    assert lake.home == assay_home.resolve()
    lake.write_batch("ingest", {"domain": "a", "batch": "b1"},
                     {"samples": pl.DataFrame({"id": ["1", "2"], "x": [1, 2]})})
    lake.write_batch("ingest", {"domain": "b", "batch": "b1"},
                     {"samples": pl.DataFrame({"id": ["3"], "x": [3]})})
    frame = lake.read("ingest", "samples").sort("id")
    assert frame["domain"].to_list() == ["a", "a", "b"]
    assert lake.read("ingest", "samples", where={"domain": "b"})["id"].to_list() == ["3"]
    counts = lake.sql("SELECT domain, sum(x) AS s FROM samples GROUP BY 1 ORDER BY 1")
    assert counts.to_dicts() == [{"domain": "a", "s": 3}, {"domain": "b", "s": 3}]


def test_replacing_a_batch_is_whole(assay_home):
    lake = Lake.at()
    part = {"domain": "a", "batch": "gen"}
    lake.write_batch("t", part, {"part": pl.DataFrame({"v": [1, 2, 3]})})
    lake.write_batch("t", part, {"part": pl.DataFrame({"v": [9]})})
    assert lake.read("t")["v"].to_list() == [9]


def test_crash_mid_write_leaves_previous_state_readable(assay_home, monkeypatch):
    lake = Lake.at()
    part = {"domain": "a", "batch": "gen"}
    lake.write_batch("t", part, {"part": pl.DataFrame({"v": [1, 2]})})

    real_write = pl.DataFrame.write_parquet
    calls = {"n": 0}

    def dying_write(self, path, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real_write(self, path, *args, **kwargs)

    monkeypatch.setattr(pl.DataFrame, "write_parquet", dying_write)
    with pytest.raises(OSError):
        lake.write_batch("t", part, {"part": pl.DataFrame({"v": [7]}), "other": pl.DataFrame({"v": [8]})})
    monkeypatch.undo()
    assert lake.read("t")["v"].to_list() == [1, 2]
    assert not list(lake.root.rglob(".staging-*")), "a failed write must not leave staging folders"


def test_recover_restores_a_batch_renamed_aside(assay_home):
    lake = Lake.at()
    part = {"domain": "a", "batch": "gen"}
    final = lake.write_batch("t", part, {"part": pl.DataFrame({"v": [1]})})
    # Simulate a process killed between "rename old aside" and "rename new into place".
    os.replace(final, final.parent / ".replaced-batch=gen-deadbeef")
    assert lake.read("t").is_empty()
    assert lake.recover() == [final]
    assert lake.read("t")["v"].to_list() == [1]


def test_partition_values_are_validated(assay_home):
    with pytest.raises(ValueError, match="partition"):
        Lake.at().write_batch("t", {"domain": "../escape"}, {"part": pl.DataFrame({"v": [1]})})


def test_staging_folders_are_invisible_to_readers(assay_home):
    lake = Lake.at()
    hidden = lake.root / "t" / "domain=a" / ".staging-batch=x-1234"
    hidden.mkdir(parents=True)
    pl.DataFrame({"v": [1]}).write_parquet(hidden / "part.parquet")
    assert lake.read("t").is_empty()
    assert "t" not in lake.views()


def test_write_batches_takes_a_manifest_per_batch_or_none(assay_home):
    lake = Lake.at()
    part = {"part": pl.DataFrame({"v": [1]})}
    paths = lake.write_batches("t", [({"domain": "a", "batch": "b"}, part, {"n": 1}),
                                     ({"domain": "b", "batch": "b"}, part),
                                     ({"domain": "c", "batch": "b"}, {}, {"n": 3})])
    assert [p.name for p in paths] == ["batch=b"] * 3
    assert lake.manifest("t", {"domain": "a", "batch": "b"}) == {"n": 1}
    assert lake.manifest("t", {"domain": "b", "batch": "b"}) is None
    assert lake.manifest("t", {"domain": "c", "batch": "b"}) == {"n": 3}
    assert sorted(lake.read("t")["domain"]) == ["a", "b"]
    lake.write_batches("t", [({"domain": "a", "batch": "b"}, part)])  # replaced without one: gone with it
    assert lake.manifest("t", {"domain": "a", "batch": "b"}) is None
    with pytest.raises(ValueError, match="partition, frames"):
        lake.write_batches("t", [({"domain": "a", "batch": "b"},)])
