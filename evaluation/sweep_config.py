"""What a benchmark sweep runs (:class:`SweepConfig`), in a module that imports only pydantic.

The model is the one place its knobs are described: ``assay sweep``'s flags
(:mod:`pipelines.config_flags`) and the ``checkpoint_sweep`` asset's launchpad config
(:mod:`assets.config_bridge`) are built from these fields, their defaults and descriptions.
It lives apart from :mod:`evaluation.sweep` (numpy, polars) so ``assay sweep --help`` stays instant.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_TEMPERATURE = 0.7
DEFAULT_TOP_P = 0.95


class SweepConfig(BaseModel):
    """What a sweep runs. Defaults suit a CPU machine; every field can be set from the CLI and Dagster."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    samples: int | None = Field(
        None, description="samples per item, K, for every domain (unset: each domain's own eval_samples_per_item); "
                          "each sample is its own seeded draw, so raising K keeps the cached samples and adds new ones")
    limit: int | None = Field(
        None, description="at most this many eval items per domain (unset: the domain's whole eval set)")
    max_new_tokens: int = Field(256, description="completion length limit in tokens")
    temperature: float = Field(DEFAULT_TEMPERATURE, description="sampling temperature when K > 1 (K = 1 is greedy)")
    top_p: float = Field(DEFAULT_TOP_P, description="nucleus sampling probability mass when K > 1")
    batch_items: int = Field(16, description="items per generation batch, and per lake batch of results")
    commit_seconds: float = Field(
        30.0, description="finished batches and summaries are held this many seconds, then committed together as "
                          "one lake commit per table (results, sweep_summary), and at the end of the sweep: the most "
                          "work a sweep killed outright loses (an error still commits what finished). 0: commit "
                          "every batch and summary on its own")
    seed: int = Field(
        0, description="base of every sample's seed (evaluation.sweep.sample_seed); the cache key ignores it")
    rope_scaling: str | None = Field(
        None, description="RoPE scaling past the model's trained context, TYPE:FACTOR with TYPE linear, dynamic or "
                          "yarn (e.g. yarn:2; generation.rope); part of the cache key. Unset: the model as trained")
    progress: bool = Field(True, description="show a progress bar on stderr")

    @field_validator("rope_scaling")
    @classmethod
    def _rope_scaling(cls, value):
        from generation.rope import RopeScaling  # pydantic only: --help stays instant

        scaling = RopeScaling.parse(value)
        return scaling.spec if scaling else None

    @field_validator("samples", "limit")
    @classmethod
    def _positive_or_unset(cls, value, info):
        if value is not None and value < 1:
            raise ValueError(f"{info.field_name} must be a positive integer, got {value!r}; leave it unset for "
                             "the domain's own" + (" K" if info.field_name == "samples" else " eval set"))
        return value

    @field_validator("max_new_tokens", "batch_items")
    @classmethod
    def _positive(cls, value, info):
        if value < 1:
            raise ValueError(f"{info.field_name} must be a positive integer, got {value!r}")
        return value

    @field_validator("commit_seconds")
    @classmethod
    def _commit_seconds(cls, value):
        if value < 0:
            raise ValueError(f"commit_seconds must be >= 0, got {value!r} (0 commits every batch on its own)")
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value):
        if value < 0:
            raise ValueError(f"temperature must be >= 0, got {value!r} (K = 1 is greedy whatever the temperature)")
        return value

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, value):
        if not 0 < value <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {value!r} (1 = no nucleus cut)")
        return value

    @model_validator(mode="after")
    def _distinct_samples(self):
        if self.temperature == 0 and self.samples is not None and self.samples > 1:
            raise ValueError(f"samples={self.samples} at temperature 0 would be {self.samples} copies of the greedy "
                             "completion: raise the temperature, or set samples to 1")
        return self

    def sampling(self, k: int):
        """The sampling parameters for K samples per item (n is set per batch)."""
        from generation.contract import SamplingParams

        if k == 1:
            return SamplingParams(max_new_tokens=self.max_new_tokens, temperature=0.0)
        return SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p)
