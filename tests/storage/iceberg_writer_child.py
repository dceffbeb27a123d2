"""A team-profile lake writer in a child process, for the kill tests of tests/storage/test_iceberg_lake.py.

``python -m tests.storage.iceberg_writer_child pause TABLE VALUE`` writes one two-frame batch
(``samples`` and ``quarantine``, both holding VALUE) to ``TABLE/batch=b`` and stops after its new
table metadata is written to object storage, before the catalog's compare-and-swap: it prints
``paused`` and waits for a line on stdin (the parent kills it there).
``... pause-unit TABLE VALUE`` does the same with one unit of three batches (``write_batches``,
``domain=a|b|c``), paused before its one compare-and-swap.
``python -m tests.storage.iceberg_writer_child loop TABLE N`` replaces ``TABLE/batch=b`` with
values 1..N (``v % 4 + 1`` rows in each frame), printing each value once committed.
The profile comes from the environment (the parent's team_env).
"""

from __future__ import annotations

import sys

import polars as pl

from storage.deployment import open_lake


def frames(value: int, rows: int = 1) -> dict[str, pl.DataFrame]:
    return {"samples": pl.DataFrame({"v": [value] * rows, "kind": ["admitted"] * rows}),
            "quarantine": pl.DataFrame({"v": [value] * rows, "reasons": [["malformed"]] * rows})}


def main(mode: str, table: str, number: str) -> None:
    lake = open_lake(write=True)
    if mode in ("pause", "pause-unit"):
        from pyiceberg.catalog.sql import SqlCatalog

        real = SqlCatalog._write_metadata  # a staticmethod: (metadata, io, metadata_path)

        def write_then_pause(*args, **kwargs):
            real(*args, **kwargs)
            print("paused", flush=True)
            sys.stdin.readline()

        SqlCatalog._write_metadata = staticmethod(write_then_pause)
        if mode == "pause":
            lake.write_batch(table, {"batch": "b"}, frames(int(number)))
        else:
            lake.write_batches(table, [({"domain": d, "batch": "b"}, frames(int(number))) for d in "abc"])
        print("done", flush=True)
    elif mode == "loop":
        for value in range(1, int(number) + 1):
            lake.write_batch(table, {"batch": "b"}, frames(value, value % 4 + 1))
            print(value, flush=True)
    else:
        raise SystemExit(f"mode must be 'pause' or 'loop', got {mode!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
