"""``answer_leak``: the prompt states its own reference answer.

Two vectorised rules:

1. A leak marker ("the answer is", "answer:", "solution =", "final answer:") in the prompt is
   followed by exactly the reference answer (normalised: case, punctuation, whitespace). A marker
   followed by something else (a few-shot example's answer, "answer: inside <answer> tags") passes.
2. A long worded reference answer (>= ``answer_leak_min_chars`` normalised characters, default
   24, with at least three words of letters) appears verbatim in the prompt: a copied solution.
   Short answers ("4", "Paris", "B") and digit grids/lists (ARC-style tasks whose examples share
   output rows) legitimately appear in prompts, so they are only judged by rule 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from quality import reasons
from quality.detectors.base import matches, no_flags, shared_scan, threshold

MARKER = (r"(?i)(?:\bthe\s+(?:correct\s+|final\s+|right\s+|expected\s+)?(?:answer|solution|result)\s+(?:is|=|would\s+be)"
          r"|\b(?:final\s+)?(?:answer|solution)\s*[:=]|\bhint\s*:\s*it'?s)\s*:?\s*([^\n]{1,200})")
shared_scan(MARKER)
DEFAULT_MIN_CHARS = 24


def _norm(expr: pl.Expr) -> pl.Expr:
    return expr.str.to_lowercase().str.replace_all(r"[^\p{L}\p{N}]+", " ").str.strip_chars()


@dataclass(frozen=True)
class AnswerLeakDetector:
    code: str = reasons.ANSWER_LEAK

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        if "prompt" not in frame.columns or "answer" not in frame.columns:
            return no_flags(frame)
        min_chars = int(threshold(ctx, "answer_leak_min_chars", DEFAULT_MIN_CHARS))
        answer = _norm(pl.col("answer").fill_null(""))
        # rule 1, only where a marker occurs (a cheap vectorised pre-test)
        marked = pl.Series("m", matches(frame, "prompt", MARKER, ctx))
        out = pl.Series(self.code, np.zeros(frame.height, dtype=bool))
        idx = marked.arg_true()
        if len(idx):
            sub = frame[idx]
            after = _norm(pl.col("prompt").fill_null("").str.extract(MARKER, 1)).fill_null("")
            hit = sub.select(((answer != "") & ((after == answer) | after.str.starts_with(answer + pl.lit(" "))))
                             .fill_null(False).alias("h"))["h"]
            out = out.scatter(idx.filter(hit), True) if hit.any() else out
        # rule 2, only for long answers
        long_idx = frame.select((pl.col("answer").fill_null("").str.len_chars() >= min_chars).alias("l"))["l"].arg_true()
        if len(long_idx):
            sub = frame[long_idx]
            worded = answer.str.count_matches(r"\b\p{L}{2,}\b") >= 3
            hit = sub.select((answer.str.len_chars() >= min_chars) & worded
                             & _norm(pl.col("prompt").fill_null("")).str.contains(answer, literal=True))[:, 0].fill_null(False)
            out = out.scatter(long_idx.filter(hit), True) if hit.any() else out
        return out
