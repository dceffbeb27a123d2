"""``duplicate``: the same normalised content (prompt + answer, case- and whitespace-folded: see
:func:`quality.normalize.content_hash`) as a row already admitted in any domain, or as an earlier
row of the same batch (the first occurrence is admitted)."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from quality import reasons
from quality.detectors.admitted import admitted_rows
from quality.normalize import content_hash


def content_hashes(frame: pl.DataFrame) -> pl.Series:
    if "content_hash" in frame.columns:
        return frame["content_hash"]
    return pl.Series("content_hash", [content_hash(p or "", a or "") for p, a in
                                      zip(frame["prompt"].to_list(), frame["answer"].to_list())])


@dataclass(frozen=True)
class DuplicateDetector:
    code: str = reasons.DUPLICATE

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        hashes = content_hashes(frame)
        seen = admitted_rows(ctx)["content_hash"]
        return (~hashes.is_first_distinct() | hashes.is_in(seen.implode())).alias(self.code)
