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
