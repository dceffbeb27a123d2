"""The team profile's lake: Apache Iceberg tables on object storage, catalogued in PostgreSQL.

Same interface as :class:`storage.lake.Lake` (``write_batch``, ``read``, ``sql``, ``files``,
``delete_partition``...), so every stage runs unchanged on either; :func:`storage.deployment.open_lake`
picks one from the profile.

Why Iceberg through pyiceberg with its SQL catalog (and not Delta Lake through deltalake): a commit
is one compare-and-swap of the table's metadata pointer in PostgreSQL, which the team profile
already runs, so concurrent writers on many machines are safe on any S3-compatible store. Delta's
commit is a put-if-absent of a log file, which on S3 needs either a DynamoDB lock table or the
store's conditional writes (not every S3-compatible server has them). Readers pin a snapshot.

Mapping. Lake table ``t`` is the Iceberg table ``assay.t``. A batch (``write_batch``) may hold
several frames (``samples`` and ``quarantine`` of one ingest batch) that must appear together, and
Iceberg commits one table at a time, so all frames of a lake table share its Iceberg table: rows
carry their frame's name in ``_frame`` and the table's schema is the union of its frames' columns
(each frame's own columns are listed in the table property ``assay.frame.<name>``). One batch is
then one Iceberg commit, an overwrite of the rows whose partition columns equal the batch's key:
it replaces the old version whole or not at all. A writer that loses the race to a concurrent
commit reloads the table and redoes its commit (the last writer of a batch wins, as in the local
lake); a writer killed before
its commit leaves only unreferenced data files, never visible. Partition values are stored as
string columns (the local lake reads them from folder names); the table is partitioned by the
first key column only (see ``_create``).

Reads. The dashboard and the gates read lake files with DuckDB and polars. ``files`` therefore
exports what was asked (a frame, optionally one partition) from the table's current snapshot into
a local Parquet file named after that snapshot (under ``$ASSAY_HOME/lake-cache``): immutable, so
any number of readers share it and a reader never mixes two versions. A later commit makes a new
snapshot and so a new file; files of snapshots older than :data:`CACHE_KEEP_S` are removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import threading
import time
import uuid
from copy import deepcopy
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import polars as pl

from storage.lake import UnitBatch, connect_views, partition_part, unit_batch

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

    from storage.deployment import Profile

NAMESPACE = "assay"
FRAME_COLUMN = "_frame"
FRAME_PROPERTY = "assay.frame."
MANIFEST_PROPERTY = "assay.manifest"
CACHE_KEEP_S = 600.0        # a reader holding an older snapshot's file has this long to read it
DATA_FILES_FOLDER = "data-files"  # under lake-cache/<table>: local copies of Iceberg data files (_scan_arrow)
_FETCH_THREADS = 16
_CATALOG_LOCK = threading.Lock()  # readers export views from several threads (ui.queries.open_views)
_COMMIT_TRIES = 50          # commits lost to concurrent writers before giving up
TABLE_PROPERTIES = {
    # a lost race comes back to IcebergLake._commit, which redoes the whole batch (see _create)
    "commit.retry.num-retries": "0",
    # appends merge small manifests, so a commit does not read one more manifest per batch ever written
    "commit.manifest-merge.enabled": "true",
    # keep the metadata log short: every commit rewrites metadata.json, which lists it
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
}
# small tables whose batch key's first column has hundreds of values (gate_results: one gate run of a
# domain, a few rows): partitioned by it they keep at least one data file per domain however often
# maintenance compacts, and a cold read fetches every one (S3 pays per object). Unpartitioned, a
# run's batch is still one appended file, and maintenance compacts the whole table into one;
# a one-domain read skips files by their column statistics. Only tables created from now on.
UNPARTITIONED_TABLES = frozenset({"gate_results"})


class LakeCommitError(RuntimeError):
    """A batch could not be committed: every try lost to another writer."""


@dataclass
class IcebergLake:
    """Iceberg tables in the profile's warehouse; local files (checkpoints, models, read cache)
    under ``home``. Constructing one connects to nothing."""

    home: Path
    profile: "Profile"
    _catalog: Any = field(default=None, init=False, repr=False, compare=False)

    # -- locations (the same names as storage.lake.Lake) ------------------------------------------

    @property
    def root(self) -> str:
        return self.profile.warehouse

    @property
    def mlflow_uri(self) -> str:
        return self.profile.mlflow_uri

    @property
    def mlflow_artifacts(self) -> str:
        return self.profile.mlflow_artifacts

    @property
    def checkpoints_dir(self) -> Path:
        return self.home / "checkpoints"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def cache_dir(self) -> Path:
        return self.home / "lake-cache"

    def location(self, table: str, partition: Mapping[str, Any] | None = None) -> str:
        """Where ``table`` (one partition of it) lives, for people: the Iceberg table and filter."""
        parts = "/".join(partition_part(k, v) for k, v in (partition or {}).items())
        return f"iceberg:{NAMESPACE}.{table}" + (f"/{parts}" if parts else "")

    def recover(self) -> list:
        """Nothing to clean up: a writer that died before its commit left only data files no
        snapshot references (invisible; removable with Iceberg's orphan-file maintenance)."""
        return []

    # -- catalog -------------------------------------------------------------------------------

    @property
    def catalog(self):
        if self._catalog is None:
            with _CATALOG_LOCK:
                if self._catalog is None:
                    self.profile.export_client_env()
                    self._catalog = _open_catalog(self.profile)
        return self._catalog

    def iceberg_table(self, table: str):
        """Lake table ``table`` as a pyiceberg Table (None if it does not exist yet), for maintenance."""
        from pyiceberg.exceptions import NoSuchTableError

        try:
            return self.catalog.load_table((NAMESPACE, table))
        except NoSuchTableError:
            return None

    def tables(self) -> list[str]:
        return sorted(name for _, name in self.catalog.list_tables(NAMESPACE))

    # -- writes --------------------------------------------------------------------------------

    def write_batch(self, table: str, partition: Mapping[str, Any], frames: Mapping[str, pl.DataFrame],
                    manifest: Mapping[str, Any] | None = None) -> str:
        """Write (or replace) one batch of ``table`` in one Iceberg commit (see the module doc)."""
        if not frames and manifest is None:
            raise ValueError(f"write_batch({table!r}, {dict(partition)}): nothing to write (no frames, no manifest)")
        return self._write(table, [(partition, frames, manifest)])[0]

    def write_batches(self, table: str, batches: Sequence[UnitBatch]) -> list[str]:
        """Write (or replace) several batches of ``table`` as ONE Iceberg commit: readers see all of
        them or none, and a lost race redoes the whole unit. A commit costs about the same whatever
        it holds, so a sweep writes every domain of a checkpoint this way, not one commit each, and
        so does an ingest run of several domains. Each batch is ``(partition, frames)`` or
        ``(partition, frames, manifest)``; the manifests are properties of that same commit's
        snapshot (:meth:`manifest`)."""
        if not batches:
            return []
        unpacked = [unit_batch(batch) for batch in batches]
        for partition, frames, manifest in unpacked:
            if not frames and manifest is None:
                raise ValueError(f"write_batches({table!r}): batch {dict(partition)} has no frames (and no manifest)")
        return self._write(table, unpacked)

    def manifest(self, table: str, partition: Mapping[str, Any]) -> dict | None:
        """The manifest committed with batch ``partition`` of ``table``: a property of the newest
        snapshot (of the current one's history) that wrote one for it; None when none did, or when
        maintenance has expired that snapshot. Unlike the local lake, where a manifest lives in its
        batch's folder, a batch replaced or deleted without a manifest still reads the older one."""
        tbl = self.iceberg_table(table)
        if tbl is None:
            return None
        name = _manifest_property({k: str(v) for k, v in partition.items()})
        snapshot = tbl.current_snapshot()
        by_id = {s.snapshot_id: s for s in tbl.snapshots()}
        while snapshot is not None:
            text = snapshot.summary.get(name) if snapshot.summary is not None else None
            if text is not None:
                return json.loads(text)
            snapshot = by_id.get(snapshot.parent_snapshot_id)
        return None

    def _write(self, table: str, batches: Sequence[tuple]) -> list[str]:
        """Commit ``batches`` (``(partition, frames, manifest)`` each) as one snapshot."""
        keys = [{k: str(v) for k, v in partition.items()} for partition, _, _ in batches]
        names = list(keys[0])
        for key in keys:
            if list(key) != names:
                raise ValueError(f"write_batches({table!r}): every batch needs the same partition keys "
                                 f"({', '.join(names)}), got {', '.join(key)}")
            for k, v in key.items():
                partition_part(k, v)
        if len({tuple(key.values()) for key in keys}) != len(keys):
            raise ValueError(f"write_batches({table!r}): a batch key appears twice in one unit")
        import pyarrow as pa

        # the manifests go into the commit's snapshot: each under its batch's key (read by
        # manifest()), and a lone batch's also as MANIFEST_PROPERTY, as write_batch always stored it
        properties = {_manifest_property(key): json.dumps(manifest, default=str)
                      for key, (_, _, manifest) in zip(keys, batches) if manifest is not None}
        if len(batches) == 1 and batches[0][2] is not None:
            properties[MANIFEST_PROPERTY] = json.dumps(batches[0][2], default=str)
        parts = [_batch_table(key, frames) for key, (_, frames, _) in zip(keys, batches)]
        data = parts[0] if len(parts) == 1 else pa.concat_tables(parts, promote_options="permissive")
        columns: dict[str, list[str]] = {}
        for _, frames, _ in batches:
            for name, frame in frames.items():
                known = columns.setdefault(name, [])
                known += [c for c in frame.columns if c not in known]

        def commit(tbl) -> None:
            present = self._present_keys(tbl, keys)
            with tbl.transaction() as tx:
                with tx.update_schema() as update:
                    update.union_by_name(_without_nulls(data.schema))
                frame_columns = {f"{FRAME_PROPERTY}{name}": json.dumps(_frame_columns(tbl, name, cols, keys[0]))
                                 for name, cols in columns.items()}
                if any(tbl.properties.get(k) != v for k, v in frame_columns.items()):
                    tx.set_properties(frame_columns)
                conformed = conform_arrow(data, tx.table_metadata.schema().as_arrow())
                if present:  # replaced batches: their old rows leave in the same snapshot
                    tx.overwrite(conformed, overwrite_filter=_any_of(present), snapshot_properties=properties)
                else:  # new batches: an append, whose manifests Iceberg merges (an overwrite's it never does)
                    tx.append(conformed, snapshot_properties=properties)

        self._commit(table, data.schema, names, commit)
        return [self.location(table, key) for key in keys]

    def delete_partition(self, table: str, partition: Mapping[str, Any]) -> bool:
        key = {k: str(v) for k, v in partition.items()}
        tbl = self.iceberg_table(table)
        if tbl is None or not self._has_rows(tbl, key):
            return False

        def commit(tbl) -> None:
            with tbl.transaction() as tx:
                tx.delete(_equals(key))

        self._commit(table, None, list(key), commit)
        return True

    def _commit(self, table: str, schema: "pa.Schema | None", keys: list[str], commit) -> None:
        from pyiceberg.exceptions import CommitFailedException, ValidationException

        for attempt in range(_COMMIT_TRIES):
            tbl = self.iceberg_table(table)
            if tbl is None:
                if schema is None:
                    return
                tbl = self._create(table, schema, keys)
            try:
                commit(tbl)
                return
            except (CommitFailedException, ValidationException):
                # another writer committed first: pyiceberg retries a commit that does not conflict
                # with it, and refuses (ValidationException) one whose overwrite would miss files that
                # writer added to this same batch; either way: redo the batch on the new snapshot
                time.sleep(random.uniform(0, min(0.05 * 2 ** attempt, 1.0)))
        raise LakeCommitError(f"could not commit to lake table {table!r}: {_COMMIT_TRIES} other commits won the race; "
                              "run it again")

    def _create(self, table: str, schema: "pa.Schema", keys: list[str]):
        """Create ``table`` partitioned by the batch key, in one commit (a spec changed after the
        fact would race with the first writers' commits). pyiceberg's own commit retries are off
        (:data:`TABLE_PROPERTIES`): a lost race comes back to :meth:`_commit`, which redoes
        the whole batch on the winner's snapshot (pyiceberg's retry re-plays the manifests it
        built, which breaks when the winner changed the schema)."""
        from pyiceberg.exceptions import CommitFailedException, NamespaceAlreadyExistsError, TableAlreadyExistsError
        from sqlalchemy.exc import IntegrityError

        try:
            self.catalog.create_namespace(NAMESPACE)
        except (NamespaceAlreadyExistsError, IntegrityError):
            pass
        try:
            with self.catalog.create_table_transaction((NAMESPACE, table), schema=_without_nulls(schema),
                                                       properties=TABLE_PROPERTIES) as tx:
                # partitioned by the batch key's first column only (a checkpoint, a domain): a unit of
                # work (a sweep's 300 domains) is then one data file, not one per batch (S3 pays per
                # object); a read of one batch still opens only its first-column partition's files
                # (not the small tables of UNPARTITIONED_TABLES)
                with tx.update_spec() as spec:
                    if keys and table not in UNPARTITIONED_TABLES:
                        spec.add_identity(keys[0])
        except (TableAlreadyExistsError, CommitFailedException, IntegrityError):
            pass  # another writer created it first ("Table already exists")
        return self.catalog.load_table((NAMESPACE, table))

    # -- reads ---------------------------------------------------------------------------------

    def files(self, table: str, name: str = "part", where: Mapping[str, Any] | None = None) -> list[Path]:
        """A local Parquet file holding frame ``name`` of ``table`` (only the partition ``where``)
        as of the table's current snapshot, or nothing when it has no such rows."""
        tbl = self.iceberg_table(table)
        if tbl is None:
            return []
        return self._export(tbl, table, name, where)

    def _export(self, tbl, table: str, name: str, where: Mapping[str, Any] | None) -> list[Path]:
        snapshot = tbl.current_snapshot()
        columns = _stored_columns(tbl, name)
        if snapshot is None or columns is None:
            return []
        where = {k: str(v) for k, v in (where or {}).items()}
        unknown = [k for k in where if k not in {f.name for f in tbl.schema().fields}]
        if unknown:
            return []
        digest = hashlib.sha1(json.dumps([name, sorted(where.items())]).encode()).hexdigest()[:16]
        folder = self.cache_dir / table / str(snapshot.snapshot_id)
        path = folder / f"{name}-{digest}.parquet"
        empty = folder / f"{name}-{digest}.empty"
        if path.exists():
            return [path]
        if empty.exists():
            return []
        arrow = self._scan_arrow(table, tbl.scan(row_filter=_equals({FRAME_COLUMN: name, **where}),
                                                 selected_fields=tuple(columns), snapshot_id=snapshot.snapshot_id))
        folder.mkdir(parents=True, exist_ok=True)
        target = path if arrow.num_rows else empty
        temporary = folder / f".{target.name}.{uuid.uuid4().hex[:8]}"
        if arrow.num_rows:
            import pyarrow.parquet as pq

            pq.write_table(arrow, temporary)
        else:
            temporary.write_text("")
        os.replace(temporary, target)  # one snapshot, one file: concurrent exports write the same rows
        self._prune(table, keep=folder)
        return [path] if arrow.num_rows else []

    def _scan_arrow(self, table: str, scan) -> "pa.Table":
        """``scan``'s rows, read by pyiceberg from local copies of its data files.

        Iceberg never changes a data file once written (a replaced batch is a new file), so a copy
        keyed by the file's path is valid for as long as it exists: the export of a new snapshot
        fetches only the files added since the copies were made, and a cold export fetches all of
        them at once (:data:`_FETCH_THREADS` whole-object reads: S3 is latency-bound) instead of
        pyiceberg's few threads of ranged reads. Files with deletes (not written by this lake) are
        read by pyiceberg straight from storage."""
        from pyiceberg.io.pyarrow import ArrowScan
        from pyiceberg.table import FileScanTask

        tasks = list(scan.plan_files())
        if any(task.delete_files for task in tasks):
            return scan.to_arrow()
        folder = self.cache_dir / table / DATA_FILES_FOLDER
        folder.mkdir(parents=True, exist_ok=True)
        io = scan.io

        def local(task):
            path = folder / (hashlib.sha1(task.file.file_path.encode()).hexdigest()[:32] + ".parquet")
            try:
                os.utime(path)  # in use: not pruned for CACHE_KEEP_S
            except FileNotFoundError:
                temporary = folder / f".{path.name}.{uuid.uuid4().hex[:8]}"
                with io.new_input(task.file.file_path).open() as stream:
                    temporary.write_bytes(stream.read())
                os.replace(temporary, path)  # concurrent fetchers write the same bytes
            copy = deepcopy(task.file)
            copy[1] = str(path)  # DataFile.file_path
            assert copy.file_path == str(path)
            return FileScanTask(copy, residual=task.residual)

        if len(tasks) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(len(tasks), _FETCH_THREADS)) as pool:
                copies = list(pool.map(local, tasks))
        else:
            copies = [local(task) for task in tasks]
        reader = ArrowScan(scan.table_metadata, io, scan.projection(), scan.row_filter, scan.case_sensitive, scan.limit)
        try:
            return reader.to_table(copies)
        except FileNotFoundError:  # a copy pruned meanwhile (unused for CACHE_KEEP_S): read from storage
            return scan.to_arrow()

    def _prune(self, table: str, keep: Path) -> None:
        cutoff = time.time() - CACHE_KEEP_S
        for folder in (self.cache_dir / table).iterdir():
            try:
                if folder.name == DATA_FILES_FOLDER:
                    for copy in folder.iterdir():
                        if copy.stat().st_mtime < cutoff:
                            copy.unlink(missing_ok=True)
                elif folder != keep and folder.stat().st_mtime < cutoff:
                    shutil.rmtree(folder, ignore_errors=True)
            except FileNotFoundError:
                pass

    def read(self, table: str, name: str = "part", where: Mapping[str, Any] | None = None,
             columns: Iterable[str] | None = None) -> pl.DataFrame:
        files = self.files(table, name, where)
        if not files:
            return pl.DataFrame()
        frame = pl.read_parquet(files[0])
        return frame.select(list(columns)) if columns is not None else frame

    def partition_values(self, table: str, key: str) -> list[str]:
        """The distinct values of partition column ``key`` in ``table`` (any frame)."""
        tbl = self.iceberg_table(table)
        if tbl is None or key not in {f.name for f in tbl.schema().fields}:
            return []
        values = tbl.scan(selected_fields=(key,)).to_arrow().column(key).unique().to_pylist()
        return sorted(v for v in values if v is not None)

    def views(self) -> dict[str, list[Path]]:
        """View name -> local files, as :meth:`storage.lake.Lake.views` (``part`` feeds view ``<table>``)."""
        return self._bind(self._view_sources())

    def connect(self):
        return connect_views(self.views())

    def sql(self, query: str) -> pl.DataFrame:
        """``query`` over the lake's views (DuckDB), each view one table's current snapshot. As in
        the local lake, only the views the query names are bound (all of them if it names none):
        binding a view exports its snapshot."""
        import re

        sources = self._view_sources()
        named = {view for view, *_ in sources if re.search(rf"(?<!\w){re.escape(view)}(?!\w)", query, re.IGNORECASE)}
        con = connect_views(self._bind([source for source in sources if not named or source[0] in named]))
        try:
            relation = con.sql(query)
            return relation.pl() if relation is not None else pl.DataFrame()
        finally:
            con.close()

    def _view_sources(self) -> list[tuple[str, Any, str, str]]:
        """(view, Iceberg table, lake table, frame) for every frame of every table."""
        sources = []
        for table in self.tables():
            tbl = self.iceberg_table(table)
            if tbl is not None:
                sources += [(table if frame == "part" else frame, tbl, table, frame) for frame in sorted(_frames(tbl))]
        return sources

    def _bind(self, sources: list[tuple[str, Any, str, str]]) -> dict[str, list[Path]]:
        views: dict[str, list[Path]] = {}
        for view, tbl, table, frame in sources:
            files = self._export(tbl, table, frame, None)
            if files:
                views.setdefault(view, []).extend(files)
        return views

    def _has_rows(self, tbl, key: Mapping[str, str]) -> bool:
        return bool(self._present_keys(tbl, [key]))

    def _present_keys(self, tbl, keys: Sequence[Mapping[str, str]]) -> list[Mapping[str, str]]:
        """Those of ``keys`` that have rows in ``tbl``: one scan of the partition columns of the
        files whose partitions may match (Iceberg prunes the others by their manifests' partition values)."""
        names = list(keys[0])
        if any(k not in {f.name for f in tbl.schema().fields} for k in names):
            return []
        found = tbl.scan(row_filter=_within(keys), selected_fields=tuple(names)).to_arrow()
        if found.num_rows == 0:
            return []
        seen = set(zip(*(found.column(n).to_pylist() for n in names)))
        return [key for key in keys if tuple(key.values()) in seen]


# -- catalog -----------------------------------------------------------------------------------

def _open_catalog(profile: "Profile"):
    """The SQL catalog on the profile's ``assay_lake`` database. Creating its two tables on a fresh
    database races between processes; the loser finds them made and goes on."""
    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import IntegrityError, ProgrammingError

    properties = {"uri": profile.database_url("lake"), "warehouse": profile.warehouse,
                  "pool_pre_ping": "true", **profile.s3_options()}
    for attempt in range(5):
        try:
            return SqlCatalog(profile.lake_catalog, **properties)
        except (IntegrityError, ProgrammingError):
            time.sleep(0.2 * (attempt + 1))
    return SqlCatalog(profile.lake_catalog, **properties)


# -- frames <-> Arrow --------------------------------------------------------------------------

def _manifest_property(key: Mapping[str, str]) -> str:
    """The snapshot property holding the manifest of batch ``key``: ``assay.manifest.domain=a/batch=b``."""
    return f"{MANIFEST_PROPERTY}." + "/".join(partition_part(k, v) for k, v in key.items())


def _frames(tbl) -> list[str]:
    return [k[len(FRAME_PROPERTY):] for k in tbl.properties if k.startswith(FRAME_PROPERTY)]


def _stored_columns(tbl, name: str) -> list[str] | None:
    text = tbl.properties.get(f"{FRAME_PROPERTY}{name}")
    return None if text is None else json.loads(text)


def _frame_columns(tbl, name: str, columns: list[str], key: Mapping[str, str]) -> list[str]:
    """The frame's columns so far plus this batch's (a column added later reads as null in older
    batches, as in the local lake), the partition columns last as the local lake's reader adds them."""
    known = _stored_columns(tbl, name) or []
    ordered = [c for c in known if c not in key] + [c for c in columns if c not in known and c not in key]
    return ordered + [k for k in key if k not in ordered]


def _batch_table(key: Mapping[str, str], frames: Mapping[str, pl.DataFrame]) -> "pa.Table":
    """All frames of one batch as one Arrow table: each with its partition columns (where the
    frame lacks them) and ``_frame``; columns Iceberg cannot store made storable."""
    import pyarrow as pa

    parts = []
    for name, frame in frames.items():
        extra = [pl.lit(v, dtype=pl.Utf8).alias(k) for k, v in key.items() if k not in frame.columns]
        frame = frame.with_columns(*extra, pl.lit(name, dtype=pl.Utf8).alias(FRAME_COLUMN))
        parts.append(_storable(frame.to_arrow(compat_level=pl.CompatLevel.oldest())))
    if not parts:  # a manifest alone
        parts.append(pa.table({**{k: pa.array([], pa.large_string()) for k in key},
                               FRAME_COLUMN: pa.array([], pa.large_string())}))
    try:
        return pa.concat_tables(parts, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ValueError(f"the frames of one batch disagree on a column's type ({exc}); frames of one lake table "
                         "share its Iceberg table, so a column name must have one type across them") from None


def _storable(table: "pa.Table") -> "pa.Table":
    import pyarrow as pa

    def fix(kind: pa.DataType) -> pa.DataType:
        if pa.types.is_dictionary(kind):
            return fix(kind.value_type)
        if pa.types.is_unsigned_integer(kind):
            return pa.int64() if kind.bit_width >= 32 else pa.int32()
        if pa.types.is_integer(kind) and kind.bit_width < 32:
            return pa.int32()
        if pa.types.is_timestamp(kind) and kind.unit == "ns":
            return pa.timestamp("us", tz=kind.tz)
        if pa.types.is_string_view(kind):
            return pa.large_string()
        if pa.types.is_large_list(kind) or pa.types.is_list(kind):
            inner = fix(kind.value_type)
            return pa.large_list(inner)
        if pa.types.is_struct(kind):
            return pa.struct([pa.field(f.name, fix(f.type), True) for f in kind])
        return kind

    target = pa.schema([pa.field(f.name, fix(f.type), True) for f in table.schema])
    return table.cast(target) if target != table.schema else table


def _without_nulls(schema: "pa.Schema") -> "pa.Schema":
    """Iceberg has no null type: an all-null column (no value in any row yet) is stored as string,
    unless the table already has it (then the conform step casts to the table's type)."""
    import pyarrow as pa

    return pa.schema([pa.field(f.name, pa.large_string() if pa.types.is_null(f.type) else f.type, True)
                      for f in schema])


def conform_arrow(data: "pa.Table", schema: "pa.Schema") -> "pa.Table":
    """``data`` with exactly the table's columns, in its order and types (absent ones as nulls)."""
    import pyarrow as pa

    columns = []
    for f in schema:
        if f.name in data.column_names:
            column = data.column(f.name)
            columns.append(column if column.type == f.type else column.cast(f.type))
        else:
            columns.append(pa.nulls(data.num_rows, f.type))
    return pa.Table.from_arrays(columns, schema=pa.schema([pa.field(f.name, f.type, True) for f in schema]))


def _within(keys: Sequence[Mapping[str, str]]):
    """A superset of the batches ``keys`` that Iceberg tests in constant time per file: each key
    column in the set of its values (an OR of hundreds of batch keys costs hundreds of tests per
    file of the table, and a table has thousands); the exact keys are picked from what it finds."""
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo, In

    expression = AlwaysTrue()
    for name in keys[0]:
        values = sorted({key[name] for key in keys})
        expression = And(expression, EqualTo(name, values[0]) if len(values) == 1 else In(name, values))
    return expression


def _any_of(keys: Sequence[Mapping[str, str]]):
    """Rows of any of the batches ``keys``."""
    from pyiceberg.expressions import Or

    expression = _equals(keys[0])
    for key in keys[1:]:
        expression = Or(expression, _equals(key))
    return expression


def _equals(values: Mapping[str, str]):
    from pyiceberg.expressions import AlwaysTrue, And, EqualTo

    expression = AlwaysTrue()
    for key, value in values.items():
        expression = And(expression, EqualTo(key, value))
    return expression
