"""Keeping a lake's history short, so a commit's cost does not grow with the commits before it.

The team lake (:mod:`storage.iceberg_lake`) keeps every snapshot, and with it every data file a
replaced batch used, until told otherwise; each commit then reads and rewrites metadata that lists
them. :func:`maintain` per table:

1. **compacts small files**: a partition (the table's partition column, the batch key's first
   column: a checkpoint for ``results``, a domain for ``ingest``; the whole table for the
   unpartitioned ones, :data:`storage.iceberg_lake.UNPARTITIONED_TABLES`) holding at least
   ``compact_min_files`` data files smaller than ``compact_file_mb`` is read at the current
   snapshot and written back as one file, in one commit per partition (an overwrite of that
   partition with its own rows). A writer that commits first wins: the compaction's
   compare-and-swap fails and that partition waits for the next run (it never retries on rows it
   read before another writer's commit). The rewrite also replaces the partition's manifest
   entries, so fewer manifests stay live;
2. **expires snapshots**: all but the newest ``keep_snapshots``, and only those that stopped being
   current more than ``grace_s`` ago (a reader pins the current snapshot while it exports it);
3. **removes orphan files**: objects under the table's location that no live snapshot, manifest
   or the current metadata references and that are older than ``grace_s`` (younger ones may be a
   writer's files before its commit). That is also where a killed writer's files go, and the
   files compaction and expiry left unreferenced.

Manifest rewriting as its own operation (Java's ``rewriteManifests``) is not in pyiceberg 0.12
(``table.maintenance`` offers ``expire_snapshots`` only; ``rewrite_manifests`` and ``compact``
are pull requests upstream, apache/iceberg-python #3631 and #3124): appends merge small manifests
as they commit (``commit.manifest-merge.enabled`` in :data:`storage.iceberg_lake.TABLE_PROPERTIES`)
and compaction (1) rewrites a partition's entries; the report counts the live manifests before
and after.

The local lake needs none of it (a replaced batch's folder is gone with its rename); there
:func:`maintain` runs the lake's ``recover`` (a dead writer's staging folders).

Run by the Dagster ``lake_maintenance_job`` (scheduled by default in the team profile,
:mod:`pipelines.schedules`) or ``python -m storage.lake_maintenance``.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass

from pydantic import BaseModel, ConfigDict, Field


class MaintenanceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keep_snapshots: int = Field(5, ge=1, description="snapshots kept per table, the newest (the current one always)")
    grace_s: float = Field(900.0, ge=0.0, description=(
        "seconds a snapshot stays after it stopped being current, and an unreferenced file after it was "
        "written, before maintenance removes it (readers and writers in flight use them)"))
    compact_min_files: int = Field(8, ge=0, description=(
        "a partition (a checkpoint of results, a domain of ingest) holding at least this many small data files "
        "is rewritten as one file, in one commit; 0: never compact"))
    compact_file_mb: float = Field(32.0, gt=0.0, description="a data file smaller than this many MiB counts as small")


@dataclass
class TableMaintenance:
    table: str
    snapshots_before: int
    snapshots_expired: int
    orphans_removed: int
    seconds: float
    snapshots_after: int = 0
    data_files_before: int = 0
    data_files_after: int = 0
    partitions_compacted: int = 0
    compactions_lost: int = 0  # partitions whose compaction lost the race to a writer (next run)
    manifests_before: int = 0
    manifests_after: int = 0


def maintain(lake, settings: MaintenanceSettings | None = None, tables: list[str] | None = None) -> list[TableMaintenance]:
    """Maintain every table of ``lake`` (or ``tables``); one report per table."""
    settings = settings or MaintenanceSettings()
    from storage.iceberg_lake import IcebergLake

    if not isinstance(lake, IcebergLake):  # the local lake: nothing accumulates but dead writers' folders
        started = time.perf_counter()
        recovered = lake.recover()
        return [TableMaintenance("(local lake)", 0, 0, len(recovered), time.perf_counter() - started)]
    return [_maintain_iceberg(lake, name, settings) for name in (tables or lake.tables())]


def _maintain_iceberg(lake, name: str, settings: MaintenanceSettings) -> TableMaintenance:
    started = time.perf_counter()
    tbl = lake.iceberg_table(name)
    if tbl is None:
        return TableMaintenance(name, 0, 0, 0, 0.0)
    before = len(tbl.snapshots())
    files_before, manifests_before = _live_files(tbl)
    compacted = lost = 0
    if settings.compact_min_files:
        compacted, lost = _compact(tbl, settings)
        tbl = lake.iceberg_table(name)
    expired = _expire(tbl, settings)
    tbl = lake.iceberg_table(name)  # reload: the expiry committed a new metadata version
    removed = _remove_orphans(tbl, settings.grace_s)
    files_after, manifests_after = _live_files(tbl)
    return TableMaintenance(name, before, expired, removed, time.perf_counter() - started,
                            snapshots_after=len(tbl.snapshots()), data_files_before=files_before,
                            data_files_after=files_after, partitions_compacted=compacted, compactions_lost=lost,
                            manifests_before=manifests_before, manifests_after=manifests_after)


def _live_files(tbl) -> tuple[int, int]:
    """(data files, manifests) of the current snapshot."""
    snapshot = tbl.current_snapshot()
    if snapshot is None:
        return 0, 0
    manifests = snapshot.manifests(tbl.io)
    files = sum(1 for m in manifests for _ in m.fetch_manifest_entry(tbl.io, discard_deleted=True))
    return files, len(manifests)


def _compact(tbl, settings: MaintenanceSettings) -> tuple[int, int]:
    """Rewrite each partition holding many small files as one file; (partitions compacted, lost races)."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException
    from pyiceberg.expressions import EqualTo

    from storage.iceberg_lake import conform_arrow

    from pyiceberg.expressions import AlwaysTrue

    if tbl.current_snapshot() is None:
        return 0, 0
    spec = tbl.spec()
    column = tbl.schema().find_field(spec.fields[0].source_id).name if spec.fields else None
    small_bytes = settings.compact_file_mb * 1024 * 1024
    small: dict[object, int] = {}
    for task in tbl.scan().plan_files():
        # an unpartitioned table (storage.iceberg_lake.UNPARTITIONED_TABLES) is one group: ""
        value = task.file.partition[0] if column is not None else ""
        if value is not None and task.file.file_size_in_bytes < small_bytes:
            small[value] = small.get(value, 0) + 1
    compacted = lost = 0
    for value in sorted(v for v, n in small.items() if n >= max(2, settings.compact_min_files)):
        snapshot = tbl.current_snapshot()
        where = EqualTo(column, value) if column is not None else AlwaysTrue()
        rows = tbl.scan(row_filter=where, snapshot_id=snapshot.snapshot_id).to_arrow()
        try:
            with tbl.transaction() as tx:  # a compare-and-swap on `snapshot`: a writer first fails it
                tx.overwrite(conform_arrow(rows, tx.table_metadata.schema().as_arrow()),
                             overwrite_filter=where,
                             snapshot_properties={"assay.maintenance": "compact"})
            compacted += 1
        except (CommitFailedException, ValidationException):
            lost += 1
            tbl = tbl.refresh()
    return compacted, lost


def _expire(tbl, settings: MaintenanceSettings) -> int:
    from pyiceberg.exceptions import CommitFailedException

    now_ms = time.time() * 1000
    snapshots = sorted(tbl.snapshots(), key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    # a snapshot stopped being current when the next one was committed
    old = [s.snapshot_id for s, after in zip(snapshots, snapshots[1:])
           if now_ms - after.timestamp_ms > settings.grace_s * 1000]
    old = old[: max(0, len(snapshots) - settings.keep_snapshots)]
    current = tbl.current_snapshot()
    old = [s for s in old if current is None or s != current.snapshot_id]
    if not old:
        return 0
    try:
        tbl.maintenance.expire_snapshots().by_ids(old).commit()
    except CommitFailedException:  # a writer committed meanwhile: the next run expires them
        return 0
    return len(old)


def _referenced(tbl) -> set[str]:
    """Every object the table's live metadata points at (locations as stored, scheme stripped)."""
    refs = {tbl.metadata_location}
    refs |= {entry.metadata_file for entry in tbl.metadata.metadata_log}
    for snapshot in tbl.snapshots():
        refs.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(tbl.io):
            refs.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=True):
                refs.add(entry.data_file.file_path)
    for stats in list(tbl.metadata.statistics) + list(tbl.metadata.partition_statistics):
        refs.add(stats.statistics_path)
    return {_strip_scheme(r) for r in refs}


def _strip_scheme(location: str) -> str:
    return location.split("://", 1)[1] if "://" in location else location


def table_objects(tbl):
    """(file system, every object under the table's location) as pyarrow FileInfo entries."""
    from pyarrow.fs import FileSelector, FileType

    scheme, netloc, path = tbl.io.parse_location(tbl.metadata.location)
    fs = tbl.io.fs_by_scheme(scheme, netloc)
    infos = fs.get_file_info(FileSelector(path, recursive=True, allow_not_found=True))
    return fs, [info for info in infos if info.type == FileType.File]


def _remove_orphans(tbl, grace_s: float) -> int:
    fs, objects = table_objects(tbl)
    referenced = _referenced(tbl)
    cutoff = time.time() - grace_s
    orphans = [info.path for info in objects if info.path not in referenced
               and (info.mtime.timestamp() if info.mtime is not None else 0.0) < cutoff]
    for orphan in orphans:
        fs.delete_file(orphan)
    return len(orphans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m storage.lake_maintenance", description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep-snapshots", type=int, default=MaintenanceSettings().keep_snapshots)
    parser.add_argument("--grace-s", type=float, default=MaintenanceSettings().grace_s)
    parser.add_argument("--compact-min-files", type=int, default=MaintenanceSettings().compact_min_files)
    parser.add_argument("tables", nargs="*", help="lake tables (default: all)")
    args = parser.parse_args(argv)
    from storage.deployment import open_lake

    settings = MaintenanceSettings(keep_snapshots=args.keep_snapshots, grace_s=args.grace_s,
                                   compact_min_files=args.compact_min_files)
    for report in maintain(open_lake(write=True), settings, args.tables or None):
        print(asdict(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
