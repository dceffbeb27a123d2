"""Which difficulty estimate a domain's gate uses (:class:`DifficultySettings`), in a module that
imports only pydantic.

``policy`` (the default): the pass rate of a named policy over K seeded samples per admitted train
item (:mod:`evaluation.pass_rates`, cached in lake table ``pass_rates``); ``heuristic``: the text
heuristic of :mod:`quality.difficulty` (no policy run, stated as such wherever the gate reports).
The ``policy_pass_rates`` asset takes these as its config (Dagster launchpad, ``assay demo``) and
records them with its measurement (lake table ``policy_difficulty``), so the gate, the train set and
the champion sensor all read the one choice.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ESTIMATES = ("policy", "heuristic")


class DifficultySettings(BaseModel):
    """How a domain's train items are judged for difficulty before they enter its train set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    estimate: Literal["policy", "heuristic"] = Field(
        "policy", description="'policy': pass rate of a policy over K samples per train item (items whose K samples "
                              "all pass or all fail leave the train set); 'heuristic': a text heuristic, no policy run")
    policy: str = Field(
        "", description="policy whose pass rates judge difficulty: a checkpoint id, 'champion' or 'base-RECIPE'; empty: "
                        "the current champion, else the base policy of the policy resource's recipe (re-measured "
                        "when the champion changes)")
    samples: int = Field(4, description="samples per item, K (pass rate = passes / K)")
    max_new_tokens: int = Field(64, description="completion length limit of each sample, in tokens")
    temperature: float = Field(0.7, description="sampling temperature of the K samples (K = 1 is greedy)")
    backend: Literal["", "torch", "vllm", "auto"] = Field(
        "", description="generation engine: torch, vllm or auto; empty: the policy resource's backend")

    @field_validator("samples", "max_new_tokens")
    @classmethod
    def _positive(cls, value, info):
        if value < 1:
            raise ValueError(f"{info.field_name} must be a positive integer, got {value!r}")
        return value

    @model_validator(mode="after")
    def _distinct_samples(self):
        if self.estimate == "policy" and self.temperature <= 0 and self.samples > 1:
            raise ValueError(f"samples={self.samples} at temperature {self.temperature} would be {self.samples} copies "
                             "of one greedy completion (all pass or all fail): raise the temperature or set samples=1")
        return self

    def describe(self, checkpoint: str | None = None) -> str:
        """One line for reports: which estimate, on which policy."""
        if self.estimate == "heuristic":
            return "heuristic (item metadata difficulty, else text features; no policy run)"
        return (f"policy pass rate of {checkpoint or self.policy or 'the champion'} over K={self.samples} samples "
                f"({self.max_new_tokens} new tokens, temperature {self.temperature})")
