"""Reward composition: each sample is scored by its own domain, plus optional components.

A batch may mix domains; every completion is routed to the ``Domain`` its sample came from, so a
new domain needs no change here. A step's completions are scored with one
``Domain.safe_score_many`` call per domain (a domain may score its batch in parallel: the ``code``
domain runs it in a sandbox pool); the components and the reward are then composed per sample:

- ``score``: the domain's scorer in [0, 1] (always computed when it has one: it is also the
  accuracy signal; a domain with no verifier has no ``score`` component, and its reward is
  ``learned`` alone);
- ``format``: 1.0 if the completion matches the domain's ``format_pattern`` (``re.search``), else 0;
- ``length``: ``-max(0, tokens - length_target) / length_target``, a penalty for rambling;
- ``learned``: for a domain that declares a learned reward (``Domain.learned_reward``), its gated
  reward model's ``sigmoid(raw)`` (:mod:`training.learned_rewards`), one batch per domain and step.
  The ``score`` weight then applies to ``w * learned + (1 - w) * score`` (``w`` the declaration's
  ``weight``; 1.0: the learned reward replaces the scorer), while ``score`` stays the verifier's,
  logged beside it as the gold signal.

The reward is the weighted sum with the domain's resolved weights (see :mod:`training.config`).
Advantages are later normalised within each group (one prompt, one domain), so domains with
different reward scales do not drown each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from training.config import GRPOConfig


@dataclass(frozen=True)
class DomainRewardSpec:
    weights: dict[str, float]
    format_pattern: re.Pattern | None
    length_target: int | None
    learned_weight: float | None = None  # the learned reward's share of the score term (None: no learned reward)


@dataclass
class SampleReward:
    reward: float
    components: dict[str, float]


def resolve_reward_spec(config: GRPOConfig, domain: str) -> DomainRewardSpec:
    """The domain's override where given, else the top-level setting."""
    override = config.rewards.domains.get(domain)
    weights = dict(config.reward_weights)
    pattern = config.rewards.format_pattern
    target = config.rewards.length_target
    if config.rewards.reward_weights is not None:
        weights = dict(config.rewards.reward_weights)
    if override is not None:
        weights = dict(override.reward_weights) if override.reward_weights is not None else weights
        pattern = override.format_pattern or pattern
        target = override.length_target or target
    return DomainRewardSpec(weights, re.compile(pattern) if pattern else None, target)


class RewardComposer:
    """Scores completions of mixed domains with each domain's scorer and components."""

    def __init__(self, config: GRPOConfig, domains: dict, learned: dict | None = None):
        """``learned``: domain -> its gated reward model's scorer (``scorer(prompts, completions) ->
        [value in [0, 1]]``, e.g. :class:`training.learned_rewards.LearnedRewardScorer`), one for
        every domain that declares a learned reward: one without it is refused, never silently
        rewarded by its verifier alone."""
        self.domains = domains  # name -> domains.Domain
        self.learned = dict(learned or {})
        missing = sorted(n for n, d in domains.items() if getattr(d, "learned_reward", None) is not None
                         and n not in self.learned)
        if missing:
            raise ValueError(f"domains {', '.join(missing)} declare a learned reward but no gated reward model was "
                             f"given for them: GRPO loads it with the train rows (training.data.load_training_data)")
        self.specs = {}
        for name in domains:
            spec = resolve_reward_spec(config, name)
            if name in self.learned:
                weight = getattr(self.learned[name], "weight", None)
                declared = getattr(domains[name], "learned_reward", None)
                weight = weight if weight is not None else (declared.weight if declared is not None else 1.0)
                spec = DomainRewardSpec(spec.weights, spec.format_pattern, spec.length_target, float(weight))
            self.specs[name] = spec

    def score(self, domain: str, completion: str, sample: dict, completion_tokens: int) -> SampleReward:
        """One sample's reward (see :meth:`score_many`)."""
        return self.score_many([domain], [completion], [sample], [completion_tokens])[0]

    def score_many(self, domains: Sequence[str], completions: Sequence[str], samples: Sequence[dict],
                   completion_tokens: Sequence[int]) -> list[SampleReward]:
        """Rewards of a batch, in its order: item ``i`` is ``completions[i]`` for ``samples[i]`` of
        domain ``domains[i]``. Each domain's items are scored in one ``safe_score_many`` call."""
        if not len(domains) == len(completions) == len(samples) == len(completion_tokens):
            raise ValueError(f"score_many needs one domain, completion, sample and token count per item, got "
                             f"{len(domains)}, {len(completions)}, {len(samples)}, {len(completion_tokens)}")
        by_domain: dict[str, list[int]] = {}
        for index, domain in enumerate(domains):
            by_domain.setdefault(domain, []).append(index)
        scores: list[float | None] = [None] * len(domains)  # each domain's call fills its indices
        learned: list[float | None] = [None] * len(domains)
        for domain, indices in by_domain.items():
            if getattr(self.domains[domain], "has_verifier", True):  # else: the learned reward is the reward
                batch = self.domains[domain].safe_score_many([completions[i] for i in indices],
                                                             [samples[i] for i in indices])
                for index, value in zip(indices, batch):
                    scores[index] = value
            if domain in self.learned:
                values = list(self.learned[domain]([str(samples[i].get("prompt") or "") for i in indices],
                                                   [completions[i] for i in indices]))
                if len(values) != len(indices):
                    raise ValueError(f"domain {domain!r}: the learned reward returned {len(values)} values for "
                                     f"{len(indices)} completions")
                for index, value in zip(indices, values):
                    learned[index] = min(1.0, max(0.0, float(value)))
        return [self._compose(self.specs[d], c, s, n, lr)
                for d, c, s, n, lr in zip(domains, completions, scores, completion_tokens, learned)]

    def compose_judged(self, domain: str, completion: str, score: float, completion_tokens: int) -> SampleReward:
        """The reward of a sample whose score was decided elsewhere (a terminal episode: the hidden
        tests' verdict, judged on the host), with the domain's components as for any sample."""
        if domain in self.learned:
            raise ValueError(f"domain {domain!r} declares a learned reward: terminal episodes are rewarded by their "
                             "hidden tests only; remove learned_reward from the domain to train on its episodes")
        return self._compose(self.specs[domain], completion, score, completion_tokens)

    @staticmethod
    def _compose(spec: DomainRewardSpec, completion: str, score: float | None, completion_tokens: int,
                 learned: float | None = None) -> SampleReward:
        components = {} if score is None else {"score": score}
        primary = score
        if learned is not None and spec.learned_weight is not None:
            components["learned"] = learned
            primary = learned if score is None else spec.learned_weight * learned + (1.0 - spec.learned_weight) * score
        if primary is None:
            raise ValueError("a sample with neither a verifier's score nor a learned reward has no reward")
        if spec.format_pattern is not None:
            components["format"] = 1.0 if spec.format_pattern.search(completion) else 0.0
        if spec.length_target is not None:
            components["length"] = -max(0, completion_tokens - spec.length_target) / spec.length_target
        reward = sum(weight * (primary if name == "score" else components.get(name, 0.0))
                     for name, weight in spec.weights.items())
        return SampleReward(reward, components)
