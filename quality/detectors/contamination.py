"""``contaminated``: a training row overlaps an eval item of any domain.

The eval items are ``Domain.eval_items()`` of every domain in ``GateContext.all_domains`` (what
sweeps benchmark). Generating them for ~115 domains is slow, so each domain's items are cached
per process and on disk under ``$ASSAY_HOME/cache/eval_items/`` keyed by the domain's name,
eval size and the content of the source file of its ``samples`` function. ``make install`` may
prebuild the built-in domains' items into ``<venv>/share/assay-data/cache/eval_items/``
(``python -m quality.build_artifacts``), which every ``ASSAY_HOME`` then reads first;
the key includes the source's content hash, so an edited domain is never served stale items.

A train row (rows with ``split == "eval"`` are the eval items themselves and are skipped) is
contaminated when, for some eval item, both hold:

- **overlap**: its prompt is a near match of the item's prompt (word-set Jaccard >=
  ``contamination_jaccard``, default 0.8, found by MinHash/LSH: catches short prompts restated),
  or, for items of >= 13 words, the row contains >= ``contamination_ngram_overlap`` (default 0.5)
  of the item's distinct 13-grams (catches an item pasted into a longer prompt); 13-grams that
  several eval items share are template boilerplate and are left out of the index;
- **same item**: the item's numbers (as a set) and names appear in the row, as in
  :mod:`quality.detectors.features`, so template siblings sharing boilerplate are not flagged.

Long-context items (a domain that declares ``context_tokens``) are thousands of tokens of filler
around a few facts: what identifies one is its ``metadata["probe"]`` (the needles, chains or table
rows and the question), so the index holds probes, not whole prompts (the index stays small however
long the prompts), and a train row of such a domain is compared through its own probe when it has
one. A long row without a probe (a user's file) is compared as it is: its filler cannot match, the
13-gram containment of a probe's text still can when the probe is pasted in one piece.

Both conditions need numbers the row has, so only candidate rows are tokenised: rows whose number
multiset equals some item's (near match), and rows holding an item's longest number, its
"anchor" (13-gram overlap). If some item with 13-grams has no number, every row of >= 13 words
(at least 25 bytes) is a 13-gram candidate.
"""

from __future__ import annotations

import hashlib
import inspect
from collections import Counter
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import polars as pl

from quality import reasons
from quality.detectors import features
from quality.detectors.base import no_flags, threshold

NGRAM = 13
DEFAULT_JACCARD = 0.8
DEFAULT_NGRAM_OVERLAP = 0.5
_ITEMS_CACHE: dict[str, pl.DataFrame] = {}
_INDEX_CACHE: dict[tuple, "EvalIndex"] = {}


def _fingerprint(domain: Any) -> str:
    parts = [domain.name, str(domain.eval_size)]
    try:
        source = inspect.getsourcefile(domain.samples)
        if source:  # the file's content, not its mtime: a fresh clone reuses the install-time cache
            # with the private helpers and data beside it (``_common.py``, a token table): an edit
            # there changes the items too
            path = Path(source)
            helpers = sorted(p for p in path.parent.glob("_*.py") if p != path) + sorted(path.parent.glob("*.json"))
            for file in [path, *helpers]:
                parts += [file.name, hashlib.sha1(file.read_bytes()).hexdigest()]
    except (TypeError, OSError):
        parts.append(f"nosource-{id(domain.samples)}")  # per process only
    return hashlib.sha1("\x1f".join(parts).encode()).hexdigest()[:16]


def eval_items_frame(domain: Any, cache_dir: Path | None) -> pl.DataFrame:
    """``domain``'s eval items as (domain, id, prompt), cached in-process and under cache_dir."""
    key = f"{domain.name}-{_fingerprint(domain)}"
    if key in _ITEMS_CACHE:
        return _ITEMS_CACHE[key]
    path = cache_dir / f"{key}.parquet" if cache_dir else None
    shared = shared_cache_dir() / f"{key}.parquet"
    if shared.exists():
        frame = pl.read_parquet(shared)
    elif path is not None and path.exists():
        frame = pl.read_parquet(path)
    else:
        items = domain.eval_items()
        frame = pl.DataFrame({"domain": [domain.name] * len(items), "id": [r["id"] for r in items],
                              "prompt": [contamination_text(domain, r) for r in items]},
                             schema={"domain": pl.Utf8, "id": pl.Utf8, "prompt": pl.Utf8})
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            frame.write_parquet(tmp)
            os.replace(tmp, path)  # atomic: parallel ingests may race to write it
    _ITEMS_CACHE[key] = frame
    return frame


def contamination_text(domain: Any, row: dict) -> str:
    """What identifies ``row`` as an item: its probe for a long-context domain, else its prompt."""
    meta = row.get("metadata")
    if getattr(domain, "context_tokens", None) and isinstance(meta, dict) and isinstance(meta.get("probe"), str):
        return meta["probe"]
    return row["prompt"]


def shared_cache_dir() -> Path:
    import sys

    return Path(sys.prefix) / "share" / "assay-data" / "cache" / "eval_items"


def prebuild_eval_cache() -> int:
    """Prebuild the eval-item cache of every built-in domain (``python -m quality.build_artifacts``)."""
    import time

    from domains.registry import load_registry

    started = time.perf_counter()
    registry = load_registry(None)
    target = shared_cache_dir()
    for domain in registry:
        eval_items_frame(domain, target)
    print(f"eval items of {len(registry)} built-in domains cached under {target} "
          f"in {time.perf_counter() - started:.0f} s")
    return 0


@dataclass
class EvalIndex:
    items: pl.DataFrame           # domain, id, prompt
    feats: pl.DataFrame           # features.item_features of the prompts
    grams: np.ndarray             # distinct (item, 13-gram) hashes, sorted by gram
    gram_item: np.ndarray         # the item of each gram
    grams_per_item: np.ndarray    # distinct 13-grams per item
    numkeys: np.ndarray           # sorted distinct number-multiset keys of the items
    anchors: np.ndarray           # sorted hashes of each 13-gram item's longest number
    numberless_grams: bool        # some item with 13-grams has no number (no anchor)

    @classmethod
    def build(cls, items: pl.DataFrame) -> "EvalIndex":
        feats = features.item_features(items["prompt"])
        grams, item = features.ngram_hashes(feats["words"], NGRAM)
        pairs = pl.DataFrame({"g": grams, "i": item}).unique()
        # a 13-gram shared by several eval items is template boilerplate: it identifies no item
        # (and would match every sibling in the train data), so only item-specific grams are kept
        pairs = pairs.filter(pl.len().over("g") == 1)
        counts = np.bincount(pairs["i"].to_numpy(), minlength=items.height) if pairs.height else np.zeros(items.height, int)
        pairs = pairs.sort("g")
        h, rows, lengths = features.number_runs(items["prompt"])
        order = np.lexsort((-lengths, rows))  # by item, longest number first
        h, rows = h[order], rows[order]
        first = np.ones(len(rows), dtype=bool)
        first[1:] = rows[1:] != rows[:-1]
        anchored = np.zeros(items.height, dtype=bool)
        anchored[rows[first]] = True
        gram_items = counts > 0
        anchors = np.unique(h[first & gram_items[rows]]) if len(rows) else np.zeros(0, np.uint64)
        return cls(items, feats, pairs["g"].to_numpy(), pairs["i"].to_numpy(), counts,
                   np.unique(feats["numkey"].to_numpy()), anchors, bool((gram_items & ~anchored).any()))


def eval_index(domains: Sequence[Any], cache_dir: Path | None) -> EvalIndex:
    frames = [eval_items_frame(d, cache_dir) for d in domains]
    key = tuple(f"{d.name}-{_fingerprint(d)}" for d in domains)
    if key not in _INDEX_CACHE:
        items = pl.concat(frames) if frames else pl.DataFrame(schema={"domain": pl.Utf8, "id": pl.Utf8, "prompt": pl.Utf8})
        _INDEX_CACHE.clear()  # one index per process is enough
        _INDEX_CACHE[key] = EvalIndex.build(items)
    return _INDEX_CACHE[key]


def candidate_rows(frame: pl.DataFrame, index: EvalIndex, ctx=None) -> np.ndarray:
    """Rows of ``frame`` that could be contaminated (see the module doc); a superset, cheap."""
    cand = features.isin_sorted(features.prompt_number_keys(frame, ctx), index.numkeys)
    if index.numberless_grams:
        long_enough = frame.select(pl.col("prompt").fill_null("").str.len_bytes() >= 2 * NGRAM - 1)
        cand |= long_enough.to_series().to_numpy()
    elif len(index.anchors):
        cand |= features.rows_holding(frame["prompt"], index.anchors)
    return cand


def contaminated_rows(feats: pl.DataFrame, index: EvalIndex, jaccard: float, overlap: float) -> np.ndarray:
    """Per row of ``feats`` (:func:`features.item_features` of train prompts): contaminated?"""
    n_eval, n = index.items.height, feats.height
    if n_eval == 0 or n == 0:
        return np.zeros(n, dtype=bool)
    out = np.zeros(n, dtype=bool)

    # near match of the whole prompt: eval items first, so a bucket's earliest row is an eval item
    both = pl.concat([index.feats, feats])
    leaders = features.earliest_in_bucket(features.minhash_bands(both["wordset"], both["numkey"]))[n_eval:]
    rows = np.repeat(np.arange(n), leaders.shape[1])
    cand = leaders.reshape(-1)
    keep = cand < n_eval
    if keep.any():
        pairs = np.unique(np.stack([rows[keep], cand[keep]], axis=1), axis=0)
        ok = features.verify_pairs(feats, index.feats, pairs[:, 0], pairs[:, 1], jaccard)
        out[pairs[ok, 0]] = True

    # 13-gram overlap for long eval items
    grams, gram_row = features.ngram_hashes(feats["words"], NGRAM)
    if len(grams) and len(index.grams):
        lo = np.searchsorted(index.grams, grams, side="left")
        hi = np.searchsorted(index.grams, grams, side="right")
        hit = hi > lo
        if hit.any():
            # expand each hit gram to every eval item holding it
            lo, hi, rows_hit, g = lo[hit], hi[hit], gram_row[hit], grams[hit]
            reps = hi - lo
            pos = np.repeat(lo, reps) + (np.arange(int(reps.sum())) - np.repeat(np.cumsum(reps) - reps, reps))
            matches = pl.DataFrame({"row": np.repeat(rows_hit, reps), "item": index.gram_item[pos],
                                    "g": np.repeat(g, reps)}).unique()
            shared = matches.group_by("row", "item").len()
            need = index.grams_per_item[shared["item"].to_numpy()] * overlap
            strong = shared.filter(pl.Series(shared["len"].to_numpy() >= np.maximum(need, 1)))
            if strong.height:
                r, i = strong["row"].to_numpy(), strong["item"].to_numpy()
                a = features._numbers_and_names(feats[r])
                b = features._numbers_and_names(index.feats[i])
                # multiset containment: a sibling that repeats the changed number must not pass
                ok = np.array([not (Counter(nb) - Counter(na)) and set(mb) <= set(wa)
                               for na, wa, nb, mb in zip(a["numbers"].to_list(), a["wordset"].to_list(),
                                                         b["numbers"].to_list(), b["names"].to_list())], dtype=bool)
                out[r[ok]] = True
    return out


@dataclass(frozen=True)
class ContaminationDetector:
    code: str = reasons.CONTAMINATED

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        domains = list(getattr(ctx, "all_domains", None) or ())
        own = getattr(ctx, "domain", None)
        if own is not None and all(d.name != own.name for d in domains):
            domains.append(own)
        if not domains or "prompt" not in frame.columns:
            return no_flags(frame).alias(self.code)
        lake = getattr(ctx, "lake", None)
        cache_dir = lake.home / "cache" / "eval_items" if lake is not None else None
        index = eval_index(domains, cache_dir)
        train = (frame["split"] != "eval").fill_null(True).to_numpy() if "split" in frame.columns \
            else np.ones(frame.height, dtype=bool)
        if getattr(own, "context_tokens", None) and "metadata" in frame.columns:
            frame = frame.with_columns(pl.Series("prompt", [
                contamination_text(own, {"prompt": p, "metadata": m})
                for p, m in zip(frame["prompt"].to_list(), frame["metadata"].to_list())], dtype=pl.Utf8))
        idx = np.flatnonzero(train & candidate_rows(frame, index, ctx))
        out = np.zeros(frame.height, dtype=bool)
        if len(idx):
            feats = features.item_features(frame["prompt"].gather(idx))
            hit = contaminated_rows(feats, index, threshold(ctx, "contamination_jaccard", DEFAULT_JACCARD),
                                    threshold(ctx, "contamination_ngram_overlap", DEFAULT_NGRAM_OVERLAP))
            out[idx[hit]] = True
        return pl.Series(self.code, out)

