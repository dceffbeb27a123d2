"""A sweep commits by work, not by batch (issue 30): every domain's results and summaries of one
sweep as one unit per table; a sweep killed outright loses its held unit whole (none of its
batches visible) and resumes; an error still commits what finished. A fast engine of plain data
(no model) stands in for generation; the lakes are real (local folders, or the team profile's
Iceberg lake on PostgreSQL and moto's S3 server)."""

from __future__ import annotations

import os

import polars as pl
import pytest

from tests.conftest import kill_when_stalled
from tests.evaluation.sweep_child import CHECKPOINT, EchoEngine, domains


def _sweep(lake, names, **config):
    from evaluation.sweep import run_sweep
    from evaluation.sweep_config import SweepConfig

    return run_sweep(lake, CHECKPOINT, domains(names), EchoEngine,
                     SweepConfig(progress=False, batch_items=2, **config), prompt_format="raw")


def test_a_team_sweep_of_several_domains_is_one_commit_per_table_and_a_cached_rerun_writes_no_results(
        team_env, assay_home):
    from storage.deployment import open_lake

    lake = open_lake(write=True)
    first = _sweep(lake, "abcd")
    assert first.generated == 4 * 6 * 2  # 4 domains x 6 items x K=2, in 12 results batches
    assert len(lake.iceberg_table("results").snapshots()) == 1
    assert len(lake.iceberg_table("sweep_summary").snapshots()) == 1
    assert lake.read("results").group_by("domain").len().sort("domain")["len"].to_list() == [12] * 4
    assert sorted(lake.read("sweep_summary")["domain"]) == list("abcd")

    commits = {t: _commits(lake, t) for t in ("results", "sweep_summary")}
    again = _sweep(lake, "abcd")
    assert again.generated == 0 and again.cached == 48
    assert [d.summary["mean"] for d in again.domains] == [d.summary["mean"] for d in first.domains]
    assert _commits(lake, "results") == commits["results"]  # nothing new to write
    # the four summaries replaced in one catalog commit (an overwrite: a delete and an append snapshot)
    assert _commits(lake, "sweep_summary") == commits["sweep_summary"] + 1
    assert sorted(lake.read("sweep_summary")["domain"]) == list("abcd")


def _commits(lake, table: str) -> int:
    """Catalog commits of ``table`` so far: each writes a new metadata file, the previous one goes to the log."""
    return len(lake.iceberg_table(table).metadata.metadata_log)


def test_commit_seconds_zero_commits_every_batch_on_its_own(team_env, assay_home):
    from storage.deployment import open_lake

    lake = open_lake(write=True)
    _sweep(lake, "a", commit_seconds=0)
    commits = _commits(lake, "results")
    _sweep(lake, "b", commit_seconds=0)
    assert _commits(lake, "results") == commits + 3  # 3 batches of 2 items, one commit each
    assert len(lake.iceberg_table("results").snapshots()) == 6


def _killed_child(home, names: str, stall_on: str, commit_seconds: str) -> None:
    kill_when_stalled("tests.evaluation.sweep_child", names, stall_on, commit_seconds,
                      env={**os.environ, "ASSAY_HOME": str(home)})


def test_a_sweep_killed_while_holding_several_domains_shows_none_of_them_and_resumes(assay_home):
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    # domains a and b finished, c is generating when the process is killed: nothing was committed
    _killed_child(assay_home, "abc", "c", "3600")
    assert lake.read("results").height == 0 and lake.read("sweep_summary").height == 0
    resumed = _sweep(lake, "abc")
    assert resumed.generated == 3 * 12 and resumed.cached == 0
    assert sorted(lake.read("sweep_summary")["domain"]) == list("abc")


def test_a_sweep_killed_with_commit_seconds_zero_keeps_every_finished_batch(assay_home):
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    _killed_child(assay_home, "abc", "c", "0")
    rows = lake.read("results")
    assert rows.group_by("domain").len().sort("domain").rows() == [("a", 12), ("b", 12)]
    resumed = _sweep(lake, "abc")
    assert resumed.generated == 12 and resumed.cached == 24


def test_an_error_midway_commits_the_domains_that_finished_before_it(assay_home):
    from evaluation.sweep import SweepError
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    with pytest.raises(SweepError, match="scorer failed"):
        _sweep(lake, "ab!")  # '!' is a domain whose scorer raises on its first batch
    assert lake.read("results").group_by("domain").len().sort("domain").rows() == [("a", 12), ("b", 12)]
    assert sorted(lake.read("sweep_summary")["domain"]) == ["a", "b"]
    resumed = _sweep(lake, "ab")
    assert resumed.generated == 0 and resumed.cached == 24
    assert lake.read("results").filter(pl.col("domain") == "a").height == 12  # nothing written twice
