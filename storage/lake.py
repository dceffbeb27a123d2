"""The lake: Parquet files under ``$ASSAY_HOME/lake``, partitioned by domain, queried with DuckDB.

Layout (hive-style folders, so DuckDB sees the partition columns)::

    lake/<table>/<key>=<value>/.../<file>.parquet     e.g. lake/ingest/domain=gsm/batch=b1/samples.parquet

DuckDB is used in-memory with one view per table; no process keeps a database file open for
writing, which is what lets the multiprocess executor materialize many domains at once.

Views: a file ``<stem>.parquet`` under ``lake/<table>/`` feeds the view ``<stem>`` (``part.parquet``
feeds the view ``<table>``). Ingest writes ``lake/ingest/domain=<d>/batch=<id>/`` with
``samples.parquet`` (admitted rows) and ``quarantine.parquet`` in one folder, so a batch commits
whole. Column contracts:

- ``samples``: domain, split, id, prompt, answer, metadata (JSON text), source, line, batch,
  content_hash, ingested_at
- ``quarantine``: domain, split, id, source, line, reasons (list of codes), raw (the original
  line or row as text), prompt, answer, metadata, batch, ingested_at
- other tables (gate results, sweep results, regression reports, training history) are described
  by the modules that write them.

Concurrency. Many processes (CLI commands, Dagster's multiprocess executor, sensor runs, the
dashboard) and threads use one lake at once, with no server and no lock:

- *A batch commits whole.* A write builds the partition folder inside a hidden work folder
  ``<parent>/.staging-<owner>-<nonce>/<name>/`` and moves it into place in one rename, so no
  reader ever sees half a batch, and parallel writers never share a file.
- *A replace never leaves a gap.* Where the file system supports it (Linux ``renameat2`` with
  ``RENAME_EXCHANGE``: ext4, xfs, btrfs, tmpfs, overlayfs), the new folder and the old one swap
  names in one step: the path ``<name>`` always holds a committed version, and the old one ends
  inside the work folder, deleted with it. Elsewhere the old folder is first moved into
  ``.replaced-<owner>-<nonce>/<name>`` and the new one renamed in; while ``<name>`` is absent,
  readers take that aside folder as the committed version (its path keeps the ``key=value``
  parts, so partition columns stay right), so they see the old or the new batch, never neither.
- *Work folders name their owner* as ``<boot id>-<pid>-<start time>``
  (:mod:`storage.process_identity`), which survives the process and is not fooled by pid reuse or
  a reboot. :meth:`Lake.recover` removes only what a dead owner left: its staging and deleted
  folders go, its aside folder is restored unless a newer version was committed since. Live work,
  this process's threads included, is never touched. Recovery runs where writes start
  (``open_lake(write=True)``, ``LakeResource.lake(write=True)``), never on a read.
- *Readers never modify the lake* and tolerate writers: a file that vanishes between listing and
  reading (a replace or delete in between) makes :meth:`Lake.read` / :meth:`Lake.sql` list again
  and retry; a query reading two files of one batch (``samples`` joined with ``quarantine``)
  checks the batch folder was not swapped meanwhile (inode and ctime), so it never mixes two
  versions. A read that keeps colliding with writers gives up with :class:`LakeBusyError`.
"""

from __future__ import annotations

import ctypes
import errno
import io
import json
import os
import re
import shutil
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

import polars as pl

from storage import process_identity
from storage.home import DEFAULT_HOME, HOME_ENV, resolve_home  # noqa: F401 (re-exported)
_KEY_VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")
# work folders: .<kind>-<owner token>-<nonce>, holding one folder named like the partition
_WORK = re.compile(r"^\.(?P<kind>staging|replaced|deleted)-(?P<owner>[0-9a-f]+-[0-9]+-[0-9]+)-[0-9a-f]{8}$")
# before owners were recorded: .<kind>-<partition name>-<nonce>, being the partition folder itself
_LEGACY_WORK = re.compile(r"^\.(?P<kind>staging|replaced|deleted)-(?P<name>.+=.*)-[0-9a-f]{8}$")
_COMMIT_TRIES = 100  # same-partition writers racing each other; each lost round means another commit
_READ_TRIES = 25     # a read colliding with writers lists the lake again, with backoff (~2 s in all)
T = TypeVar("T")


class LakeBusyError(RuntimeError):
    """A read collided with writers on every try."""


class _Changed(Exception):
    """What a reader listed changed before it was read: list again."""


def partition_part(key: str, value: str) -> str:
    value = str(value)
    if not _KEY_VALUE.match(key) or not _KEY_VALUE.match(value) or value in (".", ".."):
        raise ValueError(f"partition {key}={value!r}: use letters, digits, '_', '-', '.' only")
    return f"{key}={value}"


# one batch of a write_batches unit: (partition, frames) or (partition, frames, manifest or None)
UnitBatch = tuple  # tuple[Mapping[str, Any], Mapping[str, pl.DataFrame]] | (..., Mapping[str, Any] | None)


def unit_batch(batch: Sequence) -> tuple[Mapping[str, Any], Mapping[str, pl.DataFrame], Mapping[str, Any] | None]:
    """``(partition, frames, manifest)`` of one batch of a ``write_batches`` unit, which may omit
    the manifest."""
    if len(batch) == 2:
        return batch[0], batch[1], None
    if len(batch) == 3:
        return batch[0], batch[1], batch[2]
    raise ValueError(f"a batch of a write_batches unit is (partition, frames) or (partition, frames, manifest), "
                     f"got {len(batch)} items")


@dataclass(frozen=True)
class _Version:
    """A committed partition folder as a reader listed it: its path, which version of it (inode
    and ctime, taken before listing its files; None when the reader did not ask) and its Parquet
    files."""

    table: str
    folder: Path
    identity: tuple[int, int] | None
    files: tuple[str, ...]

    def unchanged(self) -> bool:
        try:
            return _identity(os.stat(self.folder)) == self.identity
        except FileNotFoundError:
            return False


@dataclass(frozen=True)
class Lake:
    """Paths and atomic Parquet I/O under one ``ASSAY_HOME``. Constructing one touches nothing."""

    home: Path

    @classmethod
    def at(cls, home: str | os.PathLike | None = None) -> "Lake":
        """The lake under ``home``, its folder created: for writers (readers use ``Lake(home)``)."""
        lake = cls(resolve_home(home))
        lake.root.mkdir(parents=True, exist_ok=True)
        return lake

    # -- locations -----------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.home / "lake"

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.home / 'mlflow.db'}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.home / "mlartifacts"

    @property
    def checkpoints_dir(self) -> Path:
        return self.home / "checkpoints"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    def table_dir(self, table: str) -> Path:
        return self.root / table

    def partition_dir(self, table: str, partition: Mapping[str, Any]) -> Path:
        path = self.table_dir(table)
        for key, value in partition.items():
            path = path / partition_part(key, value)
        return path

    def location(self, table: str, partition: Mapping[str, Any] | None = None) -> str:
        """Where ``table`` (one partition of it) lives, for people: its folder."""
        return str(self.partition_dir(table, partition or {}))

    def partition_values(self, table: str, key: str) -> list[str]:
        """The values of partition ``key`` among ``table``'s top-level partition folders (names only)."""
        base = self.table_dir(table)
        if not base.is_dir():
            return []
        return sorted(p.name.split("=", 1)[1] for p in base.iterdir() if p.name.startswith(f"{key}="))

    # -- writes --------------------------------------------------------------------------------

    def write_batch(self, table: str, partition: Mapping[str, Any], frames: Mapping[str, pl.DataFrame],
                    manifest: Mapping[str, Any] | None = None) -> Path:
        """Atomically write (or replace) one partition folder holding ``{name}.parquet`` files.

        ``partition`` must end with the batch key (e.g. ``{"domain": d, "batch": b}``); the folder
        appears complete in one rename. An existing folder with the same key is replaced, with no
        moment at which readers find neither version.
        """
        if not frames and manifest is None:
            raise ValueError(f"write_batch({table!r}, {dict(partition)}): nothing to write (no frames, no manifest)")
        final = self.partition_dir(table, partition)
        final.parent.mkdir(parents=True, exist_ok=True)
        work = _make_work_folder(final.parent, "staging")
        try:
            staged = work / final.name
            staged.mkdir()
            for name, frame in frames.items():
                frame.write_parquet(staged / f"{name}.parquet")
            if manifest is not None:
                (staged / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
            _commit(staged, final)
        finally:
            shutil.rmtree(work, ignore_errors=True)  # after a swap it holds the replaced version
        return final

    def write_batches(self, table: str, batches: Sequence[UnitBatch]) -> list[Path]:
        """Several batches of ``table`` (one unit of work: a sweep's domains, an ingest run's
        domains), each ``(partition, frames)`` or ``(partition, frames, manifest)`` (a manifest as
        :meth:`write_batch` stores it). Here each batch is still its own folder rename, atomic per
        batch, at ~3 ms a batch; the team lake (:meth:`storage.iceberg_lake.IcebergLake.write_batches`)
        commits the unit at once, manifests included, since there a commit costs the same whatever
        it holds."""
        return [self.write_batch(table, *unit_batch(batch)) for batch in batches]

    def manifest(self, table: str, partition: Mapping[str, Any]) -> dict | None:
        """The manifest stored with batch ``partition`` of ``table`` (``manifest.json`` in its
        folder), or None when it has none."""
        try:
            return json.loads((self.partition_dir(table, partition) / "manifest.json").read_text())
        except FileNotFoundError:
            return None

    def delete_partition(self, table: str, partition: Mapping[str, Any]) -> bool:
        path = self.partition_dir(table, partition)
        if not path.exists():
            return False
        work = _make_work_folder(path.parent, "deleted")
        try:
            os.rename(path, work / path.name)
        except FileNotFoundError:  # someone else deleted it first
            return False
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return True

    def recover(self) -> list[Path]:
        """Clean up after writers that died mid-write; return the partitions restored.

        A dead writer's aside folder is renamed back to its partition unless a newer version was
        committed since; its staging and deleted folders are removed. Folders of live writers
        (other processes, or this one's threads) are left alone. Safe to run from any number of
        processes at once. Call it before writing, never from a reader.
        """
        restored = []
        for work in self._work_folders():
            found = _WORK.match(work.name)
            if found is None:
                restored.extend(_recover_legacy(work))
                continue
            owner = process_identity.ProcessIdentity.parse(found["owner"])
            if owner is None or owner.is_alive():
                continue
            if found["kind"] == "replaced":
                for inner in _subfolders(work):
                    target = work.parent / inner.name
                    try:
                        _rename_noreplace(inner, target)
                        restored.append(target)
                    except (FileExistsError, FileNotFoundError):
                        pass  # a newer version is committed, or another recovery restored it
                _discard(work)
            shutil.rmtree(work, ignore_errors=True)
        return restored

    def _work_folders(self) -> list[Path]:
        found = []
        for folder, dirs, _ in os.walk(self.root):
            for name in [d for d in dirs if d.startswith(".")]:
                dirs.remove(name)  # never descend into work folders
                if _WORK.match(name) or _LEGACY_WORK.match(name):
                    found.append(Path(folder) / name)
        return found

    # -- reads ---------------------------------------------------------------------------------

    def files(self, table: str, name: str = "part", where: Mapping[str, Any] | None = None) -> list[Path]:
        """Committed ``{name}.parquet`` files of ``table``, optionally only under ``where``."""
        return self._retry(f"lake table {table!r}", lambda: [
            v.folder / f for v in self._versions(table, where) for f in v.files if f == f"{name}.parquet"])

    def read(self, table: str, name: str = "part", where: Mapping[str, Any] | None = None,
             columns: Iterable[str] | None = None) -> pl.DataFrame:
        """All committed rows of ``table`` with its partition columns, or an empty frame.
        ``columns``: only these (a partition key among them comes from the folder name)."""
        base = self.table_dir(table)
        wanted = list(columns) if columns is not None else None

        def attempt() -> pl.DataFrame:
            frames = []
            for version in self._versions(table, where):
                if f"{name}.parquet" not in version.files:
                    continue
                path = version.folder / f"{name}.parquet"
                values = _partition_values(path, base)
                try:
                    # one open, read whole: polars may open a path more than once (footer, then
                    # pages), and a writer swapping the batch in between hands it the footer of one
                    # version and the pages of the other ("wrong page size"); an open file is one
                    # version, whatever is committed after
                    with open(path, "rb") as handle:
                        data = handle.read()
                except FileNotFoundError:
                    raise _Changed(path) from None
                frame = pl.read_parquet(io.BytesIO(data), columns=None if wanted is None else
                                        [c for c in wanted if c not in values])
                extra = {k: v for k, v in values.items()
                         if k not in frame.columns and (wanted is None or k in wanted)}
                frame = frame.with_columns([pl.lit(v).alias(k) for k, v in extra.items()])
                frames.append(frame if wanted is None else frame.select(wanted))
            return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()

        return self._retry(f"lake table {table!r}", attempt)

    def tables(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def views(self) -> dict[str, list[Path]]:
        """View name -> committed files. A file ``<stem>.parquet`` under table ``t`` feeds view
        ``<stem>``, except ``part.parquet``, which feeds view ``t``."""
        return self._retry("the lake", lambda: _view_files(self._all_versions()))

    def connect(self):
        """An in-memory DuckDB connection with one view per table (``samples``, ``quarantine``...).

        The views name the files committed when it was made; a long-lived connection can meet a
        file replaced since (prefer :meth:`sql`, which retries)."""
        return connect_views(self.views())

    def sql(self, query: str) -> pl.DataFrame:
        """Run ``query`` over the lake's views; a statement without rows gives an empty frame.

        Only the views the query names are bound (all of them if it names none). Retried from a
        fresh listing if a writer replaced or deleted a file it read, or swapped a batch it read
        two files of, so the answer is always over committed batches, each read whole."""
        import duckdb

        def attempt() -> pl.DataFrame:
            versions = self._all_versions(identify=True)
            views = _view_files(versions)
            named = {v for v in views if re.search(rf"(?<!\w){re.escape(v)}(?!\w)", query, re.IGNORECASE)}
            views = {v: f for v, f in views.items() if v in named} if named else views
            con = None
            try:
                con = connect_views(views)  # binding a view checks its files exist: a file can go here too
                relation = con.sql(query)  # duckdb 2.x: execute() returns the connection, sql() a relation
                frame = relation.pl() if relation is not None else pl.DataFrame()
            except duckdb.IOException as exc:
                message = str(exc)
                if str(self.root) in message and ("No such file" in message or "No files found" in message):
                    raise _Changed(message) from None  # a lake file went away after it was listed
                raise
            finally:
                if con is not None:
                    con.close()
            files_read = Counter(path.parent for files in views.values() for path in files)
            if any(not v.unchanged() for v in versions if files_read[v.folder] > 1):
                raise _Changed("a batch read twice was replaced meanwhile")
            return frame

        return self._retry("the lake", attempt)

    def _all_versions(self, identify: bool = False) -> list[_Version]:
        return [v for table in self.tables() for v in self._versions(table, identify=identify)]

    def _versions(self, table: str, where: Mapping[str, Any] | None = None,
                  identify: bool = False) -> list[_Version]:
        base = self.table_dir(table)
        versions = _list_versions(table, base, must_exist=False, identify=identify)
        if where:
            required = {partition_part(k, v) for k, v in where.items()}
            versions = [v for v in versions if required.issubset(v.folder.relative_to(base).parts)]
        return versions

    @staticmethod
    def _retry(what: str, attempt: Callable[[], T]) -> T:
        for n in range(_READ_TRIES):
            try:
                return attempt()
            except _Changed:
                time.sleep(min(0.002 * 2 ** n, 0.1))
        raise LakeBusyError(f"{what} changed under every one of {_READ_TRIES} reads (writers replacing "
                            "the same batches non-stop); run the read again")


# -- reading helpers ---------------------------------------------------------------------------

def _identity(stat: os.stat_result) -> tuple[int, int]:
    return stat.st_ino, stat.st_ctime_ns


def _subfolders(folder: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(folder) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []


def _list_versions(table: str, folder: Path, must_exist: bool, identify: bool) -> list[_Version]:
    """Committed partition folders under ``folder``, sorted. Hidden folders are skipped except a
    ``.replaced-*`` aside whose partition is absent: that is the committed version mid-replace.
    A folder that vanishes while being listed raises ``_Changed`` (a writer moved it: list again)."""
    try:
        before = os.stat(folder)  # before listing: a swap after it shows
        entries = list(os.scandir(folder))
        # A listing that began on a version a writer then swapped out reads that folder while its
        # files are being removed (the replaced version is deleted right after the swap), so it can
        # come back partial or empty: the folder at this path must be the same one afterwards. The
        # inode says which folder it is (its ctime also moves whenever a writer adds a work folder
        # beside its partitions, which is no reason to list again).
        if os.stat(folder).st_ino != before.st_ino:
            raise _Changed(folder)
    except FileNotFoundError:
        if must_exist:
            raise _Changed(folder) from None
        return []
    identity = _identity(before) if identify else None
    names = {e.name for e in entries}
    versions: list[_Version] = []
    parquet = []
    asides: dict[str, tuple[int, Path]] = {}
    for entry in entries:
        if entry.name.startswith("."):
            found = _WORK.match(entry.name)
            if found is not None and found["kind"] == "replaced":
                try:
                    aside_time = entry.stat(follow_symlinks=False).st_mtime_ns
                    inner = [i for i in os.scandir(entry.path) if i.is_dir(follow_symlinks=False)]
                except FileNotFoundError:
                    raise _Changed(entry.path) from None  # the replace finished meanwhile
                for version in inner:
                    if version.name not in names and aside_time >= asides.get(version.name, (-1, None))[0]:
                        asides[version.name] = (aside_time, Path(version.path))  # the newest aside wins
            continue
        if entry.is_dir(follow_symlinks=False):
            versions.extend(_list_versions(table, Path(entry.path), True, identify))
        elif entry.name.endswith(".parquet") and entry.is_file(follow_symlinks=False):
            parquet.append(entry.name)
    for _, aside in asides.values():
        versions.extend(_list_versions(table, aside, True, identify))
    if parquet:
        versions.append(_Version(table, folder, identity, tuple(sorted(parquet))))
    return sorted(versions, key=lambda v: v.folder)


def _view_files(versions: Iterable[_Version]) -> dict[str, list[Path]]:
    views: dict[str, list[Path]] = {}
    for version in versions:
        for name in version.files:
            stem = name[: -len(".parquet")]
            views.setdefault(version.table if stem == "part" else stem, []).append(version.folder / name)
    return {name: sorted(files) for name, files in sorted(views.items())}


def connect_views(views: Mapping[str, list[Path]]):
    import duckdb

    con = duckdb.connect(":memory:")
    try:
        for view, files in views.items():
            listing = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            con.execute(
                f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM read_parquet([{listing}], '
                "hive_partitioning=true, union_by_name=true)"
            )
    except BaseException:
        con.close()
        raise
    return con


def _partition_values(path: Path, base: Path) -> dict[str, str]:
    values = {}
    for part in path.relative_to(base).parent.parts:
        if "=" in part:
            key, value = part.split("=", 1)
            values[key] = value
    return values


# -- writing helpers ---------------------------------------------------------------------------

def _make_work_folder(parent: Path, kind: str) -> Path:
    """``<parent>/.<kind>-<this process>-<nonce>``: hidden from readers, owned by this process."""
    path = parent / f".{kind}-{process_identity.current().token}-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    return path


def _commit(staged: Path, final: Path) -> None:
    """Put ``staged`` at ``final``. Swapped in one step where the file system can (the replaced
    version lands at ``staged``); otherwise the old version is renamed aside first."""
    for _ in range(_COMMIT_TRIES):
        try:
            _rename2(staged, final, _RENAME_EXCHANGE)
            return
        except FileNotFoundError:
            if not staged.exists():
                raise
            try:  # nothing at final yet
                _rename_noreplace(staged, final)
                return
            except FileExistsError:
                continue  # another writer committed first: swap with that version
        except _Unsupported:
            if _commit_with_aside(staged, final):
                return
    raise RuntimeError(f"could not commit {final}: {_COMMIT_TRIES} other writers committed it meanwhile")


def _commit_with_aside(staged: Path, final: Path) -> bool:
    """The commit without an atomic swap; False if another writer got in the way (try again)."""
    try:
        _rename_noreplace(staged, final)
        return True
    except FileExistsError:
        pass
    aside = _make_work_folder(final.parent, "replaced")
    try:
        try:
            os.rename(final, aside / final.name)  # readers now take the aside as the committed version
        except FileNotFoundError:
            return False  # another writer moved it aside first
        try:
            _rename_noreplace(staged, final)
        except FileExistsError:
            return False  # another writer's version arrived in between; ours replaces it next round
        return True
    finally:
        _discard(aside)


def _discard(aside: Path) -> None:
    """Remove an aside folder without a reader ever listing it half-removed: ``rmtree`` deletes the
    version inside before the folder, and a reader that lists the aside in between would find no
    version at all. Renamed to a deleted folder first (readers never look inside those), in one
    step; a reader that listed it before the rename finds it gone and lists again."""
    trash = aside.parent / f".deleted-{process_identity.current().token}-{uuid.uuid4().hex[:8]}"
    try:
        os.rename(aside, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _recover_legacy(work: Path) -> list[Path]:
    """Leftovers named before owners were recorded: only an older version could have left them."""
    found = _LEGACY_WORK.match(work.name)
    if found["kind"] == "replaced":
        try:
            target = work.parent / found["name"]
            _rename_noreplace(work, target)
            return [target]
        except (FileExistsError, FileNotFoundError):
            pass
    shutil.rmtree(work, ignore_errors=True)
    return []


class _Unsupported(Exception):
    """The platform or file system has no ``renameat2`` with the flag asked for."""


_AT_FDCWD = -100
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2


def _load_renameat2():
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # not Linux, or a libc without it
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


_renameat2 = _load_renameat2()


def _rename2(src: Path, dst: Path, flags: int) -> None:
    """``renameat2(src, dst, flags)``; ``_Unsupported`` where it is not available, else OSError."""
    global _renameat2
    if _renameat2 is None:
        raise _Unsupported()
    if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        _renameat2 = None  # this file system cannot swap: use the aside commit from now on
        raise _Unsupported()
    raise OSError(code, os.strerror(code), str(src), None, str(dst))


def _rename_noreplace(src: Path, dst: Path) -> None:
    """Rename a folder to ``dst``; FileExistsError if ``dst`` exists."""
    try:
        _rename2(src, dst, _RENAME_NOREPLACE)
    except _Unsupported:
        try:
            os.rename(src, dst)  # a folder onto a non-empty folder fails; partition folders are never empty
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise FileExistsError(exc.errno, exc.strerror, str(dst)) from None
            raise
