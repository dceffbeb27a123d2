"""Row gates: per-row checks that decide admission. Each returns reason codes per row.

A gate sees the structurally valid rows of one batch as a polars frame with columns
``row`` (0-based position in the batch), ``id``, ``split``, ``prompt``, ``answer``, ``metadata``
(dict or null) and ``content_hash``, plus a :class:`GateContext`. It returns a list of reason
codes per row (empty list: clean), in the frame's order. Gates never drop rows: the ingest path
quarantines every row with at least one reason and keeps all of them.

Every gate but ``too_long`` wraps one detector from :mod:`quality.detectors` (one module per
reason code, vectorised over the batch). :func:`gate_flags` runs gates on a plain polars frame
(no lake needed) and returns one bool column per code: what the benchmark and notebooks use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol, Sequence

import polars as pl

from domains.base import DEFAULT_MAX_PROMPT_TOKENS, Domain
from quality import detectors, reasons
from quality.detectors.base import Detector
from storage.lake import Lake


@dataclass
class GateContext:
    """What a gate may consult besides the batch: the domain, the lake, the other domains."""

    domain: Domain | None = None
    lake: Lake | None = None
    replacing_batch: str | None = None  # a batch being replaced does not count as "already there"
    all_domains: Sequence[Domain] = ()
    cache: dict = field(default_factory=dict)  # gates may memoise expensive lookups here
    # the policy's tokenizer as prompts -> token counts; a domain that declares a length bucket
    # (``Domain.context_tokens``) is measured with it (``generation.policy.policy_token_counter``)
    count_tokens: Callable[[Sequence[str]], Sequence[int]] | None = None
    # admitted rows of the batches an ingest run holds to commit with this one (quality.ingest.IngestUnit):
    # not in the lake yet, they count as already there, and the lake's versions of those batches do not
    pending: pl.DataFrame | None = None


class RowGate(Protocol):
    name: str
    codes: tuple[str, ...]

    def check(self, batch: pl.DataFrame, ctx: GateContext) -> list[list[str]]: ...


_CLEAN: list[str] = []


def verdicts(mask: pl.Series, code: str) -> list[list[str]]:
    """Bool mask -> reason lists. The lists are shared between rows: callers must not mutate them."""
    flagged = [code]
    out = [_CLEAN] * len(mask)
    for i in mask.fill_null(False).arg_true().to_list():  # flagged rows are few: touch only those
        out[i] = flagged
    return out


@dataclass(frozen=True)
class TooLongGate:
    """``too_long``: the prompt would not fit the domain's ``max_prompt_tokens``, estimated as
    :func:`quality.normalize.estimate_tokens` does (UTF-8 bytes / 3, rounded up: errs towards
    flagging), except for a long-context domain (one that declares ``context_tokens``) when the
    context holds the policy's tokenizer: its prompts sit close to the limit on purpose, so they
    are counted exactly (the estimate would flag every honest 16k prompt of English text)."""

    name: str = "too_long"
    codes: tuple[str, ...] = (reasons.TOO_LONG,)

    def flags(self, batch: pl.DataFrame, ctx: GateContext | None = None) -> pl.Series:
        domain = getattr(ctx, "domain", None)
        limit = domain.max_prompt_tokens if domain is not None else DEFAULT_MAX_PROMPT_TOKENS
        counter = getattr(ctx, "count_tokens", None)
        if getattr(domain, "context_tokens", None) is not None and counter is not None:
            counts = list(counter(batch["prompt"].fill_null("").to_list()))
            return pl.Series(reasons.TOO_LONG, [n > limit for n in counts], dtype=pl.Boolean)
        tokens = (pl.col("prompt").fill_null("").str.len_bytes() + 2) // 3
        return batch.select((tokens > limit).alias(reasons.TOO_LONG))[reasons.TOO_LONG]

    def check(self, batch: pl.DataFrame, ctx: GateContext) -> list[list[str]]:
        return verdicts(self.flags(batch, ctx), reasons.TOO_LONG)


@dataclass(frozen=True)
class DetectorGate:
    """A row gate around one detector of :mod:`quality.detectors`."""

    detector: Detector

    @property
    def name(self) -> str:
        return self.detector.code

    @property
    def codes(self) -> tuple[str, ...]:
        return (self.detector.code,)

    def flags(self, batch: pl.DataFrame, ctx: GateContext | None = None) -> pl.Series:
        return self.detector.flags(batch, ctx)

    def check(self, batch: pl.DataFrame, ctx: GateContext) -> list[list[str]]:
        return verdicts(self.flags(batch, ctx), self.detector.code)


def ExactDuplicateGate() -> DetectorGate:  # noqa: N802 - reads as a class at call sites, like the other gates
    """``duplicate``: same normalised content as a row admitted in any domain or earlier in the batch."""
    return DetectorGate(detectors.DuplicateDetector())


GateFactory = Callable[[], list[RowGate]]


def rule_based_gates() -> list[RowGate]:
    return [TooLongGate()] + [DetectorGate(d) for d in detectors.rule_based()]


def default_row_gates() -> list[RowGate]:
    """The gates every ingest runs, cheapest first: format, dedup, contamination, then the
    model-based safety gates."""
    return rule_based_gates() + [DetectorGate(d) for d in detectors.model_based()]


def gate_flags(frame: pl.DataFrame, ctx: GateContext | None = None,
               gates: Sequence[RowGate] | None = None) -> pl.DataFrame:
    """Run ``gates`` (default: all) on a plain frame with ``prompt`` and ``answer`` columns and
    return one bool column per reason code, row-aligned with ``frame``."""
    ctx = ctx if ctx is not None else GateContext()
    columns = {}
    for gate in default_row_gates() if gates is None else gates:
        mask = gate.flags(frame, ctx) if hasattr(gate, "flags") else pl.Series(
            [bool(v) for v in gate.check(frame, ctx)])
        columns[gate.codes[0]] = mask.fill_null(False).alias(gate.codes[0])
    return pl.DataFrame(columns) if columns else pl.DataFrame(height=frame.height)
