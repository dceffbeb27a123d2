"""``duplicate``: the same normalised content (prompt + answer, case- and whitespace-folded: see
:func:`quality.normalize.content_hash`) as a row already admitted in any domain, or as an earlier
row of the same batch (the first occurrence is admitted)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from quality import reasons
from quality.detectors.admitted import admitted_rows
from quality.detectors.features import duplicated_u64
from quality.normalize import content_hash


def content_hashes(frame: pl.DataFrame) -> pl.Series:
    if "content_hash" in frame.columns:
        return frame["content_hash"]
    return pl.Series("content_hash", [content_hash(p or "", a or "") for p, a in
                                      zip(frame["prompt"].to_list(), frame["answer"].to_list())])


def exact_duplicates(frame: pl.DataFrame, ctx=None) -> pl.Series:
    """The ``duplicate`` mask, memoised in ``ctx.cache`` for the batch: near_duplicate needs it
    too (an exact duplicate is reported as ``duplicate`` only)."""
    cache = getattr(ctx, "cache", None)
    key = ("exact_duplicates", id(frame))
    if cache is not None and key in cache and cache[key][0] is frame:
        return cache[key][1]
    hashes = content_hashes(frame)
    # only rows whose 64-bit hash of the content hash repeats can repeat: compare those exactly
    maybe = np.flatnonzero(duplicated_u64(hashes.hash().to_numpy()))
    repeat = np.zeros(frame.height, dtype=bool)
    if maybe.size:
        repeat[maybe] = ~hashes.gather(maybe).is_first_distinct().to_numpy()
    seen = admitted_rows(ctx)["content_hash"]
    if len(seen):
        repeat |= hashes.is_in(seen.implode()).fill_null(False).to_numpy()
    mask = pl.Series(reasons.DUPLICATE, repeat)
    if cache is not None:
        cache[key] = (frame, mask)  # holding the frame keeps its id from being reused
    return mask


@dataclass(frozen=True)
class DuplicateDetector:
    code: str = reasons.DUPLICATE

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        return exact_duplicates(frame, ctx).alias(self.code)
