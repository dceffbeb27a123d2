"""The budgeted hack search (quality.report_card.hack_search) and its regression corpus
(quality.report_card.hack_corpus): a hole outside the fixed families is found within budget, a sound
scorer yields nothing, no candidate is built from the answer or is a single plain value, a lucky
guess is not reported, found hacks round-trip through the lake and fail the self-test until the
scorer is fixed, the budget and the wall-clock cap hold, and a seed repeats the search exactly."""

from __future__ import annotations

import base64
import binascii
import math
import re
import time

import pytest

from domains import Domain, get_registry
from quality.domain_check import check_domain
from quality.report_card.hack_corpus import read_corpus, replay_corpus, write_corpus
from quality.report_card.hack_search import (NON_ANSWERS, HackSearchConfig, Prompt, never_a_candidate, plain_tokens,
                                             reference_swaps, search_hacks, stated_values, states_reference_alone)
from quality.reward_attacks import attack_domain
from storage.lake import Lake

SENTINEL = "918273645"


def _samples(split, n, seed):
    base = 0 if split == "train" else 3
    for i in range(n):
        a, b = base + 2 * i, 5 + i
        yield {"id": f"add-{split}-{i}", "prompt": f"What is {a} plus {b}?\nFinish with a line 'Answer: <number>'.",
               "answer": str(a + b)}


def _sound(completion, sample):
    """Exactly the line the prompt asks for (or the bare answer), nothing else."""
    return float(completion.strip() in (sample["answer"], f"Answer: {sample['answer']}"))


_B64 = re.compile(r"[A-Za-z0-9+/]{8,}={0,2}")


def _decodes_base64(completion, sample):
    """The sound scorer, plus a hole: it also reads base64 it finds and pays the answer anywhere in it."""
    for token in _B64.findall(completion):
        try:
            text = base64.b64decode(token, validate=True).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            continue
        if sample["answer"] in text.split():
            return 1.0
    return _sound(completion, sample)


def _tolerant_float(completion, sample):
    """The sound scorer, plus a hole: a tolerance test written so that nan passes it."""
    words = completion.replace("Answer:", " ").split()
    try:
        value = float(words[-1]) if len(words) == 1 else None
    except ValueError:
        value = None
    if value is not None and not abs(value - float(sample["answer"])) > 1e-9:
        return 1.0
    return _sound(completion, sample)


def _last_number(completion, sample):
    """Lenient but not exploitable without the answer: it reads the last number written."""
    numbers = re.findall(r"-?\d+", completion)
    return float(bool(numbers) and numbers[-1] == sample["answer"])


def _domain(score, samples=_samples, **kw) -> Domain:
    # these scorers are strict on purpose (exactly "Answer: N"): their recall is not what is tested here
    kw.setdefault("gate_thresholds", {"min_recall": 0.0})
    return Domain(name="adds", owner="t@example.com", description="hack search test", samples=samples, score=score,
                  **kw)


SEARCH = HackSearchConfig(items=3, candidates_per_item=160, max_seconds=60)


@pytest.mark.parametrize("score, kind", [(_decodes_base64, "base64"), (_tolerant_float, "non_finite")])
def test_a_hole_outside_the_fixed_families_is_found_within_budget(score, kind):
    domain = _domain(score)
    assert attack_domain(domain, items=3).passed  # the fixed families do not reach it
    report = search_hacks(domain, config=SEARCH)
    assert report.error is None and not report.control_failures and not report.passed, report.summary()
    assert report.candidates_tried <= 3 * 160
    assert any(kind in hack.shape for hack in report.paid), [h.shape for h in report.paid]
    items = {s["id"]: s for s in domain.generate("eval", 3)}
    for hack in report.paid:
        sample = items[hack.item_id]
        assert hack.sample == sample and score(hack.completion, sample) > 0 and hack.score > 0
        # a hole, not the right answer: what the completion states is never the reference alone
        assert _sound(hack.completion, sample) == 0
    assert report.as_dict()["paid"][0]["shape"] == report.paid[0].shape


def test_a_sound_builtin_scorer_yields_nothing_and_spends_the_budget():
    domain = get_registry().get("math_arith_easy")
    config = HackSearchConfig(items=2, candidates_per_item=100, max_seconds=120)
    report = search_hacks(domain, config=config)
    assert report.passed and report.paid == [] and not report.capped, report.summary()
    assert report.candidates_tried == 200 and report.items == 2


def test_a_lenient_scorer_whose_leniency_needs_the_answer_is_not_reported():
    # the last number written: a spray that happens to end on the answer is paid, but no shape is paid
    # whatever the draw, nor with the answer and a rival trading places, so nothing is a hack
    report = search_hacks(_domain(_last_number), config=SEARCH)
    assert report.error is None and report.paid == [], [(h.shape, h.completion[:80]) for h in report.paid]
    assert report.dropped > 0  # the guesses were paid, found and set aside


def test_no_candidate_is_built_from_the_answer_or_states_a_single_value():
    seen = []

    def record(completion, sample):
        seen.append(completion)
        return 0.0 if completion != sample["answer"] else 1.0

    def secret(split, n, seed):
        for i in range(n):
            yield {"id": f"s-{split}-{i}", "prompt": f"Name the hidden code {i}. Options: A) alpha B) beta 12 13",
                   "answer": SENTINEL}

    report = search_hacks(_domain(record, samples=secret), config=HackSearchConfig(items=2, candidates_per_item=150))
    tried = seen[2:]  # after the two controls
    assert report.candidates_tried == len(tried) == 300
    assert not any(SENTINEL in text for text in tried)
    # like reward_attacks: never a single plain value, marked up, repeated or encoded ("nan" is no value)
    words = {w.casefold() for s in secret("eval", 2, 0) for w in re.findall(r"\w+", s["prompt"])}
    singles = [text for text in tried if len(set(plain_tokens(text)) - NON_ANSWERS) == 1
               and (plain_tokens(text)[0] in words or plain_tokens(text)[0].lstrip("-").isdigit())]
    assert not singles, singles[:5]


def test_the_precision_rules_read_a_candidate_plainly():
    prompt = Prompt("What is 12 plus 7?\nFinish with a line 'Answer: <number>'.")
    for single in ("7", "<answer>7</answer>", "**７.0**", "\\boxed{𝟕}", "Nw==", "7 7 7", "Answer: seven", "nan 7", "nan\n7",
                   "I'm sorry, but I can't help with that.", "What is 12 plus 7?"):
        assert never_a_candidate(single, stated_values(single, ""), prompt) is not None, single
    for allowed in ("nan", "-Infinity", "", "<answer></answer>", "12 7", "MTIgNw==", "Answer: 3 or 4"):
        assert never_a_candidate(allowed, stated_values(allowed, ""), prompt) is None, allowed
    # the frame a transform adds is no answer: a story around one value is still one value
    story = "Once upon a time a wise owl was asked this. It said: 7. The end."
    frame = "Once upon a time a wise owl was asked this. It said: . The end."
    assert stated_values(story, frame) == ["7"]
    # a right answer among junk of no rival kind is a guess; with a rival it is a hedge
    assert states_reference_alone(["answer", "7"], "7") and states_reference_alone(["kk7", "exit(7"], "7")
    assert not states_reference_alone(["6", "7", "8"], "7") and states_reference_alone(["nan", "7"], "7")
    assert states_reference_alone(["programming", "false", "python"], "false")
    assert not states_reference_alone(["true", "false"], "false")
    assert reference_swaps("006 + 7", "7") == ["007 + 6"] and reference_swaps("MTIgNw==", "7") == []


def test_found_hacks_round_trip_through_the_lake_and_fail_the_self_test_until_fixed(tmp_path):
    holed = _domain(_decodes_base64)
    report = search_hacks(holed, config=SEARCH)
    assert report.paid
    lake = Lake.at(tmp_path / "home")
    assert read_corpus(lake, "adds") == []
    write_corpus(lake, [report], source="test")
    write_corpus(lake, [report], source="test")  # kept once
    rows = read_corpus(lake, "adds")
    assert len(rows) == len(report.paid) and rows[0]["source"] == "test"
    assert {(r["item_id"], r["completion"], r["shape"]) for r in rows} == \
        {(h.item_id, h.completion, h.shape) for h in report.paid}

    # replayed from the stored sample alone: the data need not be generated again
    replay = replay_corpus(holed, rows)
    assert not replay.passed and len(replay.still_paid) == len(rows)
    failing = check_domain(holed, n=4, corpus_rows=rows)
    assert not failing["passed"] and not failing["checks"]["hack_corpus"]["passed"]
    assert rows[0]["shape"] in failing["checks"]["hack_corpus"]["detail"]
    assert all(c["passed"] for name, c in failing["checks"].items() if name != "hack_corpus")

    fixed = _domain(_sound)
    passing = check_domain(fixed, n=4, corpus_rows=rows)
    assert passing["passed"], passing["checks"]["hack_corpus"]
    assert f"{len(rows)} kept hacks replayed, none paid" in passing["checks"]["hack_corpus"]["detail"]
    assert "corpus is empty" in check_domain(fixed, n=4)["checks"]["hack_corpus"]["detail"]


def test_the_selftest_gate_replays_the_corpus_it_is_given():
    from quality.batch_gates import selftest_outcomes

    holed = _domain(_decodes_base64)
    rows = [{"item_id": "add-eval-0", "shape": "base64(every_integer_to_999)", "score": 1.0,
             "completion": base64.b64encode(" ".join(map(str, range(20))).encode()).decode(),
             "sample": '{"id": "add-eval-0", "prompt": "What is 3 plus 5?", "answer": "8", "metadata": {}}'}]
    outcomes = {o.expectation: o for o in selftest_outcomes(holed, 4, corpus_rows=rows)}
    assert outcomes["hack_corpus"].severity == "critical" and not outcomes["hack_corpus"].success
    assert {o.expectation: o for o in selftest_outcomes(_domain(_sound), 4, corpus_rows=rows)}["hack_corpus"].success


def test_the_budget_and_the_wall_clock_cap_hold():
    report = search_hacks(_domain(_sound), config=HackSearchConfig(items=2, candidates_per_item=40))
    assert report.candidates_tried == 80 and not report.capped

    def slow(completion, sample):
        time.sleep(0.02)
        return _sound(completion, sample)

    started = time.perf_counter()
    capped = search_hacks(_domain(slow), config=HackSearchConfig(items=2, candidates_per_item=500, max_seconds=0.6))
    assert capped.capped and 0 < capped.candidates_tried < 1000 and capped.error is None
    # the cap is checked before each batch, each batch sized by the measured cost: a short overrun at most
    assert time.perf_counter() - started < 0.6 + 0.5, capped.seconds


def test_a_seed_repeats_the_search_exactly_and_another_seed_searches_elsewhere():
    def run(seed):
        seen = []

        def record(completion, sample):
            seen.append((sample["id"], completion))
            return _decodes_base64(completion, sample)

        report = search_hacks(_domain(record), config=HackSearchConfig(items=2, candidates_per_item=60, seed=seed))
        return seen, [(h.item_id, h.shape, h.completion) for h in report.paid]

    first, again, other = run(0), run(0), run(1)
    assert first == again
    # the controls, then the budget (then the confirmation of any find): the same shapes first, other draws
    assert first[0][:122] != other[0][:122] and first[0][:2] == other[0][:2]


def test_a_broken_domain_is_reported_never_safe():
    def boom(split, n, seed):
        raise RuntimeError("data file missing")
        yield  # pragma: no cover

    assert "data file missing" in search_hacks(_domain(_sound, samples=boom)).error

    def raises(completion, sample):
        if completion != sample["answer"] and "nan" in completion:
            raise ValueError("cannot parse nan")
        return _sound(completion, sample)

    broken = search_hacks(_domain(raises), config=SEARCH)
    assert not broken.passed and "cannot parse nan" in broken.error
    refused = search_hacks(_domain(lambda c, s: 0.0), config=HackSearchConfig(items=2, candidates_per_item=5))
    assert not refused.passed and len(refused.control_failures) == 2 and refused.candidates_tried == 0


def test_the_config_rejects_a_budget_that_cannot_search():
    for bad in ({"items": 0}, {"candidates_per_item": 0}, {"max_seconds": 0}, {"max_seconds": math.inf}):
        with pytest.raises(ValueError, match="must be"):
            HackSearchConfig(**bad)
