"""Pieces every built-in domain shares: split assignment, stable ids and sample streams (answer
extraction is :mod:`domains.answers`, re-exported here).

Splits are decided by content, not by seed: an item's *key* (its normalized prompt, or another
identity the domain chooses) hashes into a bucket, and the bucket fixes the split. The same item
can therefore never be in both "train" and "eval", whatever seeds are used, which matters most
for templated data whose item space is small (2-term single-digit sums have ~200 items).
The salt is the same for every domain, so an item that two domains can both generate (a chain
sum in ``math_arith`` and in ``rg_chain_sum``) sits on the same side in both when they use the
same eval share; a train row of one domain is then never an eval item of another.
Within one call a stream also skips repeats, so a split holds each item once.
"""

from __future__ import annotations

import hashlib
import random
import re
import unicodedata
from typing import Callable, Iterator

# Answer extraction lives in domains.answers (one grammar for every scorer and training signal);
# its names are re-exported here for the built-ins' existing imports.
from domains.answers import (NUMBER, SPAN_MAX_REPEATS, SPAN_MAX_WORDS, boxed_contents,  # noqa: F401
                             declared_answer, declared_number, equivalent_answers, final_answer_text, final_number,
                             line_claim, normalize_span, normalize_text_answer, numbers_match, parse_number,
                             score_number, single_number, stated_answers, states_non_finite)

_SPLIT_SALT = "assay-split-v1"
_WS = re.compile(r"\s+")
# Sentence punctuation and quotes only: math symbols (+ - * / = < > ^ brackets) make a different item.
_PUNCT = re.compile(r"[.,;:!?'\"`\u2018\u2019\u201c\u201d]")


def normalize_key(text: str) -> str:
    """What makes two prompts the same item: case, whitespace and punctuation do not count."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _WS.sub(" ", _PUNCT.sub(" ", text)).strip()


def split_of(key: str, eval_share: float) -> str:
    """The split an item belongs to, from the hash of its normalized key (stable forever)."""
    digest = hashlib.sha256(f"{_SPLIT_SALT}\x1f{normalize_key(key)}".encode()).digest()
    bucket = int.from_bytes(digest[:8], "big") / 2**64
    return "eval" if bucket < eval_share else "train"


def item_id(domain: str, key: str) -> str:
    """Stable id: the same item gets the same id in every run and every seed."""
    return f"{domain}-{hashlib.sha1(normalize_key(key).encode()).hexdigest()[:16]}"


def seeded_rng(*parts: object) -> random.Random:
    # str seeds are hashed with sha512 by `random`, so this is stable across processes.
    return random.Random("\x1f".join(map(str, parts)))


def int_seed(*parts: object) -> int:
    return int.from_bytes(hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()[:4], "big") >> 1


def stream_split(domain: str, split: str, n: int, seed: int, draws: Iterator[dict], *,
                 eval_share: float, max_draws: int | None = None) -> Iterator[dict]:
    """Keep the candidates from ``draws`` that hash into ``split``, each item once, up to ``n``.

    A candidate is ``{"prompt", "answer", "metadata"?, "key"?, "split_key"?}``; ``key`` (default:
    the prompt) is the item's identity (id, repeats); ``split_key`` (default: ``key``) decides the
    split, so items about the same fact (a claim and its negation, a question and its reverse)
    can be kept on one side. ``max_draws`` bounds the work when the item
    space is smaller than ``n`` (then fewer than ``n`` items come out).
    """
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    limit = max_draws if max_draws is not None else 30 * n + 200
    seen: set[str] = set()
    produced = 0
    for drawn, item in enumerate(draws, start=1):
        key = normalize_key(item.get("key") or item["prompt"])
        if key not in seen and split_of(item.get("split_key") or key, eval_share) == split:
            seen.add(key)
            produced += 1
            yield {"id": item_id(domain, key), "prompt": item["prompt"], "answer": item["answer"],
                   "metadata": item.get("metadata") or {}}
        if produced >= n or drawn >= limit:
            return


def draws_from(make: Callable[[random.Random], dict], *seed_parts: object) -> Iterator[dict]:
    rng = seeded_rng(*seed_parts)
    while True:
        yield make(rng)


def read_json(path) -> object:
    import json

    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


ANSWER_HINT = "Finish with a line 'Answer: <your answer>'."
NUMBER_HINT = "Finish with a line 'Answer: <number>'."
