"""Test strength: the share of mutants of a domain's reference solutions that its hidden tests kill.

A verifier that runs tests is only as strong as its tests. Each item's reference solution (the
completion that scores 1.0) is mutated with small, plausible bugs (:mod:`.mutation_operators`:
operator and constant changes, off-by-one, deleted or swapped statements, and a lookup table of
the examples the prompt shows), and every mutant is scored through the domain's own scorer,
``Domain.safe_score_many``, as training scores a completion (code runs sandboxed). A mutant
scoring below 1.0 is killed. A surviving mutant either shows a weak test (the lookup table of the
prompt's examples is never a correct solution) or is equivalent to the reference (``a <= b`` where
the inputs never tie); the report names every item with a survivor and shows each surviving change,
so a person can judge. Mutants whose compiled code equals the reference's are dropped beforehand
(trivial compiler equivalence), and so are bash mutants ``bash -n`` rejects (stillborn).

Which domains have tests to mutate is a capability of their samples, not a list of names
(:func:`reference_program`):

- a domain of terminal tasks (``Domain.episode_task``): the reference is the task's ``solution.sh``
  (the sample's ``answer``), mutated as bash, with Python heredoc bodies mutated as Python. Each
  mutant runs as a single-turn completion (``score``'s view of the task) under ``timeout``, so a
  mutant that loops costs ``script_timeout_s``, not the task's whole episode budget;
- a sample in HumanEval's shape: ``metadata`` holds ``code_prompt`` (a Python prompt ending in a
  function's signature and docstring) and ``entry_point``, and ``code_prompt + answer`` defines
  that function; the function is mutated (its docstring left out) and sent as a fenced whole
  ``def``, which a HumanEval-style scorer puts in place of the prompt's stub.

Any other domain has no reference program: :func:`test_strength` returns None for it.

Every item's unmutated reference, sent the same way, is the control: an item whose control does
not score 1.0 is skipped (named in ``skipped``) and counts nowhere. Everything is scored in one
batch, so a domain's own parallel scorer (``code``'s sandbox pool, the task suite's thread pool)
spreads the work. Cost: items x (``mutants_per_item`` + 1) scorings; with the defaults ``code``
is 1,604 sandbox runs (164 items) and the built-in terminal suite 189 episodes (28 tasks).
"""

from __future__ import annotations

import ast
import copy
import random
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from domains import Domain
from quality.report_card import mutation_operators as ops

PYTHON_FUNCTION = "python_function"
BASH_SCRIPT = "bash_script"
MAX_ITEMS = 10_000  # "every item" of a domain whose samples never run out (a procedural one)
_SCRIPT_FILE = "/tmp/assay-mutant.sh"  # the episode's private /tmp, fresh for each command
_SCRIPT_END = "ASSAY_MUTANT_SCRIPT_END"


@dataclass(frozen=True)
class MutationConfig:
    """Settings of a mutation run.

    - ``mutants_per_item``: at most this many mutants per item, a few of each operator in turn
      (the example lookup always first); the run's cost is about items x (this + 1) scorings.
    - ``seed``: which sites are picked when an item has more than ``mutants_per_item``.
    - ``script_timeout_s``: wall-clock seconds a terminal mutant's script may run (``timeout``).
    """

    mutants_per_item: int = field(default=10, metadata={"help": "mutants per item (bounded cost)"})
    seed: int = field(default=0, metadata={"help": "picks the sites when there are more than the bound"})
    script_timeout_s: float = field(default=15.0, metadata={"help": "seconds a mutated solution script may run"})

    def __post_init__(self) -> None:
        if not isinstance(self.mutants_per_item, int) or self.mutants_per_item < 1:
            raise ValueError(f"mutants_per_item must be a positive int, got {self.mutants_per_item!r}; "
                             "each item needs at least one mutant to test")
        if not self.script_timeout_s > 0:
            raise ValueError(f"script_timeout_s must be > 0 seconds, got {self.script_timeout_s!r}")


@dataclass
class MutationReport:
    """One domain's mutation run.

    ``items``: items whose control scored 1.0 (the ones measured); ``mutants`` and ``killed`` over
    them; ``kill_rate`` = killed / mutants (None without mutants); ``weak_items``: every item with
    a surviving mutant, ``{"item", "mutants", "killed", "survivors": [{"operator", "mutant"}]}``
    (``mutant``: the change as a short diff), those with a surviving example lookup first;
    ``operators``: ``{operator: {"mutants", "killed"}}``; ``skipped``: ``{"item", "why"}`` for items
    not measured; ``error``: why the run failed (then nothing else is reliable)."""

    domain: str
    items: int = 0
    mutants: int = 0
    killed: int = 0
    kill_rate: float | None = None
    weak_items: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    kind: str = ""
    operators: dict[str, dict[str, int]] = field(default_factory=dict)
    skipped: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        if self.error:
            return f"mutation testing failed: {self.error}"
        if not self.mutants:
            return f"no mutants over {self.items} items"
        weak = ", ".join(w["item"] for w in self.weak_items[:5]) + (" ..." if len(self.weak_items) > 5 else "")
        survivors = f"{len(self.weak_items)} items with survivors: {weak}" if self.weak_items else "every mutant killed"
        return f"kill rate {self.kill_rate:.1%} ({self.killed}/{self.mutants} mutants, {self.items} items); {survivors}"


@dataclass(frozen=True)
class ReferenceProgram:
    """An item's reference solution as a program that can be mutated, and how a version of it is
    sent to the domain's scorer."""

    kind: str
    source: str
    instruction: str = ""
    entry_point: str = ""

    def mutants(self, config: MutationConfig, rng: random.Random) -> list[ops.Mutant]:
        if self.kind == PYTHON_FUNCTION:
            found = _function_mutants(self.source, self.entry_point, self.instruction)
            return ops.pick(found, config.mutants_per_item, rng, ops.PYTHON_OPERATORS)
        candidates = [*ops.script_example_lookup(self.source, self.instruction),
                      *ops.bash_mutants(self.source, _module_mutants)]
        ordered = ops.pick(candidates, len(candidates), rng, ops.BASH_OPERATORS)
        chosen = []
        for mutant in ordered:  # bash -n is a subprocess: only as many as are kept
            if ops.bash_parses(mutant.program):
                chosen.append(mutant)
                if len(chosen) >= config.mutants_per_item:
                    break
        return chosen

    def reference(self) -> str:
        """The unmutated program as the mutants are written (the control)."""
        return _render_function(ast.parse(self.source), self.entry_point) if self.kind == PYTHON_FUNCTION \
            else self.source

    def completion(self, program: str, config: MutationConfig) -> str:
        if self.kind == PYTHON_FUNCTION:
            return f"```python\n{program}\n```\n"
        return (f"cat > {_SCRIPT_FILE} <<'{_SCRIPT_END}'\n{program}\n{_SCRIPT_END}\n"
                f"timeout -k 2 {config.script_timeout_s:g} bash {_SCRIPT_FILE}\n")


def reference_program(domain: Domain, sample: dict) -> ReferenceProgram | None:
    """The sample's reference solution as a program, or None when the domain has none to mutate
    (see the module docstring for the two shapes recognised)."""
    answer = sample.get("answer")
    if not isinstance(answer, str) or not answer.strip():
        return None
    if domain.episode_task is not None:
        return ReferenceProgram(BASH_SCRIPT, answer, instruction=str(sample.get("prompt") or ""))
    meta = sample.get("metadata") or {}
    prompt, entry_point = meta.get("code_prompt"), meta.get("entry_point")
    if not (isinstance(prompt, str) and isinstance(entry_point, str) and entry_point.isidentifier()):
        return None
    try:
        tree = ast.parse(prompt + answer)
    except (SyntaxError, ValueError):
        return None
    if _entry_function(tree, entry_point) is None:
        return None
    return ReferenceProgram(PYTHON_FUNCTION, prompt + answer, instruction=prompt, entry_point=entry_point)


def _entry_function(tree: ast.Module, entry_point: str) -> ast.FunctionDef | None:
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == entry_point]
    return found[-1] if found else None


def _without_docstring(function: ast.FunctionDef) -> ast.FunctionDef:
    clone = copy.copy(function)  # shallow: only the body list is replaced
    if len(function.body) > 1 and ops.is_docstring(function.body[0]):
        clone.body = function.body[1:]
    return clone


def _render_function(module: ast.Module, entry_point: str) -> str:
    return ast.unparse(_without_docstring(_entry_function(module, entry_point)))


def _function_mutants(source: str, entry_point: str, prompt: str) -> list[ops.Mutant]:
    module = ast.parse(source)
    function = _entry_function(module, entry_point)
    mutants = ops.python_mutants(module, function, lambda tree: _render_function(tree, entry_point))
    examples = ops.docstring_examples(prompt, entry_point)
    for table, description in ops.python_example_lookup(_without_docstring(function), examples):
        mutants.append(ops.Mutant("example_lookup", ast.unparse(table), description))
    return mutants


def _module_mutants(body: str) -> list[ops.Mutant]:
    module = ast.parse(body)
    return ops.python_mutants(module, module, ast.unparse)


def _items(domain: Domain, items: int | None) -> list[dict]:
    """Eval items first, then train (both splits feed training or sweeps), each once."""
    wanted = items if items is not None else MAX_ITEMS
    rows, seen = [], set()
    for split in ("eval", "train"):
        if len(rows) >= wanted:
            break
        for row in domain.generate(split, wanted - len(rows), seed=0):
            if row["id"] not in seen:
                seen.add(row["id"])
                rows.append(row)
    return rows


def test_strength(domain: Domain, *, items: int | None = None, config: MutationConfig | None = None,
                  samples: Sequence[dict] | None = None) -> MutationReport | None:
    """Mutation kill rate of ``domain``'s hidden tests over ``items`` items (None: all, up to
    MAX_ITEMS, eval first) or the given ``samples``; None when the domain's samples carry no reference program (see the
    module docstring)."""
    config = config or MutationConfig()
    if items is not None and (not isinstance(items, int) or items < 1):
        raise ValueError(f"items must be a positive int or None (every item), got {items!r}")
    started = time.monotonic()
    report = MutationReport(domain.name)
    try:
        probe = list(samples[:1]) if samples is not None else _items(domain, 1)
    except Exception as exc:  # noqa: BLE001 - a domain that would be mutated says why it was not
        if domain.episode_task is None:
            return None
        report.error = f"samples raised {type(exc).__name__}: {exc}"[:500]
        return report
    if not probe or reference_program(domain, probe[0]) is None:
        return None
    try:
        rows = list(samples)[:items] if samples is not None else _items(domain, items)
        batch: list[tuple[str, dict]] = []
        plan: list[tuple[dict, list[ops.Mutant]]] = []
        for row in rows:
            program = reference_program(domain, row)
            if program is None:
                report.skipped.append({"item": row["id"], "why": "no reference program"})
                continue
            report.kind = report.kind or program.kind
            mutants = program.mutants(config, random.Random(f"{config.seed}:{row['id']}"))
            batch.append((program.completion(program.reference(), config), row))
            batch.extend((program.completion(m.program, config), row) for m in mutants)
            plan.append((row, mutants))
        scores = domain.safe_score_many([c for c, _ in batch], [s for _, s in batch]) if batch else []
    except Exception as exc:  # noqa: BLE001 - reported as the run's failure, never as a kill rate
        report.error = f"{type(exc).__name__}: {exc}"[:500]
        report.seconds = round(time.monotonic() - started, 2)
        return report
    position = 0
    for row, mutants in plan:
        control, verdicts = scores[position], scores[position + 1:position + 1 + len(mutants)]
        position += 1 + len(mutants)
        if control != 1.0:
            report.skipped.append({"item": row["id"], "why": f"the unmutated reference scored {control:g}"})
            continue
        report.items += 1
        survivors = []
        for mutant, score in zip(mutants, verdicts):
            tally = report.operators.setdefault(mutant.operator, {"mutants": 0, "killed": 0})
            tally["mutants"] += 1
            if score < 1.0:
                tally["killed"] += 1
            else:
                survivors.append({"operator": mutant.operator, "mutant": mutant.change})
        report.mutants += len(mutants)
        report.killed += len(mutants) - len(survivors)
        if survivors:
            report.weak_items.append({"item": row["id"], "mutants": len(mutants),
                                      "killed": len(mutants) - len(survivors), "survivors": survivors})
    report.weak_items.sort(key=lambda w: (not any(s["operator"] == "example_lookup" for s in w["survivors"]),
                                          -len(w["survivors"]), w["item"]))
    report.kill_rate = report.killed / report.mutants if report.mutants else None
    report.seconds = round(time.monotonic() - started, 2)
    return report


test_strength.__test__ = False  # a library function named test_*: not for pytest to collect


__all__ = ["BASH_SCRIPT", "MAX_ITEMS", "MutationConfig", "MutationReport", "PYTHON_FUNCTION", "ReferenceProgram",
           "reference_program", "test_strength"]
