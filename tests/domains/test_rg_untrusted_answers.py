"""No reasoning-gym verifier executes a completion's text: eval-based ones parse literals only,
sympy-based ones only see plain math, the verifiers' own partial credit is unchanged, and every
eval/exec/parse_expr call in the installed package is accounted for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from domains import get_registry
from domains.builtin import _rg
from domains.builtin import _rg_untrusted_answers as untrusted

EXECUTING_TASKS = (*untrusted.LITERAL_EVAL_TASKS, *untrusted.SYMPY_TASKS)


def _sample(task: str) -> dict:
    return get_registry().get(f"rg_{task}").generate("train", 1, 0)[0]


def _payloads(marker: Path) -> list[str]:
    write = f"open({str(marker)!r}, 'w').write('ran')"
    return [
        f"__import__('builtins').exec({write!r}) or []",  # what eval(answer) runs as is
        # sympy's parse_expr turns unknown names into Symbols, but attribute chains and strings pass:
        f"Integer.__new__.__globals__['__builtins__']['exec']({write!r})",
        f"[{write}]",
    ]


@pytest.mark.parametrize("task", EXECUTING_TASKS)
def test_code_in_an_answer_never_runs(task, tmp_path):
    marker = tmp_path / "ran"
    domain, sample = get_registry().get(f"rg_{task}"), _sample(task)
    for payload in _payloads(marker):
        assert domain.score(f"<answer>{payload}</answer>", sample) <= 0.05, payload  # upstream no-credit floor
        assert not marker.exists(), f"the {task} verifier executed {payload!r}"


def test_one_completion_cannot_rewrite_every_later_reward(monkeypatch):
    """On main, eval(answer) let a single completion replace the verifier for the whole process."""
    monkeypatch.setattr(_rg, "SCORE_OVERRIDES", dict(_rg.SCORE_OVERRIDES))  # undone even if the hack works
    domain = get_registry().get("rg_string_insertion")
    first, second = domain.generate("train", 2, 0)
    hack = ("__import__('sys').modules['domains.builtin._rg'].SCORE_OVERRIDES"
            ".__setitem__('string_insertion', lambda answer, entry: 1.0) or []")
    domain.score(f"<answer>{hack}</answer>", first)
    assert domain.score("<answer>certainly wrong</answer>", second) == 0.0


def _verifier_and_domain(task: str, completion_span: str, sample: dict) -> tuple[float, float]:
    """The hardened verifier's own score of a span, and the domain's (binary) score of it."""
    meta = sample["metadata"]
    entry = {"question": "", "answer": meta.get("rg_answer"), "metadata": dict(meta["rg_metadata"])}
    raw = float(_rg.scoring_dataset(task).score_answer(completion_span, entry))
    return raw, get_registry().get(f"rg_{task}").score(f"<answer>{completion_span}</answer>", sample)


def test_literal_answers_keep_the_verifiers_partial_credit():
    """eval -> literal_eval keeps what the verifiers meant: a Python list spelling of the answer
    gets the verifier's partial credit, which the domain (binary since issue 27) pays as 0."""
    sample = _sample("string_insertion")
    assert _verifier_and_domain("string_insertion", repr(list(sample["answer"])), sample) == (0.1, 0.0)
    sample = _sample("spiral_matrix")
    as_list = "[" + ", ".join(sample["answer"].split()) + "]"
    assert _verifier_and_domain("spiral_matrix", as_list, sample) == (0.1, 0.0)
    sample = _sample("n_queens")
    board = [row.split() for row in sample["answer"].splitlines()]
    assert _verifier_and_domain("n_queens", repr(board), sample) == (0.5, 0.0)


@pytest.mark.parametrize("task", EXECUTING_TASKS)
def test_reference_answers_still_score_1(task):
    domain = get_registry().get(f"rg_{task}")
    for sample in domain.generate("train", 4, 1) + domain.generate("eval", 2, 1):
        assert domain.score(f"<answer>{sample['answer']}</answer>", sample) == 1.0, sample["answer"]


@pytest.mark.parametrize("text, vocabulary", [
    ("10*8*3/10", untrusted.ARITHMETIC), ("(100 + 47) - 46 + 21", untrusted.ARITHMETIC),
    ("295*y**6 - 420*y**4 - 1870*y", untrusted.POLYNOMIAL), ("-7*X**10/4 - 6*X**5 + C", untrusted.POLYNOMIAL),
    ("-x*atan(3*x) + log(9*x**2 + 1)/6 + C", untrusted.CALCULUS), ("x**(1/2) + x**-2 + (x + 1)**3/3", untrusted.CALCULUS),
    ("exp(x**2) + 2^3", untrusted.CALCULUS), ("1.5*x**2 + .5", untrusted.CALCULUS),
])
def test_plain_math_accepts_ordinary_answers(text, vocabulary):
    assert untrusted.is_plain_math(text, vocabulary)


@pytest.mark.parametrize("text, vocabulary", [
    ("x.__class__", untrusted.CALCULUS), ("Integer(1)", untrusted.CALCULUS), ("__import__", untrusted.CALCULUS),
    ("lambda: 1", untrusted.CALCULUS), ("x[0]", untrusted.CALCULUS), ("'a'", untrusted.CALCULUS),
    ("sin(x).evalf", untrusted.CALCULUS), ("1 .real", untrusted.CALCULUS), ("test()", untrusted.CALCULUS),
    ("N(pi, 1000000)", untrusted.CALCULUS), ("S(3)", untrusted.CALCULUS), ("x; y", untrusted.CALCULUS),
    ("x = 1", untrusted.CALCULUS), ("9**9**9", untrusted.ARITHMETIC), ("2**(9)**9", untrusted.ARITHMETIC),
    ("(((9**99)**99)**99)**99", untrusted.ARITHMETIC), ("2**101", untrusted.ARITHMETIC), ("x**y**z", untrusted.CALCULUS),
    ("atan(exp(exp(x)))", untrusted.CALCULUS), ("(x + 1))", untrusted.CALCULUS), ("", untrusted.CALCULUS),
    ("1" * 500, untrusted.ARITHMETIC), ("exp(exp(exp(100)))", untrusted.ARITHMETIC), ("x + 1", untrusted.ARITHMETIC),
    ("sin(x)", untrusted.POLYNOMIAL), ("Integral(x, x)", untrusted.POLYNOMIAL), ("Integral(exp(x**2), x)", untrusted.CALCULUS),
    ("oo*x + C", untrusted.CALCULUS),
])
def test_plain_math_refuses_code_names_towers_and_deep_nesting(text, vocabulary):
    assert not untrusted.is_plain_math(text, vocabulary)


_BUILTIN_EXECUTORS = {"eval", "exec", "compile"}  # as bare names (Compiler.compile is bf's own compiler)
_SYMPY_EXECUTORS = {"parse_expr", "sympify"}  # bare or as sympy.parse_expr / sp.parse_expr


def _modules_calling_executors() -> set[str]:
    import reasoning_gym

    root = Path(reasoning_gym.__file__).parent
    found = set()
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                bare = node.func.id if isinstance(node.func, ast.Name) else None
                attr = node.func.attr if isinstance(node.func, ast.Attribute) else None
                if bare in _BUILTIN_EXECUTORS | _SYMPY_EXECUTORS or attr in _SYMPY_EXECUTORS:
                    found.add(".".join(path.relative_to(root).with_suffix("").parts))
    return found


def test_every_executing_call_in_reasoning_gym_is_accounted_for():
    """An upgrade that adds eval/exec/parse_expr anywhere fails here until someone classifies it."""
    from reasoning_gym.factory import DATASETS

    module_of = {task: cls.__module__.removeprefix("reasoning_gym.") for task, (cls, _) in DATASETS.items()}
    handled = {module_of[t] for t in EXECUTING_TASKS} | set(untrusted.TRUSTED_EVALS)
    unaccounted = _modules_calling_executors() - handled
    assert not unaccounted, f"classify these in domains/builtin/_rg_untrusted_answers.py: {sorted(unaccounted)}"
