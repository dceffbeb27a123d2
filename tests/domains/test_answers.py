"""domains.answers, the one answer grammar: the declared span normalised once (markup around a value
is not the value, a label in front of the tags is not a second answer), an exact equivalence that
widens nothing a hedge or a spray can use, non-finite values that are never a number, and what an
unmarked line claims."""

from __future__ import annotations

from fractions import Fraction

import pytest

import domains.answers as answers
from domains.answers import (answer_candidates, declared_answer, declared_number, equivalent_answers, exact_number,
                             line_claim, normalize_span, parse_number, score_number, stated_answers, states_non_finite)


def test_the_public_names_are_curated():
    assert set(answers.__all__) <= set(dir(answers))
    assert all(not name.startswith("_") for name in answers.__all__)
    # the built-ins' old import path still works
    from domains.builtin._common import declared_answer as old_path

    assert old_path is declared_answer


@pytest.mark.parametrize("span, value", [
    ("$1649$", "1649"), ("$$1649$$", "1649"), ("\\boxed{1649}", "1649"), ("\\(1649\\)", "1649"), ("\\[1649\\]", "1649"),
    ("**True**", "True"), ("__True__", "True"), ("`[1, 2]`", "[1, 2]"), ("```\n1 2\n3 4\n```", "1 2\n3 4"),
    ("\\text{mother}", "mother"), ("\\frac{3}{4}", "3/4"), ("  **$\\boxed{7}$**  ", "7"),
    ("**x**2 + 1**", "x**2 + 1"),                            # a bold formula with powers inside
    ("$3$ or $4$", "$3$ or $4$"), ("**a** and **b**", "**a** and **b**"),  # markup around parts stays
    ("x**2 + 1", "x**2 + 1"), ("Michael is a devil.", "Michael is a devil."), ("$5", "$5"),
])
def test_normalize_span_drops_markup_around_the_whole_value_only(span, value):
    assert normalize_span(span) == value


@pytest.mark.parametrize("completion", [
    "Answer: <answer>3</answer>", "Answer:\n<answer>3</answer>", "**Answer:** <answer>3</answer>",
    "Final answer: <answer> 3 </answer>", "<answer>$3$</answer>", "<answer>\\boxed{3}</answer>", "<ANSWER>3</ANSWER>",
    "Let me think.\n3 + 0 = 3\n<answer>**3**</answer>", "**<answer>3</answer>**",
])
def test_a_label_or_markup_around_the_tag_is_one_answer(completion):
    assert declared_answer(completion) == "3"
    assert declared_number(completion) == 3.0


@pytest.mark.parametrize("completion", [
    "Answer: <answer>3</answer>\nAnswer: 4", "<answer>$3$</answer>\n<answer>4</answer>", "Answer: 3\n<answer>4</answer>",
    "<answer>**True**</answer>\nFalse", "\\boxed{3}\n<answer>\\boxed{4}</answer>",
])
def test_two_different_answers_are_still_a_hedge(completion):
    assert declared_answer(completion) is None


def test_an_empty_label_alone_is_an_empty_answer():
    assert stated_answers("Answer:") == [""]
    assert declared_number("Answer:") is None


@pytest.mark.parametrize("span, reference", [
    ("1170.0", "1170"), ("1,795", "1795"), ("-1,234.5", "-1234.5"), ("3/4", "0.75"), ("0.75", "3/4"), ("1170.", "1170"),
    ("0", "0.0"), ("true", "True"), ("YES", "Yes"), ("[19,20]", "[19, 20]"), ("['a','b']", "['a', 'b']"),
    ("a,b , c", "a, b, c"), ('{"0":1,"1":2}', '{"0": 1, "1": 2}'), ("$1170$", "1170"),
])
def test_exact_equivalents_of_the_reference(span, reference):
    assert equivalent_answers(span, reference)


@pytest.mark.parametrize("span, reference", [
    ("1170 1171", "1170"), ("1,17", "117"), ("1234", "1,234"),   # a reference's comma may be a list
    ("1e3", "1000"), ("0x10", "16"), ("007", "7"), ("1170.01", "1170"), ("0.333", "1/3"), ("nan", "1170"),
    ("yes", "True"), ("True or False", "True"), ("true false", "True"), ("[20, 19]", "[19, 20]"),
    ("[19, 20, 21]", "[19, 20]"), ("a b", "a, b"), ("tac", "TAC"), ("", "1"), ("1", ""),
])
def test_no_loose_equivalence(span, reference):
    assert not equivalent_answers(span, reference)


def test_exact_number_reads_one_plain_number_as_a_rational():
    assert exact_number("1,795") == 1795 and exact_number("1,795", grouping=False) is None
    assert exact_number("-0.25") == Fraction(-1, 4) and exact_number("6/8") is None and exact_number("3/4") == Fraction(3, 4)
    assert exact_number("1/0") is None and exact_number("1 2") is None and exact_number("+7") == 7


@pytest.mark.parametrize("text", ["nan", "NaN", "-inf", "+Infinity", "1e999", "-1e999", "nan+nanj", "0.0 + nani",
                                  "\u221e", '{"0": nan}', "[nan]", "x = inf"])
def test_non_finite_values_are_no_number(text):
    assert states_non_finite(text)
    assert parse_number(text) is None
    assert score_number(f"Answer: {text}", "0") == 0.0


@pytest.mark.parametrize("text", ["7", "1e3", "information", "Nancy", "infant", "3.5e-2", "zoo"])
def test_finite_text_is_not_non_finite(text):
    assert not states_non_finite(text)


def test_a_fraction_over_zero_is_no_number():
    assert parse_number("1/0") is None and parse_number("NaN/1") is None


@pytest.mark.parametrize("line, claim", [
    ("The answer to the given arithmetic problem is 3.", " 3."), ("3 + 4 = 7", " 7"), ("So the total is 7 apples.", " 7 apples."),
    ("That makes 7.", " 7."), ("7", "7"), ("Thus 7.", "Thus 7."), ("7 is the result", "7 is the result"),
])
def test_line_claim_reads_what_follows_the_last_claim_marker(line, claim):
    assert line_claim(line) == claim


@pytest.mark.parametrize("line", ["What is 3 plus 4?", "The answer is not 3.", "Is it 7?",
                                  "What is 3 plus 4? Think about it and then give the number 7 please"])
def test_questions_and_negations_claim_nothing_a_number_can_be_read_from(line):
    assert declared_number(line) is None


def test_the_base_policys_own_phrasing_is_paid_and_sprays_are_not():
    assert score_number("The answer to the given arithmetic problem is 3.", "3") == 1.0
    assert score_number("Let me add them.\nThe answer to the given arithmetic problem is 3.", "3") == 1.0
    assert score_number("The answer to the given arithmetic problem is 3 or 4.", "3") == 0.0
    assert score_number("The sum of 1 and 2 is 3, or maybe 4.", "3") == 0.0


def test_answer_candidates_read_the_same_grammar():
    assert answer_candidates("Answer: <answer>3</answer>") == {"3"}
    assert answer_candidates("<answer>$3$</answer>\n\\boxed{3}") == {"3"}
    assert len(answer_candidates("<answer>3</answer> but the answer is 4.")) == 2
