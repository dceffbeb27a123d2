"""Pieces every built-in domain shares: split assignment, stable ids, sample streams and answer
extraction from free-form completions.

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
import math
import random
import re
import unicodedata
from fractions import Fraction
from typing import Callable, Iterator

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


# -- answer extraction ------------------------------------------------------------------------

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_ANSWER_LINE = re.compile(r"\banswer\s*(?:is\s*:?|:|=)\s*(.+)", re.I)
NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
_FRACTION = re.compile(r"(-?\d+)\s*/\s*(\d+)")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}")


def boxed_contents(text: str) -> list[str]:
    """Contents of every ``\\boxed{...}`` (balanced braces), in order."""
    found = []
    start = 0
    while True:
        i = text.find("\\boxed{", start)
        if i < 0:
            return found
        depth, j = 1, i + len("\\boxed{")
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            return found
        found.append(text[i + len("\\boxed{"):j - 1])
        start = j


def final_answer_text(completion: str) -> str | None:
    """The span a completion marks as its final answer: the last ``\\boxed{}``, else the last
    ``<answer>...</answer>``, else what follows the last "answer:"/"answer is" on its line."""
    if not isinstance(completion, str):
        return None
    boxed = boxed_contents(completion)
    if boxed:
        return boxed[-1].strip()
    tags = _ANSWER_TAG.findall(completion)
    if tags:
        return tags[-1].strip()
    lines = [m for m in _ANSWER_LINE.finditer(completion)]
    if lines:
        return lines[-1].group(1).strip().rstrip(".").strip()
    return None


def parse_number(text: str) -> float | None:
    """The number a short answer span states: '1,234', '$12.50', '45%', '-3/4', '1e3'."""
    if not isinstance(text, str):
        return None
    cleaned = unicodedata.normalize("NFKC", text).replace("$", "").replace("\u2212", "-").strip()
    cleaned = _LATEX_FRAC.sub(r"\1/\2", cleaned)
    frac = _FRACTION.fullmatch(cleaned.strip().rstrip("."))
    if frac and int(frac.group(2)) != 0:
        return float(Fraction(int(frac.group(1)), int(frac.group(2))))
    match = NUMBER.search(cleaned)
    if not match:
        return None
    try:
        value = float(match.group(0).replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def final_number(completion: str) -> float | None:
    """The number a completion gives as its answer: from its marked final answer if any,
    otherwise the last number it writes."""
    if not isinstance(completion, str):
        return None
    marked = final_answer_text(completion)
    if marked is not None:
        value = parse_number(marked)
        if value is not None:
            return value
    cleaned = completion.replace("\u2212", "-")
    numbers = NUMBER.findall(cleaned)
    for raw in reversed(numbers):
        try:
            value = float(raw.replace(",", ""))
        except ValueError:
            continue
        if math.isfinite(value):
            return value
    return None


def numbers_match(predicted: float | None, reference: float, *, rel_tol: float = 0.0,
                  abs_tol: float = 1e-9) -> bool:
    if predicted is None:
        return False
    return math.isclose(predicted, reference, rel_tol=rel_tol, abs_tol=abs_tol)


def score_number(completion: str, reference: str, *, rel_tol: float = 0.0, abs_tol: float = 1e-9) -> float:
    """1.0 when the completion's final number equals the reference (within tolerance), else 0."""
    ref = parse_number(reference)
    if ref is None:
        return 0.0
    return 1.0 if numbers_match(declared_number(completion), ref, rel_tol=rel_tol, abs_tol=abs_tol) else 0.0


def normalize_text_answer(text: str) -> str:
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip().strip(".").strip()


def read_json(path) -> object:
    import json

    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


ANSWER_HINT = "Finish with a line 'Answer: <your answer>'."
NUMBER_HINT = "Finish with a line 'Answer: <number>'."


# -- one declared answer (issue 27) -------------------------------------------------------------
# A scorer judges ONE span, the one the completion declares as its answer. A completion that
# declares several different answers (two <answer> tags, a tag then a bare "False", a boxed value
# and a different "Answer:" line) has hedged, and no span of it is judged: taking the best of
# several spans pays every true/false item for "<answer>True</answer>\nFalse".
_ANSWER_LINE_START = re.compile(r"^[\s*_#>]*(?:final\s+)?answer\s*[:=]\s*(.*)$", re.I | re.M)
_TAGS = re.compile(r"</?answer>", re.I)
_EDGE = re.compile(r"^[\s*_`\"']+|[\s*_`\"'.!]+$")


def _clean_span(span: str) -> str:
    """A span as compared with the others: no tags, no lone \\boxed{}, no markdown or closing
    punctuation around it ("**True**." and "True" are one answer)."""
    span = _TAGS.sub(" ", span).strip()
    boxed = boxed_contents(span)
    if len(boxed) == 1 and span.startswith("\\boxed{") and span.endswith("}"):
        span = boxed[0]
    return _EDGE.sub("", span)


def stated_answers(completion: str) -> list[str]:
    """Every answer span a completion declares, in order: each ``\\boxed{}``, each
    ``<answer>...</answer>``, each line starting "Answer:" (its closing period dropped), and any
    text left after the last closing ``</answer>`` (``<answer>True</answer>\\nFalse`` states two
    answers). Spans are stripped but otherwise as written (verifiers compare them exactly); an
    empty tag is a declared, empty answer."""
    if not isinstance(completion, str):
        return []
    text = completion.replace("\x00", "")
    spans = [b.strip() for b in boxed_contents(text)]
    tags = list(_ANSWER_TAG.finditer(text))
    spans += [m.group(1).strip() for m in tags]
    outside = _ANSWER_TAG.sub("\n", text)
    lines = list(_ANSWER_LINE_START.finditer(outside))
    for m in lines:
        line = m.group(1).strip().rstrip(".").strip().strip("*").strip()
        if line.startswith("\\boxed{") and len(boxed_contents(line)) == 1 and line.endswith("}"):
            continue  # "Answer: \\boxed{7}" is the boxed span, already counted
        spans.append(line)
    if lines and not tags:
        tail = outside[lines[-1].end():]
        if _clean_span(tail) and "\\boxed{" not in tail:
            spans.append(tail.strip())  # the prompt asks to *finish* with the line: "Answer: True\nFalse"
    if tags:
        tail = text[tags[-1].end():]
        if _clean_span(tail) and not _ANSWER_LINE_START.search(tail) and "\\boxed{" not in tail:
            spans.append(tail.strip())  # a bare second answer after the tag; a closing "." is not one
    return spans


def declared_answer(completion: str, *, key: Callable[[str], object] | None = None,
                    fallback: str | None = "last_line") -> str | None:
    """The one answer span to judge: the declared span when every declared span says the same
    (``key``, applied to the span without markup, decides sameness; default: normalized text),
    None when they differ (a hedge). With no declared span: what follows the last "the answer is",
    else the last non-empty line (``fallback="last_line"``) or the whole completion (``"whole"``:
    a bare multi-line answer, a grid, is one span) or nothing (None)."""
    if not isinstance(completion, str):
        return None
    key = key or normalize_text_answer
    spans = stated_answers(completion)
    if spans:
        return spans[-1] if len({key(_clean_span(s)) for s in spans}) == 1 else None
    text = completion.replace("\x00", "")
    marked = final_answer_text(text)
    if marked is not None:
        return marked
    if fallback == "whole":
        return text.strip() or None
    if fallback == "last_line":
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return lines[-1].strip() if lines else None
    return None


def single_number(span: str | None) -> float | None:
    """The number a span states, None when it states none or several different numbers
    ("Answer: 12 13 14" is a spray, not an answer)."""
    if span is None:
        return None
    # a number answer is short: a sentence that happens to hold one number (an echoed prompt) is not one
    if len(span.split()) > SPAN_MAX_WORDS:
        return None
    value = parse_number(span)
    if value is None:
        return None
    cleaned = _LATEX_FRAC.sub(r"\1/\2", unicodedata.normalize("NFKC", span).replace("\u2212", "-"))
    if _FRACTION.fullmatch(cleaned.replace("$", "").strip().rstrip(".")):
        return value
    others = set()
    for raw in NUMBER.findall(cleaned.replace("$", "")):
        try:
            others.add(float(raw.replace(",", "")))
        except ValueError:
            continue
    # one value said again and again ("1 1 1 1 ...") is a spray too
    return value if len(others) <= 1 and len(NUMBER.findall(cleaned)) <= SPAN_MAX_REPEATS else None


SPAN_MAX_WORDS = 8  # "Answer: $1,234.50 per year" fits; a restated question does not
SPAN_MAX_REPEATS = 3


def _number_key(span: str) -> object:
    value = single_number(span)
    return ("n", value) if value is not None else ("t", normalize_text_answer(span))


def declared_number(completion: str) -> float | None:
    """The number a completion declares as its answer (one declared span, one number in it); with
    no declared span, the one number its last line states."""
    if not isinstance(completion, str):
        return None
    if stated_answers(completion) or final_answer_text(completion.replace("\x00", "")) is not None:
        return single_number(declared_answer(completion, key=_number_key, fallback=None))
    # undeclared: the last line must state one number ("0 1" or a spray of the prompt's numbers
    # states several and is no answer), and bare number lines before it must not say another
    # ("0\n1" is a hedge); reasoning lines with several numbers before it are fine
    lines = [ln for ln in completion.replace("\x00", "").splitlines() if ln.strip()]
    if not lines:
        return None
    last = single_number(_trailing_number_text(lines[-1]))
    bare = {single_number(ln) for ln in lines[:-1] if _BARE_NUMBER_LINE.fullmatch(ln.strip())}
    return last if last is not None and bare <= {last} else None


_BARE_NUMBER_LINE = re.compile(r"[-+\u2212]?[$\d.,/%\s]+")


def _trailing_number_text(line: str) -> str:
    """The last line's claim: what follows its last '=' ("3 + 4 = 7" claims 7), else the line."""
    return line.rsplit("=", 1)[-1] if "=" in line else line
