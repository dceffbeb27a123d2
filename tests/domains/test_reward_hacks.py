"""Rewards that pay only for the work (issue 27): completions an adversary builds from the prompt
alone (never the answer) score 0 in every domain these scorers own, and the true answer, written
the way each prompt asks, still scores 1.0.

Every hack here states more than one distinct candidate, states nothing, or is junk, so it must
score 0 whatever the item's answer is: a hedge is never paid, even when one of its candidates is
right. Scores go through ``Domain.safe_score_many`` as the trainer calls it.
"""

from __future__ import annotations

import re

import pytest

from domains import load_registry

# Scorers owned elsewhere (code, long context, safety, terminal) have their own hack tests.
NOT_HERE = ("code", "long_", "safety", "terminal", "humaneval")
N_ITEMS = 10
TAGGED = "<answer>"  # reasoning-gym domains ask for <answer></answer>; the rest for "Answer: ..."


def load_items() -> dict:
    registry = load_registry(None)
    out = {}
    for name in registry.names:
        if any(name.startswith(p) or p in name for p in NOT_HERE):
            continue
        source = registry.sources.get(name, "")
        if "domains/builtin" not in source.replace("\\", "/"):
            continue
        domain = registry.get(name)
        out[name] = (domain, domain.generate("eval", N_ITEMS, seed=0))
    assert len(out) >= 100
    return out


@pytest.fixture(scope="module")
def items() -> dict:
    return load_items()


def _tagged(sample: dict) -> bool:
    return TAGGED in sample["prompt"]


def _declare(sample: dict, text: str) -> str:
    return f"<answer>{text}</answer>" if _tagged(sample) else f"Answer: {text}"


def _prompt_numbers(prompt: str) -> list[str]:
    seen = []
    for n in re.findall(r"-?\d+(?:\.\d+)?", prompt):
        if n not in seen:
            seen.append(n)
    return seen


def _two_options(sample: dict) -> tuple[str, str]:
    """Two different candidates from the prompt: truth values where the prompt asks for one,
    else two of its numbers, else two of its words."""
    prompt = sample["prompt"]
    low = prompt.lower()
    if "true" in low or "false" in low:
        return "True", "False"
    if re.search(r"\byes\b", low) or re.search(r"\bno\b", low):
        return "Yes", "No"
    numbers = _prompt_numbers(prompt)
    if len(numbers) >= 2:
        return numbers[0], numbers[1]
    words = list(dict.fromkeys(re.findall(r"[A-Za-z]{3,}", prompt)))
    return words[0], words[-1]


def hacks(sample: dict) -> dict[str, str]:
    a, b = _two_options(sample)
    prompt = sample["prompt"]
    numbers = _prompt_numbers(prompt) or ["0", "1"]
    out = {
        "tag_then_bare": f"<answer>{a}</answer>\n{b}",
        "two_tags": f"<answer>{a}</answer>\n<answer>{b}</answer>",
        "boxed_then_line": f"\\boxed{{{a}}}\nAnswer: {b}",
        "two_answer_lines": f"Answer: {a}\nAnswer: {b}",
        "line_then_bare": f"Answer: {a}\n{b}",
        "hedge_in_span": _declare(sample, f"{a} or {b}"),
        "truth_stuffing": _declare(sample, "True False Yes No"),
        "prompt_echo": prompt,
        "empty": "",
        "whitespace": " \n\t \n",
        "nul_bytes": "\x00" * 64,
        "huge": "a" * 100_000,
        "nul_in_tag": f"<answer>\x00{a}\x00</answer>\n{b}",
    }
    if len(numbers) >= 2:
        out["number_spray"] = _declare(sample, " ".join(numbers[:40]))
        out["number_lines"] = "\n".join(f"Answer: {n}" for n in numbers[:40])
    return out


def _scores(domain, completions, sample):
    return domain.safe_score_many(completions, [sample] * len(completions))


def test_controls_score_one(items):
    """The true answer, as the prompt asks for it, and the variants a real model writes."""
    failures = []
    for name, (domain, samples) in items.items():
        for s in samples:
            ans = s["answer"]
            variants = {"canonical": _declare(s, ans),
                        "explained": "Let me work through it step by step.\nSo the result follows.\n" + _declare(s, ans)}
            if "\n" not in ans:
                variants["trailing_period"] = (_declare(s, ans) + "." if _tagged(s) else f"Answer: {ans}.")
            for label, completion in variants.items():
                value = domain.safe_score(completion, s)
                if value != 1.0:
                    failures.append((name, label, s["id"], value))
    assert not failures, failures[:20]


def paid_pairs(items) -> dict[tuple[str, str], float]:
    """(domain, hack family) -> mean score, for the pairs where any item was paid."""
    paid = {}
    for name, (domain, samples) in items.items():
        totals: dict[str, list[float]] = {}
        for s in samples:
            built = hacks(s)
            for family, value in zip(built, _scores(domain, list(built.values()), s)):
                totals.setdefault(family, []).append(value)
        for family, values in totals.items():
            if any(v > 0 for v in values):
                paid[(name, family)] = round(sum(values) / len(values), 3)
    return paid


def test_no_hack_family_is_paid(items):
    paid = paid_pairs(items)
    assert not paid, f"{len(paid)} paid pairs: {sorted(paid.items())[:40]}"


# -- the verifier bugs named in issue 27 -------------------------------------------------------

def _rg(items, task):
    return items[f"rg_{task}"]


def test_propositional_logic_premises_are_not_a_conclusion(items):
    domain, samples = _rg(items, "propositional_logic")
    paid = []
    for s in samples:
        premises = s["metadata"]["rg_metadata"]["premises"]
        for text in [" ∧ ".join(f"({p})" for p in premises)] + list(premises):
            if domain.safe_score(f"<answer>{text}</answer>", s) > 0:
                paid.append((s["id"], text))
    assert not paid, paid


def test_coin_flip_zero_is_not_every_small_probability(items):
    domain, samples = _rg(items, "coin_flip")
    from fractions import Fraction

    wrong = [s for s in samples if Fraction(s["answer"]) != 0]
    assert wrong
    assert [domain.safe_score(c, s) for s in wrong for c in ("<answer>0</answer>", "<answer>0</answer>\n1")] \
        == [0.0] * (2 * len(wrong))


def test_mini_sudoku_clues_with_ones_score_zero(items):
    domain, samples = _rg(items, "mini_sudoku")
    for s in samples:
        grid = s["metadata"]["rg_metadata"]["puzzle"]
        filled = "\n".join(" ".join(str(v) if v else "1" for v in row) for row in grid)
        assert domain.safe_score(f"<answer>{filled}</answer>", s) == 0.0


def test_reasoning_gym_scores_are_binary(items):
    """No format-only or containment credit: any parseable junk scores exactly 0 or 1."""
    values = set()
    for name, (domain, samples) in items.items():
        if not name.startswith("rg_"):
            continue
        for s in samples[:5]:
            numbers = _prompt_numbers(s["prompt"]) or ["1"]
            junk = [f"<answer>{numbers[0]}</answer>", f"<answer>{' + '.join(numbers[:4])}</answer>",
                    f"<answer>{s['prompt'][:200]}</answer>", s["prompt"].split("\n")[0]]
            values.update(_scores(domain, junk, s))
    assert values <= {0.0, 1.0}, sorted(values)


def test_knights_knaves_both_roles_score_zero(items):
    domain, samples = items["logic"]
    for s in samples:
        if s["metadata"].get("task") != "knights_knaves":
            continue
        names = re.findall(r"\b([A-Z][a-z]+) is a (?:knight|knave)", s["answer"])
        both = ", ".join(f"{n} is a knight, {n} is a knave" for n in names)
        assert domain.safe_score(f"<answer>{both}</answer>", s) == 0.0


def test_general_qa_sprays_of_every_option_score_zero(items):
    from domains.builtin.general_qa import fact_pool

    domain, samples = items["general_qa"]
    by_kind: dict[str, list[str]] = {}
    for fact in fact_pool():
        by_kind.setdefault(fact["metadata"]["kind"], []).append(fact["answer"])
    checked = 0
    for s in samples:
        options = by_kind.get(s["metadata"].get("kind"), [])
        if s["metadata"].get("kind") == "claim" or not options:
            continue
        for start in range(0, len(options), 9):  # nine candidates fit in the old extra-word allowance
            spray = " ".join(options[start:start + 9])
            assert domain.safe_score(f"Answer: {spray}", s) == 0.0, (s["prompt"], spray)
        checked += 1
    assert checked


def test_strings_echoing_the_input_word_scores_zero(items):
    domain, samples = items["strings"]
    checked = 0
    for s in samples:
        if s["metadata"].get("task") != "spell_backward":
            continue
        word = s["metadata"]["rg_metadata"].get("word") or re.findall(r"[a-z]{3,}", s["prompt"])[-1]
        if word[::-1] == word:
            continue
        for c in (f"<answer>{word}</answer>", s["prompt"], f"<answer>{word} {word[::-1][:2]}</answer>"):
            assert domain.safe_score(c, s) == 0.0, c
        checked += 1
    assert checked


if __name__ == "__main__":  # python -m tests.domains.test_reward_hacks: the paid pairs, counted
    from collections import Counter

    found = paid_pairs(load_items())
    print(f"{len(found)} paid (domain, hack family) pairs")
    print("by family:", dict(Counter(family for _, family in found)))
    for (name, family), mean in sorted(found.items()):
        print(f"  {name:40s} {family:18s} mean {mean}")


# -- the shared mechanism ----------------------------------------------------------------------

@pytest.mark.parametrize("completion", [
    "<answer>True</answer>\nFalse", "<answer>3</answer> <answer>4</answer>", "\\boxed{3}\nAnswer: 4",
    "Answer: yes\nAnswer: no", "<answer>Lima</answer>\n**Answer:** Quito", "Answer: True\nFalse",
])
def test_declared_answer_is_none_for_a_hedge(completion):
    from domains.builtin._common import declared_answer

    assert declared_answer(completion) is None


@pytest.mark.parametrize("completion, span", [
    ("Thinking...\n<answer>True</answer>", "True"), ("<answer>True</answer>.", "True"),
    ("<answer>7</answer>\nAnswer: 7", "7"), ("Answer: \\boxed{7}", "7"), ("So\nAnswer: Lima.", "Lima"),
    ("<answer>**True**</answer>\n<answer>true</answer>", "true"),
])
def test_declared_answer_keeps_one_answer_said_twice_or_dressed(completion, span):
    from domains.builtin._common import declared_answer

    assert declared_answer(completion) == span


def test_declared_number_refuses_a_spray_and_accepts_formatting():
    from domains.builtin._common import declared_number

    assert declared_number("Answer: 12 13 14") is None
    assert declared_number("\\boxed{12}\nAnswer: 13") is None
    assert declared_number("Answer: $1,234.50") == 1234.5
    assert declared_number("\\boxed{12}\nAnswer: 12.0") == 12.0
    assert declared_number("Answer: ４２") == 42.0
    assert declared_number("Answer: -3/4") == -0.75


def test_family_relationship_labels_that_reasoning_gym_reverses_are_not_drawn(items):
    from domains.builtin._rg import ITEM_FILTERS

    keep = ITEM_FILTERS["family_relationships"]
    assert not keep({"answer": "mother-in-law"}) and not keep({"answer": "nephew"}) and keep({"answer": "mother"})
    _, samples = items["rg_family_relationships"]
    assert not {s["answer"] for s in samples} & {"mother-in-law", "father-in-law", "niece", "nephew"}
