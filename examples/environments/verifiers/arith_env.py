"""arith_env: a small verifiers environment of Assay's own, the example of `assay domains import verifiers`.

Written against verifiers 0.4.0's API (``verifiers.v1``: a ``Taskset`` that loads typed ``Task``s, whose
``@vf.reward`` methods are the weighted rubric), the way the verifiers documentation's tasksets are:
a dataset built in memory (``datasets.Dataset``), a system prompt, and two weighted rewards on the reply,

- ``correct`` (weight 1.0): the reply ends with exactly one ``<answer>...</answer>`` holding the result;
- ``formatted`` (weight 0.25): the same shape holding an integer, right or wrong.

The taskset's config fields are its arguments: ``--arg num_examples=40 --arg seed=0``.
"""

from __future__ import annotations

import random
import re

import verifiers.v1 as vf

SYSTEM = ("Solve the arithmetic problem. You may reason first; end your reply with the result as a single "
          "integer inside <answer></answer> tags, e.g. <answer>42</answer>.")
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_INTEGER = re.compile(r"-?\d+")
_OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def final_answer(reply: str) -> str | None:
    """The text of the reply's one answer tag when the reply ends with it, else None (no tag, two tags, or
    text after the tag: a hedge)."""
    found = _TAG.findall(reply)
    if len(found) != 1 or not reply.rstrip().endswith("</answer>"):
        return None
    return found[0].strip()


class ArithData(vf.TaskData):
    answer: str
    """The result, an integer written in decimal."""


class ArithTask(vf.Task[ArithData]):
    @vf.stop
    async def single_turn(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(final_answer(trace.last_reply) == self.data.answer)

    @vf.reward(weight=0.25)
    async def formatted(self, trace: vf.Trace) -> float:
        answer = final_answer(trace.last_reply)
        return float(answer is not None and _INTEGER.fullmatch(answer) is not None)


class ArithConfig(vf.TasksetConfig):
    num_examples: int = 40
    """How many problems to build."""
    seed: int = 0
    """The seed of the problems' operands and operations."""


class ArithTaskset(vf.Taskset[ArithTask, ArithConfig]):
    def load(self) -> list[ArithTask]:
        from datasets import Dataset

        rng = random.Random(self.config.seed)
        rows = []
        for i in range(self.config.num_examples):
            a, b, op = rng.randint(2, 99), rng.randint(2, 99), rng.choice(sorted(_OPERATIONS))
            rows.append({"id": f"arith-{self.config.seed}-{i}", "question": f"What is {a} {op} {b}?",
                         "answer": str(_OPERATIONS[op](a, b))})
        dataset = Dataset.from_list(rows)
        return [ArithTask(ArithData(id=row["id"], prompt=row["question"], system_prompt=SYSTEM,
                                    answer=row["answer"]), self.config.task)
                for row in dataset]


__all__ = ["ArithTaskset"]
