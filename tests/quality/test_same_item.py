"""duplicate / near_duplicate / contaminated follow the "same item vs sibling item" rule."""

from __future__ import annotations

import polars as pl
import pytest

from domains import Domain
from quality import detectors
from quality.normalize import content_hash
from quality.row_gates import GateContext


def _frame(rows, split="train"):
    prompts = [p for p, _ in rows]
    answers = [a for _, a in rows]
    return pl.DataFrame({"prompt": prompts, "answer": answers, "split": [split] * len(rows),
                         "content_hash": [content_hash(p, a) for p, a in rows]})


NEAR = [  # (first, restated, is_same_item)
    (("Convert 194 g to mg", "194000"), ("convert 194 G to MG!", "194000"), True),  # case + punctuation
    (("What is the capital of France? Answer with one word.", "Paris"),
     ("Answer with one word: what is the capital of France", "Paris"), True),  # word order + punctuation
    (("A train travels 120 km in 2 hours at constant speed. What is its speed in km per hour?", "60"),
     ("A train travels 120 km in 2 hours at a constant speed. What is its speed in km per hour ?", "60"), True),
    (("Convert 194 g to mg", "194000"), ("Convert 195 g to mg", "195000"), False),  # sibling: numbers
    (("What is the capital of France? Answer with one word.", "Paris"),
     ("What is the capital of Spain? Answer with one word.", "Madrid"), False),  # sibling: names
    (("Janet has 3 apples and buys 5 more. How many apples does she have now in total?", "8"),
     ("Mark has 3 apples and buys 5 more. How many apples does he have now in total?", "8"), False),
]


@pytest.mark.parametrize("first,second,same", NEAR)
def test_near_duplicate_table(first, second, same):
    flags = detectors.NearDuplicateDetector().flags(_frame([first, second])).to_list()
    assert flags == [False, same]


def test_exact_duplicate_is_duplicate_not_near_duplicate():
    frame = _frame([("Convert 194 g to mg", "194000"), ("convert 194 G  to mg", "194000")])
    assert detectors.DuplicateDetector().flags(frame).to_list() == [False, True]
    assert detectors.NearDuplicateDetector().flags(frame).to_list() == [False, False]


def test_template_siblings_are_not_flagged_at_scale():
    rows = [(f"Convert {n} g to mg", str(n * 1000)) for n in range(100, 1100)]
    rows += [(f"What is {a} plus {b}?", str(a + b)) for a, b in zip(range(1000), range(7, 1007))]
    frame = _frame(rows)
    assert detectors.NearDuplicateDetector().flags(frame).sum() == 0
    assert detectors.DuplicateDetector().flags(frame).sum() == 0


def _eval_domain(items):
    def samples(split, n, seed):
        return [{"id": f"e{i}", "prompt": p, "answer": a} for i, (p, a) in enumerate(items)][:n] if split == "eval" else []

    return Domain(name="evalsrc", owner="t@x", description="d", samples=samples,
                  score=lambda c, s: 0.0, eval_size=len(items))


LONG_ITEM = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
             "How many clips did Natalia sell altogether in April and May?")


def test_contamination_table():
    domain = _eval_domain([("Convert 194 g to mg", "194000"), (LONG_ITEM, "72")])
    ctx = GateContext(domain=domain, all_domains=[domain])
    rows = [
        ("convert 194 g to MG.", "x"),                                     # short item restated
        ("Solve this problem carefully. " + LONG_ITEM + " Show your work.", "72"),  # pasted in a longer prompt
        ("Convert 195 g to mg", "x"),                                      # sibling
        (LONG_ITEM.replace("48", "50").replace("Natalia", "Maria"), "75"),  # sibling of the long item
        ("What is the boiling point of water at sea level in Celsius?", "100"),
    ]
    assert detectors.ContaminationDetector().flags(_frame(rows), ctx).to_list() == [True, True, False, False, False]
    # eval rows are the eval items themselves: not contamination
    assert detectors.ContaminationDetector().flags(_frame(rows, split="eval"), ctx).sum() == 0


def test_reasoning_gym_items_are_almost_never_flagged():
    reasoning_gym = pytest.importorskip("reasoning_gym")
    rows = []
    for task in ("chain_sum", "basic_arithmetic", "letter_counting", "word_sorting", "number_sorting",
                 "spell_backward", "base_conversion", "gcd", "fraction_simplification", "leg_counting"):
        for entry in reasoning_gym.create_dataset(task, size=100, seed=7):
            rows.append((entry["question"], str(entry["answer"])))
    frame = _frame(rows)
    unique = frame.unique(subset=["content_hash"], keep="first", maintain_order=True)
    near = detectors.NearDuplicateDetector().flags(unique).sum()
    leak = detectors.AnswerLeakDetector().flags(unique).sum()
    pii = detectors.PiiDetector().flags(unique).sum()
    secret = detectors.SecretDetector().flags(unique).sum()
    injection = detectors.PromptInjectionDetector().flags(unique).sum()
    assert unique.height >= 900
    assert near <= 0.01 * unique.height, near
    assert leak <= 0.01 * unique.height, leak
    assert pii == 0 and secret == 0 and injection == 0
    # the model-based safety gates must not quarantine healthy procedural prompts either
    assert detectors.ToxicDetector().flags(unique).sum() <= 0.01 * unique.height
    assert detectors.HarmfulDetector().flags(unique).sum() <= 0.01 * unique.height
