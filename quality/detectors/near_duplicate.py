"""``near_duplicate``: the same item as a row already admitted in any domain (or an earlier row of
the batch), restated: different case, whitespace, punctuation, word order or a small edit.

"Same item" follows :mod:`quality.detectors.features`: equal number multisets, matching names,
word-set Jaccard >= ``near_duplicate_jaccard`` (default 0.8) over prompt + answer. MinHash/LSH
nominates candidates (each row is compared with the earliest row of each of its LSH buckets),
the exact test confirms them, all vectorised. The number multiset is part of every LSH bucket
key, so only rows whose number multiset another row shares (:func:`features.number_keys`, cheap)
are tokenised and hashed at all: same result, a fraction of the work. Template siblings differ
in a number or a name and are never flagged. A row that is an exact duplicate is reported as
``duplicate`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from quality import reasons
from quality.detectors import features
from quality.detectors.admitted import admitted_rows
from quality.detectors.duplicate import exact_duplicates

DEFAULT_JACCARD = 0.8


def item_text(frame: pl.DataFrame) -> pl.Series:
    return frame.select((pl.col("prompt").fill_null("") + pl.lit("\n") + pl.col("answer").fill_null("")).alias("t"))["t"]


def earlier_same_item(feats: pl.DataFrame, first_new: int, jaccard: float) -> np.ndarray:
    """For rows ``first_new..`` of ``feats`` (:func:`features.item_features` of prompt + answer):
    is some earlier row the same item?"""
    keys = features.minhash_bands(feats["wordset"], feats["numkey"])
    leaders = features.earliest_in_bucket(keys)
    n = feats.height
    rows = np.repeat(np.arange(n), leaders.shape[1])
    cand = leaders.reshape(-1)
    keep = (cand < rows) & (rows >= first_new)
    rows, cand = rows[keep], cand[keep]
    if len(rows) == 0:
        return np.zeros(n - first_new, dtype=bool)
    pairs = np.unique(np.stack([rows, cand], axis=1), axis=0)
    ok = features.verify_pairs(feats, feats, pairs[:, 0], pairs[:, 1], jaccard)
    out = np.zeros(n, dtype=bool)
    out[pairs[ok, 0]] = True
    return out[first_new:]


@dataclass(frozen=True)
class NearDuplicateDetector:
    code: str = reasons.NEAR_DUPLICATE

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        from quality.detectors.base import threshold

        jaccard = threshold(ctx, "near_duplicate_jaccard", DEFAULT_JACCARD)
        existing = admitted_rows(ctx)
        n_old = existing.height
        prompts, answers = frame["prompt"].fill_null(""), frame["answer"].fill_null("")
        keys = features.prompt_number_keys(frame, ctx) + features.number_keys(answers)
        if n_old:
            prompts = pl.concat([existing["prompt"].fill_null(""), prompts])
            answers = pl.concat([existing["answer"].fill_null(""), answers])
            old_keys = features.number_keys(existing["prompt"]) + features.number_keys(existing["answer"])
            keys = np.concatenate([old_keys, keys])
        # a row no other row shares its numbers with has a bucket of its own in every band
        cand = np.flatnonzero(features.duplicated_u64(keys))
        near = np.zeros(frame.height, dtype=bool)
        if cand.size:
            feats = features.with_answers(features.item_features(prompts.gather(cand)), answers.gather(cand))
            first_new = int(np.searchsorted(cand, n_old))
            near[cand[first_new:] - n_old] = earlier_same_item(feats, first_new, jaccard)
        near = pl.Series(self.code, near)
        return (near & ~exact_duplicates(frame, ctx)).alias(self.code)
