"""Batch scoring in the Domain contract: ``Domain.safe_score_many`` maps ``score`` by default, calls
a domain's own ``score_many`` once per batch, checks what comes back, and the code domain's batch
runs in its sandbox pool (in parallel)."""

from __future__ import annotations

import math
import os
import shutil
import time

import pytest

from domains import Domain, DomainError, ScoringError, get_registry

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (`make install`)")


def _domain(score=None, score_many=None, name: str = "batchy") -> Domain:
    return Domain(name=name, owner="t@example.com", description="batch scoring test domain",
                  samples=lambda split, n, seed: [], score=score or (lambda c, s: 0.0), score_many=score_many)


def _samples(n: int) -> list[dict]:
    return [{"id": f"s{i}", "prompt": "p", "answer": str(i)} for i in range(n)]


def test_the_default_maps_score_over_the_batch_in_order():
    calls = []

    def score(completion, sample):
        calls.append((completion, sample["id"]))
        return {"right": 1.0, "wrong": 0.0, "big": 7, "low": -2.5, "half": 0.5}[completion]

    domain = _domain(score)
    samples = _samples(5)
    completions = ["wrong", "right", "big", "half", "low"]
    assert domain.safe_score_many(completions, samples) == [0.0, 1.0, 1.0, 0.5, 0.0]  # clamped like safe_score
    assert calls == list(zip(completions, ["s0", "s1", "s2", "s3", "s4"]))
    assert domain.safe_score_many([], []) == [] and len(calls) == 5


def test_a_domains_score_many_is_called_once_per_batch_and_score_not_at_all():
    batches = []

    def score_many(completions, samples):
        batches.append((list(completions), [s["id"] for s in samples]))
        return [float(len(c) % 2) for c in completions]

    domain = _domain(score=lambda c, s: pytest.fail("score must not be called when score_many is given"),
                     score_many=score_many)
    assert domain.safe_score_many(["a", "bb", "ccc"], _samples(3)) == [1.0, 0.0, 1.0]
    assert batches == [(["a", "bb", "ccc"], ["s0", "s1", "s2"])]


@pytest.mark.parametrize("returned, message", [
    ([1.0, 0.0], r"domain 'batchy': score_many returned 2 scores for 3 samples"),
    ([1.0, 0.0, 0.0, 1.0], r"domain 'batchy': score_many returned 4 scores for 3 samples"),
    ([1.0, "yes", 0.0], r"domain 'batchy': score_many returned 'yes' for sample 's1'"),
    ([1.0, 0.0, math.nan], r"domain 'batchy': score_many returned nan for sample 's2'"),
    ([True, 0.0, 0.0], r"domain 'batchy': score_many returned True for sample 's0'"),
    ([None, 0.0, 0.0], r"domain 'batchy': score_many returned None for sample 's0'"),
])
def test_score_many_results_that_break_the_contract_raise_naming_the_domain(returned, message):
    domain = _domain(score_many=lambda completions, samples: returned)
    with pytest.raises(ScoringError, match=message) as caught:
        domain.safe_score_many(["a", "b", "c"], _samples(3))
    assert isinstance(caught.value, DomainError) and caught.value.domain == "batchy"


def test_scorer_failures_name_the_domain_and_the_sample_and_keep_the_cause():
    def score(completion, sample):
        if sample["id"] == "s1":
            raise ZeroDivisionError("boom")
        return 1.0

    named = r"domain 'batchy': score raised on sample 's1': ZeroDivisionError: boom"
    with pytest.raises(ScoringError, match=named) as one:
        _domain(score).safe_score_many(["a", "b", "c"], _samples(3))
    assert one.value.sample_ids == ("s1",) and isinstance(one.value.__cause__, ZeroDivisionError)
    with pytest.raises(ScoringError, match=r"score returned 'yes' for sample 's0'"):
        _domain(lambda c, s: "yes").safe_score_many(["a"], _samples(1))

    def broken_batch(completions, samples):
        raise RuntimeError("pool died")

    with pytest.raises(ScoringError, match=r"domain 'batchy': score_many raised on a batch of 3 samples "
                                           r"\('s0', 's1', 's2'\): RuntimeError: pool died") as batch:
        _domain(score_many=broken_batch).safe_score_many(["a", "b", "c"], _samples(3))
    assert batch.value.sample_ids == ("s0", "s1", "s2")


def test_a_batch_needs_one_completion_per_sample_and_score_many_must_be_callable():
    with pytest.raises(DomainError, match=r"domain 'batchy': 2 completions for 3 samples"):
        _domain().safe_score_many(["a", "b"], _samples(3))
    with pytest.raises(DomainError, match=r"domain 'batchy': score_many must be a callable or None, got str"):
        _domain(score_many="not callable")


@needs_bwrap
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="parallelism needs at least 2 CPUs")
def test_the_code_domain_scores_a_batch_in_parallel_in_its_sandbox_pool():
    """4 completions that each sleep 1 s inside the sandbox: one at a time that is 4x the time of
    one; through the registered domain's batch path (a pool of one worker per CPU) it is about
    4 / workers of it. The time of one is measured in the same test, so load slows both alike."""
    from domains.builtin import code

    domain = get_registry().get("code")
    sample = next(s for s in map(code.to_sample, code.problems()) if s["metadata"]["task_id"] == "HumanEval/2")
    nap = "\nimport time\ntime.sleep(1.0)\n"  # once, when the program loads
    passing = sample["metadata"]["code_prompt"] + sample["answer"] + nap
    failing = sample["metadata"]["code_prompt"] + "    return number\n" + nap
    start = time.perf_counter()
    assert domain.safe_score_many([passing], [sample]) == [1.0]
    one = time.perf_counter() - start
    start = time.perf_counter()
    scores = domain.safe_score_many([passing, failing, passing, passing], [sample] * 4)
    elapsed = time.perf_counter() - start
    assert scores == [1.0, 0.0, 1.0, 1.0]
    assert elapsed < 0.75 * 4 * one, (f"4 sleeping completions took {elapsed:.2f} s, one took {one:.2f} s: "
                                      "the batch did not run in parallel")
