"""Settings of a reward-model training run (:mod:`training.reward_model`); only pydantic here, since
``assay reward train --help`` builds its flags from this model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


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
    (:mod:`training.verified_pairs`): ``items`` train items, ``wrong_per_item`` rejected answers each."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    items: int = Field(100, description="train items of the domain to build pairs from (fewer when the split has "
                                        "fewer)")
    wrong_per_item: int = Field(3, description="pairs per item: the reference answer against this many wrong ones")
    seed: int = Field(0, description="seed of the items drawn and of the wrong answers chosen")

    @field_validator("items", "wrong_per_item")
    @classmethod
    def _at_least_one(cls, value: int, info) -> int:
        if value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value}")
        return value
