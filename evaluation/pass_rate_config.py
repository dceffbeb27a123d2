"""What a policy pass-rate measurement runs (:class:`PassRateConfig`), in a module that imports only pydantic.

The sampling knobs are a sweep's (:class:`evaluation.sweep_config.SweepConfig`: the same
``max_new_tokens``, temperature, top_p and seed give the same samples and the same generation
config); only the defaults of K and of the item cap differ, so that a default run is short on a CPU.
Kept apart from :mod:`evaluation.pass_rates` so ``assay difficulty --help`` stays instant.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from evaluation.sweep_config import SweepConfig

DEFAULT_SAMPLES = 4
DEFAULT_LIMIT = 32


class PassRateConfig(SweepConfig):
    """K seeded samples per train item of a named policy, scored by the domain."""

    samples: int = Field(
        DEFAULT_SAMPLES, description="samples per item, K; an item whose K samples all pass or all fail carries no "
                                     "GRPO signal (K = 1 is greedy)")
    limit: int = Field(
        DEFAULT_LIMIT, description="at most this many train items; bounds a run's cost (SmolLM2 at K=4 on a CPU: "
                                   "about 1 s per item), cached items cost nothing")
    batch_items: int = Field(
        16, description="items per generation batch (a run's results are committed once, when all are scored)")

    @field_validator("samples", "limit", "batch_items")
    @classmethod
    def _positive_or_unset(cls, value, info):  # replaces SweepConfig's: neither may be unset here
        if value < 1:
            raise ValueError(f"{info.field_name} must be a positive integer, got {value!r}")
        return value
