"""Vectorised text features shared by the "same item" detectors (near_duplicate, contamination).

DESIGN.md's rule: two rows are the same item when they state the same numbers, names and facts,
possibly restated (case, whitespace, punctuation, word order, small edits). Template siblings
("Convert 194 g to mg" / "Convert 195 g to mg") are different items. So every comparison here
requires

- equal **number multisets** (every number, in any order; part of the LSH bucket key, so siblings
  that differ in a number are never even compared),
- matching **names**: every capitalised word of either text appears (case-folded) among the
  other's words, so "capital of France" never matches "capital of Spain",
- a high **word-set Jaccard** similarity (order-free), estimated by MinHash/LSH and then computed
  exactly on the candidate pairs.

Everything is polars/numpy over the whole batch: tokenising, hashing, MinHash signatures (a
handful of universal hashes, min-reduced per row) and banding. Python touches only the candidate
pairs, and those are verified with polars list operations too.
"""

from __future__ import annotations

import numpy as np
import polars as pl

NUMBER_PATTERN = r"\d+(?:\.\d+)?"
NAME_PATTERN = r"\b[A-Z][a-zA-Z]+\b"
NON_WORD = r"[^\p{L}\p{N}]+"
WORD = r"[\p{L}\p{N}]+"

# MinHash: NUM_PERM hashes in BANDS bands of ROWS_PER_BAND. With r=2, b=4, a pair with Jaccard
# 0.8 lands in a shared bucket with probability 1-(1-0.8^2)^4 = 0.98; exact verification after.
BANDS, ROWS_PER_BAND = 4, 2
NUM_PERM = BANDS * ROWS_PER_BAND
_RNG = np.random.default_rng(20261129)
_MULT = (_RNG.integers(1, 2**62, NUM_PERM, dtype=np.uint64) | np.uint64(1))
_ADD = _RNG.integers(0, 2**62, NUM_PERM, dtype=np.uint64)
_POSITION_MULT = (_RNG.integers(1, 2**62, 64, dtype=np.uint64) | np.uint64(1))


def strip_thousands(expr: pl.Expr) -> pl.Expr:
    """``1,000,000`` -> ``1000000``: a number means the same with or without separators."""
    sep = r"(\d),(\d{3})"
    return expr.str.replace_all(sep, "${1}${2}").str.replace_all(sep, "${1}${2}")


def word_list_expr(column: str | pl.Expr) -> pl.Expr:
    """Lower-cased word tokens in order (punctuation and whitespace dropped). Unicode letters
    and digits count as word characters, so no NFKC pass is needed for the split."""
    expr = pl.col(column) if isinstance(column, str) else column
    return strip_thousands(expr).str.to_lowercase().str.extract_all(WORD)


def item_features(text: pl.Series) -> pl.DataFrame:
    """Per row: ``text``, ``words`` (ordered), ``wordset`` (unique) and ``numkey`` (a hash of the
    sorted number multiset). Numbers and names of candidate pairs are computed in
    :func:`verify_pairs`, only for the few rows that need them."""
    frame = pl.DataFrame({"text": text.fill_null("")})
    # thousands separators are rare: strip them only in the rows that have one
    has_sep = frame.select(pl.col("text").str.contains(r"\d,\d{3}").alias("m"))["m"]
    norm_text = frame["text"]
    if has_sep.any():
        idx = has_sep.arg_true()
        fixed = frame[idx].select(strip_thousands(pl.col("text")))["text"]
        norm_text = norm_text.scatter(idx, fixed)
    out = pl.DataFrame({"text": frame["text"], "_norm": norm_text.str.to_lowercase()}).with_columns(
        pl.col("_norm").str.extract_all(WORD).alias("words"),
        pl.col("_norm").str.extract_all(r"\d+").alias("_digits"),
    )
    # Set semantics come from the set operations downstream, so "wordset" is the word list
    # itself (MinHash's min ignores repeats); de-duplicating 1M lists costs more than it saves.
    return out.with_columns(pl.col("words").alias("wordset"),
                            pl.Series("numkey", multiset_key(out["_digits"]))).drop("_digits", "_norm")


def prompt_features(frame: pl.DataFrame, ctx=None) -> pl.DataFrame:
    """:func:`item_features` of ``frame["prompt"]``, memoised in ``ctx.cache`` for the batch, so
    near_duplicate and contamination tokenise a batch's prompts once."""
    cache = getattr(ctx, "cache", None)
    key = ("prompt_features", id(frame), frame.height)
    if cache is not None and key in cache:
        return cache[key]
    feats = item_features(frame["prompt"])
    if cache is not None:
        cache.clear() if len(cache) > 64 else None
        cache[key] = feats
    return feats


def with_answers(prompt_feats: pl.DataFrame, answers: pl.Series) -> pl.DataFrame:
    """Features of ``prompt + "\n" + answer`` from the prompt's features: word lists concatenate
    and number-multiset keys add (the key is a sum of element hashes)."""
    ans = item_features(answers)
    with np.errstate(over="ignore"):
        numkey = prompt_feats["numkey"].to_numpy().astype(np.uint64) + ans["numkey"].to_numpy().astype(np.uint64)
    words = pl.DataFrame({"p": prompt_feats["words"], "a": ans["words"]}).select(
        pl.concat_list("p", "a").alias("w"))["w"]
    return pl.DataFrame({"text": prompt_feats["text"] + "\n" + ans["text"], "words": words, "wordset": words,
                         "numkey": pl.Series(numkey, dtype=pl.UInt64)})


def exploded_hashes(lists: pl.Series, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every element of every list, flat, plus each list's length (empty lists hold
    nothing, whatever this polars version's ``explode`` does with them)."""
    lengths = lists.list.len().fill_null(0).to_numpy().astype(np.int64)
    flat = lists.explode()
    if len(flat) != int(lengths.sum()):  # empty lists exploded to a null each: drop those
        keep = np.repeat(lengths > 0, np.maximum(lengths, 1))
        flat = flat.filter(pl.Series(keep))
    return flat.hash(seed).to_numpy().astype(np.uint64, copy=False), lengths


def multiset_key(lists: pl.Series) -> np.ndarray:
    """An order-free key of each list's multiset of strings: the wrapping sum of element hashes."""
    values, lengths = exploded_hashes(lists, 3)
    out = np.zeros(len(lengths), dtype=np.uint64)
    nonempty = lengths > 0
    if values.size:
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        with np.errstate(over="ignore"):  # segments of the non-empty rows only (empty ones add nothing)
            out[nonempty] = np.add.reduceat(values, starts[nonempty])
    return out


def _numbers_and_names(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.select(
        pl.col("wordset"),
        strip_thousands(pl.col("text")).str.extract_all(NUMBER_PATTERN).list.sort().alias("numbers"),
        pl.col("text").str.extract_all(NAME_PATTERN).list.eval(pl.element().str.to_lowercase())
        .list.unique().alias("names"),
    )


def minhash_bands(wordsets: pl.Series, numkeys: pl.Series) -> np.ndarray:
    """LSH bucket keys, shape (rows, BANDS): a band's MinHash values mixed with the number key."""
    n = len(wordsets)
    flat, lengths = exploded_hashes(wordsets, 11)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    nonempty = lengths > 0  # a text without words keeps signature 0 (it only meets other such texts)
    sig = np.zeros((n, NUM_PERM), dtype=np.uint64)
    with np.errstate(over="ignore"):
        if flat.size:
            for k in range(NUM_PERM):
                sig[nonempty, k] = np.minimum.reduceat(flat * _MULT[k] + _ADD[k], starts[nonempty])
        keys = np.empty((n, BANDS), dtype=np.uint64)
        nk = numkeys.to_numpy().astype(np.uint64)
        for b in range(BANDS):
            acc = nk * np.uint64(0x100000001B3) + np.uint64(b)
            for r in range(ROWS_PER_BAND):
                acc = (acc ^ sig[:, b * ROWS_PER_BAND + r]) * np.uint64(0x100000001B3)
            keys[:, b] = acc
    return keys


def earliest_in_bucket(keys: np.ndarray) -> np.ndarray:
    """For every row and band, the index of the first row with the same bucket key (itself if
    it is the first): shape (rows, BANDS)."""
    n = keys.shape[0]
    frame = pl.DataFrame({f"b{b}": keys[:, b] for b in range(keys.shape[1])}).with_row_index("i")
    return frame.select(
        [pl.col("i").min().over(f"b{b}").alias(f"l{b}") for b in range(keys.shape[1])]
    ).to_numpy().astype(np.int64).reshape(n, keys.shape[1])


def verify_pairs(left: pl.DataFrame, right: pl.DataFrame, li: np.ndarray, ri: np.ndarray,
                 threshold: float, names_both_ways: bool = True) -> np.ndarray:
    """Exact same-item test for candidate pairs ``(left[li], right[ri])``: equal numbers, names
    present on both sides, word-set Jaccard >= ``threshold``. Returns a bool array per pair."""
    if len(li) == 0:
        return np.zeros(0, dtype=bool)
    a = _numbers_and_names(left[li]).select(pl.col("wordset").alias("ws_a"), pl.col("numbers").alias("num_a"),
                                            pl.col("names").alias("nm_a"))
    b = _numbers_and_names(right[ri]).select(pl.col("wordset").alias("ws_b"), pl.col("numbers").alias("num_b"),
                                             pl.col("names").alias("nm_b"))
    pairs = pl.concat([a, b], how="horizontal")
    inter = pl.col("ws_a").list.set_intersection("ws_b").list.len()
    union = pl.col("ws_a").list.set_union("ws_b").list.len()
    same_names = pl.col("nm_a").list.set_difference("ws_b").list.len() == 0
    if names_both_ways:
        same_names = same_names & (pl.col("nm_b").list.set_difference("ws_a").list.len() == 0)
    ok = pairs.select(
        ((pl.col("num_a").list.join(" ") == pl.col("num_b").list.join(" "))
         & same_names & (union > 0) & (inter >= pl.lit(threshold) * union)).alias("ok")
    )["ok"]
    return ok.fill_null(False).to_numpy()


def ngram_hashes(words: pl.Series, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every ``n``-word window of each row, and the row each window belongs to.
    Rows shorter than ``n`` words contribute nothing (they are matched by near-match instead)."""
    lengths = words.list.len().to_numpy().astype(np.int64)
    long_rows = np.flatnonzero(lengths >= n)
    if len(long_rows) == 0:
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    sub = words.gather(long_rows)
    sub_len = lengths[long_rows]
    tok = sub.explode().hash(13).to_numpy().astype(np.uint64, copy=False)
    starts = np.zeros(len(sub_len), dtype=np.int64)
    np.cumsum(sub_len[:-1], out=starts[1:])
    win_counts = sub_len - n + 1
    win_row = np.repeat(np.arange(len(sub_len)), win_counts)
    begin = np.arange(int(win_counts.sum())) + np.repeat(starts - (np.cumsum(win_counts) - win_counts), win_counts)
    # an order-sensitive hash of the window: sum of token hashes times per-position odd constants
    grams = np.zeros(len(begin), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in range(n):
            grams += tok[begin + k] * _POSITION_MULT[k]
    return grams, long_rows[win_row]
