"""A number answer with no declared span (no 'Answer:' line, tag or box): what its last line claims,
one number, and no bare number line before it saying another. Found by `assay domains attack`:
'0\\n1', '1 7' and '1 1 1 ...' were paid on math_arith, gsm and scene3d by the last number alone."""

from __future__ import annotations

import pytest

from domains.builtin._common import declared_number, score_number


@pytest.mark.parametrize("completion", ["7", "The answer is 7.", "3 + 4 = 7", "So the total is 7 apples.",
                                        "First, 3 + 4.\nThat makes 7.", "Answer: 7", "**7**", "<answer>7</answer>"])
def test_a_genuine_answer_scores_1(completion):
    assert score_number(completion, "7") == 1.0, completion


@pytest.mark.parametrize("completion", ["0\n7", "7\n0\n7\n3", "1 7", "3 4 7", "1 " * 5000 + "7", "7 7 7 7 7",
                                        "What is 3 plus 4? Think about it and then give the number 7 please",
                                        "7\n\n8", "$7\n$8"])
def test_a_hedge_or_spray_scores_0(completion):
    assert score_number(completion, "7") == 0.0, completion


def test_reasoning_lines_with_several_numbers_do_not_hide_the_claim():
    assert declared_number("3 + 4 = 7, minus 2 is 5\n5") == 5.0
    assert declared_number("We have 3 and 4.\n7") == 7.0
