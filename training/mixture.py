"""Domain mixture: which domain each prompt of a step comes from, and which row.

Probabilities over domains: ``uniform``; ``weights`` (explicit, normalised); or ``temperature``
sampling over domain sizes, p(d) ~ size(d) ** (1 / T) (T = 1: proportional to size; larger T
flattens towards uniform, as in multilingual pre-training mixtures). Each domain's rows are
visited in a seeded shuffled order, epoch after epoch, so every row is used before any repeats.
With learnability sampling (:mod:`training.learnability`: Foster & Foerster 2025) rows are drawn
with replacement with probability ~ p(1-p) of their pass rate p (rows always or never passed are
never drawn), and ``strategy: learnability`` weighs domains by their summed p(1-p).
The draw for step s depends only on (seed, s): a resumed run picks exactly the prompts it would
have picked, with no sampler state to save.
"""

from __future__ import annotations

import bisect
import itertools
import random
from dataclasses import dataclass

from training.config import MixtureConfig


def mixture_probabilities(sizes: dict[str, int], config: MixtureConfig,
                          learnable: dict[str, float] | None = None) -> dict[str, float]:
    """p(domain). ``learnable``: each domain's summed p(1-p) (needed by ``strategy: learnability``)."""
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
    elif config.strategy == "learnability":
        if learnable is None or set(learnable) != set(sizes):
            raise ValueError("mixture.strategy 'learnability' needs every domain's pass rates (training.learnability)")
        raw = {d: float(learnable[d]) ** (1.0 / config.temperature) for d in sizes}
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
    def __init__(self, rows: dict[str, list[dict]], config: MixtureConfig, seed: int,
                 item_weights: dict[str, list[float]] | None = None):
        """``item_weights``: per domain, one weight per row (p(1-p)); needed by learnability sampling."""
        self.rows = rows
        self.seed = seed
        learnable = None
        if config.items == "learnability" or config.strategy == "learnability":
            if item_weights is None or any(len(item_weights.get(d, ())) != len(r) for d, r in rows.items()):
                raise ValueError("learnability sampling needs one weight per train row of every domain "
                                 "(training.learnability.load_item_pass_rates)")
            if any(w < 0 for ws in item_weights.values() for w in ws):
                raise ValueError("item weights must be >= 0")
            learnable = {d: float(sum(item_weights[d])) for d in rows}
            dead = [d for d, total in learnable.items() if total <= 0]
            if dead:
                raise ValueError(f"no row of {', '.join(dead)} can teach anything (every pass rate is 0 or 1)")
        self.probabilities = mixture_probabilities({d: len(r) for d, r in rows.items()}, config, learnable)
        # cumulative row weights per domain, for draws with replacement ~ p(1-p)
        self._cumulative = ({d: list(itertools.accumulate(item_weights[d])) for d in rows}
                            if config.items == "learnability" else None)
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
        if self._cumulative is not None:
            return [self._weighted_pick(domain, step, slot)
                    for slot, domain in enumerate(self._domains_for(step, per_step))]
        used = self._counts_before(step, per_step)
        picks = []
        for domain in self._domains_for(step, per_step):
            n = len(self.rows[domain])
            epoch, position = divmod(used[domain], n)
            picks.append(Pick(domain, self.rows[domain][self._order(domain, epoch)[position]]))
            used[domain] += 1
        return picks

    def _weighted_pick(self, domain: str, step: int, slot: int) -> Pick:
        cumulative = self._cumulative[domain]
        u = random.Random(f"{self.seed}:item:{domain}:{step}:{slot}").random() * cumulative[-1]
        # the first row whose cumulative weight exceeds u: a row of weight 0 is never chosen
        index = bisect.bisect_right(cumulative, u)
        if index == len(cumulative):  # u rounded up to the total: the last row with weight
            index = bisect.bisect_left(cumulative, cumulative[-1])
        return Pick(domain, self.rows[domain][index])
