"""What a detector is: one reason code, a vectorised ``flags`` over a batch, and its settings.

A detector sees a polars frame with at least ``prompt`` and ``answer`` (strings; the ingest path
adds ``row``, ``id``, ``split``, ``metadata``, ``content_hash``) and returns one bool per row.
``ctx`` is the ingest :class:`~quality.row_gates.GateContext` or ``None`` for a plain frame (the
benchmark, notebooks): then the defaults apply (``clean`` policy, no lake, no other domains).
Detectors are pure over the frame except for what ``ctx`` lets them read (the lake, eval items).
"""

from __future__ import annotations

from typing import Any, Protocol

import polars as pl


class Detector(Protocol):
    code: str

    def flags(self, frame: pl.DataFrame, ctx: Any = None) -> pl.Series: ...


def safety_policy(ctx: Any) -> str:
    domain = getattr(ctx, "domain", None)
    return getattr(domain, "safety_policy", "clean") or "clean"


def threshold(ctx: Any, name: str, default: float) -> float:
    """A gate threshold: the domain's ``gate_thresholds[name]`` override, else ``default``."""
    domain = getattr(ctx, "domain", None)
    overrides = getattr(domain, "gate_thresholds", None) or {}
    return float(overrides.get(name, default))


def any_field(frame: pl.DataFrame, fields: tuple[str, ...], make: Any) -> pl.Expr:
    """OR of ``make(pl.col(field))`` over the ``fields`` present in ``frame`` (nulls are False)."""
    exprs = [make(pl.col(f).fill_null("")) for f in fields if f in frame.columns]
    if not exprs:
        return pl.repeat(False, pl.len())
    out = exprs[0]
    for e in exprs[1:]:
        out = out | e
    return out


def no_flags(frame: pl.DataFrame) -> pl.Series:
    return pl.Series("flag", [False] * frame.height, dtype=pl.Boolean)


def verify_candidates(frame: pl.DataFrame, fields: tuple[str, ...], candidate_pattern: str,
                      verify: Any, rows: pl.Series | None = None) -> pl.Series:
    """Rows where some regex match of ``candidate_pattern`` in ``fields`` passes ``verify(str)``.

    The regex runs vectorised over the whole batch; ``verify`` (a checksum, an entropy test) runs
    in Python only on the matches, which in real data are rare.
    """
    out = [False] * frame.height
    for field in fields:
        if field not in frame.columns:
            continue
        hits = frame.select(pl.col(field).fill_null("").str.contains(candidate_pattern).alias("h"))["h"]
        idx = hits.arg_true()
        if len(idx) == 0:
            continue
        found = frame[field].gather(idx).str.extract_all(candidate_pattern)
        for i, matches in zip(idx.to_list(), found.to_list()):
            if not out[i] and any(verify(m) for m in matches or ()):
                out[i] = True
    flags = pl.Series("flag", out, dtype=pl.Boolean)
    return flags if rows is None else flags & rows
