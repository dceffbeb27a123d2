"""Mutation testing of hidden tests (quality/report_card/mutants.py, mutation_operators.py): every
operator plants its bug in a small reference, a toy domain whose test checks one example gets a
low kill rate with the item and its lookup-table survivor named while a strong test kills, the
real weak HumanEval item's lookup table survived before its supplementary inputs and is killed
after, and the terminal suite's strengthened tasks kill their former survivors."""

from __future__ import annotations

import ast
import random
import shutil

import pytest

from domains import Domain, get_registry
from quality.report_card import mutants
from quality.report_card import mutation_operators as ops

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (`make install`)")

REFERENCE = '''
def window_total(values, size, limit):
    """Sum of the last `size` values, capped at limit.
    >>> window_total([1, 2, 3], 2, 10)
    5
    >>> window_total([4, 5, 6], 3, 12)
    12
    """
    if size == 0 and limit >= 0:
        return 0
    total = 0
    for i in range(len(values) - size, len(values)):
        total += values[i]
    recent = values[-size:]
    if total > limit:
        total = limit
    return total
'''


def _mutants_of(source: str, function: str) -> list[ops.Mutant]:
    module = ast.parse(source)
    scope = next(n for n in module.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return ops.python_mutants(module, scope, ast.unparse)


def _changes(found: list[ops.Mutant], operator: str) -> list[str]:
    return [m.change for m in found if m.operator == operator]


# -- operators --------------------------------------------------------------------------------------

def test_every_python_operator_plants_its_bug():
    found = _mutants_of(REFERENCE, "window_total")
    changes = {op: _changes(found, op) for op in ops.PYTHON_OPERATORS if op != "example_lookup"}
    assert all(changes.values()), {op: len(c) for op, c in changes.items()}
    assert "- total += values[i]\n+ total -= values[i]" in changes["arithmetic"]
    assert "- if total > limit:\n+ if total >= limit:" in changes["comparison"]
    assert "- if size == 0 and limit >= 0:\n+ if size != 0 and limit >= 0:" in changes["comparison"]
    assert "- if size == 0 and limit >= 0:\n+ if size == 0 or limit >= 0:" in changes["boolean"]
    assert "- total = 0\n+ total = 1" in changes["constant"]
    assert "- for i in range(len(values) - size, len(values)):\n+ for i in range(len(values) - size, len(values) + 1):" \
        in changes["off_by_one"]
    assert "- recent = values[-size:]\n+ recent = values[-size + 1:]" in changes["off_by_one"]
    assert "- total += values[i]\n+ total += values[i + 1]" in changes["off_by_one"]
    assert "- total = limit\n+ pass" in changes["statement_deletion"]
    assert "swapped: `total = 0` <-> `for i in range(len(values) - size, len(values)):`" in changes["statement_swap"]
    # `recent` is neither read nor written by the `if`: that swap is equivalent and not made
    assert not [c for c in changes["statement_swap"] if "`recent = values[-size:]` <-> `if total > limit:`" in c]


def test_docstrings_annotations_and_swaps_that_cannot_matter_are_left_alone():
    source = ('def f(xs: list[int], n: int = 1) -> list[int]:\n    """Doc 1."""\n    a = len(xs)\n    b = n + 1\n'
              '    c = a + b\n    return [c]\n')
    found = _mutants_of(source, "f")
    assert found and all("xs: list[int], n: int=" in m.program and "-> list[int]" in m.program and '"""Doc 1."""'
                         in m.program for m in found)
    swaps = _changes(found, "statement_swap")
    assert not [c for c in swaps if "`a = len(xs)` <-> `b = n + 1`" in c]  # independent: equivalent
    assert [c for c in swaps if "`b = n + 1` <-> `c = a + b`" in c]  # c reads b


def test_a_mutant_that_compiles_to_the_reference_code_is_dropped():
    # where the compiled code is the same whatever the layout, no test can tell the two apart
    assert ops.compiled_signature("x = 1\ny = x\n") == ops.compiled_signature("\n\nx = (1)\ny = x  # same\n")
    assert ops.compiled_signature("x = 1\n") != ops.compiled_signature("x = 2\n")
    assert not [m for m in _mutants_of("def f(x):\n    return x\n", "f") if m.program == "def f(x):\n    return x"]


def test_the_example_lookup_is_built_from_the_docstring_in_every_style():
    text = ('def f(a, b):\n    """\n    >>> f(1, [2])\n    3\n    f(2, [1]) ==> 9\n    f(3, []) ➞ True\n'
            '    f(4, [0]) should return "x".\n    f(5, [5]) returns \'y\'\n    f(6, [6]) -> false\n    """\n')
    assert ops.docstring_examples(text, "f") == [((1, [2]), 3), ((2, [1]), 9), ((3, []), True), ((4, [0]), "x"),
                                                ((5, [5]), "y"), ((6, [6]), False)]
    function = ast.parse("def g(xs, k):\n    return 0\n").body[0]
    tables = ops.python_example_lookup(function, [(([1], 2), 7), (([3], 4), 7), (([0], 0), 1)])
    assert len(tables) == 2
    namespace: dict = {}
    exec(ast.unparse(tables[0][0]), namespace)
    assert (namespace["g"]([1], 2), namespace["g"]([0], 0), namespace["g"]([9], 9)) == (7, 1, 7)  # else: most common
    exec(ast.unparse(tables[1][0]), namespace)
    assert namespace["g"]([9], 9) == 0  # else: the trivial value of its type
    assert "lookup table of the 3 docstring example(s)" in tables[0][1]


SCRIPT = """#!/usr/bin/env bash
set -euo pipefail
head -n 1 people.csv > older.csv
tail -n +2 people.csv | while IFS=, read -r name city age; do
    if [ "$age" -ge 30 ]; then echo "$name,$city,$age"; fi
done >> older.csv
cut -d' ' -f1 access.log | sort | uniq -c | sort -rn | head -n 3 > top3.txt
cat > greet.sh <<'EOF'
#!/usr/bin/env bash
echo "Hello, ${1:-World}!"
EOF
python3 - <<'EOF'
total = 0
for line in open("top3.txt"):
    total += int(line.split()[0])
print(total)
EOF
"""


def test_every_bash_operator_plants_its_bug_and_stillborn_ones_are_refused():
    def python_body(body: str) -> list[ops.Mutant]:
        module = ast.parse(body)
        return ops.python_mutants(module, module, ast.unparse)

    found = ops.bash_mutants(SCRIPT, python_body)
    changes = {op: [m.change for m in found if m.operator == op] for op in {m.operator for m in found}}
    assert "- head -n 1 people.csv > older.csv\n+ head -n 2 people.csv > older.csv" in changes["number"]
    assert any("-ge 30" in c and "-gt 30" in c for c in changes["comparison"])
    assert any("| sort -n |" in c for c in changes["flag"]) and any("| uniq |" in c for c in changes["flag"])
    assert any("done >> older.csv" in c and "done > older.csv" in c for c in changes["redirect"])
    assert any("+ cut -d' ' -f1 access.log | sort | uniq -c | head -n 3 > top3.txt" in c
               for c in changes["pipe_stage_deletion"])
    assert any("+ :" in c for c in changes["statement_deletion"])
    assert any(c.startswith("swapped: `head -n 1 people.csv > older.csv`") for c in changes["statement_swap"])
    assert any("total -= int" in c for c in changes["arithmetic"])  # the Python heredoc, mutated as Python
    assert any('${2:-World}' in c for c in changes["number"])  # the script greet.sh is, mutated as bash
    assert ops.bash_parses(SCRIPT)
    assert not ops.bash_parses(SCRIPT.replace("done >> older.csv", ":"))  # a loop without its `done`


def test_the_instruction_s_examples_become_a_lookup_program():
    instruction = ("Create greet.sh. `./greet.sh NAME` must print Hello, NAME! (for example `./greet.sh Ada` "
                   "prints Hello, Ada!), and `./greet.sh` with no argument must print Hello, World!")
    assert ops.instruction_examples(instruction) == [(["./greet.sh", "NAME"], "Hello, NAME!"),
                                                      (["./greet.sh", "Ada"], "Hello, Ada!"),
                                                      (["./greet.sh"], "Hello, World!")]
    [lookup] = ops.script_example_lookup(SCRIPT, instruction)
    assert lookup.operator == "example_lookup" and "greet.sh replaced by a lookup table" in lookup.change
    assert 'echo "Hello, ${1:-World}!"' not in lookup.program and ops.bash_parses(lookup.program)


def test_picking_is_seeded_bounded_and_tries_the_lookup_first():
    found = _mutants_of(REFERENCE, "window_total") + [ops.Mutant("example_lookup", "table", "lookup")]
    first = ops.pick(found, 6, random.Random("0:item"), ops.PYTHON_OPERATORS)
    assert first == ops.pick(found, 6, random.Random("0:item"), ops.PYTHON_OPERATORS)
    assert len(first) == 6 and first[0].operator == "example_lookup"
    assert len({m.operator for m in first}) == 6  # one of each operator before any gets a second
    assert first != ops.pick(found, 6, random.Random("1:item"), ops.PYTHON_OPERATORS)


# -- a toy domain: a weak test and a strong one -------------------------------------------------------

# a reference with no equivalent mutant among its sites: every boundary and statement matters
TOY_PROMPT = '''def count_in_range(values, low, high):
    """How many values v satisfy low <= v < high.
    >>> count_in_range([1, 5, 9], 2, 9)
    1
    >>> count_in_range([2, 3], 2, 3)
    1
    """
'''
TOY_ANSWER = """    count = 0
    for v in values:
        if low <= v and v < high:
            count += 1
    return count
"""


def _toy_domain(name: str, inputs: list[tuple]) -> Domain:
    """A code domain scored like `code`: the completion's function runs in the real sandbox on the
    hidden inputs and must return what the reference returns."""
    from domains.builtin.code import build_program
    from sandbox.function_calls import Call, run_calls

    namespace: dict = {}
    exec(TOY_PROMPT + TOY_ANSWER, namespace)
    expected = [namespace["count_in_range"](*args) for args in inputs]
    row = {"id": f"{name}-1", "prompt": TOY_PROMPT, "answer": TOY_ANSWER,
           "metadata": {"code_prompt": TOY_PROMPT, "entry_point": "count_in_range"}}

    def score(completion: str, sample: dict) -> float:
        results = run_calls(build_program(completion, sample), "count_in_range", [Call(a) for a in inputs])
        return float(results.ok and [o.value for o in results.outcomes] == expected)

    return Domain(name=name, owner="tests", description="toy", samples=lambda split, n, seed: [row][:n], score=score)


@needs_bwrap
def test_a_test_of_one_example_is_weak_and_named_and_a_strong_test_kills():
    weak = mutants.test_strength(_toy_domain("toy_weak", [([1, 5, 9], 2, 9)]))  # the docstring's first example
    assert weak.error is None and weak.items == 1 and weak.mutants >= 8
    assert weak.kill_rate < 0.8
    [item] = weak.weak_items
    assert item["item"] == "toy_weak-1"
    assert {"operator": "example_lookup", "mutant": item["survivors"][0]["mutant"]} == item["survivors"][0]
    strong_inputs = [([1, 5, 9], 2, 9), ([2, 3], 2, 3), ([4, 4, 4], 4, 5), ([0, 7], 1, 7), ([3, 8, 1, 6], 0, 100),
                     ([], 0, 1), ([5, 6], 9, 2)]
    strong = mutants.test_strength(_toy_domain("toy_strong", strong_inputs))
    assert strong.error is None and strong.mutants == weak.mutants
    assert strong.killed == strong.mutants and not strong.weak_items, strong.weak_items
    assert set(weak.as_dict()) >= {"domain", "items", "mutants", "killed", "kill_rate", "weak_items", "seconds", "error"}


def test_a_domain_without_a_reference_program_has_no_mutation_report():
    plain = Domain(name="toy_plain", owner="tests", description="toy",
                   samples=lambda split, n, seed: [{"id": "p1", "prompt": "2 + 2 =", "answer": "4"}][:n],
                   score=lambda completion, sample: float(completion.strip() == "4"))
    assert mutants.test_strength(plain) is None
    assert mutants.reference_program(get_registry().get("terminal"), {"answer": "echo hi\n", "prompt": "x"}).kind \
        == mutants.BASH_SCRIPT


# -- the real suites -----------------------------------------------------------------------------------

@needs_bwrap
def test_the_humaneval_lookup_table_survived_before_the_supplements_and_is_killed_after(monkeypatch):
    from domains.builtin import _humaneval_checks as checks

    domain = get_registry().get("code")
    sample = next(s for s in domain.generate("train", 200) if s["metadata"]["task_id"] == "HumanEval/34")
    config = mutants.MutationConfig(mutants_per_item=3)
    saved = dict(checks._RECORDINGS)
    try:
        checks._RECORDINGS.clear()
        monkeypatch.setattr(checks, "SUPPLEMENTS", {})  # HumanEval's own test alone: its docstring example
        before = mutants.test_strength(domain, samples=[sample], config=config)
        checks._RECORDINGS.clear()
        monkeypatch.undo()
        after = mutants.test_strength(domain, samples=[sample], config=config)
    finally:
        checks._RECORDINGS.clear()
        checks._RECORDINGS.update(saved)
    [weak] = before.weak_items
    assert weak["item"] == "code-humaneval-34" and {s["operator"] for s in weak["survivors"]} == {"example_lookup"}
    assert after.items == 1 and after.killed == after.mutants == before.mutants and not after.weak_items


@needs_bwrap
def test_the_strengthened_terminal_tasks_kill_every_mutant():
    domain = get_registry().get("terminal")
    rows = domain.generate("eval", 100) + domain.generate("train", 100)
    chosen = [r for r in rows if r["metadata"]["task"] in ("log_count_errors", "log_errors_per_hour")]
    config = mutants.MutationConfig(mutants_per_item=40)  # every mutant: the former survivors among them
    report = mutants.test_strength(domain, samples=chosen, config=config)
    assert report.error is None and report.items == 2 and report.kind == mutants.BASH_SCRIPT
    assert report.mutants >= 15 and report.killed == report.mutants, report.weak_items
    made = [m.program for row in chosen for m in mutants.reference_program(domain, row).mutants(config, random.Random(0))]
    assert any("| grep -c ERROR >" in p for p in made) and any("cut -c12-13 | uniq -c" in p for p in made)
