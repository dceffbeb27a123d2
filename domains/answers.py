"""Answer extraction: the one grammar every scorer and training signal reads a completion with.

A scorer judges ONE span, the one the completion declares as its answer (issue 27): each
``\\boxed{}``, each ``<answer>...</answer>``, each line starting "Answer:" (any case, bold or not),
and text left after the last closing tag. A completion that declares several different answers has
hedged, and no span of it is judged (:func:`declared_answer` is None): taking the best of several
spans pays every true/false item for ``<answer>True</answer>\\nFalse``.

The declared span is normalised once, here, before any verifier sees it (issue 41): the markup a
person puts around a value is not part of it (:func:`normalize_span`: ``$1649$``, ``\\boxed{1649}``,
``\\(1649\\)``, ``**1649**``, backticks, whitespace inside the tags), and an ``Answer:`` label in
front of the tags (``Answer: <answer>3</answer>``) is a label, not a second, empty answer.
:func:`equivalent_answers` is the only equivalence a verifier's exact compare is widened with, and
it is exact: one number equal as a rational (``1170.0``, ``1,795``, ``1/4`` against ``0.25``), a
truth word in another case, a list spaced differently. Nothing looser (no "contains", no tolerance,
no best-of-spans), so no spray or hedge gains from it. Non-finite values (``nan``, ``inf``,
``1e999``) are no number anywhere (:func:`parse_number`, :func:`states_non_finite`).

With no declared span, a number answer is what the last line *claims* (:func:`line_claim`): the
value after its last "=", "is", "equals", ... ("The answer to the given arithmetic problem is 3."
claims 3), one number, not negated, not a question; a line that restates the question states several
numbers or asks, and claims nothing.

``domains.builtin._common`` re-exports these names for the built-ins' existing imports.
"""

from __future__ import annotations

import math
import re
import unicodedata
from fractions import Fraction
from typing import Callable

__all__ = [
    "NUMBER", "SPAN_MAX_REPEATS", "SPAN_MAX_WORDS", "answer_candidates", "boxed_contents", "declared_answer",
    "declared_number", "equivalent_answers", "exact_number", "final_answer_text", "final_number", "line_claim",
    "normalize_span", "normalize_text_answer", "numbers_match", "parse_number", "score_number", "single_number",
    "stated_answers", "states_non_finite",
]

_WS = re.compile(r"\s+")
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
_TAGS = re.compile(r"</?answer>", re.I)
# "the answer is X", "answer: X", "answer = X" anywhere (a completion with no declared span)
_ANSWER_PHRASE = re.compile(r"\banswer\s*(?:is\s*:?|:|=)\s*(.+)", re.I)
# a line that starts with the answer label, markdown around it allowed ("**Final Answer:** 7")
_ANSWER_LINE_START = re.compile(r"^[\s*_#>]*(?:final\s+)?answer\s*[:=]\s*(.*)$", re.I | re.M)
_EDGE = re.compile(r"^[\s*_`\"']+|[\s*_`\"'.!]+$")
NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|-?\.\d+")
_FRACTION = re.compile(r"(-?\d+)\s*/\s*(\d+)")
_LATEX_FRAC = re.compile(r"\\[dt]?frac\{\s*(-?\d+)\s*\}\{\s*(\d+)\s*\}")
_PLACEHOLDER = "\x01"  # where a tag stood, while the lines around it are read

SPAN_MAX_WORDS = 8  # "Answer: $1,234.50 per year" fits; a restated question does not
SPAN_MAX_REPEATS = 3
_NEGATED = re.compile(r"^\W*(?:not|never|no)\b", re.I)


# -- spans ------------------------------------------------------------------------------------------

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


# Markup a person wraps a whole value in: math delimiters, bold/italic markers, code ticks.
_WRAPPERS = (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"), ("**", "**"), ("__", "__"), ("`", "`"))
_CODE_FENCE = re.compile(r"```[A-Za-z]*[ \t]*\n?(.*?)\n?[ \t]*```", re.S)
_LATEX_WORDS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|fbox)\{([^{}]*)\}")


def normalize_span(span: str | None) -> str | None:
    """A declared span without the markup around the whole of it: ``\\boxed{7}``, ``$7$``, ``$$7$$``,
    ``\\(7\\)``, ``\\[7\\]``, ``**7**``, ``__7__``, `` `7` ``, a code fence, ``\\text{7}``, a lone
    ``\\frac{1}{2}`` (as ``1/2``) and the whitespace inside them. Markup around part of the span
    (``$3$ or $4$``) stays, and nothing inside the value changes: verifiers compare what is left."""
    if not isinstance(span, str):
        return span
    text = span.strip()
    for _ in range(8):  # wrappers nest: <answer>**$7$**</answer>
        before = text
        boxed = boxed_contents(text)
        if len(boxed) == 1 and text.startswith("\\boxed{") and text.endswith("}"):
            text = boxed[0].strip()
        fence = _CODE_FENCE.fullmatch(text)
        if fence:
            text = fence.group(1).strip()
        words = _LATEX_WORDS.fullmatch(text)
        if words:
            text = words.group(1).strip()
        frac = _LATEX_FRAC.fullmatch(text)
        if frac:
            text = f"{frac.group(1)}/{frac.group(2)}"
        for opening, closing in _WRAPPERS:
            if len(text) > len(opening) + len(closing) and text.startswith(opening) and text.endswith(closing):
                inner = text[len(opening):len(text) - len(closing)]
                if inner.strip() and (opening not in inner and closing not in inner or _only_powers(inner, opening)):
                    text = inner.strip()
                break
        if text == before:
            break
    return text


def _only_powers(inner: str, marker: str) -> bool:
    """Whether every ``**`` inside a bold span is a power (``x**2``, between two non-spaces) rather
    than the edge of another bold part (``a** and **b``): ``**x**2 + 1**`` is one bold formula."""
    return marker == "**" and all(
        0 < i and i + 2 < len(inner) and not inner[i - 1].isspace() and not inner[i + 2].isspace()
        for i in (m.start() for m in re.finditer(r"\*\*", inner)))


def final_answer_text(completion: str) -> str | None:
    """The span a completion marks as its final answer: the last ``\\boxed{}``, else the last
    ``<answer>...</answer>``, else what follows the last "answer:"/"answer is" on its line."""
    if not isinstance(completion, str):
        return None
    boxed = boxed_contents(completion)
    if boxed:
        return normalize_span(boxed[-1])
    tags = _ANSWER_TAG.findall(completion)
    if tags:
        return normalize_span(tags[-1])
    lines = [m for m in _ANSWER_PHRASE.finditer(completion)]
    if lines:
        return normalize_span(lines[-1].group(1).strip().rstrip(".").strip())
    return None


def _clean_span(span: str) -> str:
    """A span as compared with the others: no tags, no markup around it, no closing punctuation
    ("**True**." and "True" are one answer)."""
    return _EDGE.sub("", normalize_span(_TAGS.sub(" ", span)) or "")


def _labels_a_tag(marked: str, line: re.Match) -> bool:
    """An "Answer:" line with nothing after its label but the tag it introduces
    (``Answer: <answer>3</answer>``, or the tag on the next line): a label, not an empty answer."""
    if line.group(1).strip(" \t*_`"):
        return False
    # the label's own trailing whitespace may already have run over the tag's place
    return _PLACEHOLDER in marked[line.start():line.end()] or \
        marked[line.end():].lstrip(" \t\r\n*_`").startswith(_PLACEHOLDER)


def stated_answers(completion: str) -> list[str]:
    """Every answer span a completion declares, in order: each ``\\boxed{}``, each
    ``<answer>...</answer>``, each line starting "Answer:" (its closing period dropped; a label in
    front of a tag is not one), and any text left after the last closing ``</answer>``
    (``<answer>True</answer>\\nFalse`` states two answers). Spans are stripped but otherwise as
    written; an empty tag is a declared, empty answer."""
    if not isinstance(completion, str):
        return []
    text = completion.replace("\x00", "").replace(_PLACEHOLDER, "")
    spans = [b.strip() for b in boxed_contents(text)]
    tags = list(_ANSWER_TAG.finditer(text))
    spans += [m.group(1).strip() for m in tags]
    marked = _ANSWER_TAG.sub(_PLACEHOLDER, text)
    outside = marked.replace(_PLACEHOLDER, "\n")  # same length: positions agree
    lines = [m for m in _ANSWER_LINE_START.finditer(outside) if not _labels_a_tag(marked, m)]
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


def normalize_text_answer(text: str) -> str:
    return _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip().strip(".").strip()


def declared_answer(completion: str, *, key: Callable[[str], object] | None = None,
                    fallback: str | None = "last_line") -> str | None:
    """The one answer span to judge, normalised (:func:`normalize_span`): the declared span when
    every declared span says the same (``key``, applied to the span without markup, decides
    sameness; default: normalized text), None when they differ (a hedge). With no declared span:
    what follows the last "the answer is", else the last non-empty line (``fallback="last_line"``)
    or the whole completion (``"whole"``: a bare multi-line answer, a grid, is one span) or nothing
    (None)."""
    if not isinstance(completion, str):
        return None
    key = key or normalize_text_answer
    spans = stated_answers(completion)
    if spans:
        return normalize_span(spans[-1]) if len({key(_clean_span(s)) for s in spans}) == 1 else None
    text = completion.replace("\x00", "")
    marked = final_answer_text(text)
    if marked is not None:
        return marked
    if fallback == "whole":
        return normalize_span(text) or None
    if fallback == "last_line":
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return normalize_span(lines[-1]) if lines else None
    return None


# -- numbers ----------------------------------------------------------------------------------------

def parse_number(text: str) -> float | None:
    """The number a short answer span states: '1,234', '$12.50', '45%', '-3/4', '1e3'; never a
    non-finite one ('1e999' is no number)."""
    if not isinstance(text, str) or states_non_finite(text):
        return None  # "0.0 + nan", "nan/1": a span that names a non-finite value states no number
    cleaned = unicodedata.normalize("NFKC", text).replace("$", "").replace("\u2212", "-").strip()
    cleaned = _LATEX_FRAC.sub(r"\1/\2", cleaned)
    frac = _FRACTION.fullmatch(cleaned.strip().rstrip("."))
    if frac:  # "1/0" is no number either, not its numerator
        return float(Fraction(int(frac.group(1)), int(frac.group(2)))) if int(frac.group(2)) else None
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


def single_number(span: str | None) -> float | None:
    """The number a span states, None when it states none or several different numbers
    ("Answer: 12 13 14" is a spray, not an answer)."""
    if span is None:
        return None
    # a number answer is short: a sentence that happens to hold one number (an echoed prompt) is not one;
    # and "not 3" says what the answer is not
    if len(span.split()) > SPAN_MAX_WORDS or _NEGATED.match(span):
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


def _number_key(span: str) -> object:
    value = single_number(span)
    return ("n", value) if value is not None else ("t", normalize_text_answer(span))


# What introduces a line's claim: "x = 7", "the total is 7", "that makes 7", "which equals 7".
_CLAIM_MARKER = re.compile(r"=|\u2248|\b(?:is|are|was|were|equals|makes|gives|get|gets|got|comes to|totals?)\b",
                           re.I)


def line_claim(line: str) -> str | None:
    """What an unmarked line claims as its answer: the text after its last claim marker ("=", "is",
    "equals", "makes", ...) that states a number ("The answer to the given arithmetic problem is 3."
    claims "3."), else the whole line when it is short (at most ``SPAN_MAX_WORDS`` words: "7",
    "So 7 apples."). None for a question (a restated one asks, it does not claim) and a long line with
    no such marker; a negated claim ("is not 3") is read by :func:`single_number` as no number."""
    if not isinstance(line, str) or not line.strip() or line.rstrip().endswith("?"):
        return None
    for marker in reversed(list(_CLAIM_MARKER.finditer(line))):
        claim = line[marker.end():]
        if NUMBER.search(claim.replace("\u2212", "-")):
            return claim  # single_number refuses it when negated ("is not 3") or several numbers
    return line if len(line.split()) <= SPAN_MAX_WORDS else None


_BARE_NUMBER_LINE = re.compile(r"[-+\u2212]?[$\d.,/%\s]+")


def declared_number(completion: str) -> float | None:
    """The number a completion declares as its answer (one declared span, one number in it); with
    no declared span, the one number its last line claims (:func:`line_claim`)."""
    if not isinstance(completion, str):
        return None
    if stated_answers(completion) or final_answer_text(completion.replace("\x00", "")) is not None:
        return single_number(declared_answer(completion, key=_number_key, fallback=None))
    # undeclared: the last line must claim one number ("0 1" or a spray of the prompt's numbers
    # states several and is no answer), and bare number lines before it must not say another
    # ("0\n1" is a hedge); reasoning lines with several numbers before it are fine
    lines = [ln for ln in completion.replace("\x00", "").splitlines() if ln.strip()]
    if not lines:
        return None
    last = single_number(line_claim(lines[-1]))
    bare = {single_number(ln) for ln in lines[:-1] if _BARE_NUMBER_LINE.fullmatch(ln.strip())}
    return last if last is not None and bare <= {last} else None


def score_number(completion: str, reference: str, *, rel_tol: float = 0.0, abs_tol: float = 1e-9) -> float:
    """1.0 when the completion's declared number equals the reference (within tolerance), else 0."""
    ref = parse_number(reference)
    if ref is None:
        return 0.0
    return 1.0 if numbers_match(declared_number(completion), ref, rel_tol=rel_tol, abs_tol=abs_tol) else 0.0


# -- exact equivalence ------------------------------------------------------------------------------

# One number as a person writes it: no leading zeros, no exponent, thousands grouped by threes.
_EXACT_DECIMAL = re.compile(r"([-+]?)((?:0|[1-9]\d*)|[1-9]\d{0,2}(?:,\d{3})+)(\.\d+)?\.?")
_EXACT_FRACTION = re.compile(r"(-?(?:0|[1-9]\d*))\s*/\s*([1-9]\d*)")
# nan/inf as a word, also as a complex part ("nanj", "infi"); sympy's "oo" is refused where sympy reads
# answers (domains.builtin._rg_untrusted_answers), not here: "zoo" is a word
_NON_FINITE = re.compile(r"(?<![A-Za-z0-9_])[-+]?(?:nan|inf(?:inity)?)[ij]?(?![A-Za-z0-9_])|\u221e", re.I)
# linear on long digit runs: r"\d*\.?\d+[eE]..." backtracks cubically ("9" * 5000 took minutes)
_EXPONENT_NUMBER = re.compile(r"(?<![\d.])(?:\d+(?:\.\d*)?|\.\d+)[eE][-+]?\d+")
_TRUTH_WORDS = ("true", "false", "yes", "no")
_AROUND_PUNCTUATION = re.compile(r"\s*([,;:\[\](){}])\s*")


def exact_number(span: str | None, *, grouping: bool = True) -> Fraction | None:
    """The one number a span states exactly, as a rational: '1170', '1170.0', '1,795' (with
    ``grouping``), '-3/4', '0.25'; None for anything else (words, lists, '007', '1e3', '1,79', and a
    fraction not in lowest terms, '6/8' or '5/1': the form a task may be asking for)."""
    if not isinstance(span, str):
        return None
    text = unicodedata.normalize("NFKC", span).replace("\u2212", "-").strip()
    fraction = _EXACT_FRACTION.fullmatch(text)
    if fraction:
        numerator, denominator = int(fraction.group(1)), int(fraction.group(2))
        # a fraction not in lowest terms is not the answer written another way: "10176/20280" is the
        # question of "simplify 10176/20280" handed back, equal to its answer 424/845 only as a number
        if denominator == 1 or math.gcd(numerator, denominator) != 1:
            return None
        return Fraction(numerator, denominator)
    decimal = _EXACT_DECIMAL.fullmatch(text)
    if not decimal or ("," in decimal.group(2) and not grouping):
        return None
    value = Fraction(decimal.group(2).replace(",", "") + (decimal.group(3) or ""))
    return -value if decimal.group(1) == "-" else value


def equivalent_answers(span: str | None, reference: str | None) -> bool:
    """Whether ``span`` says exactly what ``reference`` says in another form a fair grader accepts:
    the same single number (``1170.0``, ``1,795``, ``3/4`` for ``0.75``: equal as rationals; the
    reference is read without thousands grouping, since '1,234' there may be a list), the same truth
    word in another case (``true`` for ``True``), or the same list with other spacing around its
    punctuation (``[19,20]`` for ``[19, 20]``). Exact by design: no tolerance, no containment."""
    if not isinstance(span, str) or not isinstance(reference, str):
        return False
    said, truth = normalize_span(span) or "", reference.strip()
    if not said or not truth:
        return False
    wanted = exact_number(truth, grouping=False)
    if wanted is not None:
        return exact_number(said) == wanted
    if truth.casefold() in _TRUTH_WORDS:
        return said.casefold() == truth.casefold()
    if _AROUND_PUNCTUATION.search(truth):
        return _AROUND_PUNCTUATION.sub(r"\1", said) == _AROUND_PUNCTUATION.sub(r"\1", truth)
    return False


def states_non_finite(text: str | None) -> bool:
    """Whether ``text`` states a non-finite value: ``nan``, ``inf``, ``Infinity``, ``-inf``, ``nanj``,
    ``∞`` or a literal too large for a float (``1e999``). No answer is non-finite."""
    if not isinstance(text, str):
        return False
    if _NON_FINITE.search(text):
        return True
    for literal in _EXPONENT_NUMBER.findall(text):
        try:
            if not math.isfinite(float(literal)):
                return True
        except (ValueError, OverflowError):
            return True
    return False


# -- candidates, for training signals -----------------------------------------------------------------

_ANSWER_LINE_ANYWHERE = re.compile(r"^[\s*#>_-]*(?:final\s+)?answer\s*[:\uff1a]\s*(.+?)\s*$", re.I | re.M)
_ANSWER_IS = re.compile(r"\banswer\s+is\s*[:\uff1a]?\s*(.+?)(?=[.;!?](?:\s|$)|$)", re.I | re.M)
_TRAILING_WORD = re.compile(r"^\s*([^\s<>]{1,24})\s*$")  # one bare token after the last answer tag


def _candidate_form(candidate: str) -> str:
    """One candidate's comparable form: tags and markup around it dropped, case and whitespace
    folded, closing punctuation dropped."""
    text = normalize_span(_ANSWER_TAG.sub(lambda m: m.group(1), candidate)) or ""
    text = _WS.sub(" ", text).strip().lower()
    return text.strip(" $*`'\"").rstrip(".;,!").strip()


def answer_candidates(completion: str) -> set[str]:
    """The distinct normalized candidate answers a completion states anywhere: ``<answer>`` tags,
    ``\\boxed{}``, ``Answer:`` lines, "the answer is ..." phrases, and a lone word after the last
    ``</answer>`` (the ``<answer>True</answer>\\nFalse`` hedge). Wider than :func:`stated_answers`
    (it reads "the answer is" in running text too): a training signal counting hedges, not a scorer."""
    if not isinstance(completion, str):
        return set()
    raw = [m.group(1) for m in _ANSWER_TAG.finditer(completion)]
    raw += boxed_contents(completion)
    raw += [m.group(1) for m in _ANSWER_LINE_ANYWHERE.finditer(completion)]
    raw += [m.group(1) for m in _ANSWER_IS.finditer(completion)]
    closing = completion.lower().rfind("</answer>")
    if closing >= 0:
        tail = _TRAILING_WORD.match(completion[closing + len("</answer>"):])
        if tail:
            raw.append(tail.group(1))
    return {n for n in (_candidate_form(c) for c in raw) if n}
