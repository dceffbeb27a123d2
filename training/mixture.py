"""Domain mixture: which domain each prompt of a step comes from, and which row.

Probabilities over domains: ``uniform``; ``weights`` (explicit, normalised); or ``temperature``
sampling over domain sizes, p(d) ~ size(d) ** (1 / T) (T = 1: proportional to size; larger T
flattens towards uniform, as in multilingual pre-training mixtures). Each domain's rows are
visited in a seeded shuffled order, epoch after epoch, so every row is used before any repeats.
The draw for step s depends only on (seed, s): a resumed run picks exactly the prompts it would
have picked, with no sampler state to save.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from training.config import MixtureConfig


def mixture_probabilities(sizes: dict[str, int], config: MixtureConfig) -> dict[str, float]:
    if not sizes:
        raise ValueError("no domains to mix: pass at least one domain with train rows")
    empty = [d for d, n in sizes.items() if n <= 0]
    if empty:
        raise ValueError(f"domains without train rows cannot be mixed: {', '.join(empty)}")
    if config.strategy == "uniform":
        raw = {d: 1.0 for d in sizes}
    elif config.strategy == "weights":
        missing = sorted(set(sizes) - set(config.weights))
        if missing:
            raise ValueError(f"mixture.weights has no weight for {', '.join(missing)}")
        raw = {d: float(config.weights[d]) for d in sizes}
    else:
        raw = {d: float(n) ** (1.0 / config.temperature) for d, n in sizes.items()}
    total = sum(raw.values())
    if total <= 0:
        raise ValueError("mixture weights sum to 0: give at least one domain a positive weight")
    return {d: w / total for d, w in raw.items()}


@dataclass(frozen=True)
class Pick:
    domain: str
    row: dict


class DomainMixture:
    def __init__(self, rows: dict[str, list[dict]], config: MixtureConfig, seed: int):
        self.rows = rows
        self.seed = seed
        self.probabilities = mixture_probabilities({d: len(r) for d, r in rows.items()}, config)
        self._orders: dict[tuple[str, int], list[int]] = {}
        self._counts_cache: dict[int, tuple[int, dict[str, int]]] = {}

    def _order(self, domain: str, epoch: int) -> list[int]:
        key = (domain, epoch)
        if key not in self._orders:
            order = list(range(len(self.rows[domain])))
            random.Random(f"{self.seed}:{domain}:{epoch}").shuffle(order)
            self._orders[key] = order
        return self._orders[key]

    def _counts_before(self, step: int, per_step: int) -> dict[str, int]:
        start, counts = 0, {d: 0 for d in self.rows}
        cached = self._counts_cache.get(per_step)
        if cached is not None and cached[0] <= step:  # steps are drawn in order: advance, don't replay
            start, counts = cached[0], dict(cached[1])
        for s in range(start, step):
            for d in self._domains_for(s, per_step):
                counts[d] += 1
        self._counts_cache[per_step] = (step, dict(counts))
        return counts

    def _domains_for(self, step: int, per_step: int) -> list[str]:
        rng = random.Random(f"{self.seed}:mix:{step}")
        names = list(self.probabilities)
        return rng.choices(names, weights=[self.probabilities[d] for d in names], k=per_step)

    def draw(self, step: int, per_step: int) -> list[Pick]:
        """The prompts of ``step`` (0-based): a pure function of (seed, step)."""
        used = self._counts_before(step, per_step)
        picks = []
        for domain in self._domains_for(step, per_step):
            n = len(self.rows[domain])
            epoch, position = divmod(used[domain], n)
            picks.append(Pick(domain, self.rows[domain][self._order(domain, epoch)[position]]))
            used[domain] += 1
        return picks
