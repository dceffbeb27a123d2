"""Learnability: how much a train item can still teach GRPO, from its pass rate under the policy.

The rule (Foster & Foerster 2025, "Learning to Reason at the Frontier of Learnability",
arXiv:2502.12272, *sampling for learnability*): an item the policy passes with probability ``p``
gives a binary reward of variance ``p (1 - p)``. GRPO's advantages are rewards minus the group
mean, so a group teaches nothing when its samples all agree (probability ``p^G + (1-p)^G``) and
the expected size of its update grows with ``p (1 - p)``: 0 for items always or never solved,
largest at ``p = 1/2``. With ``mixture.items: learnability`` the trainer draws a domain's items
with probability proportional to ``p (1 - p)`` (items with ``p`` 0 or 1 are never drawn); with
``mixture.strategy: learnability`` it draws domains with probability proportional to
``(sum_i p_i (1 - p_i)) ** (1 / temperature)``, the domain's total learnable reward variance
(temperature 1: as is; larger: towards uniform). The size-based temperature mixture stays the
default (``strategy: temperature``).

``p`` is the pass rate of the run's **starting policy** (``base-<name>`` for a built-in policy,
else the checkpoint id it names) over ``mixture.pass_rate_samples`` samples drawn with the
rollouts' own sampling (completion length, temperature, top-p, top-k, stop strings, prompt
format): the difficulty a GRPO group will actually meet. The rates are read from lake table
``pass_rates`` (:mod:`evaluation.pass_rates` measures them; ``assay train`` and the training asset
measure the missing ones before a run starts). They are part of the run's identity: other rates,
another run.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from storage.lake import Lake

PASS_RATES_TABLE = "pass_rates"


class LearnabilityError(ValueError):
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
    """The :class:`training.generation.SamplingParams` of the run's rollouts (``n`` aside)."""
    from training.generation import SamplingParams

    return SamplingParams(max_new_tokens=config.max_completion_length, temperature=config.temperature,
                          top_p=config.top_p, top_k=config.top_k, stop=tuple(config.stop))


def gen_params_of(params, prompt_format: str) -> dict:
    """The fields of a generation config as :func:`evaluation.sweep.generation_config` records them
    in ``gen_params`` (sampling parameters without ``n`` and the seed, plus the prompt format)."""
    fields = {k: v for k, v in asdict(params).items() if k not in ("n", "seed")}
    fields["stop"] = list(fields["stop"])
    fields["prompt_format"] = prompt_format
    return fields


def pass_rate_checkpoint(policy: str) -> str:
    """The checkpoint id pass rates of the run's starting policy are stored under."""
    from training.policy import BUILTIN_POLICIES, builtin_name

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

    def weights(self, rows: dict[str, list[dict]]) -> dict[str, list[float]]:
        """``p (1 - p)`` per row, aligned with ``rows[domain]``."""
        return {d: [learnability(self.rates[d][r["id"]]) for r in domain_rows] for d, domain_rows in rows.items()}

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
    gen_params = gen_params_of(rollout_sampling(config), prompt_format)
    rates: dict[str, dict[str, float]] = {}
    for domain, domain_rows in rows.items():
        stored = read_pass_rates(lake, checkpoint, domain, samples, gen_params)
        missing = [r["id"] for r in domain_rows if r["id"] not in stored]
        if missing:
            raise LearnabilityError(
                f"{len(missing)} of {len(domain_rows)} train items of {domain!r} have no pass rate under {checkpoint} "
                f"(K={samples}, the rollouts' sampling; first: {missing[0]!r}): `assay train` measures them before "
                "it starts; from Python call evaluation.pass_rates.measure_for_training first, or set "
                "mixture.items: uniform and a mixture.strategy other than learnability")
        rates[domain] = {r["id"]: float(stored[r["id"]]) for r in domain_rows}
        if not any(0.0 < p < 1.0 for p in rates[domain].values()):
            raise LearnabilityError(
                f"no train item of {domain!r} has a pass rate strictly between 0 and 1 under {checkpoint} "
                f"(K={samples}): every GRPO group would have equal rewards. Add items of the right difficulty, "
                "raise mixture.pass_rate_samples, or leave the domain out")
    return ItemPassRates(checkpoint, samples, gen_params, rates)
