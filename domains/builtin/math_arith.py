"""Arithmetic from reasoning-gym: a mixed domain and an easy one for GRPO on CPU.

- ``math_arith``: chain sums (2-6 terms, 1-4 digits), basic arithmetic expressions and products,
  reasoning-gym's default difficulties, interleaved.
- ``math_arith_easy``: 2-term single-digit chain sums ("4 - 1 ="). Its item space is ~200
  expressions, half of them eval (split by hashing the expression), so train and eval hold ~100
  each and never share an item; it is the target of the CPU GRPO run (an untrained
  SmolLM2-135M already solves a few, so sampled groups have reward variance).

Scoring takes the number a completion gives as its final answer (``\\boxed{}``, "Answer: X",
else the last number written) and compares it with the reference exactly.
"""

from __future__ import annotations

from domains import Domain
from domains.builtin._common import NUMBER_HINT, score_number, stream_split
from domains.builtin._rg import draw_entries

OWNER = "math-team@assay.dev"
SUFFIX = "\n" + NUMBER_HINT
MIXED_TASKS = ("chain_sum", "basic_arithmetic", "products")
EASY_CONFIG = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def _interleave(streams):
    while True:
        for stream in streams:
            yield next(stream)


def mixed_samples(split: str, n: int, seed: int):
    streams = [draw_entries(task, {}, n, "math_arith", split, seed, prompt_suffix=SUFFIX) for task in MIXED_TASKS]
    yield from stream_split("math_arith", split, n, seed, _interleave(streams), eval_share=0.5)


def easy_samples(split: str, n: int, seed: int):
    draws = draw_entries("chain_sum", EASY_CONFIG, max(n, 64), "math_arith_easy", split, seed, prompt_suffix=SUFFIX)
    # ~200 distinct items: enough draws to collect every one of them, however large n is.
    yield from stream_split("math_arith_easy", split, n, seed, draws, eval_share=0.5,
                            max_draws=min(30 * n + 200, 5000))


def score(completion: str, sample: dict) -> float:
    return score_number(completion, sample.get("answer", ""), abs_tol=1e-6)


DOMAINS = [
    Domain(
        name="math_arith",
        owner=OWNER,
        description="Arithmetic from reasoning-gym (chain sums, basic expressions, products); "
                    "the final number must equal the exact result",
        tags=("math", "arithmetic"),
        samples=mixed_samples,
        score=score,
        answer_pattern=r"-?\d+(\.\d+)?",
    ),
    Domain(
        name="math_arith_easy",
        owner=OWNER,
        description="2-term single-digit chain sums from reasoning-gym (e.g. '4 - 1 ='): the "
                    "easy arithmetic target of GRPO training on CPU",
        tags=("math", "arithmetic", "easy"),
        samples=easy_samples,
        score=score,
        eval_size=100,
        answer_pattern=r"-?\d+",
    ),
]
