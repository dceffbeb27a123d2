"""Reward composition: each sample is scored by its own domain, plus optional components.

A batch may mix domains; every completion is routed to the ``Domain`` its sample came from
(``Domain.safe_score``), so a new domain needs no change here. The components of one sample:

- ``score``: the domain's scorer in [0, 1] (always computed: it is also the accuracy signal);
- ``format``: 1.0 if the completion matches the domain's ``format_pattern`` (``re.search``), else 0;
- ``length``: ``-max(0, tokens - length_target) / length_target``, a penalty for rambling.

The reward is the weighted sum with the domain's resolved weights (see :mod:`training.config`).
Advantages are later normalised within each group (one prompt, one domain), so domains with
different reward scales do not drown each other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from training.config import GRPOConfig


@dataclass(frozen=True)
class DomainRewardSpec:
    weights: dict[str, float]
    format_pattern: re.Pattern | None
    length_target: int | None


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

    def __init__(self, config: GRPOConfig, domains: dict):
        self.domains = domains  # name -> domains.Domain
        self.specs = {name: resolve_reward_spec(config, name) for name in domains}

    def score(self, domain: str, completion: str, sample: dict, completion_tokens: int) -> SampleReward:
        spec = self.specs[domain]
        components = {"score": self.domains[domain].safe_score(completion, sample)}
        if spec.format_pattern is not None:
            components["format"] = 1.0 if spec.format_pattern.search(completion) else 0.0
        if spec.length_target is not None:
            components["length"] = -max(0, completion_tokens - spec.length_target) / spec.length_target
        reward = sum(weight * components.get(name, 0.0) for name, weight in spec.weights.items())
        return SampleReward(reward, components)
