"""Recall probes (quality.report_card.recall): correct answers in the forms a prompt allows are built
from the reference, only where they apply; a verifier that refuses them is caught with the family
and the completion named; a sound one, and the built-in domains, pay every one of them."""

from __future__ import annotations

import re

import pytest

from domains import Domain, load_registry
from domains.answers import declared_answer, equivalent_answers
from quality.report_card.recall import (ANSWER_LINE, FREE_FORM, TAGGED, asked_format, equivalence_families,
                                        measure_recall, wilson_interval)

TAG_HINT = "\n\nGive your final answer inside <answer></answer> tags."
LINE_HINT = "\nFinish with a line 'Answer: <number>'."


def _item(prompt: str, answer: str, i: int = 0) -> dict:
    return {"id": f"item-{i}", "prompt": prompt, "answer": answer, "metadata": {}}


ITEMS = [_item("What is 1000 + 170?" + TAG_HINT, "1170", 0), _item("Is 7 prime? Answer Yes or No." + TAG_HINT, "Yes", 1),
         _item("Sort 20, 19." + TAG_HINT, "[19, 20]", 2), _item("What is 1/4 as a number?" + TAG_HINT, "0.25", 3),
         _item("Spell 'cat' backward." + TAG_HINT, "tac", 4)]


def _samples(split, n, seed):
    yield from ITEMS[:n]


def _fair(completion, sample):
    """A grader that reads the declared span and accepts exact other forms of the answer."""
    span = declared_answer(completion, fallback="whole")
    return float(span is not None and (span == sample["answer"] or equivalent_answers(span, sample["answer"])))


_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


def _verbatim(completion, sample):
    """The pre-issue-41 reasoning-gym wrapper in miniature: the tag's text, compared verbatim."""
    tags = _TAG.findall(completion) or [completion]
    return float(len(tags) == 1 and tags[0].strip() == sample["answer"])


def _domain(score, name="recall_toy", **kw) -> Domain:
    return Domain(name=name, owner="t@example.com", description="recall test", samples=_samples, score=score, **kw)


def test_the_prompt_decides_the_format_of_every_form():
    assert asked_format(ITEMS[0]) == TAGGED
    assert asked_format(_item("2 + 2 =" + LINE_HINT, "4")) == ANSWER_LINE
    assert asked_format(_item("Write a function that adds two numbers.", "def f(a, b): ...")) == FREE_FORM
    assert equivalence_families(_item("Write a function.", "def f(): ...")) == {}
    for forms in equivalence_families(ITEMS[0]).values():
        assert all("<answer>" in f.lower() for f in forms), forms
    line_forms = equivalence_families(_item("2 + 998 =" + LINE_HINT, "1000"))
    assert all(re.search(r"answer\s*:", f, re.I) for forms in line_forms.values() for f in forms)
    assert "label_and_tag" not in line_forms  # tags where the prompt asks for a line would not follow it


def test_families_apply_only_where_they_are_correct():
    number = equivalence_families(ITEMS[0])
    assert number["thousands_separators"] == ["<answer>1,170</answer>"]
    assert number["integer_as_decimal"] == ["<answer>1170.0</answer>"]
    assert "<answer>$1170$</answer>" in number["math_wrapper"] and "truth_word_case" not in number
    word = equivalence_families(ITEMS[4])
    assert not {"thousands_separators", "integer_as_decimal", "math_wrapper", "fraction_decimal"} & set(word)
    assert equivalence_families(ITEMS[1])["truth_word_case"] == ["<answer>YES</answer>", "<answer>yes</answer>"]
    assert equivalence_families(ITEMS[2])["list_spacing"] == ["<answer>[19,20]</answer>"]
    assert equivalence_families(ITEMS[3])["fraction_decimal"] == ["<answer>1/4</answer>"]
    # the prompt's own rules win: a fraction asked for stays one, digits in another base are not decimal
    assert "fraction_decimal" not in equivalence_families(_item("Give a reduced fraction." + TAG_HINT, "21/40"))
    assert "fraction_decimal" not in equivalence_families(_item("Round to 2 decimals." + TAG_HINT, "0.25"))
    binary = equivalence_families(_item("Convert 13 to base-2." + TAG_HINT, "1101"))
    assert "thousands_separators" not in binary and "integer_as_decimal" not in binary
    spaced = equivalence_families(_item("Answer as a comma-separated list without spaces." + TAG_HINT, "A,B,C"))
    assert "list_spacing" not in spaced
    assert equivalence_families(_item("Sort them." + TAG_HINT, "a, b, c"))["list_spacing"] == ["<answer>a,b,c</answer>"]
    options = equivalence_families(_item("Pick one:\nA) red\nB) blue" + TAG_HINT, "B"))
    assert options["option_letter_text"] == ["<answer>B) blue</answer>", "<answer>(B) blue</answer>"]


def test_a_restatement_quotes_the_question_not_the_format_hint():
    forms = equivalence_families(_item("Is the cube above the cone?\nAnswer yes or no. "
                                       "Finish with a line 'Answer: <your answer>'.", "no"))["restatement_before"]
    assert forms[0] == "The question: Is the cube above the cone?\nAnswer: no"


def test_a_verbatim_verifier_is_caught_with_the_family_and_completion_named():
    report = measure_recall(_domain(_verbatim), items=5)
    assert report.items == 5 and report.error is None and not report.control_failures
    assert report.recall is not None and report.recall < 0.8
    low, high = report.interval
    assert low <= report.recall <= high
    missed = {m["family"] for m in report.misses}
    assert {"math_wrapper", "bold_markers", "integer_as_decimal", "list_spacing", "truth_word_case"} <= missed
    assert all(m["score"] < 1.0 and m["completion"] and m["item"].startswith("item-") for m in report.misses)
    worst = next(f for f in report.families if f.family == report.worst_family)
    assert worst.paid == 0 and worst.example_miss and worst.example_item
    as_dict = report.as_dict()
    assert as_dict["recall"] == report.recall and as_dict["worst_family"] == report.worst_family


def test_a_fair_verifier_pays_every_generic_form():
    report = measure_recall(_domain(_fair), items=5)
    assert report.candidates > 40 and report.paid == report.candidates, report.misses
    assert report.recall == 1.0 and report.worst_family is None  # nothing refused: no family to point at


def test_items_whose_reference_fails_are_left_out_and_listed():
    def refuses_tac(completion, sample):
        return 0.0 if sample["answer"] == "tac" else _fair(completion, sample)

    report = measure_recall(_domain(refuses_tac), items=5)
    assert report.items == 4 and report.control_failures == ["item-4 scored 0.000"]
    assert all(m["item"] != "item-4" for m in report.misses) and report.recall == 1.0


def test_the_domains_own_equivalents_are_scored_beside_the_generic_families():
    def unordered(completion, sample):  # "[19, 20]" is a set here: any order is right
        span = declared_answer(completion, fallback="whole") or ""
        if sample["answer"].startswith("["):
            return float(sorted(re.findall(r"\d+", span)) == sorted(re.findall(r"\d+", sample["answer"])))
        return _fair(completion, sample)

    def equivalents(sample):
        if sample["answer"] != "[19, 20]":
            return {}
        return {"another_order": ["<answer>[20, 19]</answer>"], "list_spacing": ["<answer>[20,19]</answer>"]}

    report = measure_recall(_domain(unordered, equivalents=equivalents), items=5)
    tried = {f.family: f.tried for f in report.families}
    assert tried["another_order"] == 1 and tried["domain:list_spacing"] == 1 and tried["list_spacing"] == 1
    assert report.recall == 1.0
    strict = measure_recall(_domain(_fair, equivalents=equivalents), items=5)
    assert {m["family"] for m in strict.misses} == {"another_order", "domain:list_spacing"}


def test_nothing_tried_is_no_recall_and_a_raising_scorer_is_an_error():
    free = [_item("Write a poem.", "roses", 0)]
    report = measure_recall(_domain(_fair), samples=free)
    assert report.candidates == 0 and report.recall is None and report.interval is None and report.worst_family is None

    def raises(completion, sample):
        raise RuntimeError("verifier crashed")

    broken = measure_recall(_domain(raises), items=2)
    assert broken.error and "verifier crashed" in broken.error and broken.recall is None


def test_a_domain_with_no_verifier_is_skipped_with_the_reason():
    from domains.base import LearnedReward

    domain = Domain(name="open_toy", owner="t@example.com", description="d", samples=_samples, score=None,
                    learned_reward=LearnedReward())
    report = measure_recall(domain, items=2)
    assert report.skipped and "no verifier" in report.skipped and report.recall is None


def test_wilson_interval_known_values():
    low, high = wilson_interval(95, 100)
    assert low == pytest.approx(0.8882, abs=1e-3) and high == pytest.approx(0.9785, abs=1e-3)
    assert wilson_interval(0, 0) is None
    assert wilson_interval(10, 10)[1] == 1.0 and wilson_interval(0, 10)[0] == 0.0


# Domains whose verifiers refused these forms before issue 41 (the declared span judged verbatim,
# reasoning-gym's exact compares wrapped unchanged); every form must be paid now.
BUILT_INS = ("math_arith_easy", "gsm", "logic", "strings", "rg_lcm", "rg_gsm_symbolic", "rg_list_functions",
             "rg_course_schedule", "rg_fraction_simplification", "rg_graph_color", "rg_propositional_logic",
             "rg_intermediate_integration", "rg_number_filtering")


@pytest.mark.parametrize("name", BUILT_INS)
def test_built_in_verifiers_pay_every_correct_form(name):
    report = measure_recall(load_registry(None).get(name), items=6)
    assert report.error is None and report.items >= 4 and not report.control_failures, report.control_failures
    assert report.candidates and report.paid == report.candidates, report.misses[:5]


def test_a_reference_written_in_the_asked_form_is_not_wrapped_twice():
    """An imported environment's reference is the completion its scorer pays (``<answer>1170</answer>``,
    ``Answer: 4``): the families build forms from the answer inside it, so a fair verifier pays them all
    (they were '<answer><answer>1170</answer></answer>' and recall read 0)."""
    wrapped = [dict(item, answer=f"<answer>{item['answer']}</answer>") for item in ITEMS]
    for bare, item in zip(ITEMS, wrapped):
        assert equivalence_families(item) == equivalence_families(bare)
    line = _item("2 + 998 =" + LINE_HINT, "Answer: 1000")
    assert equivalence_families(line) == equivalence_families(_item("2 + 998 =" + LINE_HINT, "1000"))

    def fair_on_wrapped(completion, sample):
        return _fair(completion, dict(sample, answer=declared_answer(sample["answer"], fallback="whole")))

    domain = Domain(name="recall_wrapped", owner="t@example.com", description="recall test",
                    samples=lambda split, n, seed: iter(wrapped[:n]), score=fair_on_wrapped)
    report = measure_recall(domain, items=len(wrapped))
    assert report.candidates > 40 and report.paid == report.candidates, report.misses
