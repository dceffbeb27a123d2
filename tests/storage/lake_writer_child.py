"""A real lake writer in a child process that stops mid-write until its parent says go on.

``python -m tests.storage.lake_writer_child HOME TABLE BATCH VALUE PAUSE_AT [aside]`` writes
``{"v": [VALUE]}`` to ``TABLE/batch=BATCH``. ``PAUSE_AT`` is ``write`` (after the Parquet file is
written in staging) or ``aside`` (after the old version was renamed aside, before the new one is
renamed in); there it prints ``paused`` and waits for a line on stdin. ``aside`` as the last
argument forces the commit without an atomic swap, the path taken on file systems without
``RENAME_EXCHANGE``. The parent may kill it (SIGKILL) while it waits.
"""

from __future__ import annotations

import os
import sys

import polars as pl

from storage import lake as lake_module


def _pause() -> None:
    print("paused", flush=True)
    if not sys.stdin.readline():  # the parent went away
        os._exit(3)


def main(home: str, table: str, batch: str, value: str, pause_at: str, *mode: str) -> None:
    if "aside" in mode:
        lake_module._renameat2 = None
    if pause_at == "write":
        real_write = pl.DataFrame.write_parquet

        def write_then_pause(self, path, *args, **kwargs):
            real_write(self, path, *args, **kwargs)
            _pause()

        pl.DataFrame.write_parquet = write_then_pause
    elif pause_at == "aside":
        for name in ("rename", "replace"):
            real = getattr(os, name)

            def rename_then_pause(src, dst, *args, _real=real, **kwargs):
                _real(src, dst, *args, **kwargs)
                if any(part.startswith(".replaced-") for part in str(dst).split(os.sep)):
                    _pause()

            setattr(os, name, rename_then_pause)
    else:
        raise SystemExit(f"PAUSE_AT must be 'write' or 'aside', got {pause_at!r}")
    lake = lake_module.Lake.at(home)
    lake.write_batch(table, {"batch": batch}, {"part": pl.DataFrame({"v": [int(value)]})})
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
