"""A multi-domain ingest in a child process, for the kill tests of tests/quality/test_ingest_units.py.

``python -m tests.quality.ingest_child NAMES STALL_ON`` ingests the generated samples of one domain
per letter of NAMES (:func:`domains`) as one unit (``quality.ingest.ingest_generated_many``) on the
lake of the environment's profile; when it starts generating domain STALL_ON's samples, after the
domains before it were gated and held, it prints ``stalled`` and waits (the parent kills it there).
"""

from __future__ import annotations

import sys
import time

from domains import Domain

TRAIN_N = 6


def _items(name: str, index: int, split: str, n: int) -> list[dict]:
    base = 1000 * (index + 1) + (0 if split == "eval" else 500)
    return [{"id": f"{name}-{split}-{i}", "prompt": f"What is {base + 37 * i} times {13 + 11 * i + index}?",
             "answer": str((base + 37 * i) * (13 + 11 * i + index))} for i in range(n)]


def domains(names: str, stall_on: str | None = None, shared: str | None = None) -> list[Domain]:
    """One domain per letter, 4 eval and TRAIN_N train items. The train items of domain ``shared``
    repeat domain ``a``'s eval items word for word (cross-domain duplicates the gates must catch)."""
    out = []
    for index, name in enumerate(names):
        def samples(split, n, seed, name=name, index=index):
            if name == stall_on:
                print("stalled", flush=True)
                time.sleep(600)
            if name == shared and split == "train":
                return [{**row, "id": f"{name}-train-{i}"} for i, row in enumerate(_items("a", 0, "eval", n))]
            return _items(name, index, split, n)

        out.append(Domain(name=name, owner="t@example.com", description="ingest unit test domain",
                          samples=samples, score=lambda completion, sample: float(completion == sample["answer"]),
                          eval_size=4))
    return out


def main(names: str, stall_on: str) -> None:
    from quality.ingest import ingest_generated_many
    from storage.deployment import open_lake

    ingest_generated_many(open_lake(write=True), domains(names, stall_on), train_n=TRAIN_N)
    print("done", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
