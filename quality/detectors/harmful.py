"""``harmful``: requests for serious harm (weapons, explosives, malware, self-harm instructions...)
in the prompt, scored by the build-time classifier in :mod:`quality.harmful_model` at its
calibrated threshold (a domain may override it with ``gate_thresholds["harmful_threshold"]``).

Adversarial domains (refusal training) are exempt: harmful prompts are their point. Answers are
not scored: the classifier is trained on requests, not on responses.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from quality import reasons
from quality.detectors.base import no_flags, safety_policy, threshold


@dataclass(frozen=True)
class HarmfulDetector:
    code: str = reasons.HARMFUL

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        if safety_policy(ctx) == "adversarial" or "prompt" not in frame.columns or frame.height == 0:
            return no_flags(frame).alias(self.code)
        from quality.harmful_model import harmful_scores, load

        cut = threshold(ctx, "harmful_threshold", load()["threshold"])
        scores = harmful_scores(frame["prompt"].fill_null("").to_list())
        return pl.Series(self.code, [s >= cut for s in scores], dtype=pl.Boolean)
