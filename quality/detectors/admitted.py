"""What is already admitted in the lake, across every domain: the reference for dedup.

A batch that replaces an earlier batch of the same domain (re-materialising generated samples)
does not count that earlier batch as "already there". Results are memoised in ``ctx.cache`` so
the detectors of one ingest read the lake once.
"""

from __future__ import annotations

from typing import Any

import polars as pl

COLUMNS = ("domain", "id", "prompt", "answer", "content_hash")


def admitted_rows(ctx: Any) -> pl.DataFrame:
    """Admitted rows (``COLUMNS``) of every domain in the lake, minus the batch being replaced."""
    lake = getattr(ctx, "lake", None)
    empty = pl.DataFrame(schema={c: pl.Utf8 for c in COLUMNS})
    if lake is None:
        return empty
    own = getattr(getattr(ctx, "domain", None), "name", None)
    key = ("admitted_rows", own, getattr(ctx, "replacing_batch", None))
    if key not in ctx.cache:
        # Lake.read, not the files themselves: it re-lists if a concurrent writer replaces a batch
        frame = lake.read("ingest", "samples", columns=[*COLUMNS, "batch"])
        if frame.is_empty():
            frame = empty.with_columns(pl.lit(None, pl.Utf8).alias("batch"))
        if own and ctx.replacing_batch:
            frame = frame.filter((pl.col("domain") != own) | (pl.col("batch") != ctx.replacing_batch))
        ctx.cache[key] = frame.select(COLUMNS)
    return ctx.cache[key]
