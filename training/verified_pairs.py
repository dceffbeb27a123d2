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

Two optional sources, each pair again confirmed by the scorer:

- ``hack_families``: the reference against one hack per family built from the prompt alone
  (:data:`quality.reward_attacks.REWARD_MODEL_FAMILIES`, as ``assay domains attack`` builds them), so the
  reward model is taught not to pay what a policy under RL would try first. The gate probes with
  the same families on held-out prompts: for a family trained on, a pass shows it generalises across
  prompts, not to a new kind of hack (families left out of training still test that).
- ``policy``: the policy's own completions (``samples`` per item, sampled as GRPO samples): a
  correct one over a wrong one of the same item, or, where the policy got none right, the reference
  over a wrong one. These are the texts a reward model will score during GRPO, which reference
  answers alone never show it (a base SmolLM2 at temperature 1 writes mostly prose, rarely an
  ``Answer:`` line). Completions with partial credit are neither chosen nor rejected.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

from domains import Domain
from quality.reward_attacks import REWARD_MODEL_FAMILIES
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

    policy_completions: int = 0  # with a policy: completions sampled, and how many the verifier scored 1.0
    policy_correct: int = 0

    def summary(self) -> dict:
        sources = Counter(str(p.metadata.get("source")) for p in self.pairs)
        out = {"domain": self.domain, "items": self.items, "pairs": len(self.pairs),
               "prompts": len({p.prompt for p in self.pairs}), "skipped": dict(self.skipped),
               "sources": dict(sorted(sources.items()))}
        if self.policy_completions:
            out["policy_completions"] = self.policy_completions
            out["policy_correct"] = self.policy_correct
        return out


def _near_misses(answer: str) -> list[str]:
    text = answer.strip()
    if not _NUMBER.fullmatch(text):
        return []
    value = float(text)
    as_text = (lambda v: str(int(v))) if "." not in text else (lambda v: f"{v:g}")
    candidates = [value + 1, value - 1, value + 2, value - 2, value + 10, value - 10, -value, 2 * value]
    return [c for c in dict.fromkeys(as_text(v) for v in candidates) if c != text]


def _pair(sample: dict, chosen: str, rejected: str, domain: str, source: str) -> PreferencePair:
    return PreferencePair(id=pair_id(sample["prompt"], chosen, rejected), prompt=sample["prompt"], chosen=chosen,
                          rejected=rejected, metadata={"domain": domain, "item_id": sample["id"], "source": source})


def _hack_pairs(domain: Domain, sample: dict, chosen: str, families: Sequence[str], rng: random.Random,
                result: "VerifiedPairs") -> list[PreferencePair]:
    # one hack per family: the first of a seeded order the verifier confirms 0.0
    out = []
    for family in families:
        candidates = [c for c in dict.fromkeys(REWARD_MODEL_FAMILIES[family](sample)) if c.strip() != chosen.strip()]
        rng.shuffle(candidates)
        candidates = candidates[:8]
        scores = domain.safe_score_many(candidates, [sample] * len(candidates)) if candidates else []
        hack = next((c for c, score in zip(candidates, scores) if score == 0.0), None)
        if hack is None:
            result.skipped[f"no_hack_scored_0:{family}"] += 1
            continue
        out.append(_pair(sample, chosen, hack, domain.name, f"hack:{family}"))
    return out


def _policy_pairs(domain: Domain, samples: list[dict], references: dict[str, str], config: VerifiedPairsConfig,
                  engine, rng: random.Random, result: "VerifiedPairs") -> list[PreferencePair]:
    from generation.contract import SamplingParams

    params = SamplingParams(max_new_tokens=config.max_new_tokens, temperature=config.temperature, n=config.samples,
                            seed=config.seed)
    generations = engine.generate([engine.format_prompt(s["prompt"]) for s in samples], params)
    out = []
    for sample, group in zip(samples, generations):
        texts = list(dict.fromkeys(g.text for g in group if g.text.strip()))
        scores = domain.safe_score_many(texts, [sample] * len(texts)) if texts else []
        right = [t for t, score in zip(texts, scores) if score == 1.0]
        wrong = [t for t, score in zip(texts, scores) if score == 0.0]
        result.policy_completions += len(group)
        result.policy_correct += sum(score == 1.0 for score in scores)
        if not wrong:
            result.skipped["policy_none_wrong"] += 1
            continue
        rng.shuffle(wrong)
        for index, text in enumerate(wrong):
            chosen = right[index % len(right)] if right else references[sample["id"]]
            out.append(_pair(sample, chosen, text, domain.name, "policy" if right else "policy:reference"))
    return out


def build_verified_pairs(domain: Domain, config: VerifiedPairsConfig | None = None, *, engine=None,
                         home: str | None = None) -> VerifiedPairs:
    """Pairs over ``config.items`` train items of ``domain``: the reference against wrong answers,
    against hacks of ``config.hack_families``, and (with ``config.policy``) the policy's own
    completions, sampled by ``engine`` (default: the torch engine of ``config.policy``)."""
    config = config or VerifiedPairsConfig()
    if not domain.has_verifier:
        raise ValueError(f"domain {domain.name!r} has no verifier: its pairs must be labelled by people (a JSONL "
                         "file of prompt, chosen, rejected)")
    samples = domain.generate("train", config.items, seed=config.seed)
    rng = random.Random(f"verified-pairs-{config.seed}")
    hack_rng = random.Random(f"hack-pairs-{config.seed}")  # its own: adding hacks leaves the near misses as they were
    result = VerifiedPairs(domain.name, len(samples))
    references = {}  # item id -> the reference answer in the layout the verifier scores 1.0
    confirmed = []  # the items whose reference scored 1.0
    siblings = [str(s["answer"]) for s in samples]
    for sample in samples:
        answer = str(sample["answer"])
        formatted = [f.format(answer) for f in FORMATS]
        ok = domain.safe_score_many(formatted, [sample] * len(formatted))
        layout = next((f for f, score in zip(FORMATS, ok) if score == 1.0), None)
        if layout is None:
            result.skipped["reference_not_scored_1"] += 1
            continue
        wrong = _near_misses(answer) or [r for r in dict.fromkeys(siblings) if r.strip() != answer.strip()]
        rng.shuffle(wrong)
        wrong = wrong[:max(4 * config.wrong_per_item, 8)]  # score a few spares: some may still pass
        scores = domain.safe_score_many([layout.format(w) for w in wrong], [sample] * len(wrong))
        rejected = [w for w, score in zip(wrong, scores) if score == 0.0][:config.wrong_per_item]
        if len(rejected) < config.wrong_per_item:
            result.skipped["too_few_wrong_answers"] += 1
            if not rejected:
                continue
        chosen = layout.format(answer)
        references[sample["id"]] = chosen
        confirmed.append(sample)
        for value in rejected:
            result.pairs.append(_pair(sample, chosen, layout.format(value), domain.name, "verified"))
        result.pairs += _hack_pairs(domain, sample, chosen, config.hack_families, hack_rng, result)
    if config.policy and confirmed:
        if engine is None:
            from generation.factory import make_engine

            engine = make_engine(config.policy, "torch", home=home)
        result.pairs += _policy_pairs(domain, confirmed, references, config, engine,
                                      random.Random(f"policy-pairs-{config.seed}"), result)
    return result
