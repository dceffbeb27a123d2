"""Domain mixture: which domain each prompt of a step comes from, and which row.

Probabilities over domains: ``uniform``; ``weights`` (explicit, normalised); or ``temperature``
sampling over domain sizes, p(d) ~ size(d) ** (1 / T) (T = 1: proportional to size; larger T
flattens towards uniform, as in multilingual pre-training mixtures). Each domain's rows are
visited in a seeded shuffled order, epoch after epoch, so every row is used before any repeats;
the draw for step s depends only on (seed, s): a resumed run picks exactly the prompts it would
have picked, with no sampler state to save.

With learnability sampling (:mod:`training.learnability`: Foster & Foerster 2025) a row is drawn
with probability ~ its p(1-p) (at least ``explore_weight``), p its current pass-rate estimate
(:class:`training.learnability.PassRateTracker`, updated by every rollout group), and at most
once per epoch; an epoch ends when every row still expected to teach has had its turn, so the
rows at the frontier come round again soon and the solved or hopeless ones only at the
exploration rate. ``strategy: learnability`` weighs domains by their summed weights. The draw then
depends on (seed, step, the estimates and the rows used this epoch): the trainer saves that state
with each checkpoint (:meth:`DomainMixture.state_dict`) and a resumed run restores it.

With ``mixture.retire_solved`` a row whose estimate reaches ``solved_pass_rate`` leaves the pool: it
is never drawn (not even at the exploration weight) until a re-measure of its pass rate
(:meth:`training.learnability.PassRateTracker.reset`, when the domain's validation plateaus) finds
it failing again; the rows stay in the run, counted (``solved`` in the tracker's summary).

Reweighting (``validation.forgetting: reweight``, :mod:`training.forgetting`): :meth:`DomainMixture.boost`
multiplies domains' weights from a given step on; the schedule of boosts is part of the saved state,
so a replay of earlier steps (the position of each domain in its epoch order) uses the weights in
force at each step.
"""

from __future__ import annotations

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
    index: int = -1  # the row's place in ``rows[domain]``


class DomainMixture:
    def __init__(self, rows: dict[str, list[dict]], config: MixtureConfig, seed: int, pass_rates=None):
        """``pass_rates``: a :class:`training.learnability.PassRateTracker` over ``rows`` (needed by
        learnability sampling; :meth:`observe` updates it when ``pass_rate_updates`` is online)."""
        self.rows = rows
        self.config = config
        self.seed = seed
        self.tracker = None
        self.learnability = config.items == "learnability" or config.strategy == "learnability"
        if self.learnability:
            if pass_rates is None or {d: len(v) for d, v in pass_rates.passes.items()} != \
                    {d: len(r) for d, r in rows.items()}:
                raise ValueError("learnability sampling needs a pass rate for every train row of every domain "
                                 "(training.learnability.load_item_pass_rates)")
            dead = [d for d, r in rows.items() if not any(pass_rates.learnable(d, i) for i in range(len(r)))]
            if dead:
                raise ValueError(f"no row of {', '.join(dead)} can teach anything (every pass rate is 0 or 1)")
            self.tracker = pass_rates
        self._used: dict[str, set[int]] = {d: set() for d in rows}  # rows drawn this epoch (learnability)
        # (first step, {domain: weight multiplier}) in force from that step on (validation.forgetting: reweight)
        self._boosts: list[tuple[int, dict[str, float]]] = []
        self.probabilities = self._probabilities()
        self._orders: dict[tuple[str, int], list[int]] = {}
        self._counts_cache: dict[int, tuple[int, dict[str, int]]] = {}

    def _probabilities(self) -> dict[str, float]:
        learnable = None
        if self.config.strategy == "learnability":
            # a domain whose rows are all retired as solved weighs (next to) nothing; all of them: uniform
            learnable = {d: sum(self.tracker.weight(d, i) for i in range(len(r))) or 1e-12 for d, r in self.rows.items()}
        return mixture_probabilities({d: len(r) for d, r in self.rows.items()}, self.config, learnable)

    def boost(self, from_step: int, multipliers: dict[str, float]) -> None:
        """From draw ``from_step`` (0-based) on, weigh each domain of ``multipliers`` by that multiple of
        its weight (the others keep theirs); an empty mapping ends every boost. Steps before are unchanged."""
        current = self._boost_at(from_step)
        if multipliers == current:
            return
        unknown = sorted(set(multipliers) - set(self.rows))
        if unknown or any(not m > 0 for m in multipliers.values()):
            raise ValueError(f"boosts must be > 0 and name domains of the mixture, got {multipliers}")
        self._boosts = [b for b in self._boosts if b[0] < from_step] + [(from_step, dict(multipliers))]
        self._counts_cache = {k: v for k, v in self._counts_cache.items() if v[0] <= from_step}

    def _boost_at(self, step: int) -> dict[str, float]:
        boosts: dict[str, float] = {}
        for first, multipliers in self._boosts:
            if first <= step:
                boosts = multipliers
        return boosts

    def probabilities_at(self, step: int) -> dict[str, float]:
        """p(domain) at draw ``step``: the mixture's, times the boosts in force then, normalised."""
        boosts = self._boost_at(step)
        if not boosts:
            return self.probabilities
        raw = {d: p * boosts.get(d, 1.0) for d, p in self.probabilities.items()}
        total = sum(raw.values())
        return {d: w / total for d, w in raw.items()}

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
        probabilities = self.probabilities_at(step)
        names = list(probabilities)
        return rng.choices(names, weights=[probabilities[d] for d in names], k=per_step)

    def draw(self, step: int, per_step: int) -> list[Pick]:
        """The prompts of ``step`` (0-based). Without learnability a pure function of (seed, step);
        with it, it also marks the rows drawn as used for this epoch (call it once per step)."""
        if self.learnability:
            if self.config.strategy == "learnability":
                self.probabilities = self._probabilities()  # the estimates moved since the last step
            if self.config.items == "learnability":
                return [self._weighted_pick(domain, step, slot)
                        for slot, domain in enumerate(self._domains_for(step, per_step))]
        used = self._counts_before(step, per_step)
        picks = []
        for domain in self._domains_for(step, per_step):
            n = len(self.rows[domain])
            epoch, position = divmod(used[domain], n)
            index = self._order(domain, epoch)[position]
            picks.append(Pick(domain, self.rows[domain][index], index))
            used[domain] += 1
        return picks

    def _weighted_pick(self, domain: str, step: int, slot: int) -> Pick:
        tracker, used, n = self.tracker, self._used[domain], len(self.rows[domain])
        if not any(tracker.learnable(domain, i) for i in range(n) if i not in used):
            used.clear()  # a new epoch: every row still expected to teach has had its turn
        candidates = [i for i in range(n) if i not in used and not tracker.solved(domain, i)]
        if not candidates:  # every row left is retired as solved: any row of the domain
            candidates = [i for i in range(n) if i not in used] or list(range(n))
        weights = [tracker.weight(domain, i) for i in candidates]
        rng = random.Random(f"{self.seed}:item:{domain}:{step}:{slot}")
        if sum(weights) <= 0:  # explore_weight 0 and nothing left to learn here (or all solved): any row
            index = rng.choice(candidates)
        else:
            index = rng.choices(candidates, weights=weights)[0]
        used.add(index)
        return Pick(domain, self.rows[domain][index], index)

    def observe(self, picks: list[Pick], passes: list[int], samples: int) -> None:
        """Each pick's rollout group: ``passes`` of ``samples`` completions earned full credit.
        Updates the pass-rate estimates (online learnability); otherwise nothing to learn here."""
        if self.tracker is None or self.config.pass_rate_updates != "online":
            return
        for pick, k in zip(picks, passes, strict=True):
            self.tracker.observe(pick.domain, pick.index, int(k), samples)

    def remeasured(self, domain: str, passes: list[int], samples: int) -> None:
        """Fresh pass rates of every row of ``domain`` (``passes[i]`` of ``samples``), measured on the
        current policy, replace their online estimates (``validation.replateau_steps``)."""
        for index, k in enumerate(passes):
            self.tracker.reset(domain, index, k, samples)
        if self.config.strategy == "learnability":
            self.probabilities = self._probabilities()

    def state_dict(self) -> dict | None:
        """What the next draws depend on beyond (seed, step): the pass-rate estimates and the rows used
        this epoch (learnability sampling), the schedule of boosts (reweighting); None without either."""
        state: dict = {}
        if self.tracker is not None:
            state = {"estimates": self.tracker.state_dict(), "used": {d: sorted(u) for d, u in self._used.items()}}
        if self._boosts:
            state["boosts"] = [[first, multipliers] for first, multipliers in self._boosts]
        return state or None

    def load_state_dict(self, state: dict | None) -> None:
        if state is None:
            return
        self._boosts = [(int(first), {d: float(m) for d, m in multipliers.items()})
                        for first, multipliers in state.get("boosts", [])]
        self._counts_cache = {}
        if self.tracker is None or "estimates" not in state:
            return
        self.tracker.load_state_dict(state["estimates"])
        self._used = {d: set(state["used"].get(d, ())) for d in self.rows}
        self.probabilities = self._probabilities()
