"""Keeping a lake's history short, so a commit's cost does not grow with the commits before it.

The team lake (:mod:`storage.iceberg_lake`) keeps every snapshot, and with it every data file a
replaced batch used, until told otherwise; each commit then reads and rewrites metadata that lists
them. :func:`maintain` per table:

1. **expires snapshots**: all but the newest ``keep_snapshots``, and only those that stopped being
   current more than ``grace_s`` ago (a reader pins the current snapshot while it exports it);
2. **removes orphan files**: objects under the table's location that no live snapshot, manifest
   or the current metadata references and that are older than ``grace_s`` (younger ones may be a
   writer's files before its commit). That is also where a killed writer's files go.

The local lake needs neither (a replaced batch's folder is gone with its rename); there
:func:`maintain` runs the lake's ``recover`` (a dead writer's staging folders).

Run by the Dagster ``lake_maintenance_job`` (scheduled in the team profile) or
``python -m storage.lake_maintenance``.
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


@dataclass
class TableMaintenance:
    table: str
    snapshots_before: int
    snapshots_expired: int
    orphans_removed: int
    seconds: float


def maintain(lake, settings: MaintenanceSettings | None = None, tables: list[str] | None = None) -> list[TableMaintenance]:
    """Maintain every table of ``lake`` (or ``tables``); one report per table."""
    settings = settings or MaintenanceSettings()
    from storage.iceberg_lake import IcebergLake

    if not isinstance(lake, IcebergLake):  # the local lake: nothing accumulates but dead writers' folders
        started = time.perf_counter()
        lake.recover()
        return [TableMaintenance("(local lake)", 0, 0, 0, time.perf_counter() - started)]
    return [_maintain_iceberg(lake, name, settings) for name in (tables or lake.tables())]


def _maintain_iceberg(lake, name: str, settings: MaintenanceSettings) -> TableMaintenance:
    started = time.perf_counter()
    tbl = lake.iceberg_table(name)
    if tbl is None:
        return TableMaintenance(name, 0, 0, 0, 0.0)
    before = len(tbl.snapshots())
    expired = _expire(tbl, settings)
    tbl = lake.iceberg_table(name)  # reload: the expiry committed a new metadata version
    removed = _remove_orphans(tbl, settings.grace_s)
    return TableMaintenance(name, before, expired, removed, time.perf_counter() - started)


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
    parser.add_argument("tables", nargs="*", help="lake tables (default: all)")
    args = parser.parse_args(argv)
    from storage.deployment import open_lake

    settings = MaintenanceSettings(keep_snapshots=args.keep_snapshots, grace_s=args.grace_s)
    for report in maintain(open_lake(write=True), settings, args.tables or None):
        print(asdict(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
