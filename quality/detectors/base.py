"""What a detector is: one reason code, a vectorised ``flags`` over a batch, and its settings.

A detector sees a polars frame with at least ``prompt`` and ``answer`` (strings; the ingest path
adds ``row``, ``id``, ``split``, ``metadata``, ``content_hash``) and returns one bool per row.
``ctx`` is the ingest :class:`~quality.row_gates.GateContext` or ``None`` for a plain frame (the
benchmark, notebooks): then the defaults apply (``clean`` policy, no lake, no other domains).
Detectors are pure over the frame except for what ``ctx`` lets them read (the lake, eval items).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
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


# Patterns scanned together: one pass of their union over a column costs about what one pattern
# costs (~0.15 s per 1M prompts), so :func:`matches` runs the union once per batch and column,
# then each pattern only on the rows the union matched. Detectors register their patterns at
# import time with :func:`shared_scan`.
_SHARED: list[str] = []


def shared_scan(pattern: str) -> str:
    """Add ``pattern`` to the batch-wide union scan of :func:`matches`; returns it unchanged."""
    if pattern not in _SHARED:
        _SHARED.append(pattern)
    return pattern


def _union_hits(frame: pl.DataFrame, field: str, ctx: Any) -> np.ndarray:
    cache = getattr(ctx, "cache", None)
    key = ("shared_scan", id(frame), field, tuple(_SHARED))
    if cache is not None and key in cache and cache[key][0] is frame:
        return cache[key][1]
    union = "|".join(f"(?:{p})" for p in _SHARED)  # groups scope each pattern's inline flags
    hits = frame[field].fill_null("").str.contains(union).to_numpy()
    if cache is not None:
        cache.clear() if len(cache) > 64 else None
        cache[key] = (frame, hits)  # holding the frame keeps its id from being reused
    return hits


def matches(frame: pl.DataFrame, field: str, pattern: str, ctx: Any = None) -> np.ndarray:
    """``frame[field].str.contains(pattern)`` as a bool array (nulls False), via the shared scan
    when ``pattern`` is registered: a pattern can only match where the union of all does."""
    if field not in frame.columns:
        return np.zeros(frame.height, dtype=bool)
    text = frame[field].fill_null("")
    if pattern not in _SHARED:
        return text.str.contains(pattern).to_numpy()
    idx = np.flatnonzero(_union_hits(frame, field, ctx))
    out = np.zeros(frame.height, dtype=bool)
    if idx.size:
        out[idx] = text.gather(idx).str.contains(pattern).to_numpy()
    return out


def any_match(frame: pl.DataFrame, fields: tuple[str, ...], patterns: tuple[str, ...], ctx: Any = None) -> np.ndarray:
    out = np.zeros(frame.height, dtype=bool)
    for field in fields:
        for pattern in patterns:
            out |= matches(frame, field, pattern, ctx)
    return out


def verify_candidates(frame: pl.DataFrame, fields: tuple[str, ...], candidate_pattern: str,
                      verify: Any, ctx: Any = None) -> np.ndarray:
    """Rows where some regex match of ``candidate_pattern`` in ``fields`` passes ``verify(str)``.

    The regex runs vectorised over the whole batch; ``verify`` (a checksum, an entropy test) runs
    in Python only on the matches, which in real data are rare.
    """
    out = np.zeros(frame.height, dtype=bool)
    for field in fields:
        if field not in frame.columns:
            continue
        idx = np.flatnonzero(matches(frame, field, candidate_pattern, ctx) & ~out)
        if idx.size == 0:
            continue
        found = frame[field].gather(idx).str.extract_all(candidate_pattern)
        for i, found_here in zip(idx.tolist(), found.to_list()):
            if any(verify(m) for m in found_here or ()):
                out[i] = True
    return out
