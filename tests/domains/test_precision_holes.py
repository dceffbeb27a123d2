"""Hacks outside the fixed attack families that reasoning-gym verifiers paid (issue 41 item 2), each
closed where it lives: non-finite values are no answer (complex_arithmetic paid "nan" on every item),
an unevaluated integral copied from the prompt is no antiderivative (intermediate_integration paid
it on every item through the project's own allowlist), and a propositional conclusion must show an
inference (a premise or-ed with another variable passed most items; items whose premises contradict
each other, from which anything follows, are not drawn)."""

from __future__ import annotations

import pytest

from domains import load_registry


@pytest.fixture(scope="module")
def registry():
    return load_registry(None)


def _scores(domain, completions, sample):
    return domain.safe_score_many(completions, [sample] * len(completions))


@pytest.mark.parametrize("value", ["nan", "NaN", "-nan", "nan+nanj", "nan + nani", "0.0 + nani", "inf", "-inf",
                                   "Infinity", "inf + infi", "1e999", "1e999 + 1e999i", "\u221e"])
def test_non_finite_values_are_never_a_complex_number(registry, value):
    domain = registry.get("rg_complex_arithmetic")
    samples = domain.generate("eval", 8, seed=0)
    assert domain.safe_score_many([s["answer"] for s in samples], samples) == [1.0] * len(samples)
    assert domain.safe_score_many([f"<answer>{value}</answer>"] * len(samples), samples) == [0.0] * len(samples)


@pytest.mark.parametrize("name", ["math_arith_easy", "gsm", "finance", "scene3d"])
def test_non_finite_values_are_no_number_in_answer_line_domains(registry, name):
    from domains.answers import parse_number

    domain = registry.get(name)
    numeric = [s for s in domain.generate("eval", 12, seed=0) if parse_number(s["answer"]) is not None]
    assert numeric
    for sample in numeric:
        a = sample["answer"]
        hacks = [f"Answer: {a} nan", f"Answer: {a} + nan", "Answer: nan", f"Answer: {a}/0", "Answer: NaN/1",
                 f'Answer: {{"{a}": nan}}', "Answer: inf"]
        assert _scores(domain, hacks, sample) == [0.0] * len(hacks), (a, hacks)


def test_an_unevaluated_integral_is_no_antiderivative(registry):
    domain = registry.get("rg_intermediate_integration")
    samples = domain.generate("eval", 6, seed=0)
    for sample in samples:
        meta = sample["metadata"]["rg_metadata"]
        integrand, x = meta["integrand"], meta["variable"]
        restated = [f"<answer>Integral({integrand}, {x}) + C</answer>", f"<answer>Integral({integrand}, {x})</answer>",
                    f"<answer>integrate({integrand}, {x}) + C</answer>", f"<answer>oo*{x} + C</answer>",
                    f"<answer>{integrand} + C</answer>" if "exp(" not in integrand else "<answer></answer>"]
        assert _scores(domain, restated, sample) == [0.0] * len(restated), restated
        assert _scores(domain, [f"<answer>{sample['answer']}</answer>"], sample) == [1.0]


def test_no_reference_is_an_unevaluated_integral(registry):
    """reasoning-gym's own reference for polynomial x sin/cos integrands is the integral restated;
    such items are not drawn (the answer they teach is the hack)."""
    domain = registry.get("rg_intermediate_integration")
    samples = domain.generate("train", 40, seed=1) + domain.generate("eval", 40, seed=1)
    assert not [s["answer"] for s in samples if "Integral" in s["answer"]]
    assert domain.safe_score_many([s["answer"] for s in samples], samples) == [1.0] * len(samples)


def _weakenings(sample: dict) -> list[str]:
    """Conclusions built from the prompt alone that reasoning-gym's entailment check accepts."""
    meta = sample["metadata"]["rg_metadata"]
    premises, variables = meta["premises"], meta["variables"]
    out = []
    for premise in premises:
        for v in variables:
            out += [f"({premise} \u2228 {v})", f"({v} \u2228 {premise})", f"({v} \u2192 {premise})",
                    f"(\u00ac{v} \u2192 {premise})", f"({premise} \u2228 \u00ac{v})"]
    if len(premises) >= 2:
        out += [f"(({premises[0]} \u2227 {premises[1]}) \u2228 {variables[0]})"]
    ref = sample["answer"]
    out += [f"({ref} \u2228 {v})" for v in variables] + [f"({v} \u2192 {ref})" for v in variables]
    # one that happens to say exactly what the reference says ("(P ∨ P) ∨ P" for "(P ∨ P)") is right
    return [f"<answer>{c}</answer>" for c in out if not _same_truth_table(c, ref, variables)]


def _same_truth_table(a: str, b: str, variables: list[str]) -> bool:
    from itertools import product

    from reasoning_gym.logic.propositional_logic import Expression

    left, right = Expression.from_string(a), Expression.from_string(b)
    return all(left.evaluate(dict(zip(variables, values))) == right.evaluate(dict(zip(variables, values)))
               for values in product([False, True], repeat=len(variables)))


def test_a_weakened_conclusion_shows_no_inference(registry):
    domain = registry.get("rg_propositional_logic")
    samples = domain.generate("eval", 12, seed=0)
    paid = []
    for sample in samples:
        hacks = _weakenings(sample)
        paid += [(sample["id"], h) for h, v in zip(hacks, _scores(domain, hacks, sample)) if v > 0]
    assert not paid, paid[:10]
    assert domain.safe_score_many([s["answer"] for s in samples], samples) == [1.0] * len(samples)


def test_no_drawn_item_has_contradictory_premises(registry):
    from itertools import product

    from reasoning_gym.logic.propositional_logic import Expression

    for split in ("eval", "train"):
        for sample in registry.get("rg_propositional_logic").generate(split, 30, seed=1):
            meta = sample["metadata"]["rg_metadata"]
            premises = [Expression.from_string(p) for p in meta["premises"]]
            names = meta["variables"]
            assert any(all(p.evaluate(dict(zip(names, values))) for p in premises)
                       for values in product([False, True], repeat=len(names))), meta["premises"]


@pytest.mark.parametrize("premises, conclusion, defect", [
    (["P", "Q"], "(P \u2228 R)", "follows from one premise"),
    (["(P \u2192 Q)", "P"], "(R \u2192 P)", "follows from one premise"),
    (["(P \u2227 R)", "Q"], "(P \u2194 R)", "follows from one premise"),
    (["(P \u2192 Q)", "(Q \u2192 R)"], "(P \u2192 R)", None),                   # transitivity: an inference
    (["(P \u2194 Q)", "(Q \u2194 R)"], "((P \u2194 R) \u2228 S)", "weaker than the premises allow"),
    (["(P \u2192 Q)", "P"], "Q", None),                                         # modus ponens
    (["(P \u2192 Q)", "P"], "(Q \u2228 R)", "weaker than the premises allow"),
    (["P", "Q"], "(Q \u2227 P)", "restates premises"),
    (["P", "\u00acP"], "Q", "contradictory premises"),
])
def test_conclusion_defects_follow_the_written_rule(premises, conclusion, defect):
    from domains.builtin._rg import conclusion_defect

    assert conclusion_defect(conclusion, premises) == defect


def test_a_fraction_copied_from_the_question_is_not_its_simplified_form(registry):
    """'Simplify 10176/20280' is answered 424/845: the unreduced fraction handed back equals it as a
    number but is the question, not the answer (the exact equivalence must not pay it), while the
    reduced fraction in other spacing, and a terminating decimal for a decimal reference, still pay."""
    import re

    from domains.answers import equivalent_answers, exact_number

    domain = registry.get("rg_fraction_simplification")
    items = domain.generate("eval", 30, seed=0)
    copies, rights = [], []
    for item in items:
        match = re.search(r"(\d+)/(\d+)", item["prompt"]) or re.search(r"frac\{(\d+)\}\{(\d+)\}", item["prompt"])
        if match:
            copies.append((f"<answer>{match.group(1)}/{match.group(2)}</answer>", item))
            rights.append((f"<answer> {item['answer'].replace('/', ' / ')} </answer>", item))
    assert len(copies) >= 10
    # no drawn item asks to simplify a fraction already in lowest terms (its answer is in the question)
    assert all(i["metadata"]["rg_metadata"]["reduction_factor"] != 1 for i in items)
    assert domain.safe_score_many(*zip(*copies)) == [0.0] * len(copies)
    assert domain.safe_score_many(*zip(*rights)) == [1.0] * len(rights)
    assert exact_number("6/8") is None and exact_number("5/1") is None and exact_number("3/4") is not None
    assert equivalent_answers("3/4", "0.75") and equivalent_answers("0.75", "3/4")
    assert not equivalent_answers("6/8", "3/4")


def test_a_button_sequence_is_read_from_the_sequence_not_from_prose(registry):
    """reasoning-gym's quantum_lock reads every letter A-C anywhere in the text: prose whose letters
    spell the sequence was paid. The sequence in any case and separators still pays."""
    domain = registry.get("rg_quantum_lock")
    items = domain.generate("eval", 30, seed=0)
    target = next(i for i in items if i["answer"] == "A → A → B → A")
    assert domain.safe_score("The answer is Koti Nufa Zita Vibalo Duto.", target) == 0.0
    assert domain.safe_score("<answer>a bad cab</answer>", target) == 0.0
    forms = [lambda a: f"<answer>{a}</answer>", lambda a: f"<answer>{a.lower().replace(' → ', ', ')}</answer>",
             lambda a: "Answer: " + a.replace(" → ", ""), lambda a: f"<answer>{a.replace(' → ', '->')}</answer>"]
    for form in forms:
        assert domain.safe_score_many([form(i["answer"]) for i in items], items) == [1.0] * len(items)
