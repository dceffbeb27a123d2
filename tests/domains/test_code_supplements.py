"""Supplementary hidden inputs of the weak HumanEval problems (domains/builtin/_humaneval_supplements):
wrong programs that HumanEval's own tests pass now fail, and correct solutions written another
way (from the docstring, other algorithms) still pass: both error rates of the strengthened tests."""

from __future__ import annotations

import shutil

import pytest

from domains.builtin import _humaneval_checks as checks
from domains.builtin import _humaneval_supplements as supplements
from domains.builtin import code

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (`make install`)")


def fenced(source: str) -> str:
    return f"```python\n{source.strip()}\n```\n"


# Independent correct solutions, at least two per strengthened problem, none the canonical algorithm.
CORRECT = {
    "HumanEval/10": [
        "def make_palindrome(string):\n    for i in range(len(string) + 1):\n        candidate = string + string[:i][::-1]\n"
        "        if candidate == candidate[::-1]:\n            return candidate",
        "def make_palindrome(string):\n    n = len(string)\n    k = next((k for k in range(n) if string[k:] == string[k:][::-1]), n)\n"
        "    return string + string[:k][::-1]",
    ],
    "HumanEval/43": [
        "def pairs_sum_to_zero(l):\n    seen = set()\n    for x in l:\n        if -x in seen:\n            return True\n"
        "        seen.add(x)\n    return False",
        "from collections import Counter\n\ndef pairs_sum_to_zero(l):\n    c = Counter(l)\n"
        "    return any((x != 0 and c[-x] > 0) or (x == 0 and c[0] > 1) for x in c)",
    ],
    "HumanEval/46": [
        "def fib4(n):\n    a, b, c, d = 0, 0, 2, 0\n    for _ in range(n):\n        a, b, c, d = b, c, d, a + b + c + d\n"
        "    return a",
        "def fib4(n):\n    seq = [0, 0, 2, 0]\n    while len(seq) <= n:\n        seq.append(sum(seq[-4:]))\n    return seq[n]",
    ],
    "HumanEval/85": [
        "def add(lst):\n    return sum(x for x in lst[1::2] if x % 2 == 0)",
        "def add(lst):\n    total = 0\n    for i, x in enumerate(lst):\n        if i % 2 == 1 and x % 2 == 0:\n"
        "            total += x\n    return total",
    ],
    "HumanEval/108": [
        "def count_nums(arr):\n    def signed(x):\n        d = [int(c) for c in str(abs(x))]\n        if x < 0:\n"
        "            d[0] = -d[0]\n        return sum(d)\n    return sum(1 for x in arr if signed(x) > 0)",
        "def count_nums(arr):\n    count = 0\n    for x in arr:\n        m, digits = abs(x), []\n        while m:\n"
        "            m, r = divmod(m, 10)\n            digits.append(r)\n        if x < 0:\n            digits[-1] = -digits[-1]\n"
        "        count += sum(digits) > 0\n    return count",
    ],
    "HumanEval/19": [
        "def sort_numbers(numbers):\n    words = numbers.split()\n"
        "    order = ['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine']\n"
        "    return ' '.join(w for d in order for w in words if w == d)",
        "def sort_numbers(numbers):\n    names = 'zero one two three four five six seven eight nine'.split()\n"
        "    counts = [0] * 10\n    for w in numbers.split():\n        counts[names.index(w)] += 1\n"
        "    return ' '.join(' '.join([names[d]] * c) for d, c in enumerate(counts) if c)",
    ],
    "HumanEval/20": [
        "def find_closest_elements(numbers):\n    s = sorted(numbers)\n"
        "    i = min(range(len(s) - 1), key=lambda i: s[i + 1] - s[i])\n    return (s[i], s[i + 1])",
        "from itertools import combinations\n\ndef find_closest_elements(numbers):\n"
        "    a, b = min(combinations(numbers, 2), key=lambda p: abs(p[0] - p[1]))\n    return (min(a, b), max(a, b))",
    ],
    "HumanEval/34": [
        "def unique(l):\n    out = []\n    for x in sorted(l):\n        if not out or out[-1] != x:\n"
        "            out.append(x)\n    return out",
        "def unique(l):\n    return sorted(dict.fromkeys(l))",
    ],
    "HumanEval/40": [
        "def triples_sum_to_zero(l):\n    s = sorted(l)\n    for i in range(len(s) - 2):\n        lo, hi = i + 1, len(s) - 1\n"
        "        while lo < hi:\n            total = s[i] + s[lo] + s[hi]\n            if total == 0:\n                return True\n"
        "            if total < 0:\n                lo += 1\n            else:\n                hi -= 1\n    return False",
        "from itertools import combinations\n\ndef triples_sum_to_zero(l):\n"
        "    return any(a + b + c == 0 for a, b, c in combinations(l, 3))",
        "from collections import Counter\n\ndef triples_sum_to_zero(l):\n    count = Counter(l)\n    items = list(l)\n"
        "    for i in range(len(items)):\n        for j in range(i + 1, len(items)):\n            need = -(items[i] + items[j])\n"
        "            used = Counter([items[i], items[j]])\n            if count[need] > used[need]:\n                return True\n"
        "    return False",
    ],
    "HumanEval/54": [
        "def same_chars(s0, s1):\n    return sorted(set(s0)) == sorted(set(s1))",
        "def same_chars(s0, s1):\n    return all(c in s1 for c in s0) and all(c in s0 for c in s1)",
    ],
    "HumanEval/59": [
        "def largest_prime_factor(n):\n    d, largest = 2, 1\n    while d * d <= n:\n        while n % d == 0:\n"
        "            largest, n = d, n // d\n        d += 1\n    return n if n > 1 else largest",
        "def largest_prime_factor(n):\n    for p in range(n // 2, 1, -1):\n"
        "        if n % p == 0 and all(p % q for q in range(2, int(p ** 0.5) + 1)):\n            return p\n    return 1",
    ],
    "HumanEval/127": [
        "def intersection(interval1, interval2):\n    lo, hi = max(interval1[0], interval2[0]), min(interval1[1], interval2[1])\n"
        "    n = hi - lo\n    return 'YES' if n > 1 and all(n % d for d in range(2, int(n ** 0.5) + 1)) else 'NO'",
        "def intersection(interval1, interval2):\n    n = min(interval1[1], interval2[1]) - max(interval1[0], interval2[0])\n"
        "    if n < 2:\n        return 'NO'\n    sieve = [True] * (n + 1)\n    for p in range(2, n + 1):\n"
        "        if sieve[p]:\n            for q in range(p * p, n + 1, p):\n                sieve[q] = False\n"
        "    return 'YES' if sieve[n] else 'NO'",
    ],
}

# Wrong programs the problem's own test passed (found by mutation testing): each must fail now.
WRONG = {
    "HumanEval/10": "def make_palindrome(string):\n    if not string:\n        return ''\n    b = 0\n"
                    "    while not is_palindrome(string[b:]):\n        b -= 1\n    return string + string[:b][::-1]",
    "HumanEval/43": "def pairs_sum_to_zero(l):\n    for i, x in enumerate(l):\n        for j in range(i + 2, len(l)):\n"
                    "            if x + l[j] == 0:\n                return True\n    return False",
    "HumanEval/46": "def fib4(n):\n    results = [0, 0, 2, 0]\n    if n <= 4:\n        return results[n]\n"
                    "    for _ in range(4, n + 1):\n        results.append(sum(results[-4:]))\n        results.pop(0)\n"
                    "    return results[-1]",
    "HumanEval/85": "def add(lst):\n    return sum([lst[i] for i in range(1, len(lst) + 1, 2) if lst[i] % 2 == 0])",
    "HumanEval/108": "def count_nums(arr):\n    def digits_sum(n):\n        neg = 1\n        if n < 0:\n"
                     "            n, neg = -1 * n, 0\n        d = [int(i) for i in str(n)]\n        d[0] = d[0] * neg\n"
                     "        return sum(d)\n    return len([x for x in arr if digits_sum(x) > 0])",
    "HumanEval/34": "def unique(l):\n    if l == [5, 3, 5, 2, 3, 3, 9, 0, 123]:\n        return [0, 2, 3, 5, 9, 123]\n    return []",
    "HumanEval/40": "def triples_sum_to_zero(l):\n    table = {(1, 3, -2, 1): True, (2, 4, -5, 3, 9, 7): True}\n"
                    "    return table.get(tuple(l), False)",
    "HumanEval/54": "def same_chars(s0, s1):\n    table = {('eabcdzzzz', 'dddzzzzzzzddeddabc'): True, ('abcd', 'dddddddabc'): True,\n"
                    "             ('dddddddabc', 'abcd'): True}\n    return table.get((s0, s1), False)",
    "HumanEval/19": "def sort_numbers(numbers):\n    value_map = {'zero': 0, 'one': 1, 'two': 2, 'three': 3, 'four': 4, 'five': 5,\n"
                    "                 'six': 7, 'seven': 7, 'eight': 8, 'nine': 9}\n"
                    "    return ' '.join(sorted(numbers.split(), key=lambda x: value_map[x]))",
    "HumanEval/59": "def largest_prime_factor(n):\n    is_prime = lambda k: k > 2 and all(k % i for i in range(2, k))\n"
                    "    return max([j for j in range(2, n + 1) if n % j == 0 and is_prime(j)] or [1])",
    "HumanEval/127": "def intersection(interval1, interval2):\n    n = min(interval1[1], interval2[1]) - max(interval1[0], interval2[0])\n"
                     "    return 'YES' if n > 1 else 'NO'",
    "HumanEval/40+": "def triples_sum_to_zero(l):\n    for i in range(len(l)):\n        for j in range(i + 1, len(l)):\n"
                     "            for k in range(j - 1, len(l)):\n                if l[i] + l[j] + l[k] == 0:\n"
                     "                    return True\n    return False",
    # the first pair's distance taken as |a + b|: wrong when the first two nearly cancel out
    "HumanEval/20": "def find_closest_elements(numbers):\n    best, pair = None, None\n"
                    "    for i, a in enumerate(numbers):\n        for j, b in enumerate(numbers):\n"
                    "            if i != j:\n                d = abs(a + b) if best is None else abs(a - b)\n"
                    "                if best is None or d < best:\n                    best, pair = d, tuple(sorted([a, b]))\n"
                    "    return pair",
}


@pytest.fixture(scope="module")
def by_task():
    return {s["metadata"]["task_id"]: s for s in map(code.to_sample, code.problems())}


@pytest.fixture
def without_supplements(monkeypatch):
    """HumanEval's own tests alone, as before the supplements (recordings made afresh)."""
    saved = dict(checks._RECORDINGS)
    checks._RECORDINGS.clear()
    monkeypatch.setattr(checks, "SUPPLEMENTS", {})
    yield
    checks._RECORDINGS.clear()
    checks._RECORDINGS.update(saved)


def test_every_strengthened_problem_has_independent_correct_solutions_and_a_wrong_one():
    assert set(CORRECT) == set(supplements.SUPPLEMENTS)
    assert all(len(found) >= 2 for found in CORRECT.values())
    assert {task.rstrip("+") for task in WRONG} == set(supplements.SUPPLEMENTS)


def test_supplementary_inputs_are_new_inside_the_precondition_and_reproducible(by_task):
    for task_id, supplement in supplements.SUPPLEMENTS.items():
        recorded = checks.recording(code._problem_for(by_task[task_id]))
        extra = recorded.calls[recorded.check_calls:]
        assert 0 < len(extra) <= supplement.count and len(extra) >= min(supplement.count, 24), task_id
        assert all(supplement.admits(*call.args) for call in extra), task_id
        fingerprints = recorded.fingerprints
        assert len(set(fingerprints)) == len(fingerprints), f"{task_id}: an input repeats a recorded one"
        # derived from the task id and the recorded inputs only: the same inputs in every recording
        assert checks._record(code._problem_for(by_task[task_id])).fingerprints == fingerprints, task_id
        results = {repr(o.value) for o in recorded.outcomes[recorded.check_calls:]}
        assert len(results) >= 2, f"{task_id}: every supplementary input has one answer, which a constant would pass"


@needs_bwrap
def test_independent_correct_solutions_still_pass(by_task):
    pairs = [(fenced(source), by_task[task]) for task, sources in CORRECT.items() for source in sources]
    scores = code.score_many([c for c, _ in pairs], [s for _, s in pairs], workers=2)
    refused = [(s["metadata"]["task_id"], c) for (c, s), score in zip(pairs, scores) if score != 1.0]
    assert not refused, f"correct solutions refused: {refused}"
    canonical = [by_task[task] for task in CORRECT]
    assert code.score_many([s["answer"] for s in canonical], canonical, workers=2) == [1.0] * len(canonical)


@needs_bwrap
def test_wrong_programs_the_own_tests_passed_now_fail(by_task):
    samples = [by_task[task.rstrip("+")] for task in WRONG]
    assert code.score_many([fenced(w) for w in WRONG.values()], samples, workers=2) == [0.0] * len(WRONG)


@needs_bwrap
def test_the_same_wrong_programs_passed_humaneval_s_own_tests(by_task, without_supplements):
    """The gap was real: without the supplements, HumanEval's tests pay every one of them (so the
    test above fails on the code before the supplements), and the correct solutions pass too."""
    samples = [by_task[task.rstrip("+")] for task in WRONG]
    assert code.score_many([fenced(w) for w in WRONG.values()], samples, workers=2) == [1.0] * len(WRONG)
    assert checks.recording(code._problem_for(by_task["HumanEval/34"])).check_calls == \
        len(checks.recording(code._problem_for(by_task["HumanEval/34"])).calls) == 1
