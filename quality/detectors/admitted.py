"""What is already admitted in the lake, across every domain: the reference for dedup and ids.

A batch that replaces an earlier batch of the same domain (re-materialising generated samples)
does not count that earlier batch as "already there", and neither do batches the batch gates
rejected (:mod:`quality.gate_history`): their rows never reach a train set, so a corrected file
with the same items or ids must be admissible. Batches an ingest run holds to commit together with
this one (``ctx.pending``, :class:`quality.ingest.IngestUnit`) count as there already, in place of
the lake's versions of them: a unit gates like the same batches written one after another.
Results are memoised in ``ctx.cache`` so the detectors of one ingest read the lake once.
"""

from __future__ import annotations

from typing import Any

import polars as pl

COLUMNS = ("domain", "id", "prompt", "answer", "content_hash", "batch")


def admitted_rows(ctx: Any) -> pl.DataFrame:
    """Admitted rows (``COLUMNS``) of every domain in the lake, minus the batch being replaced and
    rejected batches."""
    lake = getattr(ctx, "lake", None)
    empty = pl.DataFrame(schema={c: pl.Utf8 for c in COLUMNS})
    if lake is None:
        return empty
    own = getattr(getattr(ctx, "domain", None), "name", None)
    key = ("admitted_rows", own, getattr(ctx, "replacing_batch", None))
    if key not in ctx.cache:
        from quality.gate_history import BATCH_KEY, rejected_batches

        # Lake.read, not the files themselves: it re-lists if a concurrent writer replaces a batch
        rows = lake.read("ingest", "samples", columns=[*COLUMNS, "ingested_at"])
        if rows.is_empty():
            rows = empty.with_columns(pl.lit(None, pl.Utf8).alias("ingested_at"))
        if own and ctx.replacing_batch:
            rows = rows.filter((pl.col("domain") != own) | (pl.col("batch") != ctx.replacing_batch))
        rejected = rejected_batches(lake)
        if rejected.height and rows.height:
            rows = rows.join(rejected, on=["domain", *BATCH_KEY], how="anti")
        rows = rows.select(COLUMNS)
        pending = getattr(ctx, "pending", None)
        if pending is not None and pending.height:
            held = pending.select([pl.col(c).cast(pl.Utf8) for c in COLUMNS])
            if rows.height:  # the versions the unit replaces
                rows = rows.join(held.select("domain", "batch").unique(), on=["domain", "batch"], how="anti")
            rows = pl.concat([rows.select([pl.col(c).cast(pl.Utf8) for c in COLUMNS]), held])
            if own and ctx.replacing_batch:
                rows = rows.filter((pl.col("domain") != own) | (pl.col("batch") != ctx.replacing_batch))
        ctx.cache[key] = rows
    return ctx.cache[key]
