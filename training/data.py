"""Training rows per domain: the gated ``train_set`` lake table, or (CLI only) the domain itself.

The Dagster asset trains only on rows that passed the gates (``lake/train_set``), and refuses a
domain that has none. The CLI may also generate a domain's train split directly with
``Domain.generate("train", n, seed)`` when no train_set exists yet, and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from quality import lake_tables
from quality.lake import Lake

TRAIN_SET_TABLE = "train_set"


class TrainingDataError(ValueError):
    """A domain without usable training rows."""


@dataclass
class TrainingData:
    rows: dict[str, list[dict]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # domain -> "train_set" | "generated"

    def describe(self) -> str:
        return ", ".join(f"{d}: {len(r)} rows from {self.sources[d]}" for d, r in self.rows.items())


def train_set_rows(lake: Lake, domain: str) -> list[dict]:
    frame = lake.read(TRAIN_SET_TABLE, where={"domain": domain})
    if frame.is_empty():
        return []
    frame = lake_tables.conform(frame, lake_tables.TRAIN_SET)
    rows = []
    for row in frame.iter_rows(named=True):
        meta = row.get("metadata")
        rows.append({"id": row["id"], "prompt": row["prompt"], "answer": row["answer"],
                     "metadata": json.loads(meta) if meta else {}})
    return rows


def load_training_data(domains: list[str], lake: Lake, *, registry=None, allow_generate: bool,
                       generate_n: int = 256, seed: int = 0) -> TrainingData:
    """Rows per domain (train_set first); ``allow_generate`` falls back to the domain's generator."""
    from domains import get_registry

    registry = registry or get_registry()
    if not domains:
        raise TrainingDataError("no domains selected: pass --domains a,b or set `domains:` in the recipe")
    data = TrainingData()
    for name in domains:
        domain = registry.get(name)  # UnknownDomainError names the known ones
        rows = train_set_rows(lake, name)
        if rows:
            data.rows[name], data.sources[name] = rows, TRAIN_SET_TABLE
            continue
        if not allow_generate:
            raise TrainingDataError(
                f"domain {name!r} has no train_set in the lake: materialize domain_samples, "
                f"gated_samples and domain_train_set for partition {name!r} first (its gates must pass)"
            )
        generated = domain.generate("train", generate_n, seed)
        if not generated:
            raise TrainingDataError(f"domain {name!r} generated no train samples")
        data.rows[name], data.sources[name] = generated, "generated"
    return data
