"""Settings of a reward-model training run (:mod:`training.reward_model`); only pydantic here, since
``assay reward train --help`` builds its flags from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from quality.reward_gate_config import TRAINABLE_HACK_FAMILIES


class RewardTrainConfig(BaseModel):
    """How a learned reward model is trained on preference pairs (Bradley-Terry).

    Model: ``base`` (the causal LM the reward model starts from), ``max_length``. Optimisation:
    ``epochs`` or ``max_steps``, ``batch_size`` (pairs per step), ``learning_rate``,
    ``weight_decay``, ``max_grad_norm``, ``seed``. Data: ``heldout_fraction`` (by prompt; judged by
    the gate, never trained on). Control: ``shuffle_labels`` (a reward model that must fail its gate)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    base: str = Field("smollm2", description="the causal LM the reward model starts from: 'smollm2', 'tiny', a "
                                             "Hugging Face model folder or a checkpoint id")
    epochs: int = Field(2, description="passes over the training pairs")
    max_steps: int | None = Field(None, description="stop after this many optimizer steps (default: run every epoch)")
    batch_size: int = Field(8, description="preference pairs per optimizer step (each pair is two sequences)")
    learning_rate: float = Field(1e-5, description="AdamW learning rate (backbone and head)")
    weight_decay: float = Field(0.0, description="AdamW weight decay")
    max_grad_norm: float = Field(1.0, description="clip the gradient norm to this (0: no clipping)")
    max_length: int = Field(512, description="tokens of prompt + answer the reward model reads (longer texts lose "
                                             "their start: the answer's end, where the reward is read, stays)")
    heldout_fraction: float = Field(0.2, description="share of prompts (with all their pairs) held out of training, "
                                                     "for the gate to judge the reward model on")
    seed: int = Field(0, description="seed of the head's initialisation, the batch order and the held-out split")
    autocast_bf16: bool = Field(False, description="run the forward passes in bfloat16 autocast (weights and optimizer "
                                                   "stay float32; about 2x faster on a CPU with native bf16, and on "
                                                   "one without it runs float32 and says so)")
    shuffle_labels: bool = Field(False, description="control run: swap chosen and rejected on a random half of "
                                                    "the training pairs (such a reward model must fail its gate)")

    @field_validator("epochs", "batch_size", "max_length")
    @classmethod
    def _positive(cls, value: int, info) -> int:
        if value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value}")
        return value

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, value: int | None) -> int | None:
        if value is not None and value < 1:
            raise ValueError(f"max_steps must be >= 1 (or unset to run every epoch), got {value}")
        return value

    @field_validator("learning_rate")
    @classmethod
    def _learning_rate(cls, value: float) -> float:
        if not 0 < value < 1:
            raise ValueError(f"learning_rate must be in (0, 1), got {value}; 1e-5 suits a full fine-tune of SmolLM2")
        return value

    @field_validator("weight_decay", "max_grad_norm")
    @classmethod
    def _non_negative(cls, value: float, info) -> float:
        if value < 0:
            raise ValueError(f"{info.field_name} must be >= 0, got {value}")
        return value

    @field_validator("heldout_fraction")
    @classmethod
    def _fraction(cls, value: float) -> float:
        if not 0 < value < 1:
            raise ValueError(f"heldout_fraction must be in (0, 1), got {value}: the gate needs held-out pairs and "
                             "training needs the rest")
        return value

    @model_validator(mode="after")
    def _base(self) -> "RewardTrainConfig":
        if not self.base.strip():
            raise ValueError("base is empty: use 'smollm2', 'tiny', a model folder or a checkpoint id")
        return self


class VerifiedPairsConfig(BaseModel):
    """How preference pairs are built from a domain whose verifier knows the truth
    (:mod:`training.verified_pairs`): ``items`` train items, ``wrong_per_item`` rejected answers each;
    optionally ``hack_families`` (the reference against hacks built from the prompt) and ``policy``
    (the policy's own sampled completions: ``samples`` per item at ``temperature``, up to
    ``max_new_tokens``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: int = Field(100, description="train items of the domain to build pairs from (fewer when the split has "
                                        "fewer)")
    wrong_per_item: int = Field(3, description="pairs per item: the reference answer against this many wrong ones")
    hack_families: list[str] = Field(
        [], description="also pair the reference against one hack per family and item, built from the prompt as "
                        "`assay domains attack` builds them and confirmed 0.0 by the verifier, so the reward model "
                        "learns not to pay them (the gate's probes of these families then only test new prompts)")
    policy: str = Field("", description="also pair against this policy's own completions (e.g. smollm2): a correct "
                                        "one (1.0) over a wrong one (0.0), else the reference over a wrong one; "
                                        "empty: reference answers only")
    samples: int = Field(4, description="with policy: completions sampled per item")
    temperature: float = Field(1.0, description="with policy: sampling temperature (the GRPO rollouts' default)")
    max_new_tokens: int = Field(64, description="with policy: tokens per completion at most")
    seed: int = Field(0, description="seed of the items drawn, the wrong answers chosen and the sampling")

    @field_validator("items", "wrong_per_item", "samples", "max_new_tokens")
    @classmethod
    def _at_least_one(cls, value: int, info) -> int:
        if value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value}")
        return value

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: float) -> float:
        if not 0 < value <= 2:
            raise ValueError(f"temperature must be in (0, 2], got {value}: pairs need varied samples (1.0 is what "
                             "GRPO samples at)")
        return value

    @field_validator("hack_families")
    @classmethod
    def _families(cls, value: list[str]) -> list[str]:
        unknown = [f for f in value if f not in TRAINABLE_HACK_FAMILIES]
        if unknown:
            raise ValueError(f"unknown hack family(ies) {', '.join(map(repr, unknown))} (known: "
                             f"{', '.join(TRAINABLE_HACK_FAMILIES)})")
        return list(dict.fromkeys(value))
