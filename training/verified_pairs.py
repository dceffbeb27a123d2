"""Preference pairs from a domain whose verifier knows the truth: the proof set of a learned reward.

A reward model is only worth gating where its verdicts can be checked, so the first pairs come
from verifiable domains (math_arith_easy, logic, strings): the chosen answer is the item's
reference answer and the rejected one a wrong answer, both written in the same completion format
and both confirmed by the domain's own scorer (chosen scores 1.0, rejected 0.0). An item where
that cannot be shown is skipped and counted by reason, never passed off as a pair.

Wrong answers: for a numeric reference, near misses (off by 1, 2 or 10, the sign flipped, doubled),
so the reward model must check the arithmetic rather than the answer's shape; otherwise the
reference answers of sibling items, which are well-formed but wrong here. The completion format is
the first of ``Answer: X``, ``<answer>X</answer>`` or ``X`` under which the reference scores 1.0.

(Pairs from the base policy's own correct and incorrect completions, the issue's harder variant,
need generation; this builder needs only the domain.)
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field

from domains import Domain
from storage.preference_pairs import PreferencePair, pair_id
from training.reward_config import VerifiedPairsConfig

FORMATS = ("Answer: {}", "<answer>{}</answer>", "{}")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass
class VerifiedPairs:
    domain: str
    items: int
    pairs: list[PreferencePair] = field(default_factory=list)
    skipped: Counter = field(default_factory=Counter)

    def summary(self) -> dict:
        return {"domain": self.domain, "items": self.items, "pairs": len(self.pairs),
                "prompts": len({p.prompt for p in self.pairs}), "skipped": dict(self.skipped)}


def _near_misses(answer: str) -> list[str]:
    text = answer.strip()
    if not _NUMBER.fullmatch(text):
        return []
    value = float(text)
    as_text = (lambda v: str(int(v))) if "." not in text else (lambda v: f"{v:g}")
    candidates = [value + 1, value - 1, value + 2, value - 2, value + 10, value - 10, -value, 2 * value]
    return [c for c in dict.fromkeys(as_text(v) for v in candidates) if c != text]


def build_verified_pairs(domain: Domain, config: VerifiedPairsConfig | None = None) -> VerifiedPairs:
    """Pairs (reference vs wrong answer) over ``config.items`` train items of ``domain``."""
    config = config or VerifiedPairsConfig()
    samples = domain.generate("train", config.items, seed=config.seed)
    rng = random.Random(f"verified-pairs-{config.seed}")
    result = VerifiedPairs(domain.name, len(samples))
    references = [str(s["answer"]) for s in samples]
    for sample in samples:
        answer = str(sample["answer"])
        formatted = [f.format(answer) for f in FORMATS]
        ok = domain.safe_score_many(formatted, [sample] * len(formatted))
        layout = next((f for f, score in zip(FORMATS, ok) if score == 1.0), None)
        if layout is None:
            result.skipped["reference_not_scored_1"] += 1
            continue
        wrong = _near_misses(answer) or [r for r in dict.fromkeys(references) if r.strip() != answer.strip()]
        rng.shuffle(wrong)
        wrong = wrong[:max(4 * config.wrong_per_item, 8)]  # score a few spares: some may still pass
        scores = domain.safe_score_many([layout.format(w) for w in wrong], [sample] * len(wrong))
        rejected = [w for w, score in zip(wrong, scores) if score == 0.0][:config.wrong_per_item]
        if len(rejected) < config.wrong_per_item:
            result.skipped["too_few_wrong_answers"] += 1
            if not rejected:
                continue
        chosen = layout.format(answer)
        for value in rejected:
            text = layout.format(value)
            result.pairs.append(PreferencePair(
                id=pair_id(sample["prompt"], chosen, text), prompt=sample["prompt"], chosen=chosen, rejected=text,
                metadata={"domain": domain.name, "item_id": sample["id"], "source": "verified"}))
    return result
