"""What is already admitted in the lake, across every domain: the reference for dedup and ids.

A batch that replaces an earlier batch of the same domain (re-materialising generated samples)
does not count that earlier batch as "already there", and neither do batches the batch gates
rejected (:mod:`quality.gate_history`): their rows never reach a train set, so a corrected file
with the same items or ids must be admissible. Results are memoised in ``ctx.cache`` so the
detectors of one ingest read the lake once.
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

        skip = None
        if own and ctx.replacing_batch:
            skip = {f"domain={own}", f"batch={ctx.replacing_batch}"}
        frames = [pl.read_parquet(path, columns=[*COLUMNS, "ingested_at"])
                  for path in lake.files("ingest", "samples")
                  if not (skip and skip.issubset(path.parts))]
        rows = pl.concat(frames, how="vertical_relaxed") if frames else empty.with_columns(
            pl.lit(None, pl.Utf8).alias("ingested_at"))
        rejected = rejected_batches(lake)
        if rejected.height and rows.height:
            rows = rows.join(rejected, on=["domain", *BATCH_KEY], how="anti")
        ctx.cache[key] = rows.select(COLUMNS)
    return ctx.cache[key]
