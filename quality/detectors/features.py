"""Vectorised text features shared by the "same item" detectors (near_duplicate, contamination).

The same-item rule (README, "Ingest and quarantine"): two rows are the same item when they state the same numbers, names and facts,
possibly restated (case, whitespace, punctuation, word order, small edits). Template siblings
("Convert 194 g to mg" / "Convert 195 g to mg") are different items. So every comparison here
requires

- equal **number multisets** (every number, in any order; part of the LSH bucket key, so siblings
  that differ in a number are never even compared),
- matching **names**: every capitalised word of either text appears (case-folded) among the
  other's words, so "capital of France" never matches "capital of Spain",
- a high **word-set Jaccard** similarity (order-free), estimated by MinHash/LSH and then computed
  exactly on the candidate pairs.

Tokenising costs more than the rest of the row gates together, so it runs only on candidates:
:func:`number_runs` hashes every row's numbers straight from the Arrow byte buffer (numpy, no
per-row lists), and since the same item needs the same numbers, a row whose number multiset no
other row (or eval item) shares can be ruled out before any word is extracted. On candidates,
everything is polars/numpy: tokenising, hashing, MinHash signatures (a handful of universal
hashes, min-reduced per row) and banding. Python touches only the candidate pairs, and those are
verified with polars list operations too.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

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
    )
    # Set semantics come from the set operations downstream, so "wordset" is the word list
    # itself (MinHash's min ignores repeats); de-duplicating 1M lists costs more than it saves.
    return out.with_columns(pl.col("words").alias("wordset"),
                            pl.Series("numkey", number_keys(frame["text"]), dtype=pl.UInt64)).drop("_norm")


_HASH_MULT = np.uint64(0x100000001B3)


def _mix(h: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: makes number hashes non-linear, so that their wrapping sum is a
    multiset key ({12, 34} and {14, 32} would collide under a plain polynomial hash)."""
    with np.errstate(over="ignore"):
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return h ^ (h >> np.uint64(31))


def _byte_buffer(text: pl.Series) -> tuple[np.ndarray, np.ndarray]:
    """The UTF-8 bytes of all rows back to back and the row offsets into them (zero-copy)."""
    if text.null_count():  # fill_null runs a query even without nulls: ~1 ms a chunk
        text = text.fill_null("")
    arr = text.to_arrow()
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if arr.type != pa.large_string():
        arr = arr.cast(pa.large_string())
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    base = int(offsets[0]) if len(offsets) else 0
    return data[base:int(offsets[-1]) if len(offsets) else 0], offsets - base


_LOW_BYTES = np.array([0] + [(1 << (8 * k)) - 1 for k in range(1, 8)] + [2**64 - 1], dtype=np.uint64)


def _first_word(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The 8 bytes from each start as a little-endian uint64 (zeros past the end of data)."""
    words = np.zeros(len(starts), dtype=np.uint64)
    body = max(len(data) - 7, 0)  # starts below this have 8 bytes to read
    inside = starts < body
    if body:
        windows = np.lib.stride_tricks.as_strided(data, shape=(body, 8), strides=(1, 1))
        words[inside] = np.ascontiguousarray(windows[starts[inside]]).view(np.uint64).reshape(-1)
    if not inside.all():
        tail = np.zeros(16, dtype=np.uint8)
        tail[:len(data) - body] = data[body:]
        twin = np.lib.stride_tricks.as_strided(tail, shape=(8, 8), strides=(1, 1))
        words[~inside] = np.ascontiguousarray(twin[starts[~inside] - body]).view(np.uint64).reshape(-1)
    return words


def _runs(data: np.ndarray, offsets: np.ndarray, digit: np.ndarray):
    """Hash, row and length of every maximal run of ``digit`` bytes (runs never cross rows)."""
    edges = np.flatnonzero(digit[1:] != digit[:-1]) + 1
    if digit.size and digit[0]:
        edges = np.concatenate([[0], edges])
    if digit.size and digit[-1]:
        edges = np.concatenate([edges, [digit.size]])
    starts, ends = edges[0::2], edges[1::2]  # runs alternate: rise, fall, rise, fall...
    inner = offsets[1:-1]
    inner = inner[(inner > 0) & (inner < len(data))]
    cross = inner[digit[inner - 1] & digit[inner]]  # a run that spans two rows is two runs
    cross = cross[np.diff(cross, prepend=-1) > 0]  # empty rows repeat an offset
    if cross.size:
        starts, ends = np.sort(np.concatenate([starts, cross])), np.sort(np.concatenate([ends, cross]))
    lengths = ends - starts
    # the first 8 bytes of each run as one little-endian word (an unaligned load via a strided
    # view of the padded buffer), bytes past the run masked off; longer runs continue bytewise
    h = _first_word(data, starts) & _LOW_BYTES[np.minimum(lengths, 8)]
    active, k = np.flatnonzero(lengths > 8), 8
    with np.errstate(over="ignore"):
        while active.size:  # total work = digits beyond the 8th: rare
            h[active] = h[active] * _HASH_MULT + data[starts[active] + k].astype(np.uint64)
            k += 1
            active = active[lengths[active] > k]
        h = _mix(h + lengths.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
    first = np.searchsorted(starts, offsets)  # each row's first run
    rows = np.repeat(np.arange(len(offsets) - 1), np.diff(first))
    return h, rows, lengths


def _number_runs(text: pl.Series, odd: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data, offsets = _byte_buffer(text)
    if data.size and data.max() >= 0x80:
        high = np.flatnonzero(data >= 0x80)
        odd[np.unique(np.searchsorted(offsets, high, side="right") - 1)] = True
    h, rows, lengths = _runs(data, offsets, (data - np.uint8(48)) < 10)
    if not odd.any():
        return h, rows, lengths
    keep = ~odd[rows]
    odd_idx = np.flatnonzero(odd)
    joined = pl.DataFrame({"t": text.gather(odd_idx)}).select(
        strip_thousands(pl.col("t")).str.extract_all(r"\d+").list.join(" "))["t"]
    odata, ooffsets = _byte_buffer(joined)
    oh, orows, olen = _runs(odata, ooffsets, odata != 32)
    rows = np.concatenate([rows[keep], odd_idx[orows]])
    order = np.argsort(rows, kind="stable")
    return (np.concatenate([h[keep], oh])[order], rows[order], np.concatenate([lengths[keep], olen])[order])


# Bytes per chunk of the number scan: its temporaries stay a few MB and are reused from chunk to
# chunk; a scan of the whole column at once spends most of its time faulting in fresh pages.
_CHUNK_BYTES, _CHUNK_ROWS = 1 << 19, 1 << 15  # measured on 1M-row columns


def iter_number_runs(text: pl.Series):
    """Every number (``\\d+`` after dropping thousands separators) of every row, as (hash, row,
    length) arrays ordered by row, one chunk of rows at a time. Pure-ASCII rows are scanned as
    bytes in numpy; the rare rows with a thousands separator or a non-ASCII byte (``\\d`` is
    Unicode) go through the regex and get the same hashes."""
    text = text.fill_null("") if text.null_count() else text
    separators = text.str.contains(r"\d,\d{3}").to_numpy()  # one regex pass for all chunks
    mean_bytes = (text.str.len_bytes().sum() or 0) / max(len(text), 1)
    chunk = min(_CHUNK_ROWS, max(1024, int(_CHUNK_BYTES / max(mean_bytes, 1))))
    for start in range(0, len(text), chunk):
        odd = separators[start:start + chunk].copy()
        h, rows, lengths = _number_runs(text.slice(start, chunk), odd)
        yield h, rows + start, lengths


def number_runs(text: pl.Series) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`iter_number_runs` in one piece (for small columns: the eval items)."""
    parts = list(iter_number_runs(text))
    if not parts:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    return tuple(np.concatenate(p) for p in zip(*parts))


def number_keys(text: pl.Series) -> np.ndarray:
    """An order-free key of each row's number multiset: the wrapping sum of its numbers' hashes
    (0 for a row without numbers)."""
    out = np.zeros(len(text), dtype=np.uint64)
    for h, rows, _ in iter_number_runs(text):
        if h.size:
            first = np.flatnonzero(np.concatenate([[True], rows[1:] != rows[:-1]]))
            with np.errstate(over="ignore"):
                out[rows[first]] = np.add.reduceat(h, first)
    return out


def isin_sorted(values: np.ndarray, sorted_set: np.ndarray) -> np.ndarray:
    """``np.isin`` for uint64 hashes against a small sorted set: a 2^20-bit table of the set's top
    bits rules out almost every value with one gather; only the rest pay a binary search."""
    out = np.zeros(len(values), dtype=bool)
    if len(sorted_set) == 0 or len(values) == 0:
        return out
    shift = np.uint64(44)
    table = np.zeros(1 << 20, dtype=bool)
    table[sorted_set >> shift] = True
    maybe = np.flatnonzero(table[values >> shift])
    if maybe.size:
        v = values[maybe]
        pos = np.minimum(np.searchsorted(sorted_set, v), len(sorted_set) - 1)
        out[maybe] = sorted_set[pos] == v
    return out


def duplicated_u64(values: np.ndarray) -> np.ndarray:
    """Per value: does another element equal it? (A sort finds the repeated values, then a
    bitmap-prefiltered look-up marks them: ~3x faster than a hash-based ``is_duplicated``.)"""
    ordered = np.sort(values)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    return isin_sorted(values, np.unique(repeated))


def rows_holding(text: pl.Series, sorted_hashes: np.ndarray) -> np.ndarray:
    """Per row: does it contain a number whose hash is in ``sorted_hashes``?"""
    out = np.zeros(len(text), dtype=bool)
    if len(sorted_hashes):
        for h, rows, _ in iter_number_runs(text):
            out[rows[isin_sorted(h, sorted_hashes)]] = True
    return out


def prompt_number_keys(frame: pl.DataFrame, ctx=None) -> np.ndarray:
    """:func:`number_keys` of ``frame["prompt"]``, memoised in ``ctx.cache`` for the batch
    (near_duplicate and contamination both start from them)."""
    cache = getattr(ctx, "cache", None)
    key = ("prompt_number_keys", id(frame))
    if cache is not None and key in cache and cache[key][0] is frame:
        return cache[key][1]
    keys = number_keys(frame["prompt"])
    if cache is not None:
        cache.clear() if len(cache) > 64 else None
        cache[key] = (frame, keys)  # holding the frame keeps its id from being reused
    return keys


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
