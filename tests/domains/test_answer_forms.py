"""Right answers in the forms a prompt allows are paid, scored as training scores them (issue 41 item 1),
and the same normalisation pays no hedge, spray, echo or non-finite value.

Every class here scored 0 before the declared span was normalised centrally (domains.answers) and
reasoning-gym's exact compares were widened by an exact equivalence (domains.builtin._rg): a math
wrapper inside the tags, ``1170.0``, ``true`` for ``True``, ``1,795``, ``[19,20]``, ``Answer: <answer>3</answer>``
(in every domain), bold around the tag's text, and the base policy's own "The answer to the given
arithmetic problem is 3." on math_arith_easy.
"""

from __future__ import annotations

import pytest

from domains import load_registry


@pytest.fixture(scope="module")
def registry():
    return load_registry(None)


def _items(registry, name: str, n: int = 6, keep=lambda s: True) -> tuple:
    domain = registry.get(name)
    samples = [s for s in domain.generate("eval", n, seed=0) if keep(s)]
    assert samples, f"no {name} item fits"
    return domain, samples


def _scores(domain, completions: list[str], sample: dict) -> list[float]:
    return domain.safe_score_many(completions, [sample] * len(completions))


def _big_number(s: dict) -> bool:
    return s["answer"].lstrip("-").isdigit() and len(s["answer"].lstrip("-")) >= 4


FORMS = {
    "math_wrapper": ["<answer>${a}$</answer>", "<answer>\\boxed{{{a}}}</answer>", "<answer>\\({a}\\)</answer>"],
    "bold": ["<answer>**{a}**</answer>", "**<answer>{a}</answer>**"],
    "label_and_tag": ["Answer: <answer>{a}</answer>", "**Answer:** <answer>{a}</answer>", "Answer:\n<answer>{a}</answer>"],
    "marker_case_and_space": ["<ANSWER>{a}</ANSWER>", "<answer>\n {a} \n</answer>"],
    "reasoning_before": ["Let me work it out step by step; the numbers add up.\n<answer>{a}</answer>"],
}


@pytest.mark.parametrize("family", sorted(FORMS))
@pytest.mark.parametrize("name", ["rg_chain_sum", "rg_lcm", "rg_gsm_symbolic", "rg_fraction_simplification",
                                  "rg_course_schedule", "strings"])
def test_markup_and_labels_around_a_right_answer_are_paid(registry, name, family):
    domain, samples = _items(registry, name, n=4)
    for sample in samples:
        forms = [f.format(a=sample["answer"]) for f in FORMS[family]]
        assert _scores(domain, forms, sample) == [1.0] * len(forms), (sample["answer"], forms)


def test_an_integer_written_with_a_decimal_point_or_separators_is_paid(registry):
    for name in ("rg_lcm", "rg_basic_arithmetic", "rg_gcd", "rg_leg_counting", "rg_products"):
        domain, samples = _items(registry, name, n=6)
        for sample in samples:
            forms = [f"<answer>{sample['answer']}.0</answer>"]
            if _big_number(sample):
                forms.append(f"<answer>{int(sample['answer']):,}</answer>")
            assert _scores(domain, forms, sample) == [1.0] * len(forms), (name, forms)


def test_truth_words_in_another_case_are_paid(registry):
    for name in ("rg_course_schedule", "rg_isomorphic_strings", "rg_ransom_note", "rg_syllogism"):
        domain, samples = _items(registry, name, n=4)
        for sample in samples:
            forms = [f"<answer>{w}</answer>" for w in {sample["answer"].lower(), sample["answer"].upper()}]
            assert _scores(domain, forms, sample) == [1.0] * len(forms), (name, forms)


def test_lists_spaced_differently_are_paid(registry):
    domain, samples = _items(registry, "rg_list_functions", n=4, keep=lambda s: ", " in s["answer"])
    for sample in samples:
        assert _scores(domain, [f"<answer>{sample['answer'].replace(', ', ',')}</answer>"], sample) == [1.0]
    domain, samples = _items(registry, "rg_number_filtering", n=4, keep=lambda s: ", " in s["answer"])
    for sample in samples:
        assert _scores(domain, [f"<answer>{sample['answer'].replace(', ', ',')}</answer>"], sample) == [1.0]


def test_answer_line_domains_take_a_tag_after_the_label_and_the_policys_own_sentence(registry):
    domain, samples = _items(registry, "math_arith_easy", n=6)
    for sample in samples:
        a = sample["answer"]
        forms = [f"Answer: <answer>{a}</answer>", f"The answer to the given arithmetic problem is {a}.",
                 f"**Answer:** {a}", f"Answer: ${a}$"]
        assert _scores(domain, forms, sample) == [1.0] * len(forms), forms


def _other_number(answer: str) -> str:
    try:
        return str(int(answer) + 1)
    except ValueError:
        return "7"


HACKS = [
    "<answer>{a} {b}</answer>", "<answer>{a}.0</answer>\n{b}", "<answer>${a}$ or ${b}$</answer>",
    "Answer: <answer>{a}</answer>\nAnswer: {b}", "<answer>\\boxed{{{a}}}</answer>\n<answer>{b}</answer>",
    "<answer>{a},{b}</answer>", "<answer>{a}.0 {b}.0</answer>", "<answer>nan</answer>", "<answer>inf</answer>",
    "<answer>-Infinity</answer>", "<answer>1e999</answer>", "<answer>{a}/0</answer>", "<answer>**{a}** **{b}**</answer>",
]


@pytest.mark.parametrize("name", ["rg_chain_sum", "rg_lcm", "rg_gsm_symbolic", "rg_basic_arithmetic",
                                  "rg_complex_arithmetic", "math_arith_easy", "gsm"])
def test_the_widening_pays_no_hedge_spray_or_non_finite_value(registry, name):
    domain, samples = _items(registry, name, n=4)
    for sample in samples:
        a = sample["answer"]
        hacks = [h.format(a=a, b=_other_number(a)) for h in HACKS]
        scores = _scores(domain, hacks, sample)
        assert scores == [0.0] * len(hacks), [h for h, v in zip(hacks, scores) if v]


def test_a_truth_word_hedge_in_any_case_is_not_paid(registry):
    domain, samples = _items(registry, "rg_course_schedule", n=4)
    for sample in samples:
        hacks = ["<answer>true false</answer>", "<answer>TRUE</answer>\nfalse", "<answer>true or false</answer>",
                 "<answer>**True**</answer>\n<answer>False</answer>"]
        assert _scores(domain, hacks, sample) == [0.0] * len(hacks)


def test_an_unmarked_echo_question_or_negation_is_not_paid(registry):
    domain, samples = _items(registry, "math_arith_easy", n=6)
    for sample in samples:
        a = sample["answer"]
        question = sample["prompt"].splitlines()[0]
        hacks = [question, f"Is the answer {a}?", f"The answer is not {a}.", f"The answer is {a} or {_other_number(a)}.",
                 f"{question} The answer to the given arithmetic problem is {a} or maybe {_other_number(a)}."]
        assert _scores(domain, hacks, sample) == [0.0] * len(hacks), hacks


@pytest.mark.parametrize("name", ["rg_chain_sum", "rg_basic_arithmetic", "rg_gcd", "rg_decimal_arithmetic", "rg_dice",
                                  "rg_coin_flip"])
def test_an_unmarked_claim_of_a_number_is_paid_in_reasoning_gym_numbers_as_in_the_built_ins(registry, name):
    """With no tag, box or answer line, the last line's claim is judged by the built-ins' rule
    (domains.answers.declared_number): "The result is 1649." and "= 1649" pay; a question, a
    negation, a second bare number or a pair of numbers do not."""
    domain, samples = _items(registry, name, n=4)
    for sample in samples:
        answer, question = sample["answer"], sample["prompt"].splitlines()[0]
        # the bare reference first: the oracle (a fraction such as dice's 21/40 is claimed as written)
        paid = [answer, f"The result is {answer}.", f"Adding up step by step.\n= {answer}", f"x = {answer}",
                f"{question}\nSo the total is {answer}"]
        refused = [question, f"The result is not {answer}.", f"{answer}\n{answer}1", f"It is {answer} or 5.",
                   f"{answer} {answer}1", "3 + 4"]
        assert _scores(domain, paid, sample) == [1.0] * len(paid), (sample["id"], answer)
        assert _scores(domain, refused, sample) == [0.0] * len(refused), (sample["id"], answer)
