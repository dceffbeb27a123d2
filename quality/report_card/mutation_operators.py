"""Mutation operators: small, plausible bugs planted in a reference program (pure functions).

:mod:`.mutants` scores what these produce through a domain's own scorer; hidden tests that still
pay a mutant are weak (or the mutant is equivalent, which a person judges from the change shown).

Python (``ast``, deterministic): every site of every operator is listed, then a seeded pick takes
a bounded number, a few of each operator in turn (:func:`pick`):

- ``arithmetic``: ``+`` <-> ``-``, ``*`` -> ``+``, ``/`` and ``//`` -> ``*``, ``%`` -> ``//``,
  ``**`` -> ``*``, a unary minus dropped (in expressions and augmented assignments);
- ``comparison``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=``, ``in`` <-> ``not in``,
  ``is`` <-> ``is not``;
- ``boolean``: ``and`` <-> ``or``, a ``not`` dropped, an ``if``/``while`` condition negated;
- ``constant``: an integer ``0`` -> ``1``, ``1`` -> ``0``, ``n`` -> ``n + 1``; ``True`` <-> ``False``;
- ``off_by_one``: a ``range`` bound, a slice bound or a subscript index moved by one;
- ``statement_deletion``: a statement replaced by ``pass``;
- ``statement_swap``: two neighbouring statements swapped;
- ``example_lookup`` (built by :func:`python_example_lookup`): the function replaced by a table of
  the examples its docstring shows, returning a trivial value for any other input.

A Python mutant whose compiled code equals the reference's (trivial compiler equivalence) is
dropped: it cannot be told apart by any test.

Bash (lines of a script; a heredoc body that is Python gets the Python operators):

- ``number``: a number in a command changed (``n`` -> ``n + 1``, ``n`` -> ``n - 1``; not inside a
  regex class such as ``[0-9]``);
- ``comparison``: ``-ge`` <-> ``-gt``, ``-le`` <-> ``-lt``, ``-eq`` <-> ``-ne``, ``=`` <-> ``!=``;
- ``flag``: one short option letter of a common tool dropped (``sort -rn`` -> ``sort -n``,
  ``uniq -c`` -> ``uniq``), ``-r`` added to a plain ``sort``;
- ``redirect``: ``>>`` -> ``>`` (the other way round only appends to a new file);
- ``pipe_stage_deletion``: one stage of a pipeline dropped;
- ``statement_deletion`` (a line, or a whole heredoc command, replaced by ``:``) and
  ``statement_swap`` (two neighbouring commands swapped);
- ``example_lookup`` (:func:`script_example_lookup`): a program the script writes replaced by one
  that prints the outputs the instruction shows for its example commands.

Bash mutants that ``bash -n`` rejects are stillborn and dropped (a syntax error tests nothing).
"""

from __future__ import annotations

import ast
import copy
import difflib
import json
import random
import re
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any, Callable, Sequence

PYTHON_OPERATORS = ("example_lookup", "comparison", "off_by_one", "arithmetic", "boolean", "constant",
                    "statement_deletion", "statement_swap")
BASH_OPERATORS = ("example_lookup", "number", "comparison", "flag", "redirect", "pipe_stage_deletion",
                  "statement_deletion", "statement_swap")
CHANGE_CHARS = 400  # a mutant's change as reported: enough to judge it, short enough for a table


@dataclass(frozen=True)
class Mutant:
    """One mutant: the operator that made it, the whole mutated program, and the change as a short
    diff (``-`` old line, ``+`` new line)."""

    operator: str
    program: str
    change: str


def change_between(old: str, new: str) -> str:
    """The lines that differ, as ``- old`` / ``+ new`` (stripped), capped at CHANGE_CHARS."""
    lines = [f"{line[0]} {line[1:].strip()}" for line in difflib.unified_diff(old.splitlines(), new.splitlines(),
                                                                               lineterm="", n=0)
             if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    text = "\n".join(lines)
    return text if len(text) <= CHANGE_CHARS else text[:CHANGE_CHARS - 3] + "..."


def pick(candidates: Sequence[Mutant], limit: int, rng: random.Random, order: Sequence[str]) -> list[Mutant]:
    """At most ``limit`` distinct mutants: each operator's candidates shuffled, then taken one per
    operator in turn (``order`` first, so ``example_lookup`` is always tried), so every operator
    with a site is represented before any gets a second."""
    by_operator: dict[str, list[Mutant]] = {}
    for mutant in candidates:
        by_operator.setdefault(mutant.operator, []).append(mutant)
    for group in by_operator.values():
        rng.shuffle(group)
    names = [n for n in order if n in by_operator] + sorted(set(by_operator) - set(order))
    chosen, seen = [], set()
    while len(chosen) < limit and any(by_operator[n] for n in names):
        for name in names:
            while by_operator[name]:
                mutant = by_operator[name].pop(0)
                if mutant.program not in seen:
                    seen.add(mutant.program)
                    chosen.append(mutant)
                    break
            if len(chosen) >= limit:
                break
    return chosen


# -- Python ---------------------------------------------------------------------------------------

_ARITHMETIC = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult,
               ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult}
_COMPARISON = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
               ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_BODY_FIELDS = ("body", "orelse", "finalbody")

# A site: (operator, index of the node in ast.walk order, how to change the copy of that node,
# and a description when a diff would not say it clearly).
Site = tuple[str, int, Callable[[ast.AST, dict], None], "str | None"]

# Builtins that change none of their arguments: a statement calling only these writes nothing else.
_PURE_CALLS = frozenset({"abs", "all", "any", "bin", "bool", "chr", "dict", "divmod", "enumerate", "filter", "float",
                         "frozenset", "hex", "int", "isinstance", "len", "list", "map", "max", "min", "oct", "ord",
                         "pow", "range", "repr", "reversed", "round", "set", "sorted", "str", "sum", "tuple", "zip"})


def is_docstring(statement: ast.stmt) -> bool:
    """A string standing alone as a statement (a docstring, or a comment written as a string)."""
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def _parents(root: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(root) for child in ast.iter_child_nodes(node)}


def _replace(parents: dict, old: ast.AST, new: ast.AST) -> None:
    parent = parents[id(old)]
    for name, value in ast.iter_fields(parent):
        if value is old:
            setattr(parent, name, new)
            return
        if isinstance(value, list):
            for i, item in enumerate(value):
                if item is old:
                    value[i] = new
                    return
    raise LookupError("node not found under its parent")


def _plus(node: ast.expr, amount: int) -> ast.expr:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return ast.Constant(node.value + amount)
    return ast.BinOp(node, ast.Add() if amount > 0 else ast.Sub(), ast.Constant(abs(amount)))


def _statement_lists(scope: ast.AST) -> list[tuple[ast.AST, str, list[ast.stmt]]]:
    """Every statement list under ``scope`` (its own body included): (owner, field, list)."""
    lists = []
    for node in ast.walk(scope):
        for name in _BODY_FIELDS:
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                lists.append((node, name, body))
    return lists


def _annotation_nodes(scope: ast.AST) -> set[int]:
    """Nodes inside type annotations (``List[int]`` is not code a test can reach)."""
    roots = []
    for node in ast.walk(scope):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
    return {id(n) for root in roots for n in ast.walk(root)}


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _effects(statement: ast.stmt) -> tuple[set[str], set[str]] | None:
    """(names read, names written) by running a statement, or None when it may do more than that
    (return, raise, break, yield, a call that may change something)."""
    if isinstance(statement, (ast.Import, ast.ImportFrom)):  # binds names (modules are cached)
        return set(), {(a.asname or a.name).split(".")[0] for a in statement.names}
    if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        # defining binds the name; only decorators, defaults and bases run now
        reads: set[str] = set()
        for part in [*statement.decorator_list, *getattr(statement, "bases", []),
                     *(getattr(statement.args, "defaults", []) if hasattr(statement, "args") else [])]:
            effects = _effects(ast.Expr(part))
            if effects is None:
                return None
            reads |= effects[0] | effects[1]
        return reads, {statement.name}
    reads, writes = set(), set()
    for node in ast.walk(statement):
        if isinstance(node, (ast.Return, ast.Raise, ast.Break, ast.Continue, ast.Yield, ast.YieldFrom, ast.Await,
                             ast.Global, ast.Nonlocal, ast.Import, ast.ImportFrom, ast.FunctionDef,
                             ast.AsyncFunctionDef, ast.ClassDef, ast.Delete, ast.Assert, ast.With, ast.Try)):
            return None
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else writes).add(node.id)
        elif isinstance(node, (ast.Attribute, ast.Subscript)) and not isinstance(node.ctx, ast.Load):
            name = _root_name(node)
            if name is None:
                return None
            writes.add(name)
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in _PURE_CALLS:
                continue
            if isinstance(node.func, ast.Attribute) and _root_name(node.func) is not None:
                writes.add(_root_name(node.func))  # a method may change its object
                continue
            if isinstance(node.func, ast.Lambda):
                continue
            return None
    return reads, writes


def _independent(first: ast.stmt, second: ast.stmt) -> bool:
    """Whether swapping two statements cannot change anything (no name one writes is read or
    written by the other, and neither does more than read and write names): such a swap is an
    equivalent mutant, left out."""
    a, b = _effects(first), _effects(second)
    if a is None or b is None:
        return False
    (reads_a, writes_a), (reads_b, writes_b) = a, b
    return not (writes_a & (reads_b | writes_b) or writes_b & reads_a)


def _first_line(statement: ast.stmt) -> str:
    line = ast.unparse(statement).split("\n", 1)[0]
    return line if len(line) <= 80 else line[:77] + "..."


def python_sites(scope: ast.AST) -> list[Site]:
    """Every mutation site of the Python operators under ``scope`` (a module or a function),
    leaving alone strings standing as statements, type annotations and swaps that cannot matter."""
    sites: list[Site] = []
    index_of = {id(node): i for i, node in enumerate(ast.walk(scope))}
    annotations = _annotation_nodes(scope)

    def site(operator: str, node: ast.AST, change: Callable[[ast.AST, dict], None], label: str | None = None) -> None:
        sites.append((operator, index_of[id(node)], change, label))

    for node in ast.walk(scope):
        if id(node) in annotations:
            continue
        if isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _ARITHMETIC:
            site("arithmetic", node, lambda n, _: setattr(n, "op", _ARITHMETIC[type(n.op)]()))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) \
                and not isinstance(node.operand, ast.Constant):
            site("arithmetic", node, lambda n, parents: _replace(parents, n, n.operand))
        elif isinstance(node, ast.Compare):
            for position, op in enumerate(node.ops):
                if type(op) in _COMPARISON:
                    site("comparison", node,
                         lambda n, _, p=position: n.ops.__setitem__(p, _COMPARISON[type(n.ops[p])]()))
        elif isinstance(node, ast.BoolOp):
            site("boolean", node, lambda n, _: setattr(n, "op", ast.Or() if isinstance(n.op, ast.And) else ast.And()))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            site("boolean", node, lambda n, parents: _replace(parents, n, n.operand))
        elif isinstance(node, (ast.If, ast.While, ast.IfExp)):
            site("boolean", node, lambda n, _: setattr(n, "test", ast.UnaryOp(ast.Not(), n.test)))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            site("constant", node, lambda n, _: setattr(n, "value", not n.value))
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            site("constant", node, lambda n, _: setattr(n, "value", {0: 1, 1: 0}.get(n.value, n.value + 1)))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and node.args \
                and not node.keywords and len(node.args) <= 3:
            stop = 0 if len(node.args) == 1 else 1
            site("off_by_one", node, lambda n, _, s=stop: n.args.__setitem__(s, _plus(n.args[s], 1)))
            if len(node.args) >= 2:
                site("off_by_one", node, lambda n, _: n.args.__setitem__(0, _plus(n.args[0], 1)))
        elif isinstance(node, ast.Slice):
            if node.lower is not None:
                site("off_by_one", node, lambda n, _: setattr(n, "lower", _plus(n.lower, 1)))
            if node.upper is not None:
                site("off_by_one", node, lambda n, _: setattr(n, "upper", _plus(n.upper, -1)))
        elif isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Slice, ast.Tuple)) \
                and isinstance(node.ctx, ast.Load) \
                and not (isinstance(node.slice, ast.Constant) and not type(node.slice.value) is int):
            site("off_by_one", node, lambda n, _: setattr(n, "slice", _plus(n.slice, 1)))
    for owner, field_name, body in _statement_lists(scope):
        for position, statement in enumerate(body):
            if is_docstring(statement):
                continue
            if not isinstance(statement, ast.Pass):
                site("statement_deletion", statement, lambda n, parents: _replace(parents, n, ast.Pass()))
            following = body[position + 1] if position + 1 < len(body) else None
            if following is not None and not is_docstring(following) and not _independent(statement, following):
                site("statement_swap", owner, lambda n, _, p=position, f=field_name: _swap(getattr(n, f), p),
                     f"swapped: `{_first_line(statement)}` <-> `{_first_line(following)}`")
    return sites


def _swap(body: list, position: int) -> None:
    body[position], body[position + 1] = body[position + 1], body[position]


def _code_signature(code) -> tuple:
    """What a code object does, without line numbers or names of the file."""
    consts = tuple(_code_signature(c) if hasattr(c, "co_code") else (type(c).__name__, repr(c)) for c in code.co_consts)
    return code.co_code, consts, code.co_names, code.co_varnames, code.co_argcount


def compiled_signature(source: str) -> tuple | None:
    try:
        return _code_signature(compile(source, "<mutant>", "exec"))
    except (SyntaxError, ValueError, RecursionError):
        return None


def python_mutants(module: ast.Module, scope: ast.AST, render: Callable[[ast.Module], str]) -> list[Mutant]:
    """Every mutant of ``scope`` (a node inside ``module``), as ``render(mutated module)``; mutants
    that do not compile or compile to the reference's code are dropped."""
    reference = render(module)
    reference_signature = compiled_signature(reference)
    walk_root = list(ast.walk(module))
    scope_index = next(i for i, node in enumerate(walk_root) if node is scope)
    mutants, seen = [], {reference}
    for operator, index, change, label in python_sites(scope):
        mutated = copy.deepcopy(module)
        scope_copy = list(ast.walk(mutated))[scope_index]
        target = list(ast.walk(scope_copy))[index]
        try:
            change(target, _parents(mutated))
            ast.fix_missing_locations(mutated)
            program = render(mutated)
        except (LookupError, ValueError, TypeError, RecursionError):
            continue
        if program in seen:
            continue
        seen.add(program)
        signature = compiled_signature(program)
        if signature is None or signature == reference_signature:
            continue
        mutants.append(Mutant(operator, program, label or change_between(reference, program)))
    return mutants


# -- examples a prompt shows ------------------------------------------------------------------------

_EXAMPLE_SEPARATORS = re.compile(r"\s*(?:#\s*)?(?:==>|=>|->|➞|→|==|=|should\s+return|returns?|is)\s*", re.I)


def _balanced(text: str, start: int) -> int | None:
    """Index just past the parenthesis that closes the one at ``start``."""
    depth, quote = 0, None
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if ch == "\\":
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def _literal_prefix(text: str) -> tuple[bool, Any]:
    """The longest prefix of ``text`` that is a Python literal (``true``/``false`` read as bools)."""
    text = text.strip()
    for end in range(len(text), 0, -1):
        chunk = text[:end].strip().rstrip(".,;")
        if not chunk:
            continue
        lowered = chunk.lower()
        if lowered in ("true", "false") and chunk != lowered.capitalize():
            return True, lowered == "true"
        try:
            return True, ast.literal_eval(chunk)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return False, None


def docstring_examples(text: str, function: str) -> list[tuple[tuple, Any]]:
    """``[(arguments, value)]`` for each example call of ``function`` that ``text`` shows with its
    result: doctest style (``>>> f(1)`` then ``2``) or inline (``f(1) == 2``, ``f(1) => 2``,
    ``f(1) ➞ 2``, ``f(1) returns 2``, ``f(1) should return 2``). Arguments and results must be
    Python literals; the first result shown for an argument list wins."""
    examples, seen = [], set()
    for match in re.finditer(rf"(?<![\w.]){re.escape(function)}\(", text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        if text[line_start:match.start()].strip().startswith("def"):
            continue
        end = _balanced(text, match.end() - 1)
        if end is None:
            continue
        try:
            arguments = ast.literal_eval(f"({text[match.end():end - 1]},)") if text[match.end():end - 1].strip() else ()
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        rest_of_line = text[end:].split("\n", 1)[0]
        separator = _EXAMPLE_SEPARATORS.match(rest_of_line)
        if separator and rest_of_line[separator.end():].strip():
            found, value = _literal_prefix(rest_of_line[separator.end():])
        elif not rest_of_line.strip() and ">>>" in text[line_start:match.start()]:
            following = [line for line in text[end:].split("\n")[1:3] if line.strip()]
            found, value = _literal_prefix(following[0]) if following and ">>>" not in following[0] else (False, None)
        else:
            found, value = False, None
        key = repr(arguments)
        if found and key not in seen:
            seen.add(key)
            examples.append((arguments, value))
    return examples


def _trivial(value: Any) -> Any:
    """The empty value of ``value``'s type (0, "", [], False, None...)."""
    try:
        return type(value)()
    except TypeError:
        return None


def python_example_lookup(function: ast.FunctionDef,
                          examples: Sequence[tuple[tuple, Any]]) -> list[tuple[ast.FunctionDef, str]]:
    """``function`` rewritten as a lookup table of ``examples``: the shown value when the arguments
    match an example, else (one variant each) the most common shown value or the trivial value of
    its type; with a description. Empty when there are no examples or the signature takes
    ``*args``/``**kwargs``."""
    parameters = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    if not examples or function.args.vararg or function.args.kwarg or function.args.kwonlyargs:
        return []
    usable = [(args, value) for args, value in examples if len(args) == len(parameters)]
    if not usable:
        return []
    values = [value for _, value in usable]
    common = max(values, key=lambda v: sum(1 for w in values if repr(w) == repr(v)))
    variants = []
    for fallback in (common, _trivial(common)):
        body = (f"for _arguments, _value in {usable!r}:\n"
                f"    if ({''.join(p + ', ' for p in parameters)}) == _arguments:\n"
                f"        return _value\n"
                f"return {fallback!r}\n")
        try:
            statements = ast.parse(body).body
        except SyntaxError:  # a value whose repr is not Python (an object): no lookup table
            return []
        rewritten = copy.deepcopy(function)
        rewritten.body = statements
        first_args, first_value = usable[0]
        shown = f"{function.name}{first_args!r}"[:60].replace(",)", ")")
        variants.append((ast.fix_missing_locations(rewritten),
                         f"lookup table of the {len(usable)} docstring example(s) (e.g. {shown} -> "
                         f"{first_value!r:.40}), else return {fallback!r:.40}"))
    return variants


# -- bash -----------------------------------------------------------------------------------------

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_NUMBER = re.compile(r"(?:(?<=-[A-Za-z])|(?<![\w$.&\\]))(\d+)(?![\w.]|[<>])")
_TEST_OPS = {"-ge": "-gt", "-gt": "-ge", "-le": "-lt", "-lt": "-le", "-eq": "-ne", "-ne": "-eq"}
_FLAG_TOOLS = ("sort", "uniq", "grep", "cut", "head", "tail", "wc", "tr", "find", "sed", "rm", "cp", "mv",
               "mkdir", "ls", "paste")
_STRUCTURE = re.compile(r"^\s*(do|done|then|fi|else|esac|;;|\}|\{|\(|\))\s*$")


@dataclass(frozen=True)
class ScriptUnit:
    """A command of a script: its first line, and for a heredoc command the whole block
    (``lines[start:end]``), its body, and what the body is."""

    start: int
    end: int
    body: tuple[int, int] | None = None
    body_kind: str = ""  # "python" (a Python program), "bash" (a script it writes), "" (data)
    target: str = ""     # the file a heredoc body is written to, if any


def _is_header(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#") or re.match(r"^set\s+-[a-z]+(\s+\w+)*$", stripped) is not None


def script_units(lines: Sequence[str]) -> list[ScriptUnit]:
    """The script's commands, heredoc blocks kept whole (comments, blanks and ``set -e``-style
    lines are not commands)."""
    units, i = [], 0
    while i < len(lines):
        line = lines[i]
        if _is_header(line) or _STRUCTURE.match(line):
            i += 1
            continue
        heredoc = _HEREDOC.search(line)
        if heredoc and not line.lstrip().startswith("#"):
            delimiter, strip_tabs = heredoc.group(2), "<<-" in line[heredoc.start():heredoc.start() + 3]
            end = i + 1
            while end < len(lines) and (lines[end].lstrip("\t") if strip_tabs else lines[end]) != delimiter:
                end += 1
            body = "\n".join(lines[i + 1:end])
            target_match = re.search(r">\s*(\S+)", line[:heredoc.start()] + line[heredoc.end():])
            target = target_match.group(1) if target_match else ""
            kind = ""
            if target.endswith(".sh"):
                kind = "bash"
            elif re.search(r"\bpython3?\b", line) or target.endswith(".py"):
                kind = "python" if _parses(body) else ""
            units.append(ScriptUnit(i, min(end + 1, len(lines)), (i + 1, end), kind, target))
            i = end + 1
            continue
        units.append(ScriptUnit(i, i + 1))
        i += 1
    return units


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
        return True
    except (SyntaxError, ValueError):
        return False


def _word_spans(line: str) -> list[tuple[int, int, str]]:
    """``(start, end, text)`` of each word outside quotes (quoted text is one word, kept as is)."""
    spans, i = [], 0
    while i < len(line):
        if line[i].isspace():
            i += 1
            continue
        start, quote = i, None
        while i < len(line) and (quote or not line[i].isspace()):
            if quote:
                if line[i] == quote:
                    quote = None
            elif line[i] in "'\"":
                quote = line[i]
            i += 1
        spans.append((start, i, line[start:i]))
    return spans


def _outside_quotes(line: str) -> list[bool]:
    mask, quote = [], None
    for ch in line:
        if quote:
            mask.append(False)
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            mask.append(False)
        else:
            mask.append(True)
    return mask


def bash_line_mutants(line: str) -> list[tuple[str, str]]:
    """``[(operator, new line)]`` for one command line."""
    out: list[tuple[str, str]] = []
    if line.lstrip().startswith("#"):
        return out
    classes = [m.span() for m in re.finditer(r"\[[^\]]*\]", line)]  # regex classes: [0-9] is not a number
    for match in _NUMBER.finditer(line):
        if any(start <= match.start() < end for start, end in classes):
            continue
        value = int(match.group(1))
        for new in sorted({value + 1, value - 1} - {-1}):
            out.append(("number", line[:match.start(1)] + str(new) + line[match.end(1):]))
    outside = _outside_quotes(line)
    words = _word_spans(line)
    for start, end, word in words:
        if word in _TEST_OPS:
            out.append(("comparison", line[:start] + _TEST_OPS[word] + line[end:]))
        elif word in ("=", "==", "!=") and outside[start]:
            out.append(("comparison", line[:start] + ("=" if word == "!=" else "!=") + line[end:]))
    for position, (start, end, word) in enumerate(words):
        tool = word.rsplit("/", 1)[-1]
        if tool not in _FLAG_TOOLS:
            continue
        flags = []
        for f_start, f_end, flag in words[position + 1:]:
            if not re.fullmatch(r"-[A-Za-z]+", flag):
                if flag.startswith("-") or re.fullmatch(r"[+-]?\d+", flag):
                    continue  # an option with a value (-n 3, -d,): keep looking
                break
            flags.append((f_start, f_end, flag))
        for f_start, f_end, flag in flags:
            for letter in sorted(set(flag[1:])):
                rest = flag.replace(letter, "", 1)
                new = line[:f_start] + (rest if rest != "-" else "") + line[f_end:]
                out.append(("flag", re.sub(r"  +", " ", new) if rest == "-" else new))
        if tool == "sort" and not any("r" in flag for *_, flag in flags):
            out.append(("flag", line[:end] + " -r" + line[end:]))
    for match in re.finditer(r"(?<![>&\d])>>(?![>&])", line):  # > -> >> on a new file changes nothing
        if outside[match.start()]:
            out.append(("redirect", line[:match.start()] + ">" + line[match.end():]))
    pipes = [i for i, ch in enumerate(line) if ch == "|" and outside[i] and line[i - 1:i] != "|"
             and line[i + 1:i + 2] != "|"]
    if pipes:
        bounds = [-1, *pipes, len(line)]
        for k in range(1, len(bounds) - 1):  # drop the stage after pipe k (not the first stage)
            stage_end = bounds[k + 1]
            tail = line[stage_end:] if stage_end < len(line) else ""
            redirect = re.search(r"\s*>>?\s*\S+\s*$", line[bounds[k] + 1:stage_end]) if k == len(bounds) - 2 else None
            kept = (line[:bounds[k]].rstrip() + (redirect.group(0) if redirect else "")
                    + (" " + tail.lstrip() if tail else ""))
            out.append(("pipe_stage_deletion", kept.rstrip()))
    return [(op, new) for op, new in out if new != line]


def bash_mutants(script: str, python_body_mutants: Callable[[str], list[Mutant]] | None = None) -> list[Mutant]:
    """Every mutant of a bash script; a heredoc body that is a Python program gets
    ``python_body_mutants(body)`` (mutants of the body, each a whole body). Whether each one parses
    is left to :func:`bash_parses` (a subprocess each, so only for the mutants picked)."""
    lines = script.split("\n")
    units = script_units(lines)
    candidates: list[tuple[str, list[str], str | None]] = []

    def with_lines(start: int, end: int, replacement: Sequence[str]) -> list[str]:
        return [*lines[:start], *replacement, *lines[end:]]

    for unit in units:
        for operator, new in bash_line_mutants(lines[unit.start]):
            candidates.append((operator, with_lines(unit.start, unit.start + 1, [new]), None))
        if unit.body is not None:
            body_start, body_end = unit.body
            if unit.body_kind == "python" and python_body_mutants is not None:
                for mutant in python_body_mutants("\n".join(lines[body_start:body_end])):
                    # the body is rewritten by ast.unparse: its own diff says what the mutant changed
                    candidates.append((mutant.operator, with_lines(body_start, body_end, mutant.program.split("\n")),
                                       mutant.change))
            elif unit.body_kind == "bash":
                for index in range(body_start, body_end):
                    if _is_header(lines[index]):
                        continue
                    for operator, new in bash_line_mutants(lines[index]):
                        candidates.append((operator, with_lines(index, index + 1, [new]), None))
        candidates.append(("statement_deletion", with_lines(unit.start, unit.end, [":"]), None))
    for first, second in zip(units, units[1:]):
        block_a, block_b = lines[first.start:first.end], lines[second.start:second.end]
        between = lines[first.end:second.start]
        candidates.append(("statement_swap", with_lines(first.start, second.end, [*block_b, *between, *block_a]),
                           f"swapped: `{lines[first.start].strip()}` <-> `{lines[second.start].strip()}`"))
    mutants, seen = [], {script}
    for operator, new_lines, change in candidates:
        program = "\n".join(new_lines)
        if program in seen:
            continue
        seen.add(program)
        mutants.append(Mutant(operator, program, change or change_between(script, program)))
    return mutants


def bash_parses(script: str) -> bool:
    """Whether ``bash -n`` accepts the script (parsing only: nothing runs)."""
    try:
        return subprocess.run(["bash", "-n"], input=script.encode(), capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


_SHOWN_RUN = re.compile(r"`([^`\n]+)`(?:[^`.\n]{0,40}?)\s(?:must\s+)?prints?\s+(.+?)"
                        r"(?=\s\(|\)|\.\s|\.$|;|\s+and\s|,\s+and\s|\n|$)")


def instruction_examples(instruction: str) -> list[tuple[list[str], str]]:
    """``[(command words, output)]`` for each "`command` prints output" an instruction shows."""
    examples = []
    for match in _SHOWN_RUN.finditer(instruction):
        try:
            words = shlex.split(match.group(1))
        except ValueError:
            continue
        output = match.group(2).strip().rstrip(",")
        if words and output:
            examples.append((words, output))
    return examples


def script_example_lookup(script: str, instruction: str) -> list[Mutant]:
    """Mutants whose program (a file the script writes from a heredoc and that an example command of
    the instruction runs) prints the output the instruction shows for that example's arguments,
    and for any other arguments the most common shown output."""
    lines = script.split("\n")
    examples = instruction_examples(instruction)
    mutants = []
    for unit in script_units(lines):
        if unit.body is None or not unit.target:
            continue
        name = unit.target.rsplit("/", 1)[-1]
        table = {}
        for words, output in examples:
            runs = [i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] == name]
            if runs:
                table.setdefault(json.dumps(words[runs[0] + 1:]), output)
        if not table:
            continue
        outputs = list(table.values())
        fallback = max(outputs, key=outputs.count)
        if name.endswith(".py"):
            body = ["import json, sys", f"TABLE = {table!r}",
                    f"print(TABLE.get(json.dumps(sys.argv[1:]), {fallback!r}))"]
        else:
            as_json = "python3 -c 'import json, sys; print(json.dumps(sys.argv[1:]))'"
            body = ["#!/usr/bin/env bash", f'case "$({as_json} "$@")" in']
            body += [f"  {shlex.quote(key)}) echo {shlex.quote(value)} ;;" for key, value in table.items()]
            body += [f"  *) echo {shlex.quote(fallback)} ;;", "esac"]
        start, end = unit.body
        program = "\n".join([*lines[:start], *body, *lines[end:]])
        shown = "; ".join(f"{' '.join(json.loads(k)) or '(no arguments)'} -> {v}" for k, v in table.items())
        mutants.append(Mutant("example_lookup", program,
                              f"{name} replaced by a lookup table of the instruction's examples ({shown:.200}), "
                              f"else print {fallback!r}"))
    return mutants
