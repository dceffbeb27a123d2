"""The lake: Parquet files under ``$ASSAY_HOME/lake``, partitioned by domain, queried with DuckDB.

Layout (hive-style folders, so DuckDB sees the partition columns)::

    lake/<table>/<key>=<value>/.../<file>.parquet     e.g. lake/ingest/domain=gsm/batch=b1/samples.parquet

Every write lands in a hidden staging folder and is moved into place with one ``rename``, so a
reader (or a crash) sees either the previous batch or the new one, never half of one, and
parallel partition runs never share a file. Replacing a batch renames the old folder aside first
and restores it if the process dies in between (:meth:`Lake.recover`).

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
"""

from __future__ import annotations

import json
import os
import re
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import polars as pl

HOME_ENV = "ASSAY_HOME"
DEFAULT_HOME = ".assay"
_KEY_VALUE = re.compile(r"^[A-Za-z0-9_.\-]+$")


def resolve_home(home: str | os.PathLike | None = None) -> Path:
    """``home``, else ``$ASSAY_HOME``, else ``.assay`` in the working directory (made absolute)."""
    chosen = home if home else os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Path(chosen).expanduser().resolve()


def _check_part(key: str, value: str) -> str:
    value = str(value)
    if not _KEY_VALUE.match(key) or not _KEY_VALUE.match(value) or value in (".", ".."):
        raise ValueError(f"partition {key}={value!r}: use letters, digits, '_', '-', '.' only")
    return f"{key}={value}"


@dataclass(frozen=True)
class Lake:
    """Paths and atomic Parquet I/O under one ``ASSAY_HOME``."""

    home: Path

    @classmethod
    def at(cls, home: str | os.PathLike | None = None) -> "Lake":
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
            path = path / _check_part(key, value)
        return path

    # -- writes --------------------------------------------------------------------------------

    def write_batch(self, table: str, partition: Mapping[str, Any], frames: Mapping[str, pl.DataFrame],
                    manifest: Mapping[str, Any] | None = None) -> Path:
        """Atomically write (or replace) one partition folder holding ``{name}.parquet`` files.

        ``partition`` must end with the batch key (e.g. ``{"domain": d, "batch": b}``); the folder
        appears complete in one rename. An existing folder with the same key is replaced.
        """
        final = self.partition_dir(table, partition)
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = final.parent / f".staging-{final.name}-{uuid.uuid4().hex[:8]}"
        staging.mkdir()
        try:
            for name, frame in frames.items():
                frame.write_parquet(staging / f"{name}.parquet")
            if manifest is not None:
                (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str))
            self._swap_into_place(staging, final)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        return final

    def _swap_into_place(self, staging: Path, final: Path) -> None:
        if not final.exists():
            os.replace(staging, final)
            return
        aside = final.parent / f".replaced-{final.name}-{uuid.uuid4().hex[:8]}"
        os.replace(final, aside)  # a crash here is undone by recover()
        os.replace(staging, final)
        shutil.rmtree(aside, ignore_errors=True)

    def delete_partition(self, table: str, partition: Mapping[str, Any]) -> bool:
        path = self.partition_dir(table, partition)
        if not path.exists():
            return False
        aside = path.parent / f".deleted-{path.name}-{uuid.uuid4().hex[:8]}"
        os.replace(path, aside)
        shutil.rmtree(aside, ignore_errors=True)
        return True

    def recover(self) -> list[Path]:
        """Restore folders renamed aside by a replace that died half-way; drop stale staging."""
        restored = []
        for aside in self.root.rglob(".replaced-*"):
            name = aside.name[len(".replaced-"):].rsplit("-", 1)[0]
            target = aside.parent / name
            if target.exists():
                shutil.rmtree(aside, ignore_errors=True)
            else:
                os.replace(aside, target)
                restored.append(target)
        for stale in list(self.root.rglob(".staging-*")) + list(self.root.rglob(".deleted-*")):
            shutil.rmtree(stale, ignore_errors=True)
        return restored

    # -- reads ---------------------------------------------------------------------------------

    def files(self, table: str, name: str = "part", where: Mapping[str, Any] | None = None) -> list[Path]:
        """Committed ``{name}.parquet`` files of ``table``, optionally only under ``where``."""
        base = self.table_dir(table)
        if not base.exists():
            return []
        required = {_check_part(k, v) for k, v in (where or {}).items()}
        found = []
        for path in base.rglob(f"{name}.parquet"):
            parts = path.relative_to(base).parts
            if any(p.startswith(".") for p in parts) or not required.issubset(parts):
                continue
            found.append(path)
        return sorted(found)

    def read(self, table: str, name: str = "part", where: Mapping[str, Any] | None = None) -> pl.DataFrame:
        """All committed rows of ``table`` with its partition columns, or an empty frame."""
        frames = []
        for path in self.files(table, name, where):
            frame = pl.read_parquet(path)
            extra = {k: v for k, v in _partition_values(path, self.table_dir(table)).items()
                     if k not in frame.columns}
            frames.append(frame.with_columns([pl.lit(v).alias(k) for k, v in extra.items()]))
        return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()

    def tables(self) -> list[str]:
        if not self.root.exists():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def views(self) -> dict[str, list[Path]]:
        """View name -> committed files. A file ``<stem>.parquet`` under table ``t`` feeds view
        ``<stem>``, except ``part.parquet``, which feeds view ``t``."""
        views: dict[str, list[Path]] = {}
        for table in self.tables():
            base = self.table_dir(table)
            for path in base.rglob("*.parquet"):
                if any(p.startswith(".") for p in path.relative_to(base).parts):
                    continue
                views.setdefault(table if path.stem == "part" else path.stem, []).append(path)
        return {name: sorted(files) for name, files in sorted(views.items())}

    def connect(self):
        """An in-memory DuckDB connection with one view per table (``samples``, ``quarantine``...)."""
        import duckdb

        con = duckdb.connect(":memory:")
        for view, files in self.views().items():
            listing = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            con.execute(
                f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM read_parquet([{listing}], '
                "hive_partitioning=true, union_by_name=true)"
            )
        return con

    def sql(self, query: str) -> pl.DataFrame:
        """Run ``query`` over the lake's views; a statement without rows gives an empty frame."""
        con = self.connect()
        try:
            relation = con.sql(query)  # duckdb 2.x: execute() returns the connection, sql() a relation
            return relation.pl() if relation is not None else pl.DataFrame()
        finally:
            con.close()


def _partition_values(path: Path, base: Path) -> dict[str, str]:
    values = {}
    for part in path.relative_to(base).parent.parts:
        if "=" in part:
            key, value = part.split("=", 1)
            values[key] = value
    return values
