"""Long-context domains: RULER-style retrieval and reasoning, and long financial filings, by length.

Each family is generated at 1k, 2k, 4k, 8k and 16k tokens of the policy's (SmolLM2's) tokenizer,
and each (family, length) is its own domain named ``<family>_<bucket>`` (``long_needle_4k``), so
sweeps, regression reports, gates and the dashboard treat a length bucket like any domain; the tag
``long_context`` groups them and ``Domain.context_tokens`` declares the bucket (the ``too_long``
gate's limit). A prompt is ``bucket - RESERVE_TOKENS`` tokens long, give or take one filler
sentence (the rest is room for the chat template and the answer), counted exactly
(:mod:`domains.builtin._long_text`). The families, after RULER (Hsieh et al., 2024,
"RULER: What's the Real Context Size of Your Long-Context Language Models?"):

- ``long_needle``: one "special magic number" for a key hidden in filler, among three other keys'
  7-digit numbers of other kinds ("the archive number of ..."); asked for it.
- ``long_multikey``: four needles with different keys; asked for one (the others distract).
- ``long_multivalue``: four numbers for the same key at different depths, among three other keys'
  magic numbers; asked for all of them.

Every needle family plants decoys of the answer's shape (7-digit numbers): copying the context, or
every number in it, names decoys and scores 0 (issue 27: with no other 7-digit number in the text,
the prompt echoed back scored 1.0). The asked needles and the decoys are placed in a uniformly
random order, so no position among them is a better strategy than a guess (issue 41).
- ``long_vartrack``: variable tracking: ``VAR a = 12345`` then ``VAR b = VAR a`` ... (four hops),
  plus a distractor chain with another value; asked for every variable holding the value.
- ``long_aggregate``: common-word extraction: a numbered list of words where five words appear
  three times as often as any other; asked for those five.
- ``long_filing``: an annual report (narrative, revenue tables for each half year and an expense
  table, far apart); the question needs numbers from two distant tables and arithmetic (a
  segment's full-year revenue, its operating income, or its Q4 minus Q1 revenue).

Scoring is exact and built against a policy that dumps everything it read: the needle families
take every 7-digit number in the completion, which must be exactly the asked value(s); variable
tracking and aggregation take every variable / list word the completion names, which must be
exactly the expected set; filings read the final number (``Answer: <number>``).

Generation is deterministic and cheap (an item is drawn from a 48-bit seed; its split is decided by
hashing the seed before any text is built; train and eval are disjoint by construction), and
every item's ``metadata["probe"]`` is the short text that identifies it (the needles, chains or
table rows plus the question): contamination checks compare probes, not 16k tokens of filler.
"""

from __future__ import annotations

import random
import re
from typing import Callable, Iterator

from domains import Domain
from domains.builtin import _long_text as text
from domains.builtin._common import score_number, seeded_rng, split_of, item_id

OWNER = "long-context-team@assay.dev"
BUCKETS = {"1k": 1024, "2k": 2048, "4k": 4096, "8k": 8192, "16k": 16384}
RESERVE_TOKENS = 128  # chat template (~35 tokens for SmolLM2) + the answer
EVAL_SHARE = 0.5
EVAL_SIZE = 100
NEEDLES = 4           # multikey: 1 asked + 3 distractors; multivalue: 4 values
DECOYS = 3            # 7-digit decoys every needle family plants (multivalue: other keys' numbers)
HOPS = 4              # variable tracking: a chain of 5 variables
TOP_WORDS = 5         # aggregation
# The version of what a draw key generates in each family, part of its item ids from version 2 on:
# bump it when the same key makes another prompt, so results cached by item id (sweeps, pass rates)
# are never reused for a text the policy did not see. 2: needles and decoys in a uniformly random
# order (issue 41).
ITEM_VERSIONS = {"long_needle": 2, "long_multikey": 2, "long_multivalue": 2}

# -- templates (every fixed text a prompt can hold; _long_text's token table covers them) ----------
NEEDLE_HEAD = ("Some special magic numbers are hidden in the text below. Read it carefully and remember "
               "them: you will be asked about them afterwards.\n")
NEEDLE = " One of the special magic numbers for {key} is: {value}."
# long_needle's decoys: 7-digit numbers of other keys, not magic numbers
DECOY_TEMPLATES = (" The archive number of the {key} is {value}.", " Someone wrote down {value} next to the {key}.",
                   " The {key} was filed under record {value}.")
ASK_ONE = ("\nWhat is the special magic number for {key} mentioned in the text above? "
           "Finish with a line 'Answer: <number>'.")
ASK_ALL = ("\nWhat are all the special magic numbers for {key} mentioned in the text above? List every one of "
           "them. Finish with a line 'Answer: <numbers, separated by commas>'.")
VAR_HEAD = "Memorize and track the chain of variable assignments hidden in the text below.\n"
VAR_VALUE = " VAR {name} = {value}."
VAR_COPY = " VAR {name} = VAR {source}."
VAR_ASK = ("\nQuestion: find all variables that are assigned the value {value} in the text above. "
           "Finish with a line 'Answer: <the variable names, separated by commas>'.")
LIST_HEAD = "Below is a numbered list of words. Some of the words appear more often than the others.\n"
LIST_LINE = "\n{index}. {word}"
LIST_ASK = ("\nQuestion: which {k} words appear most often in the list above? "
            "Finish with a line 'Answer: <the {k} words, separated by commas>'.")
FILING_HEAD = "ANNUAL REPORT OF {company} FOR FISCAL YEAR {year}\n\nPart I. Business\n"
FILING_PART = "\n\nPart {part}. {title}\n"
FILING_TABLE_HALF = ("\n\nTable {table}. Revenue by segment, {half} half of fiscal year {year} "
                     "(in millions of dollars)\n| Segment | Q{qa} | Q{qb} |")
FILING_TABLE_EXPENSES = ("\n\nTable {table}. Operating expenses by segment, fiscal year {year} "
                         "(in millions of dollars)\n| Segment | Expenses |")
FILING_ROW2 = "\n| {segment} | {a} | {b} |"
FILING_ROW1 = "\n| {segment} | {a} |"
FILING_PARTS = ("II", "III", "IV", "V")
FILING_PART_TITLES = ("Risk Factors", "Management Discussion", "Financial Statements", "Other Information")
FILING_ASK = {
    "year_revenue": "What was the total revenue of the {segment} segment for the full fiscal year {year}, in millions of dollars?",
    "operating_income": ("What was the operating income of the {segment} segment in fiscal year {year}, that is its "
                         "full-year revenue minus its operating expenses, in millions of dollars?"),
    "q4_minus_q1": ("By how much did the revenue of the {segment} segment in Q4 exceed its revenue in Q1 of fiscal "
                    "year {year}, in millions of dollars?"),
}
FILING_HINT = " Finish with a line 'Answer: <number>'."


def template_texts() -> list[str]:
    """Every template filled with sample values: what the token table must cover."""
    key = f"{text.ADJECTIVES[0]} {text.NOUNS[0]}"
    word = text.WORDS[0]
    out = [*(t.format(key=key, value=1234567) for t in DECOY_TEMPLATES),
           NEEDLE_HEAD, NEEDLE.format(key=key, value=1234567), ASK_ONE.format(key=key), ASK_ALL.format(key=key),
           VAR_HEAD, VAR_VALUE.format(name=word, value=12345), VAR_COPY.format(name=word, source=word),
           VAR_ASK.format(value=12345), LIST_HEAD, LIST_LINE.format(index=12, word=word),
           LIST_ASK.format(k=TOP_WORDS), FILING_HINT, FILING_TABLE_EXPENSES.format(table=3, year=2024),
           FILING_ROW1.format(segment=text.SEGMENTS[0], a=1234), FILING_ROW2.format(segment=text.SEGMENTS[0], a=12, b=34)]
    for first in text.COMPANY_FIRST:
        out.append(FILING_HEAD.format(company=f"{first} {text.COMPANY_LAST[0]}", year=2024))
    for part, title in zip(FILING_PARTS, FILING_PART_TITLES):
        out.append(FILING_PART.format(part=part, title=title))
    for half, (qa, qb) in (("first", (1, 2)), ("second", (3, 4))):
        out.append(FILING_TABLE_HALF.format(table=1, half=half, year=2024, qa=qa, qb=qb))
    for segment in text.SEGMENTS:
        out += [FILING_ROW1.format(segment=segment, a=1), FILING_ROW2.format(segment=segment, a=1, b=2)]
        out += ["\n" + ask.format(segment=segment, year=2024) + FILING_HINT for ask in FILING_ASK.values()]
    return out


# -- building a haystack ------------------------------------------------------------------------------

def _haystack(rng: random.Random, budget: int, inserts: list[str], sentences=text.FILLER, *,
              keep_order: bool = False) -> tuple[str, list[float]]:
    """Filler of ``budget`` tokens minus the inserts' tokens, with each insert at a random depth
    (between sentences), in a random order unless ``keep_order``; returns the text and each
    insert's depth (0 = start, 1 = end)."""
    fill = text.filler_sentences(rng, budget - sum(text.count_tokens(i) for i in inserts), sentences)
    slots = sorted(rng.randint(0, len(fill)) for _ in inserts)
    order = list(range(len(inserts)))
    if not keep_order:
        rng.shuffle(order)
    pieces, depths = list(fill), [0.0] * len(inserts)
    for offset, (slot, which) in enumerate(zip(slots, order)):
        pieces.insert(slot + offset, inserts[which])
        depths[which] = round(slot / max(1, len(fill)), 3)
    return "".join(pieces), depths


def _key(rng: random.Random, taken: set[str]) -> str:
    while True:
        key = f"{rng.choice(text.ADJECTIVES)} {rng.choice(text.NOUNS)}"
        if key not in taken:
            taken.add(key)
            return key


def _values(rng: random.Random, count: int, digits: int) -> list[int]:
    out: list[int] = []
    while len(out) < count:
        value = rng.randrange(10 ** (digits - 1), 10 ** digits)
        if value not in out:
            out.append(value)
    return out


# -- families: make(rng, target_tokens) -> {prompt, answer, metadata} --------------------------------

def _around(rng: random.Random, asked: list[str], decoys: list[str]) -> list[str]:
    """The inserts in haystack order, all shuffled together: where the asked needles sit among the
    numbers of their shape is uniform, so answering "the second number" (or any position) is right
    only as often as a blind guess (issue 41: with a decoy always first and last, the needle was
    always the 2nd or 3rd of four, and picking by position was right half the time)."""
    order = asked + decoys
    rng.shuffle(order)
    return order


def _placed(rng: random.Random, target: int, head: str, ask: str, inserts: list[str],
            asked: list[str]) -> tuple[str, list[float]]:
    """The haystack with ``inserts`` in their order; the depth of each ``asked`` needle."""
    body, depths = _haystack(rng, target - text.count_tokens(head + ask), inserts, keep_order=True)
    return body, [depths[inserts.index(needle)] for needle in asked]


def make_needle(rng: random.Random, target: int, *, distractors: int = 0) -> dict:
    """One asked needle among ``DECOYS`` 7-digit decoys: with ``distractors`` (multikey) the decoys
    are other keys' magic numbers, worded like the needle; without, other keys' numbers of other
    kinds ("the archive number of ..."). Either way a completion that names every number of the text
    names decoys."""
    taken: set[str] = set()
    count = max(distractors, DECOYS)
    keys = [_key(rng, taken) for _ in range(1 + count)]
    values = _values(rng, len(keys), 7)
    needle = NEEDLE.format(key=keys[0], value=values[0])
    if distractors:
        decoys = [NEEDLE.format(key=k, value=v) for k, v in zip(keys[1:], values[1:])]
    else:
        decoys = [rng.choice(DECOY_TEMPLATES).format(key=k, value=v) for k, v in zip(keys[1:], values[1:])]
    ask = ASK_ONE.format(key=keys[0])
    body, (depth,) = _placed(rng, target, NEEDLE_HEAD, ask, _around(rng, [needle], decoys), [needle])
    return {"prompt": NEEDLE_HEAD + body + ask, "answer": str(values[0]),
            "metadata": {"values": [values[0]], "distractors": values[1:], "depth": depth,
                         "probe": needle.strip() + ask}}


def make_multivalue(rng: random.Random, target: int) -> dict:
    """``NEEDLES`` magic numbers for the asked key among ``DECOYS`` magic numbers of other keys."""
    taken: set[str] = set()
    key = _key(rng, taken)
    others = [_key(rng, taken) for _ in range(DECOYS)]
    values = _values(rng, NEEDLES + DECOYS, 7)
    needles = [NEEDLE.format(key=key, value=v) for v in values[:NEEDLES]]
    decoys = [NEEDLE.format(key=k, value=v) for k, v in zip(others, values[NEEDLES:])]
    ask = ASK_ALL.format(key=key)
    body, depths = _placed(rng, target, NEEDLE_HEAD, ask, _around(rng, needles, decoys), needles)
    in_order = [v for _, v in sorted(zip(depths, values[:NEEDLES]))]
    return {"prompt": NEEDLE_HEAD + body + ask, "answer": ", ".join(map(str, in_order)),
            "metadata": {"values": in_order, "distractors": values[NEEDLES:], "depth": min(depths),
                         "probe": "".join(needles).strip() + ask}}


def make_vartrack(rng: random.Random, target: int) -> dict:
    names = rng.sample(text.WORDS, 2 * (HOPS + 1))
    chain, other = names[:HOPS + 1], names[HOPS + 1:]
    value, decoy = _values(rng, 2, 5)
    statements = []
    for group, start in ((chain, value), (other, decoy)):
        statements.append([VAR_VALUE.format(name=group[0], value=start)]
                          + [VAR_COPY.format(name=b, source=a) for a, b in zip(group, group[1:])])
    ask = VAR_ASK.format(value=value)
    # the two chains interleaved at random, each keeping its order (an assignment before its
    # copies), then placed in that order at sorted depths
    which = [0] * len(statements[0]) + [1] * len(statements[1])
    rng.shuffle(which)
    pending = [list(statements[0]), list(statements[1])]
    interleaved = [pending[chain_index].pop(0) for chain_index in which]
    body, _ = _haystack(rng, target - text.count_tokens(VAR_HEAD + ask), interleaved, keep_order=True)
    return {"prompt": VAR_HEAD + body + ask, "answer": ", ".join(chain),
            "metadata": {"variables": chain, "all_variables": names, "value": value,
                         "probe": "".join(statements[0]).strip() + ask}}


def make_aggregate(rng: random.Random, target: int) -> dict:
    ask = LIST_ASK.format(k=TOP_WORDS)
    budget = target - text.count_tokens(LIST_HEAD + ask)
    words = rng.sample(text.WORDS, len(text.WORDS))
    top, rest = words[:TOP_WORDS], words[TOP_WORDS:]
    word_cost = {w: text.count_tokens(" " + w) for w in words}
    # a line "\n12. maple" costs 2 + its digits + the word; every other word appears `rare`
    # times and the top words 3x as often; words are dropped from the rest until the list fits
    mean_line = 3 + 2 + sum(word_cost.values()) / len(words)
    rare = max(1, round(budget / mean_line / (3 * TOP_WORDS + len(rest))))

    def cost(kept: list[str]) -> int:
        n = rare * (3 * TOP_WORDS + len(kept))
        digits = sum(len(str(i)) for i in range(1, n + 1))
        return 2 * n + digits + rare * (3 * sum(word_cost[w] for w in top) + sum(word_cost[w] for w in kept))

    kept = list(rest)
    while kept and cost(kept) > budget:
        kept.pop()
    if cost(kept) > budget:
        raise _Redraw()
    pool = [w for w in top for _ in range(3 * rare)] + [w for w in kept for _ in range(rare)]
    rng.shuffle(pool)
    lines = "".join(LIST_LINE.format(index=i, word=w) for i, w in enumerate(pool, start=1))
    listed = pool
    answer = sorted(top, key=listed.index)  # in order of first appearance
    return {"prompt": LIST_HEAD + lines.lstrip("\n") + ask, "answer": ", ".join(answer),
            "metadata": {"top_words": answer, "list_words": sorted(set(pool)), "top_count": 3 * rare,
                         "other_count": rare, "probe": " ".join(listed[:40]) + ask}}


class _Redraw(Exception):
    """This draw cannot make a valid item (rare): draw the next seed instead."""


def make_filing(rng: random.Random, target: int) -> dict:
    company = f"{rng.choice(text.COMPANY_FIRST)} {rng.choice(text.COMPANY_LAST)}"
    year = rng.randint(2015, 2025)
    segments = rng.sample(text.SEGMENTS, 4)
    revenue = {s: [rng.randint(100, 999) for _ in range(4)] for s in segments}
    expenses = {s: rng.randint(int(sum(revenue[s]) * 0.5), int(sum(revenue[s]) * 0.95)) for s in segments}
    asked = rng.choice(segments)
    kind = rng.choice(sorted(FILING_ASK))
    q = revenue[asked]
    answer = {"year_revenue": sum(q), "operating_income": sum(q) - expenses[asked], "q4_minus_q1": q[3] - q[0]}[kind]
    tables = [
        FILING_TABLE_HALF.format(table=1, half="first", year=year, qa=1, qb=2)
        + "".join(FILING_ROW2.format(segment=s, a=revenue[s][0], b=revenue[s][1]) for s in segments),
        FILING_TABLE_HALF.format(table=2, half="second", year=year, qa=3, qb=4)
        + "".join(FILING_ROW2.format(segment=s, a=revenue[s][2], b=revenue[s][3]) for s in segments),
        FILING_TABLE_EXPENSES.format(table=3, year=year)
        + "".join(FILING_ROW1.format(segment=s, a=expenses[s]) for s in segments),
    ]
    head = FILING_HEAD.format(company=company, year=year)
    parts = [FILING_PART.format(part=p, title=t) for p, t in zip(FILING_PARTS, FILING_PART_TITLES)]
    ask = "\n" + FILING_ASK[kind].format(segment=asked, year=year) + FILING_HINT
    fixed = head + "".join(tables) + "".join(parts) + ask
    fill = text.filler_sentences(rng, target - text.count_tokens(fixed), text.FILING_FILLER)
    # sections in order: business | table 1 | risk factors | management discussion | table 2 |
    # financial statements | table 3 | other information; filler spread over the five text sections
    cuts = sorted(rng.sample(range(1, max(6, len(fill))), 4)) if len(fill) >= 6 else [0, 0, 0, 0]
    chunks = ["".join(fill[a:b]) for a, b in zip([0, *cuts], [*cuts, len(fill)])]
    body = (head + chunks[0] + tables[0] + parts[0] + chunks[1] + parts[1] + chunks[2]
            + tables[1] + parts[2] + chunks[3] + tables[2] + parts[3] + chunks[4])
    asked_rows = [line for table in tables for line in table.split("\n") if line.startswith(f"| {asked} |")]
    return {"prompt": body + ask, "answer": str(answer),
            "metadata": {"company": company, "year": year, "segment": asked, "question": kind,
                         "probe": f"{company} {year} " + " ".join(asked_rows) + ask}}


FAMILIES: dict[str, tuple[Callable[[random.Random, int], dict], str]] = {
    "long_needle": (make_needle, "one magic number for a key hidden in filler; asked for it"),
    "long_multikey": (lambda rng, target: make_needle(rng, target, distractors=NEEDLES - 1),
                      "four magic numbers for four keys hidden in filler; asked for one"),
    "long_multivalue": (make_multivalue, "four magic numbers for one key at different depths; asked for all"),
    "long_vartrack": (make_vartrack, "a chain of four variable copies and a distractor chain; asked for every "
                                     "variable holding the value"),
    "long_aggregate": (make_aggregate, "a numbered list of words; asked for the five that appear most often"),
    "long_filing": (make_filing, "an annual report with revenue and expense tables far apart; a segment's "
                                 "full-year revenue, operating income or Q4-Q1 change"),
}


def samples_for(domain: str, family: str, bucket: str) -> Callable[[str, int, int], Iterator[dict]]:
    make = FAMILIES[family][0]
    target = BUCKETS[bucket] - RESERVE_TOKENS
    version = ITEM_VERSIONS.get(family, 1)

    def samples(split: str, n: int, seed: int) -> Iterator[dict]:
        if split not in ("train", "eval"):
            raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
        draws = seeded_rng(domain, "draws", seed)
        produced = 0
        while produced < n:
            key = f"{domain}:{draws.getrandbits(48):012x}"
            if split_of(key, EVAL_SHARE) != split:  # decided before any text is built
                continue
            try:
                item = make(seeded_rng(key), target)
            except _Redraw:
                continue
            tokens = text.count_tokens(item["prompt"])
            item["metadata"].update({"family": family, "bucket": bucket, "context_tokens": BUCKETS[bucket],
                                     "prompt_tokens": tokens})
            produced += 1
            yield {"id": item_id(domain, key if version == 1 else f"{key}/v{version}"), **item}
    return samples


# -- scoring --------------------------------------------------------------------------------------------

_INTEGER = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3})+(?![\d,])|(?<![\d.])\d+(?![\d])")
_WORD = re.compile(r"[a-z]+")


def _integers(completion: str, digits: int) -> set[int]:
    found = (m.group(0).replace(",", "") for m in _INTEGER.finditer(completion))
    return {int(n) for n in found if len(n) == digits}


def _expected_values(sample: dict) -> set[int]:
    meta = sample.get("metadata") or {}
    values = meta.get("values")
    if values:
        return {int(v) for v in values}
    return {int(v) for v in re.findall(r"\d+", sample.get("answer", ""))}


def score_numbers(completion: str, sample: dict) -> float:
    """1 when the 7-digit numbers the completion writes are exactly the asked value(s): naming a
    distractor's number, or dumping every number of the text, scores 0."""
    if not isinstance(completion, str):
        return 0.0
    expected = _expected_values(sample)
    return 1.0 if expected and _integers(completion, 7) == expected else 0.0


def _exact_word_set(expected_key: str, vocabulary_key: str, what: str) -> Callable[[str, dict], float]:
    """A scorer: 1 when the words of the item's vocabulary (``metadata[vocabulary_key]``) that the
    completion names are exactly ``metadata[expected_key]``: naming a decoy, or every word of the
    text, scores 0."""

    def score(completion: str, sample: dict) -> float:
        if not isinstance(completion, str):
            return 0.0
        meta = sample.get("metadata") or {}
        expected = set(meta.get(expected_key) or [w.strip() for w in sample.get("answer", "").split(",")])
        allowed = set(meta.get(vocabulary_key) or text.WORDS)
        named = {w for w in _WORD.findall(completion.lower()) if w in allowed}
        return 1.0 if expected and named == expected else 0.0

    score.__doc__ = f"1 when the {what} the completion names are exactly the expected ones."
    return score


score_variables = _exact_word_set("variables", "all_variables", "variables (the chain, not the distractor chain)")
score_top_words = _exact_word_set("top_words", "list_words", "list words (the most frequent ones)")


def score_filing(completion: str, sample: dict) -> float:
    return score_number(completion, sample.get("answer", ""), abs_tol=1e-6)


SCORERS = {"long_needle": score_numbers, "long_multikey": score_numbers, "long_multivalue": score_numbers,
           "long_vartrack": score_variables, "long_aggregate": score_top_words, "long_filing": score_filing}
ANSWER_PATTERNS = {"long_needle": r"\d{7}", "long_multikey": r"\d{7}", "long_multivalue": r"\d{7}(, \d{7})*",
                   "long_vartrack": r"[a-z]+(, [a-z]+)*", "long_aggregate": r"[a-z]+(, [a-z]+)*",
                   "long_filing": r"-?\d+"}


def _domains() -> list[Domain]:
    out = []
    for family, (_, what) in FAMILIES.items():
        for bucket, tokens in BUCKETS.items():
            name = f"{family}_{bucket}"
            out.append(Domain(
                name=name, owner=OWNER,
                description=f"Long context, {bucket} tokens (RULER-style): {what}",
                tags=("long_context", family, bucket),
                samples=samples_for(name, family, bucket),
                score=SCORERS[family],
                eval_size=EVAL_SIZE,
                context_tokens=tokens,
                max_prompt_tokens=tokens,
                answer_pattern=ANSWER_PATTERNS[family],
            ))
    return out


DOMAINS = _domains()
