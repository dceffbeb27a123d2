"""Learnability: how much a train item can still teach GRPO, from its pass rate under the policy.

The rule (Foster & Foerster 2025, "Learning to Reason at the Frontier of Learnability",
arXiv:2502.12272, *sampling for learnability*): an item the policy passes with probability ``p``
gives a binary reward of variance ``p (1 - p)``. GRPO's advantages are rewards minus the group
mean, so a group teaches nothing when its samples all agree (probability ``p^G + (1-p)^G``) and
the expected size of its update grows with ``p (1 - p)``: 0 for items always or never solved,
largest at ``p = 1/2``. With ``mixture.items: learnability`` the trainer draws each of a domain's
items with probability proportional to ``max(p (1 - p), explore_weight)`` among the items not yet
drawn this epoch; an epoch ends when every item above the floor has had its turn, so items at the
frontier are used about once per epoch each and those always or never passed only at the
exploration rate. With ``mixture.strategy: learnability`` it draws domains with probability
proportional to ``(sum_i max(p_i (1 - p_i), explore_weight)) ** (1 / temperature)``, the domain's
total learnable reward variance (temperature 1: as is; larger: towards uniform). The size-based temperature mixture stays the
default (``strategy: temperature``).

``p`` starts as the pass rate of the run's **starting policy** (``base-<name>`` for a built-in
policy, else the checkpoint id it names) over ``mixture.pass_rate_samples`` samples drawn with the
rollouts' own sampling (completion length, temperature, top-p, top-k, stop strings, prompt
format): the difficulty a GRPO group will actually meet. The rates are read from lake table
``pass_rates`` (:mod:`evaluation.pass_rates` measures them; ``assay train`` and the training asset
measure the missing ones before a run starts). They are part of the run's identity: other rates,
another run.

Then they follow the policy (``mixture.pass_rate_updates: online``, the default): every rollout
group is ``num_generations`` fresh samples of the *current* policy on one item, so it updates that
item's estimate (:class:`PassRateTracker`: pass/fail pseudo-counts, the earlier ones decayed by
``mixture.pass_rate_decay`` per group, so the estimate tracks a moving policy). Measured once, the
rates go stale within a hundred steps: the policy learns the few items it half-solved, and a
sampler that keeps drawing them gets groups with equal rewards (bench/RESULTS.md, joint training).
Items estimated always or never passed keep a small weight (``mixture.explore_weight``) so they are
re-tried as the policy changes; within an epoch each item is drawn at most once
(:class:`training.mixture.DomainMixture`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from generation.contract import gen_params_of
from storage.lake import Lake
from storage.errors import UserError

PASS_RATES_TABLE = "pass_rates"


class LearnabilityError(UserError, ValueError):
    """Learnability sampling asked for, but the pass rates it needs are missing or give no signal."""


def learnability(pass_rate: float) -> float:
    """Variance of a binary reward passed with probability ``pass_rate``: ``p (1 - p)``."""
    if not 0.0 <= pass_rate <= 1.0:
        raise ValueError(f"pass rate {pass_rate!r} is not in [0, 1]")
    return pass_rate * (1.0 - pass_rate)


def uses_pass_rates(config) -> bool:
    """Whether a :class:`training.config.GRPOConfig` samples by learnability (and needs pass rates)."""
    return config.mixture.items == "learnability" or config.mixture.strategy == "learnability"


def rollout_sampling(config):
    """The :class:`generation.contract.SamplingParams` of the run's rollouts (``n`` aside)."""
    from generation.contract import SamplingParams

    return SamplingParams(max_new_tokens=config.max_completion_length, temperature=config.temperature,
                          top_p=config.top_p, top_k=config.top_k, stop=tuple(config.stop))


def pass_rate_checkpoint(policy: str) -> str:
    """The checkpoint id pass rates of the run's starting policy are stored under."""
    from generation.policy import BUILTIN_POLICIES, builtin_name

    name = builtin_name(policy)
    if name in BUILTIN_POLICIES:
        return f"base-{name}"
    if "/" in policy or policy.startswith((".", "~")):
        raise LearnabilityError(f"policy {policy!r} is a folder: learnability sampling needs pass rates stored "
                                "under a checkpoint id; train from a built-in policy or a checkpoint id")
    return policy


@dataclass(frozen=True)
class ItemPassRates:
    """Pass rates of every train item of a run: ``rates[domain][item_id]``."""

    checkpoint: str
    samples: int
    gen_params: dict
    rates: dict[str, dict[str, float]]

    def tracker(self, rows: dict[str, list[dict]], mixture) -> "PassRateTracker":
        """The estimates a run starts from, aligned with ``rows[domain]``; ``mixture``: its
        :class:`training.config.MixtureConfig` (decay, floor, retiring solved rows)."""
        return PassRateTracker({d: [self.rates[d][r["id"]] for r in domain_rows] for d, domain_rows in rows.items()},
                               self.samples, decay=mixture.pass_rate_decay, floor=mixture.explore_weight,
                               solved_at=mixture.solved_pass_rate if mixture.retire_solved else None)

    def fingerprint(self) -> str:
        text = json.dumps([self.checkpoint, self.samples, self.gen_params,
                           {d: sorted(r.items()) for d, r in sorted(self.rates.items())}], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self, rows: dict[str, list[dict]]) -> str:
        parts = []
        for domain, domain_rows in rows.items():
            rates = [self.rates[domain][r["id"]] for r in domain_rows]
            learnable = sum(0.0 < p < 1.0 for p in rates)
            parts.append(f"{domain}: {learnable}/{len(rates)} items with 0 < p < 1, mean p {sum(rates) / len(rates):.2f}")
        return "; ".join(parts)


def read_pass_rates(lake: Lake, checkpoint: str, domain: str, samples: int, gen_params: dict) -> dict[str, float]:
    """``{item_id: pass_rate}`` stored for one (checkpoint, domain, K, generation config); the first
    committed measurement of an item wins, as in :mod:`evaluation.pass_rates`."""
    import polars as pl

    from storage.tables import PASS_RATES, conform

    frame = lake.read(PASS_RATES_TABLE, where={"checkpoint": checkpoint, "domain": domain})
    if frame.height == 0:
        return {}
    frame = conform(frame, PASS_RATES).filter(pl.col("samples") == samples)
    wanted = {text for text in frame["gen_params"].unique().to_list()
              if text is not None and json.loads(text) == gen_params}
    frame = frame.filter(pl.col("gen_params").is_in(sorted(wanted)))
    frame = frame.unique(subset=["item_id"], keep="first", maintain_order=True)
    return dict(zip(frame["item_id"].to_list(), frame["pass_rate"].to_list()))


def load_item_pass_rates(lake: Lake, config, rows: dict[str, list[dict]], prompt_format: str) -> ItemPassRates:
    """The pass rates learnability sampling needs, every row covered, or :class:`LearnabilityError`
    naming what is missing and how to measure it."""
    checkpoint = pass_rate_checkpoint(config.policy)
    samples = config.mixture.pass_rate_samples
    gen_params = gen_params_of(rollout_sampling(config), prompt_format, config.rope_scaling)
    rates: dict[str, dict[str, float]] = {}
    for domain, domain_rows in rows.items():
        stored = read_pass_rates(lake, checkpoint, domain, samples, gen_params)
        missing = [r["id"] for r in domain_rows if r["id"] not in stored]
        if missing:
            raise LearnabilityError(
                f"{len(missing)} of {len(domain_rows)} train items of {domain!r} have no pass rate under {checkpoint} "
                f"(K={samples}, the rollouts' sampling; first: {missing[0]!r}): `assay train` measures them before "
                "it starts; from Python call assets.learnability_rates.measure_for_training first, or set "
                "mixture.items: uniform and a mixture.strategy other than learnability")
        rates[domain] = {r["id"]: float(stored[r["id"]]) for r in domain_rows}
        if not any(0.0 < p < 1.0 for p in rates[domain].values()):
            raise LearnabilityError(
                f"no train item of {domain!r} has a pass rate strictly between 0 and 1 under {checkpoint} "
                f"(K={samples}): every GRPO group would have equal rewards. Add items of the right difficulty, "
                "raise mixture.pass_rate_samples, or leave the domain out")
    return ItemPassRates(checkpoint, samples, gen_params, rates)


class PassRateTracker:
    """Each train item's pass rate under the current policy, as decayed pass/fail pseudo-counts.

    Starts from the measured rate, worth ``samples`` observations; a rollout group of ``n`` samples
    with ``k`` passes updates it to ``(decay * passes + k, decay * fails + n - k)``. Decay 1 keeps every
    observation (a stationary policy); below 1 the latest groups count most, as the policy moves.
    ``solved_at`` (``mixture.retire_solved``): an item estimated at or above it is solved, weighs 0 and
    leaves the sampling pool (:class:`training.mixture.DomainMixture`) until :meth:`reset` measures it
    failing again."""

    def __init__(self, rates: dict[str, list[float]], samples: int, decay: float = 0.5, floor: float = 0.01,
                 solved_at: float | None = None):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay!r}")
        self.decay = decay
        self.floor = floor
        self.solved_at = solved_at
        self.passes = {d: [p * samples for p in ps] for d, ps in rates.items()}
        self.fails = {d: [(1.0 - p) * samples for p in ps] for d, ps in rates.items()}

    def rate(self, domain: str, index: int) -> float:
        passes, fails = self.passes[domain][index], self.fails[domain][index]
        return passes / (passes + fails)

    def solved(self, domain: str, index: int) -> bool:
        """Whether the item is retired as one the policy always solves (``solved_at`` set and reached)."""
        return self.solved_at is not None and self.rate(domain, index) >= self.solved_at

    def weight(self, domain: str, index: int) -> float:
        """``p (1 - p)``, at least ``floor``: an item estimated solved or hopeless is still re-tried,
        unless it is retired as solved (weight 0)."""
        if self.solved(domain, index):
            return 0.0
        return max(learnability(self.rate(domain, index)), self.floor)

    def learnable(self, domain: str, index: int) -> bool:
        """Whether the item is expected to teach more than an item the policy always or never passes."""
        return not self.solved(domain, index) and learnability(self.rate(domain, index)) > self.floor

    def reset(self, domain: str, index: int, passes: int, samples: int) -> None:
        """A fresh measurement of the item (``passes`` of ``samples``) replaces its earlier evidence."""
        if not 0 <= passes <= samples or samples <= 0:
            raise ValueError(f"a measurement of {samples} samples cannot have {passes} passes")
        self.passes[domain][index] = float(passes)
        self.fails[domain][index] = float(samples - passes)

    def observe(self, domain: str, index: int, passes: int, samples: int) -> None:
        if not 0 <= passes <= samples or samples <= 0:
            raise ValueError(f"a group of {samples} samples cannot have {passes} passes")
        self.passes[domain][index] = self.decay * self.passes[domain][index] + passes
        self.fails[domain][index] = self.decay * self.fails[domain][index] + (samples - passes)

    def summary(self) -> dict[str, dict[str, float]]:
        """Per domain: the mean estimated pass rate, the share of items still learnable and, when solved
        items retire, how many are retired (``solved``)."""
        out = {}
        for domain, passes in self.passes.items():
            n = len(passes)
            out[domain] = {"est_pass_rate": sum(self.rate(domain, i) for i in range(n)) / n,
                           "learnable_share": sum(self.learnable(domain, i) for i in range(n)) / n}
            if self.solved_at is not None:
                out[domain]["solved"] = float(sum(self.solved(domain, i) for i in range(n)))
        return out

    def state_dict(self) -> dict:
        return {"passes": self.passes, "fails": self.fails}

    def load_state_dict(self, state: dict) -> None:
        if {d: len(v) for d, v in state["passes"].items()} != {d: len(v) for d, v in self.passes.items()}:
            raise ValueError("the saved pass-rate estimates are for other train rows: start the run again")
        self.passes = {d: [float(x) for x in v] for d, v in state["passes"].items()}
        self.fails = {d: [float(x) for x in v] for d, v in state["fails"].items()}
