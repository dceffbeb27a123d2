"""What a variant certification runs (:class:`VariantConfig`), in a module that imports only pydantic.

``assay variant``'s flags and the ``fast_variant`` asset's Dagster config are both built from these
fields (their names, defaults, help and validation live here only), as for :mod:`evaluation.sweep_config`.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

METHOD_NAMES = ("int8", "int4", "gguf-q8_0", "gguf-q4_0", "spec-ngram", "spec-draft")  # generation.variants.METHODS


class VariantConfig(BaseModel):
    """How a variant is made, timed against its parent and proved equivalent per domain."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    method: str = Field("gguf-q4_0", description="how the variant is made: " + ", ".join(METHOD_NAMES)
                        + " (generation.variants); one the machine cannot run exits 2 and says why")
    limit: int | None = Field(
        None, description="at most this many eval items per domain in the equivalence sweep (unset: each domain's "
                          "whole eval set); non-inferiority at a 2-point margin needs about 195 items per domain "
                          "even when every answer agrees, more when some differ")
    samples: int = Field(1, description="samples per item in the equivalence sweep (1: greedy, the default)")
    max_new_tokens: int = Field(256, description="completion length limit of the equivalence sweep, in tokens")
    margin: float = Field(0.02, description="non-inferiority margin per domain in score units (0.02 = 2 points): "
                                            "the variant may be at most this much worse")
    alpha: float = Field(0.025, description="one-sided level of each domain's non-inferiority test "
                                            "(0.025: the lower bound of a two-sided 95% CI)")
    min_speedup: float = Field(2.0, description="tokens/s at batch 1 over the parent's needed for the 'fast' alias")
    speed_prompts: int = Field(16, description="prompts in the speed measurement; the batch figure decodes them "
                                               "in one call (the sweep's batch)")
    speed_batch1_prompts: int = Field(8, description="of those, how many are timed one at a time (batch 1)")
    speed_new_tokens: int = Field(64, description="tokens generated per prompt in the speed measurement")
    parent_backend: str = Field("torch", description="engine that sweeps the parent: torch (the reference "
                                                     "implementation), vllm or auto")
    dtype: str = Field("bfloat16", description="dtype of the torch-served sides (bf16 runs as fp32 on a CPU "
                                               "without native bf16, generation.device)")
    draft: str | None = Field(None, description="spec-draft only: the draft policy (a checkpoint or model folder "
                                                "with the parent's vocabulary); unset: the parent's first quarter of layers")
    set_alias: bool = Field(True, description="move the 'fast' alias to the variant when it is certified "
                                              "(off: record the decision only)")
    progress: bool = Field(True, description="show progress bars on stderr")

    @field_validator("method")
    @classmethod
    def _method(cls, value):
        if value not in METHOD_NAMES:
            raise ValueError(f"unknown method {value!r}; use one of {', '.join(METHOD_NAMES)}")
        return value

    @field_validator("limit")
    @classmethod
    def _limit(cls, value):
        if value is not None and value < 1:
            raise ValueError(f"limit must be a positive integer, got {value!r}; leave it unset for the whole eval set")
        return value

    @field_validator("samples", "max_new_tokens", "speed_prompts", "speed_batch1_prompts", "speed_new_tokens")
    @classmethod
    def _positive(cls, value, info):
        if value < 1:
            raise ValueError(f"{info.field_name} must be a positive integer, got {value!r}")
        return value

    @field_validator("margin")
    @classmethod
    def _margin(cls, value):
        if not 0 < value < 1:
            raise ValueError(f"margin must be in (0, 1), got {value!r} (0.02 = 2 points; 0 cannot be shown)")
        return value

    @field_validator("alpha")
    @classmethod
    def _alpha(cls, value):
        if not 0 < value < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {value!r} (0.025 is the usual one-sided level)")
        return value

    @field_validator("min_speedup")
    @classmethod
    def _speedup(cls, value):
        if value <= 0:
            raise ValueError(f"min_speedup must be positive, got {value!r} (2.0 = twice the parent's tokens/s)")
        return value

    @field_validator("parent_backend")
    @classmethod
    def _backend(cls, value):
        if value not in ("torch", "vllm", "auto"):
            raise ValueError(f"parent_backend must be torch, vllm or auto, got {value!r}")
        return value

    @field_validator("dtype")
    @classmethod
    def _dtype(cls, value):
        if value not in ("bfloat16", "float32"):
            raise ValueError(f"dtype must be bfloat16 or float32, got {value!r}")
        return value
