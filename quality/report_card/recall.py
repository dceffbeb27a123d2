"""Recall probes: does a domain's verifier pay a correct answer written in another form the prompt allows?

A verifier that refuses right answers (a false negative) trains the policy away from them, and
nothing else in the pipeline sees it: the oracle check feeds the reference verbatim, attacks only
try wrong answers. Here each eval item's reference is rewritten into the forms a fair grader
accepts (generic *equivalence families*, built from the reference and the prompt), plus the
domain's own ``Domain.equivalents`` (what only the domain knows: another valid colouring, a
permutation of an unordered answer), and every candidate is scored as training scores it
(``Domain.safe_score_many``, one batch per domain). A candidate scoring below 1.0 is a miss: a
verifier bug, never the policy's fault.

Every generic family produces only forms that are correct AND follow the format the prompt asks
for: prompts that ask for ``<answer></answer>`` tags get tagged forms, prompts that ask to finish
with an ``Answer:`` line get answer lines, and a free-form prompt (code, terminal scripts,
refusals) gets none (its domain's ``equivalents`` speak for it). A family that does not apply to an
item (thousands separators for a word, a fraction where the prompt asks for decimals) produces
nothing, so it is never counted.

Only items whose reference itself scores 1.0 are probed; the others are listed apart as
``control_failures`` (the self-test's oracle check owns them) and never counted.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Sequence

from domains import Domain

# How a prompt asks for its answer (``asked_format``).
TAGGED, ANSWER_LINE, FREE_FORM = "tagged", "answer_line", "free_form"
MAX_MISSES = 20
# A fraction <-> decimal rewrite is offered only as a person would write it: 5/8 for 0.625, not
# 20560107/5 for 4112021.4.
MAX_FRACTION_TERM = 1000
_Z95 = 1.959963984540054

_ANSWER_LINE_ASKED = re.compile(r"\bfinish with a line\s+['\"]?answer:", re.I)
# A plain decimal number as a person writes it: no leading zeros, no exponent.
_DECIMAL = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?")
_INTEGER = re.compile(r"-?(?:0|[1-9]\d*)")
_FRACTION = re.compile(r"(-?[1-9]\d*|0)\s*/\s*([1-9]\d*)")
# Prompts where digits are not decimal (a base conversion, a binary string): separators and
# ".0" there would change the answer's meaning.
_NOT_DECIMAL = re.compile(r"\bbase[- ]?\d+|\bbinary\b|\bhexa?decimal\b|\boctal\b|\bbits?\b", re.I)
_ASKS_FRACTION = re.compile(r"\bfraction", re.I)
_ASKS_DECIMAL = re.compile(r"\bdecimal|\bround|\bsignificant", re.I)
_NO_SPACES = re.compile(r"\b(?:without|no) spaces?\b", re.I)
_WITH_SPACE = re.compile(r"\bwith a space\b|\bspace after the comma", re.I)
_NO_COMMAS = re.compile(r"\b(?:without|no) commas?\b", re.I)
_TRUTH = ("true", "false", "yes", "no")
# Options a prompt lists: "A) foo", "(b) bar", "C. baz" at the start of a line.
_OPTION = re.compile(r"^\s*\(?([A-Ha-h])[).:]\s+(\S.*?)\s*$", re.M)
# The answer-format instruction, dropped from a restated question (a person restates what is asked).
_HINT = re.compile(r"give your final answer inside <answer></answer> tags\.?|finish with a line\s+'[^']*'\.?"
                   r"|\banswer (?:with|yes or no)\b[^.?!\n]*[.?!]?", re.I)
# Quoting the problem's numbers in reasoning is natural in a short problem; in a long context it
# lists candidate values (a spray that a retrieval scorer rightly refuses), so only short prompts.
SHORT_PROMPT_CHARS = 1500
_SCIENTIFIC = re.compile(r"scientific notation|\be notation|'e' notation", re.I)
# A reference that is math (numbers, operators, one-letter or function names): a math wrapper fits it.
_MATHY = re.compile(r"[-+*/^().,\d\s=<>%a-zA-Z_]*")
_MATH_WORD = re.compile(r"[A-Za-z]{2,}")
_MATH_NAMES = frozenset({"sin", "cos", "tan", "exp", "log", "ln", "sqrt", "atan", "asin", "acos", "pi"})


# -- the report -----------------------------------------------------------------------------------

@dataclass
class FamilyRecall:
    """One family over a domain's probed items: candidates tried and paid, and one miss to look at."""

    family: str
    tried: int = 0
    paid: int = 0
    example_miss: str | None = None
    example_item: str | None = None

    @property
    def recall(self) -> float | None:
        return self.paid / self.tried if self.tried else None

    def as_dict(self) -> dict[str, Any]:
        return {"family": self.family, "tried": self.tried, "paid": self.paid, "recall": self.recall,
                "example_miss": self.example_miss, "example_item": self.example_item}


@dataclass
class RecallReport:
    """A domain's recall on correct answers in other forms. ``items``: items whose reference scored
    1.0 (the only ones probed); ``candidates``/``paid``: over every family; ``misses``: up to
    ``MAX_MISSES`` ``{item, family, completion, score}``; ``skipped``: why nothing was measured
    (a domain with no verifier), else None."""

    domain: str
    items: int = 0
    candidates: int = 0
    paid: int = 0
    families: list[FamilyRecall] = field(default_factory=list)
    misses: list[dict] = field(default_factory=list)
    control_failures: list[str] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None

    @property
    def recall(self) -> float | None:
        """paid / candidates; None when nothing was tried (never a made-up 1.0)."""
        return self.paid / self.candidates if self.candidates else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The Wilson 95% interval of ``recall``; None when nothing was tried."""
        return wilson_interval(self.paid, self.candidates)

    @property
    def worst_family(self) -> str | None:
        """The family with the lowest recall (ties: the most tried); None when nothing was tried or
        nothing was refused (naming a family at 100% would point a reader at nothing)."""
        tried = [f for f in self.families if f.tried]
        if not tried or all(f.paid == f.tried for f in tried):
            return None
        return min(tried, key=lambda f: (f.paid / f.tried, -f.tried)).family

    def as_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "items": self.items, "candidates": self.candidates, "paid": self.paid,
                "recall": self.recall, "interval": list(self.interval) if self.interval else None,
                "worst_family": self.worst_family, "families": [f.as_dict() for f in self.families],
                "misses": self.misses, "control_failures": self.control_failures[:5], "error": self.error,
                "skipped": self.skipped}


def wilson_interval(successes: int, trials: int, z: float = _Z95) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial proportion (95% by default); None for no trials."""
    if trials <= 0:
        return None
    p = successes / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    # the bounds at p = 0 and p = 1 are exactly 0 and 1 (rounding would make them 1e-17 off)
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


# -- how the prompt asks for its answer -------------------------------------------------------------

def asked_format(sample: dict) -> str:
    """``TAGGED`` when the prompt asks for ``<answer></answer>`` tags, ``ANSWER_LINE`` when it asks
    to finish with an ``Answer:`` line, else ``FREE_FORM``."""
    prompt = str(sample.get("prompt") or "")
    if "<answer>" in prompt.lower():
        return TAGGED
    if _ANSWER_LINE_ASKED.search(prompt):
        return ANSWER_LINE
    return FREE_FORM


_TAGGED_REFERENCE = re.compile(r"\s*<answer>(.*?)</answer>\s*", re.IGNORECASE | re.DOTALL)
_ANSWER_LINE_REFERENCE = re.compile(r"(?:.*\n)?[ \t]*answer[ \t]*:[ \t]*([^\n]+?)[ \t]*", re.IGNORECASE | re.DOTALL)


def bare_reference(reference: str, fmt: str) -> str:
    """The answer itself when the reference is already written in the asked form (an imported
    environment's reference is the completion its scorer pays: ``<answer>117</answer>``, ``ANSWER: 7``),
    else the reference: the families declare the answer themselves and would wrap it twice."""
    pattern = _TAGGED_REFERENCE if fmt == TAGGED else _ANSWER_LINE_REFERENCE if fmt == ANSWER_LINE else None
    match = pattern.fullmatch(reference) if pattern is not None else None
    return match.group(1).strip() if match and match.group(1).strip() else reference


def _declare(value: str, fmt: str) -> str:
    return f"<answer>{value}</answer>" if fmt == TAGGED else f"Answer: {value}"


def _question_line(prompt: str) -> str | None:
    """The prompt's last line that is not the answer-format hint, as a restatement would quote it."""
    lines = [ln.strip() for ln in _HINT.sub("", prompt).splitlines() if any(c.isalnum() for c in ln)]
    if not lines:
        return None
    line = lines[-1]
    return line if len(line) <= 300 else line[:300].rsplit(" ", 1)[0]


def _is_math(reference: str) -> bool:
    """A single-line number or formula (a math wrapper fits it; a sentence or a grid it does not)."""
    if "\n" in reference or not reference.strip() or not _MATHY.fullmatch(reference):
        return False
    return all(w.lower() in _MATH_NAMES for w in _MATH_WORD.findall(reference)) and any(c.isdigit() for c in reference)


def _list_items(reference: str) -> list[str] | None:
    """The items of a list-shaped reference (``[1, 2]``, ``a, b, c``, ``A=1,B=2``), else None."""
    text = reference.strip()
    if "\n" in text or "," not in text:
        return None
    if text[0] in "[({" and text[-1] in "])}":
        return [text]  # bracketed: spacing is rewritten around every separator inside
    items = [part.strip() for part in text.split(",")]
    return items if len(items) >= 2 and all(item and " " not in item for item in items) else None


# -- the generic families -------------------------------------------------------------------------

def _marker_case_spacing(ref: str, sample: dict, fmt: str) -> list[str]:
    if fmt == TAGGED:
        return [f"<ANSWER>{ref}</ANSWER>", f"<Answer>{ref}</Answer>"]
    if "\n" in ref:
        return []
    return [f"answer: {ref}", f"ANSWER: {ref}", f"Answer:{ref}", f"Answer :  {ref}", f"Final answer: {ref}",
            f"Final Answer: {ref}"]


def _bold_markers(ref: str, sample: dict, fmt: str) -> list[str]:
    if "\n" in ref:
        return []
    if fmt == TAGGED:
        return [f"<answer>**{ref}**</answer>", f"**<answer>{ref}</answer>**"]
    return [f"**Answer:** {ref}", f"**Answer: {ref}**", f"Answer: **{ref}**"]


def _math_wrapper(ref: str, sample: dict, fmt: str) -> list[str]:
    if not _is_math(ref):
        return []
    return [_declare(wrapped, fmt) for wrapped in (f"${ref}$", f"\\boxed{{{ref}}}", f"\\({ref}\\)")]


def _whitespace_in_marker(ref: str, sample: dict, fmt: str) -> list[str]:
    if fmt == TAGGED:
        return [f"<answer> {ref} </answer>", f"<answer>\n{ref}\n</answer>", f"<answer>\n\n{ref}\n</answer>\n"]
    if "\n" in ref:
        return []
    return [f"Answer:   {ref}   ", f"Answer: {ref}\n\n", f"\tAnswer: {ref}"]


def _reasoning_before(ref: str, sample: dict, fmt: str) -> list[str]:
    prompt = str(sample.get("prompt") or "")
    forms = [f"Let me work through this step by step.\nChecking every step again, the result holds.\n\n"
             f"{_declare(ref, fmt)}"]
    if "\n" not in ref:
        forms.append(f"I reason about the problem first, then I check it.\nWorking it through gives {ref}.\n"
                     f"{_declare(ref, fmt)}")
    numbers = list(dict.fromkeys(re.findall(r"-?\d+(?:\.\d+)?", prompt)))[:3]
    if numbers and len(prompt) <= SHORT_PROMPT_CHARS:
        forms.append(f"The problem gives {', '.join(numbers)}; I use them step by step.\n\n{_declare(ref, fmt)}")
    return forms


def _restatement_before(ref: str, sample: dict, fmt: str) -> list[str]:
    question = _question_line(str(sample.get("prompt") or ""))
    if question is None:
        return []
    return [f"The question: {question}\n{_declare(ref, fmt)}", f"We are asked: {question}\n\n{_declare(ref, fmt)}"]


def _label_and_tag(ref: str, sample: dict, fmt: str) -> list[str]:
    """The ``Answer:`` label in front of the tags the prompt asks for."""
    if fmt != TAGGED:
        return []
    return [f"Answer: <answer>{ref}</answer>", f"Final answer: <answer>{ref}</answer>",
            f"**Answer:** <answer>{ref}</answer>", f"Answer:\n<answer>{ref}</answer>"]


def _decimal_prompt(sample: dict) -> bool:
    return not _NOT_DECIMAL.search(str(sample.get("prompt") or ""))


def _thousands_separators(ref: str, sample: dict, fmt: str) -> list[str]:
    text = ref.strip()
    prompt = str(sample.get("prompt") or "")
    if not _DECIMAL.fullmatch(text) or not _decimal_prompt(sample) or _NO_COMMAS.search(prompt) \
            or _SCIENTIFIC.search(prompt):
        return []
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    whole, _, fraction = digits.partition(".")
    if len(whole) < 4:
        return []
    grouped = f"{int(whole):,}" + (f".{fraction}" if fraction else "")
    return [_declare(sign + grouped, fmt)]


def _integer_as_decimal(ref: str, sample: dict, fmt: str) -> list[str]:
    text = ref.strip()
    if not _INTEGER.fullmatch(text) or not _decimal_prompt(sample):
        return []
    return [_declare(f"{text}.0", fmt)]


def _fraction_decimal(ref: str, sample: dict, fmt: str) -> list[str]:
    """An exact fraction as its (terminating) decimal, a decimal as its fraction, where the prompt
    does not ask for the other form."""
    text, prompt = ref.strip(), str(sample.get("prompt") or "")
    if not _decimal_prompt(sample):
        return []
    match = _FRACTION.fullmatch(text)
    if match and not _ASKS_FRACTION.search(prompt):
        value = Fraction(int(match.group(1)), int(match.group(2)))
        decimal = _terminating_decimal(value) if value.denominator <= MAX_FRACTION_TERM else None
        return [_declare(decimal, fmt)] if decimal is not None else []
    if _DECIMAL.fullmatch(text) and "." in text and not _ASKS_DECIMAL.search(prompt):
        value = Fraction(text)
        if value.denominator != 1 and abs(value.numerator) <= MAX_FRACTION_TERM and value.denominator <= MAX_FRACTION_TERM:
            return [_declare(f"{value.numerator}/{value.denominator}", fmt)]
    return []


def _terminating_decimal(value: Fraction) -> str | None:
    denominator = value.denominator
    for prime in (2, 5):
        while denominator % prime == 0:
            denominator //= prime
    if denominator != 1 or value.denominator == 1:
        return None
    places = 0
    while (value * 10 ** places).denominator != 1:
        places += 1
    return f"{float(value):.{places}f}"


def _truth_word_case(ref: str, sample: dict, fmt: str) -> list[str]:
    text = ref.strip()
    if text.lower() not in _TRUTH:
        return []
    forms = {text.lower(), text.upper(), text.capitalize()} - {text}
    return [_declare(form, fmt) for form in sorted(forms)]


def _option_letter_text(ref: str, sample: dict, fmt: str) -> list[str]:
    """Where the prompt lists lettered options: the letter with its text, the text with its letter."""
    options = {m.group(1).upper(): m.group(2) for m in _OPTION.finditer(str(sample.get("prompt") or ""))}
    if len(options) < 2:
        return []
    text = ref.strip()
    if text.upper() in options:
        letter, body = text.upper(), options[text.upper()]
    else:
        matches = [k for k, v in options.items() if v.strip().casefold() == text.casefold()]
        if len(matches) != 1:
            return []
        letter, body = matches[0], options[matches[0]]
    return [_declare(f"{letter}) {body}", fmt), _declare(f"({letter}) {body}", fmt)]


def _list_spacing(ref: str, sample: dict, fmt: str) -> list[str]:
    items = _list_items(ref)
    if items is None:
        return []
    prompt = str(sample.get("prompt") or "")
    text = ref.strip()
    tight = re.sub(r"\s*([,:])\s*", r"\1", text) if text[0] in "[({" else ",".join(items)
    spaced = re.sub(r"\s*([,:])\s*", r"\1 ", text) if text[0] in "[({" else ", ".join(items)
    forms = []
    if not _WITH_SPACE.search(prompt):
        forms.append(tight)
    if not _NO_SPACES.search(prompt):
        forms.append(spaced)
    return [_declare(form, fmt) for form in forms if form != text]


Family = Callable[[str, dict, str], list[str]]

GENERIC_FAMILIES: dict[str, Family] = {
    "marker_case_spacing": _marker_case_spacing,
    "bold_markers": _bold_markers,
    "math_wrapper": _math_wrapper,
    "whitespace_in_marker": _whitespace_in_marker,
    "reasoning_before": _reasoning_before,
    "restatement_before": _restatement_before,
    "label_and_tag": _label_and_tag,
    "thousands_separators": _thousands_separators,
    "integer_as_decimal": _integer_as_decimal,
    "fraction_decimal": _fraction_decimal,
    "truth_word_case": _truth_word_case,
    "option_letter_text": _option_letter_text,
    "list_spacing": _list_spacing,
}


def equivalence_families(sample: dict, prompt_format: str | None = None) -> dict[str, list[str]]:
    """Correct completions for ``sample`` in other forms its prompt allows, by generic family, built
    from its reference (``sample["answer"]``); families that do not apply are left out. Free-form
    prompts get none. ``prompt_format``: ``TAGGED``/``ANSWER_LINE``/``FREE_FORM`` (default: read
    from the prompt, :func:`asked_format`)."""
    fmt = prompt_format or asked_format(sample)
    reference = bare_reference(str(sample.get("answer") or ""), fmt)
    if fmt == FREE_FORM or not reference.strip():
        return {}
    out = {}
    for name, family in GENERIC_FAMILIES.items():
        forms = [form for form in dict.fromkeys(family(reference, sample, fmt)) if form.strip()]
        if forms:
            out[name] = forms
    return out


def _families_for(domain: Domain, sample: dict) -> dict[str, list[str]]:
    out = equivalence_families(sample)
    if domain.equivalents is not None:
        for name, candidates in dict(domain.equivalents(sample)).items():
            out[f"domain:{name}" if name in out else str(name)] = [str(c) for c in candidates]
    return out


# -- measuring ------------------------------------------------------------------------------------

def measure_recall(domain: Domain, items: int = 8, samples: Sequence[dict] | None = None) -> RecallReport:
    """Score every equivalent form of ``items`` eval items of ``domain`` (or the given ``samples``)
    in one ``safe_score_many`` batch; a candidate below 1.0 is a miss."""
    report = RecallReport(domain.name)
    if not domain.has_verifier:
        report.skipped = "no verifier (score=None): its learned reward is gated by `assay reward check`"
        return report
    try:
        chosen = list(samples) if samples is not None else domain.generate("eval", items, seed=0)
        controls = domain.safe_score_many([s["answer"] for s in chosen], chosen)
        ok = [c == 1.0 for c in controls]
        report.control_failures = [f"{s['id']} scored {c:.3f}" for s, c in zip(chosen, controls) if c != 1.0]
        batch: list[tuple[str, dict]] = []
        owners: list[str] = []
        for sample, good in zip(chosen, ok):
            if not good:
                continue
            for name, candidates in _families_for(domain, sample).items():
                for candidate in candidates:
                    batch.append((candidate, sample))
                    owners.append(name)
        scores = domain.safe_score_many([c for c, _ in batch], [s for _, s in batch]) if batch else []
    except Exception as exc:  # noqa: BLE001 - reported as the domain's failure, never as full recall
        report.error = f"{type(exc).__name__}: {exc}"[:500]
        return report
    report.items = sum(ok)
    families: dict[str, FamilyRecall] = {}
    missed: dict[str, list[dict]] = {}
    for name, (candidate, sample), score in zip(owners, batch, scores):
        family = families.setdefault(name, FamilyRecall(name))
        family.tried += 1
        report.candidates += 1
        if score >= 1.0:
            family.paid += 1
            report.paid += 1
            continue
        if family.example_miss is None:
            family.example_miss, family.example_item = candidate[:300], sample["id"]
        missed.setdefault(name, []).append({"item": sample["id"], "family": name, "completion": candidate[:300],
                                            "score": score})
    report.families = list(families.values())
    report.misses = _spread(missed, MAX_MISSES)
    return report


def _spread(by_family: dict[str, list[dict]], limit: int) -> list[dict]:
    """Up to ``limit`` misses taken in turn from each family, so one broken family does not hide the others."""
    out: list[dict] = []
    queues = [list(misses) for misses in by_family.values()]
    while len(out) < limit and any(queues):
        for queue in queues:
            if queue and len(out) < limit:
                out.append(queue.pop(0))
    return out


__all__ = ["ANSWER_LINE", "FREE_FORM", "GENERIC_FAMILIES", "TAGGED", "FamilyRecall", "RecallReport",
           "asked_format", "equivalence_families", "measure_recall", "wilson_interval"]
