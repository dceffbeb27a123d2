"""A sweep in a child process, for the kill tests of tests/evaluation/test_sweep_units.py.

``python -m tests.evaluation.sweep_child NAMES STALL_ON COMMIT_SECONDS`` sweeps one domain per
letter of NAMES (6 eval items, K=2, batches of 2 items) on the lake of ``ASSAY_HOME``; when it
starts generating domain STALL_ON it prints ``stalled`` and waits (the parent kills it there).
"""

from __future__ import annotations

import sys
import time

from domains import Domain
from generation.contract import Generation

CHECKPOINT = "ck-units"


class EchoEngine:
    """Generation without a model: each completion is the prompt's length in words, as text."""

    name = "echo"
    stall_on: str | None = None

    def generate(self, prompts, params, seeds=None, *, with_logprobs=False):
        if self.stall_on is not None and any(p.startswith(f"[{self.stall_on}]") for p in prompts):
            print("stalled", flush=True)
            time.sleep(600)
        return [[Generation(text=str(len(p.split()) % 3), completion_tokens=1, prompt_tokens=1,
                            finish_reason="stop", latency_s=0.001) for _ in range(params.n)] for p in prompts]

    def format_prompt(self, text):
        return text


def domains(names: str) -> list[Domain]:
    """One domain per letter; ``!`` names a domain whose scorer raises."""
    out = []
    for letter in names:
        name = "broken" if letter == "!" else letter

        def samples(split, n, seed, name=name):
            return [{"id": f"{name}-{split}-{i}", "prompt": f"[{name}] item {' x' * i}", "answer": str(i % 3)}
                    for i in range(n)]

        def score(completion, sample):
            if sample["id"].startswith("broken"):
                raise RuntimeError("scorer crashed")
            return float(completion == sample["answer"])

        out.append(Domain(name=name, owner="t@example.com", description="sweep unit test domain",
                          samples=samples, score=score, eval_size=6, eval_samples_per_item=2))
    return out


def main(names: str, stall_on: str, commit_seconds: str) -> None:
    from evaluation.sweep import run_sweep
    from evaluation.sweep_config import SweepConfig
    from storage.lake import Lake

    engine = EchoEngine()
    engine.stall_on = stall_on
    run_sweep(Lake.at(), CHECKPOINT, domains(names), lambda: engine,
              SweepConfig(progress=False, batch_items=2, commit_seconds=float(commit_seconds)), prompt_format="raw")


if __name__ == "__main__":
    main(*sys.argv[1:])
