"""The environment self-test catches each way a domain can lie: a scorer that accepts wrong
answers or rejects right ones, a generator that is not deterministic, splits that overlap, a
scorer that raises on junk; and it passes honest domains, tiny answer spaces included."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from domains import Domain
from quality.domain_check import CHECK_NAMES, check_domain, corruptions_of, fuzz_strings
from tests.conftest import run_cli


def _samples(split, n, seed):
    base = 0 if split == "train" else 1_000_000
    for i in range(n):
        k = base + seed * 1000 + i
        yield {"id": f"add-{k}", "prompt": f"What is {k} plus 17?", "answer": str(k + 17)}


def _score(completion, sample):
    words = completion.strip().split()
    return 1.0 if words and words[-1] == sample["answer"] else 0.0


def make(**overrides) -> Domain:
    fields = dict(name="toy_add", owner="qa@assay.dev", description="toy", samples=_samples, score=_score)
    fields.update(overrides)
    return Domain(**fields)


def failed_checks(result) -> set[str]:
    return {name for name, check in result["checks"].items() if not check["passed"]}


def test_an_honest_domain_passes_every_check():
    result = check_domain(make(), n=10)
    assert result["domain"] == "toy_add" and result["passed"] is True
    assert set(result["checks"]) == set(CHECK_NAMES)
    assert all(c["detail"] for c in result["checks"].values())
    json.dumps(result)


def test_a_scorer_that_accepts_anything_fails_corruptions():
    result = check_domain(make(score=lambda c, s: 1.0), n=10)
    # and every reward hack is paid, which the attack check names
    assert failed_checks(result) == {"corruptions_score_less", "reward_attacks"}
    assert "empty answer scored 1.0" in result["checks"]["corruptions_score_less"]["detail"]
    assert "empty_or_whitespace" in result["checks"]["reward_attacks"]["detail"]


def test_a_scorer_that_rejects_the_reference_fails_reference():
    result = check_domain(make(score=lambda c, s: 0.0), n=10)
    assert "reference_scores_1" in failed_checks(result)


def test_a_batch_scorer_that_disagrees_with_score_fails_reference():
    """Training and sweeps call score_many: one that differs from score (here: it passes the empty
    answer) must not hide behind an honest score."""
    def lenient_batch(completions, samples):
        return [1.0 if not c else _score(c, s) for c, s in zip(completions, samples)]

    assert check_domain(make(score_many=lambda cs, ss: [_score(c, s) for c, s in zip(cs, ss)]), n=5)["passed"]
    result = check_domain(make(score_many=lenient_batch), n=5)
    # the attacks score in batches as the trainer does, so they find the paid empty answer too
    assert failed_checks(result) == {"reference_scores_1", "reward_attacks"}
    assert "score_many disagrees with score on 10 of 20 completions" in result["checks"]["reference_scores_1"]["detail"]
    broken = check_domain(make(score_many=lambda cs, ss: [1.0]), n=5)["checks"]["reference_scores_1"]
    assert not broken["passed"] and "score_many returned 1 scores for 20 samples" in broken["detail"]


def test_a_scorer_that_needs_python_objects_in_metadata_fails_after_the_lake_round_trip():
    def samples(split, n, seed):
        for row in _samples(split, n, seed):
            yield {**row, "metadata": {"grid": (1, 2)}}

    def score(completion, sample):
        return _score(completion, sample) if sample["metadata"]["grid"] == (1, 2) else 0.0

    result = check_domain(make(samples=samples, score=score), n=5)
    assert "after lake round trip" in result["checks"]["reference_scores_1"]["detail"]


def test_nondeterministic_samples_fail_determinism():
    counter = itertools.count()

    def samples(split, n, seed):
        offset = next(counter) * 100
        for row in _samples(split, n, seed + offset):
            yield row

    result = check_domain(make(samples=samples), n=5)
    assert "deterministic" in failed_checks(result)


def test_overlapping_splits_fail_disjointness_by_id_and_by_prompt():
    def same_ids(split, n, seed):
        yield from _samples("train", n, 1)

    result = check_domain(make(samples=same_ids), n=5)
    assert "splits_disjoint" in failed_checks(result)
    assert "ids in both splits" in result["checks"]["splits_disjoint"]["detail"]

    def restated(split, n, seed):  # different ids, same prompt up to case and spacing
        for row in _samples("train", n, 1):
            prompt = row["prompt"] if split == "train" else "  " + row["prompt"].upper()
            yield {**row, "id": f"{split}-{row['id']}", "prompt": prompt}

    result = check_domain(make(samples=restated), n=5)
    assert "train prompts equal an eval prompt" in result["checks"]["splits_disjoint"]["detail"]


def test_a_scorer_that_raises_on_junk_fails_fuzz():
    def fragile(completion, sample):
        return 1.0 if int(completion) == int(sample["answer"]) else 0.0

    result = check_domain(make(score=fragile), n=5)
    assert "fuzz_never_raises" in failed_checks(result)
    assert "ValueError" in result["checks"]["fuzz_never_raises"]["detail"]


def test_a_scorer_returning_out_of_range_values_fails_fuzz():
    result = check_domain(make(score=lambda c, s: 2.0 if c == s["answer"] else -1.0), n=5)
    assert "fuzz_never_raises" in failed_checks(result)


def test_a_generator_that_raises_fails_every_check_without_raising():
    def broken(split, n, seed):
        raise RuntimeError("data file missing")
        yield  # pragma: no cover

    result = check_domain(make(samples=broken), n=5)
    assert result["passed"] is False
    assert failed_checks(result) == set(CHECK_NAMES)
    assert "data file missing" in result["checks"]["deterministic"]["detail"]


def test_a_tiny_answer_space_passes_when_wrong_answers_fail():
    def yes_no(split, n, seed):
        for row in _samples(split, n, seed):
            k = int(row["answer"])
            yield {**row, "prompt": f"Is {k} even?", "answer": "yes" if k % 2 == 0 else "no"}

    def score(completion, sample):
        return 1.0 if completion.strip().casefold() == sample["answer"] else 0.0

    assert check_domain(make(samples=yes_no, score=score), n=10)["passed"]


def test_corruptions_differ_from_the_reference():
    rng = random.Random(0)
    for answer in ["42", "-3.5", "C=3,O=2,V=1", "yes", "red cube", "x"]:
        for name, corrupted in corruptions_of(answer, ["no", "42"], rng).items():
            assert corrupted.strip().casefold() != answer.casefold(), (name, answer)
    assert corruptions_of("2280", [], rng)["perturb_numbers"][0] != "2"  # leading digit changed


def test_fuzz_covers_empty_long_and_unicode_text():
    texts = fuzz_strings(random.Random(0), "17")
    assert "" in texts and max(map(len, texts)) >= 20_000
    assert any(any(ord(ch) > 0xFFFF for ch in t) for t in texts)


@pytest.mark.parametrize("name", ["finance", "scene3d"])
def test_cli_checks_a_builtin_domain(assay_home, name):
    out = run_cli("domains", "check", name, "--json", "--samples", "8")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["domain"] == name and result["passed"] is True
    assert set(result["checks"]) == set(CHECK_NAMES)


def test_the_self_test_names_its_checks_once_and_returns_them_as_a_dataclass():
    from quality.domain_check import SCORER_CHECKS, SelfTest, run_self_test

    report = run_self_test(make(), n=5)
    assert isinstance(report, SelfTest) and list(report.checks) == list(CHECK_NAMES) == list(SCORER_CHECKS)
    assert report.passed and report.failed == []
    as_dict = check_domain(make(), n=5)  # the same checks as a dict (details hold timings: compare verdicts)
    assert report.as_dict()["domain"] == as_dict["domain"] and report.as_dict()["passed"] is as_dict["passed"] is True
    assert {name: c.as_dict()["passed"] for name, c in report.checks.items()} == \
        {name: c["passed"] for name, c in as_dict["checks"].items()}
    broken = run_self_test(make(score=lambda c, s: 0.0), n=5)
    assert "reference_scores_1" in broken.failed and broken.as_dict()["passed"] is False


def test_a_scorer_that_refuses_right_answers_in_other_forms_fails_recall():
    """The false-negative side: '1,017' or 'Answer: 1017.0' for 1017 is right, and a verifier
    comparing the last word as a string refuses it; every other check passes."""
    def exact_last_word(completion, sample):
        words = completion.replace("Answer:", " ").strip().split()
        return 1.0 if words and words[-1] == sample["answer"] else 0.0

    def asks_for_a_line(split, n, seed):  # the format the generic recall families follow
        for row in _samples(split, n, seed):
            yield {**row, "prompt": row["prompt"] + " Finish with a line 'Answer: <number>'."}

    result = check_domain(make(name="toy_exact", samples=asks_for_a_line, score=exact_last_word), n=6)
    assert failed_checks(result) == {"recall"}, result["checks"]
    assert "below the bar 0.990" in result["checks"]["recall"]["detail"]
    lax = check_domain(make(name="toy_exact", samples=asks_for_a_line, score=exact_last_word,
                            gate_thresholds={"min_recall": 0.0}), n=6)
    assert lax["passed"], lax["checks"]
