"""Correct answers in other forms that only a reasoning-gym task knows: ``Domain.equivalents`` for
the pack and the mixed domains built from its tasks.

The environment report card (:mod:`quality.report_card.recall`) builds the generic forms of a
reference itself (markup, number spellings, list spacing); what is here needs the task: another
valid colouring of a graph, the groups of an unordered answer in another order, the same
assignment of roles said in another order, an equivalent formula. Every form is built from the
item's reference and metadata, is correct by the task's own rules, and is written as the prompt
asks (inside ``<answer></answer>`` tags); each must score 1.0, and one that does not is a verifier
bug (a false negative).
"""

from __future__ import annotations

import json
import re
from typing import Callable

Equivalents = Callable[[dict], dict[str, list[str]]]


def _metadata(sample: dict) -> dict:
    meta = sample.get("metadata") or {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return {}
    return meta if isinstance(meta, dict) else {}


def _rg_metadata(sample: dict) -> dict:
    inner = _metadata(sample).get("rg_metadata") or {}
    return inner if isinstance(inner, dict) else {}


def _tagged(answers: list[str]) -> list[str]:
    return [f"<answer>{a}</answer>" for a in answers]


def _graph_color(sample: dict) -> dict[str, list[str]]:
    """Another valid colouring: the colours permuted (a bijection keeps every edge's ends apart),
    and the same colouring with its vertices listed in another order."""
    try:
        colouring = json.loads(sample["answer"])
        options = list((_rg_metadata(sample).get("puzzle") or {}).get("color_options") or [])
    except (ValueError, TypeError, KeyError):
        return {}
    if not isinstance(colouring, dict) or len(options) < 2:
        return {}
    shifted = {c: options[(i + 1) % len(options)] for i, c in enumerate(options)}
    recoloured = {v: shifted.get(c, c) for v, c in colouring.items()}
    reordered = dict(reversed(list(colouring.items())))
    return {"another_valid_colouring": _tagged([json.dumps(recoloured)]),
            "vertices_in_another_order": _tagged([json.dumps(reordered)])}


def _unordered_groups(sample: dict) -> dict[str, list[str]]:
    """Groups answered "in any order" (anagram groups, palindrome partitions), in another order."""
    try:
        groups = json.loads(sample["answer"])
    except (ValueError, TypeError):
        return {}
    if not isinstance(groups, list) or len(groups) < 2:
        return {}
    return {"groups_in_another_order": _tagged([json.dumps(list(reversed(groups)))])}


def _group_anagrams(sample: dict) -> dict[str, list[str]]:
    out = _unordered_groups(sample)
    try:
        groups = json.loads(sample["answer"])
    except (ValueError, TypeError):
        return out
    if isinstance(groups, list) and all(isinstance(g, list) for g in groups):
        out["words_in_another_order"] = _tagged([json.dumps([list(reversed(g)) for g in groups])])
    return out


_ROLE_CLAUSE = re.compile(r"\s*,?\s*and\s+|\s*,\s*")


def _knights_knaves(sample: dict) -> dict[str, list[str]]:
    """The same roles said in another order ("B is a knave, and A is a knight.")."""
    text = sample.get("answer", "").strip().rstrip(".")
    clauses = [c for c in _ROLE_CLAUSE.split(text) if c]
    if len(clauses) < 2:
        return {}
    swapped = ", and ".join(reversed(clauses)) + "."
    return {"people_in_another_order": _tagged([swapped])}


def _cryptarithm(sample: dict) -> dict[str, list[str]]:
    pairs = [p.strip() for p in sample.get("answer", "").split(",") if p.strip()]
    if len(pairs) < 2:
        return {}
    return {"letters_in_another_order": _tagged([",".join(reversed(pairs))])}


def _prime_factorization(sample: dict) -> dict[str, list[str]]:
    factors = [f.strip() for f in sample.get("answer", "").split("\u00d7")]
    if len(factors) < 2 or len(set(factors)) < 2:
        return {}
    return {"factors_in_another_order": _tagged([" \u00d7 ".join(reversed(factors))])}


def _zebra_puzzles(sample: dict) -> dict[str, list[str]]:
    """The name as the puzzle writes it (capitalised); the reference is lower case."""
    name = sample.get("answer", "").strip()
    if not name or name == name.capitalize():
        return {}
    return {"name_as_written": _tagged([name.capitalize()])}


def _expression_in_parentheses(sample: dict) -> dict[str, list[str]]:
    """An arithmetic expression in one pair of parentheses, and written without spaces."""
    expression = sample.get("answer", "").strip()
    if not expression:
        return {}
    return {"same_expression": _tagged([f"({expression})", expression.replace(" ", "")])}


_COMMUTATIVE = ("\u2227", "\u2228", "\u2194")  # and, or, iff


def _propositional_logic(sample: dict) -> dict[str, list[str]]:
    """The reference conclusion in an equivalent form: the operands of a commutative top-level
    operator swapped, or negated twice."""
    from reasoning_gym.logic.propositional_logic import Expression

    reference = sample.get("answer", "").strip()
    try:
        parsed = Expression.from_string(reference)
    except (ValueError, AttributeError):
        return {}
    forms = [f"\u00ac\u00ac{reference}" if reference.startswith("(") else f"\u00ac\u00ac({reference})"]
    operator = getattr(parsed.operator, "value", None)
    if operator in _COMMUTATIVE and parsed.right is not None:
        forms.append(f"({parsed.right} {operator} {parsed.left})")
    return {"equivalent_formula": _tagged(forms)}


# task -> its equivalent forms
TASK_EQUIVALENTS: dict[str, Equivalents] = {
    "graph_color": _graph_color,
    "group_anagrams": _group_anagrams,
    "palindrome_partitioning": _unordered_groups,
    "knights_knaves": _knights_knaves,
    "cryptarithm": _cryptarithm,
    "prime_factorization": _prime_factorization,
    "zebra_puzzles": _zebra_puzzles,
    "countdown": _expression_in_parentheses,
    "puzzle24": _expression_in_parentheses,
    "propositional_logic": _propositional_logic,
}


def task_equivalents(task: str) -> Equivalents | None:
    """``equivalents`` for a domain of one task, None when the task has no forms of its own."""
    return TASK_EQUIVALENTS.get(task)


def mixed_equivalents(tasks: dict[str, dict]) -> Equivalents | None:
    """``equivalents`` for a domain interleaving ``tasks``: the item's own task builds them."""
    if not any(task in TASK_EQUIVALENTS for task in tasks):
        return None

    def equivalents(sample: dict) -> dict[str, list[str]]:
        build = TASK_EQUIVALENTS.get(_metadata(sample).get("task"))
        return build(sample) if build else {}

    return equivalents
