"""More hidden inputs for the HumanEval problems whose own tests pass wrong programs.

Mutation testing (:mod:`quality.report_card.mutants`) found problems whose ``check`` lets a
non-equivalent mutant of the canonical solution pass: a lookup table of the docstring's examples
(HumanEval/34's test is exactly its docstring example; /40's and /54's extra cases all expect the
most common example value), or a real bug (a wrong digit value in /19, a closest pair by sum in
/20, an ``is_prime`` that calls every number prime in /127, ``2`` not prime in /59, and in /10,
/43, /46, /85 and /108 the cases their tests never reach: see each ``gap``).

For those problems only, the hidden test gets supplementary inputs by differential testing against
the canonical solution, decided here and not by hand per input:

1. each input is derived from one the problem's own test records, by type-preserving
   perturbations (:func:`perturb`: an int moved by a little, negated, doubled, its digits reversed
   or one added, or taken from another recorded input,
   a list shuffled, shortened, lengthened with recorded elements, a string's characters or words
   shuffled, dropped, repeated or swapped for recorded ones), drawn from a generator seeded by the
   task id, so every process derives the same inputs;
2. it is kept only inside the precondition the docstring states (``admits``, written from the
   docstring and named in ``precondition``), because outside it the canonical solution's answer is
   not the only right one and a correct alternative solution could be refused;
3. the expected result is the canonical solution's (so a problem whose canonical solution is wrong
   somewhere, like /124's day check, gets no supplement: the differential oracle would be wrong);
4. inputs are taken round-robin over the canonical results they give, so no one answer (the
   lookup table's fallback) covers most of them; within each, the smallest inputs (they hold the
   boundaries, as property-based testing's shrinking finds: n = 4, one element, one pair)
   alternate with inputs from anywhere in the walk (further from the recorded ones).

Each supplement was checked against independent correct solutions, written from the docstring
with other algorithms (``tests/domains/test_code_supplements.py``): they still score 1.0.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sandbox import plain_data
from sandbox.function_calls import Call

SEED = "assay-humaneval-supplement:{task_id}"
ATTEMPTS_PER_INPUT = 200


@dataclass(frozen=True)
class Supplement:
    """Supplementary hidden inputs for one problem. ``gap``: the wrong program its own test passed;
    ``precondition``: what the docstring promises about inputs (every supplementary input keeps
    it, ``admits(*args)``); ``count``: how many inputs to add."""

    gap: str
    precondition: str
    admits: Callable[..., bool]
    count: int = 24


def _ints(values: Any) -> bool:
    return isinstance(values, list) and all(type(v) is int for v in values)


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1))


DIGIT_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _digit_words(numbers: Any) -> bool:
    return isinstance(numbers, str) and numbers == " ".join(numbers.split()) and \
        all(word in DIGIT_WORDS for word in numbers.split())


def _unique_closest_pair(numbers: Any) -> bool:
    if not (isinstance(numbers, list) and len(numbers) >= 2 and all(type(v) is float for v in numbers)):
        return False
    values = sorted(numbers)
    gaps = sorted(b - a for a, b in zip(values, values[1:]))
    # one closest pair, clear of float rounding: any correct algorithm finds the same one
    return len(gaps) == 1 or gaps[1] - gaps[0] > 1e-6


def _interval(value: Any) -> bool:
    return isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value) and value[0] <= value[1]


def _lower_words(*words: Any) -> bool:
    return all(isinstance(w, str) and w.isascii() and w.isalpha() and w.islower() for w in words)


SUPPLEMENTS: dict[str, Supplement] = {
    "HumanEval/10": Supplement(
        gap="a search for the palindromic suffix that walks backwards (string[-1:] is one) passed: no test needs a "
            "suffix longer than one character that is not the whole string",
        precondition="a string (kept to 30 characters)",
        admits=lambda s: isinstance(s, str) and len(s) <= 30),
    "HumanEval/19": Supplement(
        gap="a digit word mapped to a wrong value ('six': 7) passed: the test never orders six against seven",
        precondition="a space-delimited string of the words 'zero' to 'nine'",
        admits=_digit_words),
    "HumanEval/20": Supplement(
        gap="the pair with the smallest |a + b| (not |a - b|) passed",
        precondition="a list of at least two floats with one closest pair (the docstring returns 'two that are "
                     "the closest'; a tie would allow either pair)",
        admits=_unique_closest_pair, count=48),  # more: the bug shows only when the first two nearly cancel
    "HumanEval/34": Supplement(
        gap="a lookup table of the docstring example passed: the test is that one example",
        precondition="a list of integers",
        admits=_ints),
    "HumanEval/40": Supplement(
        gap="a lookup table of the docstring examples returning False otherwise passed, and so did a loop that "
            "reuses one element (range(j - 1, ...))",
        precondition="a list of integers",
        admits=_ints, count=60),  # more: the reused-element bug needs 2a + b == 0 without a real triple
    "HumanEval/43": Supplement(
        gap="a pair search that skips neighbours (range(i + 2, ...)) passed",
        precondition="a list of integers",
        admits=_ints, count=60),  # more: the bug shows only where the one zero-sum pair is adjacent
    "HumanEval/46": Supplement(
        gap="fib4 that indexes its table of four for n <= 4 (an IndexError at 4) passed: n = 4 is never tested",
        precondition="an integer n >= 0 (kept to 40)",
        admits=lambda n: type(n) is int and 0 <= n <= 40, count=41),  # every n to 40 (fib4(4) == fib4(2))
    "HumanEval/54": Supplement(
        gap="a lookup table of the docstring examples returning False otherwise passed",
        precondition="two words (lower-case letters)",
        admits=_lower_words),
    "HumanEval/59": Supplement(
        gap="an is_prime that calls 2 not prime (k <= 2) passed: no test has 2 as its largest prime factor",
        precondition="an integer n > 1 that is not a prime (kept below 5000: the canonical search is linear)",
        admits=lambda n: type(n) is int and 1 < n < 5000 and not _is_prime(n)),
    "HumanEval/85": Supplement(
        gap="a loop reading one index past the end on odd lengths (range(1, len(lst) + 1, 2)) passed: every test "
            "list has an even length",
        precondition="a non-empty list of integers",
        admits=lambda lst: _ints(lst) and len(lst) > 0),
    "HumanEval/108": Supplement(
        gap="a digit sum that drops the first digit of a negative number instead of negating it passed",
        precondition="a list of integers",
        admits=_ints, count=60),  # more: few lists hold a negative number whose first digit outweighs the rest
    "HumanEval/127": Supplement(
        gap="an is_prime that calls every number prime (its divisor check deleted) passed",
        precondition="two closed intervals (start, end) of integers with start <= end",
        admits=lambda a, b: _interval(a) and _interval(b)),
}


# -- type-preserving perturbations ------------------------------------------------------------------

def _pool(calls: Sequence[Call]) -> dict[str, list]:
    """Parts of the recorded inputs that perturbations may reuse: ints, floats, characters, words,
    list elements."""
    pool: dict[str, list] = {"int": [], "float": [], "char": [], "word": [], "element": []}

    def visit(value: Any) -> None:
        if type(value) is int:
            pool["int"].append(value)
        elif type(value) is float:
            pool["float"].append(value)
        elif type(value) is str:
            pool["char"].extend(value)
            pool["word"].extend(value.split())
        elif isinstance(value, (list, tuple)):
            if type(value) is list:
                pool["element"].extend(copy.deepcopy(value))
            for item in value:
                visit(item)

    for call in calls:
        for argument in call.args:
            visit(argument)
    return pool


def perturb(value: Any, rng: random.Random, pool: dict[str, list]) -> Any:
    """``value`` changed a little, with its type kept (a tuple keeps its length)."""
    if type(value) is bool:
        return not value
    if type(value) is int:
        sign = -1 if value < 0 else 1
        choices = [lambda: value + rng.choice((-3, -2, -1, 1, 2, 3)), lambda: -value, lambda: value * 2,
                   lambda: sign * int(str(abs(value))[::-1]),  # its digits reversed
                   lambda: value * 10 + sign * rng.randrange(10)]  # one digit more
        if pool["int"]:
            choices.append(lambda: rng.choice(pool["int"]))
        return rng.choice(choices)()
    if type(value) is float:
        choices = [lambda: round(value + rng.choice((-2.5, -1.0, -0.5, -0.1, 0.1, 0.5, 1.0, 2.5)), 6), lambda: -value]
        if pool["float"]:
            choices.append(lambda: rng.choice(pool["float"]))
        return rng.choice(choices)()
    if type(value) is str:
        return _perturb_text(value, rng, pool)
    if type(value) is tuple:
        if not value:
            return value
        index = rng.randrange(len(value))
        return value[:index] + (perturb(value[index], rng, pool),) + value[index + 1:]
    if type(value) is list:
        return _perturb_list(value, rng, pool)
    return value


def _perturb_text(text: str, rng: random.Random, pool: dict[str, list]) -> str:
    words = text.split(" ")
    if len(words) > 1 and rng.random() < 0.5:
        kind = rng.choice(("shuffle", "drop", "repeat", "replace"))
        if kind == "shuffle":
            rng.shuffle(words)
        elif kind == "drop":
            words.pop(rng.randrange(len(words)))
        elif kind == "repeat":
            words.insert(rng.randrange(len(words) + 1), rng.choice(words))
        elif pool["word"]:
            words[rng.randrange(len(words))] = rng.choice(pool["word"])
        return " ".join(words)
    chars = list(text)
    kind = rng.choice(("shuffle", "drop", "repeat", "replace", "insert"))
    if kind == "shuffle":
        rng.shuffle(chars)
    elif kind == "drop" and chars:
        chars.pop(rng.randrange(len(chars)))
    elif kind == "repeat" and chars:
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(chars))
    elif kind == "replace" and chars and pool["char"]:
        chars[rng.randrange(len(chars))] = rng.choice(pool["char"])
    elif kind == "insert" and pool["char"]:
        chars.insert(rng.randrange(len(chars) + 1), rng.choice(pool["char"]))
    return "".join(chars)


def _perturb_list(items: list, rng: random.Random, pool: dict[str, list]) -> list:
    items = copy.deepcopy(items)
    kind = rng.choice(("shuffle", "drop", "repeat", "insert", "change", "change"))
    if kind == "shuffle":
        rng.shuffle(items)
    elif kind == "drop" and items:
        items.pop(rng.randrange(len(items)))
    elif kind == "repeat" and items:
        items.insert(rng.randrange(len(items) + 1), copy.deepcopy(rng.choice(items)))
    elif kind == "insert" and pool["element"]:
        items.insert(rng.randrange(len(items) + 1), copy.deepcopy(rng.choice(pool["element"])))
    elif items:
        for _ in range(rng.randint(1, 3)):
            index = rng.randrange(len(items))
            items[index] = perturb(items[index], rng, pool)
    return items


def supplementary_calls(task_id: str, supplement: Supplement, solution: Callable,
                        recorded: Sequence[Call]) -> list[tuple[Call, Any]]:
    """``[(call, canonical result)]``: ``supplement.count`` inputs derived from the ``recorded``
    calls (see the module docstring), new, inside the precondition, each with the canonical
    ``solution``'s plain result."""
    rng = random.Random(SEED.format(task_id=task_id))
    pool = _pool(recorded)
    seen = {call.fingerprint() for call in recorded}
    by_result: dict[str, list[tuple[Call, Any]]] = {}
    # a random walk: each accepted input may be perturbed again, so inputs reach past the recorded ones
    sources = [call for call in recorded if not call.kwargs and supplement.admits(*call.args)]
    for _ in range(supplement.count * ATTEMPTS_PER_INPUT if sources else 0):
        args = list(copy.deepcopy(rng.choice(sources).args))
        for _ in range(rng.randint(1, 3)):
            position = rng.randrange(len(args))
            args[position] = perturb(args[position], rng, pool)
        call = Call(tuple(args))
        try:
            fingerprint = call.fingerprint()
        except plain_data.NotPlainData:
            continue
        if fingerprint in seen or not supplement.admits(*args):
            continue
        seen.add(fingerprint)
        try:
            value = plain_data.decode(plain_data.encode(solution(*copy.deepcopy(args))))
        except Exception:  # noqa: BLE001 - an input the canonical solution cannot answer is not used
            continue
        sources.append(call)
        by_result.setdefault(repr(value), []).append((call, value))
        if len(sources) >= supplement.count * 8:
            break
    # each answer in turn, the groups with the smallest inputs first; within a group the smallest
    # input and one from anywhere in the walk alternately (small inputs hold the boundaries: n = 4,
    # one element, a pair; the rest of the walk holds what lies further from the recorded inputs)
    def size(item: tuple[Call, Any]) -> int:
        return len(item[0].fingerprint())

    groups = []
    for group in by_result.values():
        rest, ordered = sorted(group, key=size), []
        while rest:
            ordered.append(rest.pop(0) if len(ordered) % 2 == 0 else rest.pop(rng.randrange(len(rest))))
        groups.append(ordered)
    groups.sort(key=lambda group: (size(group[0]), group[0][0].fingerprint()))
    chosen: list[tuple[Call, Any]] = []
    while len(chosen) < supplement.count and any(groups):
        for group in groups:
            if group and len(chosen) < supplement.count:
                chosen.append(group.pop(0))
    return chosen
