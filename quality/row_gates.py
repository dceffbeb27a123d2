"""Row gates: per-row checks that decide admission. Each returns reason codes per row.

A gate sees the structurally valid rows of one batch as a polars frame with columns
``row`` (0-based position in the batch), ``id``, ``split``, ``prompt``, ``answer``, ``metadata``
(dict or null) and ``content_hash``, plus a :class:`GateContext`. It returns a list of reason
codes per row (empty list: clean), in the frame's order. Gates never drop rows: the ingest path
quarantines every row with at least one reason and keeps all of them.

Adding a detector is one small module exposing a gate; :func:`default_row_gates` lists the order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import polars as pl

from domains.base import Domain
from quality import reasons
from quality.lake import Lake
from quality.normalize import estimate_tokens


@dataclass
class GateContext:
    """What a gate may consult besides the batch: the domain, the lake, the other domains."""

    domain: Domain
    lake: Lake | None = None
    replacing_batch: str | None = None  # a batch being replaced does not count as "already there"
    all_domains: Sequence[Domain] = ()
    cache: dict = field(default_factory=dict)  # gates may memoise expensive lookups here


class RowGate(Protocol):
    name: str
    codes: tuple[str, ...]

    def check(self, batch: pl.DataFrame, ctx: GateContext) -> list[list[str]]: ...


@dataclass(frozen=True)
class TooLongGate:
    """``too_long``: the prompt would not fit the domain's ``max_prompt_tokens``."""

    name: str = "too_long"
    codes: tuple[str, ...] = (reasons.TOO_LONG,)

    def check(self, batch: pl.DataFrame, ctx: GateContext) -> list[list[str]]:
        limit = ctx.domain.max_prompt_tokens
        return [[reasons.TOO_LONG] if estimate_tokens(p) > limit else [] for p in batch["prompt"]]


def existing_content_hashes(ctx: GateContext, domains: Sequence[str] | None = None) -> set[str]:
    """Content hashes admitted in the lake (for ``domains``, default: the gate's own domain)."""
    if ctx.lake is None:
        return set()
    key = ("content_hashes", tuple(domains) if domains else (ctx.domain.name,), ctx.replacing_batch)
    if key not in ctx.cache:
        hashes: set[str] = set()
        for name in key[1]:
            for path in ctx.lake.files("ingest", "samples", where={"domain": name}):
                if ctx.replacing_batch and f"batch={ctx.replacing_batch}" in path.parts:
                    continue
                hashes.update(pl.read_parquet(path, columns=["content_hash"])["content_hash"].to_list())
        ctx.cache[key] = hashes
    return ctx.cache[key]


@dataclass(frozen=True)
class ExactDuplicateGate:
    """``duplicate``: same normalised content as a row already admitted in the domain, or as an
    earlier row of the same batch (the first occurrence is admitted)."""

    name: str = "duplicate"
    codes: tuple[str, ...] = (reasons.DUPLICATE,)

    def check(self, batch: pl.DataFrame, ctx: GateContext) -> list[list[str]]:
        seen = set(existing_content_hashes(ctx))
        out = []
        for digest in batch["content_hash"]:
            out.append([reasons.DUPLICATE] if digest in seen else [])
            seen.add(digest)
        return out


GateFactory = Callable[[], list[RowGate]]


def default_row_gates() -> list[RowGate]:
    """The gates every ingest runs, cheapest first."""
    return [TooLongGate(), ExactDuplicateGate()]
