"""reasoning-gym verifiers that would run a completion's text as Python, and how each is made safe.

A verifier runs in the trainer's process. Nine of reasoning-gym's (0.1.25) hand the answer text to
something that executes it:

- ``eval(answer)``, to accept a Python list as an alternative spelling, in ``string_insertion``,
  ``spiral_matrix``, ``binary_matrix`` and ``n_queens``. A completion could run any code there:
  write files, or replace a verifier so that every later answer of the run scores 1.0 (tested).
  In those four modules ``eval`` now means :func:`literal_eval`: a list literal still parses (the
  verifier's partial credit is unchanged), code does not run.
- sympy's ``parse_expr(answer)``, which ``eval``s its input (sympy documents it as unsafe for
  untrusted text), in ``puzzle24``, ``countdown``, ``simple_integration``,
  ``intermediate_integration`` and ``polynomial_multiplication``. Only :func:`is_plain_math` text
  reaches those verifiers: numbers, operators (``+ - * / ^ **``) and parentheses, plus what the
  task's reference answers use (``SYMPY_TASKS``): nothing more for the numeric puzzle24 and
  countdown, one-letter symbols for polynomials, and a short list of math functions (nested at
  most 2 deep) and commas for integrals; never an unevaluated ``Integral`` or infinity, so an
  answer must be the evaluated result, not the problem restated. No attribute access, no underscores, no quotes or
  brackets, no other names, so nothing but arithmetic on sympy objects can run; and powers are
  bounded (small literal exponents, no towers, at most two powers of a parenthesised base) so
  ``9**9**9`` cannot stall the trainer. Anything else scores 0.

Known limit: the grammar bounds what runs, not how long sympy's ``simplify`` takes. Adversarial
answers inside it (``atan(exp(x**99))*log(sin(x**99)) + C``) took 8-15 s each to judge in
``intermediate_integration`` here (before this module they could also run code). A hard time
limit needs these verifiers in a worker process that can be killed; that is not done yet.

The principle is the one the ``code`` domain follows: the completion's text is data, never code
run next to the verdict. The reasoning-gym modules that call ``eval``/``exec``/``parse_expr`` on
*trusted* text (their own generated problems or the reference answer) are listed in
``TRUSTED_EVALS`` with the reason; ``tests/domains/test_rg_untrusted_answers.py`` scans the installed
package and fails when a module calls one of those functions and is in none of the three lists.
"""

from __future__ import annotations

import ast
import re
import sys
from typing import Any

LITERAL_EVAL_TASKS = ("string_insertion", "spiral_matrix", "binary_matrix", "n_queens")
# What each sympy-parsed answer may contain beyond numbers, operators and parentheses (what its
# reference answers use): nothing; one-letter symbols; or symbols, math functions and commas.
ARITHMETIC, POLYNOMIAL, CALCULUS = "arithmetic", "polynomial", "calculus"
SYMPY_TASKS: dict[str, str] = {"puzzle24": ARITHMETIC, "countdown": ARITHMETIC, "polynomial_multiplication": POLYNOMIAL,
                               "simple_integration": POLYNOMIAL, "intermediate_integration": CALCULUS}
# reasoning_gym modules (relative names) whose eval/exec/parse_expr only ever see trusted text.
TRUSTED_EVALS: dict[str, str] = {
    "algorithmic.number_sorting": "eval(entry['answer']) parses the reference answer; the completion goes through json.loads",
    "arithmetic.bitwise_arithmetic": "eval(problem) computes the generated problem; the completion goes through int(text, 0)",
    "arithmetic.basic_arithmetic": "eval_floordiv runs on the expressions it generates, never in score_answer",
    "arithmetic.gsm_symbolic.generators_00_49": "generation only: evaluates its own templates",
    "arithmetic.gsm_symbolic.generators_50_99": "generation only: evaluates its own templates",
    "logic.propositional_logic": "its parse_expr is its own recursive parser, not sympy's; nothing is executed",
    "code.codeio": "excluded from the pack (generation runs the dataset's snippets)",
}

# Plain math for sympy: numbers, names, operators, parentheses, commas, whitespace; nothing else.
_MATH_TOKEN = re.compile(r"\s+|\d+\.\d*|\.\d+|\d+|[A-Za-z][A-Za-z0-9]*|\*\*|[-+*/^(),]")
# Functions that evaluate to a value, nothing that leaves the work undone: ``Integral(f, x)`` (whose
# derivative is f, so an unevaluated integral copied from the prompt passed the integration
# verifiers on every item), ``Derivative``, ``Subs``, ``Sum``; and no infinity (``oo``): a symbolic
# answer must be evaluated, not restated.
MATH_FUNCTIONS = frozenset({
    "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan", "acot", "sinh", "cosh", "tanh",
    "asinh", "acosh", "atanh", "exp", "log", "ln", "sqrt", "Abs", "pi",
})
# sympy's one-letter names that compute rather than stand for a symbol: N(x, 10**6) evaluates to a
# million digits, S(...) sympifies.
_FORBIDDEN_LETTERS = frozenset({"N", "S"})
MAX_MATH_CHARS = 400
MAX_EXPONENT = 100
MAX_POWERS_OF_GROUPS = 2  # ((a**b)**c)**d with b, c, d <= 100 already reaches 9**1e6
# sympy's simplify ran for minutes on atan(exp(exp(exp(exp(x**99))))); reference answers nest 2 deep.
MAX_FUNCTION_NESTING = 2


def literal_eval(text: Any, *_scope: Any) -> Any:
    """``eval`` for the verifiers of ``LITERAL_EVAL_TASKS``: Python literals only."""
    if not isinstance(text, str):
        raise TypeError("only text can be parsed")
    return ast.literal_eval(text)


def harden_verifier(task: str, dataset: Any) -> None:
    """Make ``dataset``'s verifier safe for untrusted text, where it needs it (idempotent)."""
    if task in LITERAL_EVAL_TASKS:
        # A module-level name shadows the builtin for every eval(...) the module's code makes.
        sys.modules[type(dataset).__module__].eval = literal_eval


def is_plain_math(text: str, vocabulary: str = CALCULUS) -> bool:
    """Whether ``text`` is arithmetic that sympy's ``parse_expr`` may evaluate (see the module doc),
    using only the names ``vocabulary`` allows (``ARITHMETIC``: none, ``POLYNOMIAL``: one-letter
    symbols, ``CALCULUS``: those, ``MATH_FUNCTIONS`` and commas). Numeric verifiers (puzzle24,
    countdown) evaluate the expression to a number, and ``exp(exp(exp(100)))`` alone kept that
    running for minutes: they get no names at all."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_MATH_CHARS:
        return False
    tokens = []
    position = 0
    while position < len(text):
        match = _MATH_TOKEN.match(text, position)
        if match is None:
            return False
        position = match.end()
        if not match.group().isspace():
            tokens.append(match.group())
    powers_of_groups = 0
    open_groups: list[bool] = []  # per open parenthesis: does it open a function call?
    for index, token in enumerate(tokens):
        if token == "(":
            open_groups.append(index > 0 and tokens[index - 1][0].isalpha())
            if sum(open_groups) > MAX_FUNCTION_NESTING:
                return False
        elif token == ")":
            if not open_groups:
                return False
            open_groups.pop()
        if token[0].isalpha() and (vocabulary == ARITHMETIC or token in _FORBIDDEN_LETTERS or (
                len(token) > 1 and (vocabulary != CALCULUS or token not in MATH_FUNCTIONS))):
            return False
        if token == "," and vocabulary != CALCULUS:
            return False
        if token in ("**", "^"):
            if index == 0 or not _small_exponent(tokens, index + 1):
                return False
            if tokens[index - 1] == ")":
                powers_of_groups += 1
    return powers_of_groups <= MAX_POWERS_OF_GROUPS


def _small_exponent(tokens: list[str], start: int) -> bool:
    """The exponent after a power operator: an optionally signed number <= MAX_EXPONENT or
    one-letter symbol, bare or in parentheses, or such a fraction in parentheses; and not itself
    raised to a power (``9**9**9`` is ``9**(9**9)``)."""
    position = start
    grouped = position < len(tokens) and tokens[position] == "("
    if grouped:
        position += 1
    if position < len(tokens) and tokens[position] in ("-", "+"):
        position += 1
    if position >= len(tokens) or not (_small_number(tokens[position]) or _is_letter(tokens[position])):
        return False
    position += 1
    if grouped:
        if tokens[position:position + 1] == ["/"]:
            if not (position + 1 < len(tokens) and _small_number(tokens[position + 1])):
                return False
            position += 2
        if tokens[position:position + 1] != [")"]:
            return False
        position += 1
    return tokens[position:position + 1] not in (["**"], ["^"])


def _small_number(token: str) -> bool:
    if not (token[0].isdigit() or token[0] == "."):
        return False
    try:
        return float(token) <= MAX_EXPONENT
    except ValueError:
        return False


def _is_letter(token: str) -> bool:
    return len(token) == 1 and token.isalpha() and token not in _FORBIDDEN_LETTERS
