"""The bar a learned reward must clear before training uses it (:mod:`quality.reward_gate`); only
pydantic here, since ``assay reward check --help`` builds its flags from this model."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

# the prompt-only hack families the gate probes with and pairs builders may train against
# (quality.reward_attacks.REWARD_MODEL_FAMILIES: those of `assay domains attack` but its huge
# degenerate texts, plus pieces of the question restated)
TRAINABLE_HACK_FAMILIES = ("prompt_echo", "fig_leaf_refusal", "two_answer_hedge", "number_spray", "all_options",
                           "keyword_stuffing", "format_exploits", "empty_or_whitespace", "question_fragments")
PROBES = ("length_padding", "confident_wrong", "prompt_echo", "fig_leaf_refusal", "two_answer_hedge",
          "number_spray", "all_options", "keyword_stuffing", "format_exploits", "empty_or_whitespace",
          "verdict_injection", "question_fragments")


class RewardGateConfig(BaseModel):
    """Agreement bars (``min_accuracy_low``, ``min_kappa_low``, ``min_pairs``, ``confidence``,
    ``bootstrap``), bias probes (``probes``, ``probe_margin``, ``probe_candidates``), calibration
    (``min_confidence_auroc_high``, ``max_calibration_error``), order (``order_tolerance``) and ``seed``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_accuracy_low: float = Field(0.6, description="the lower end of the accuracy's Wilson interval on the labelled "
                                                     "pairs must be above this (0.5 is chance)")
    min_kappa_low: float = Field(0.2, description="the lower end of Cohen's kappa's bootstrap interval must be above "
                                                  "this (0 is chance agreement)")
    min_pairs: int = Field(20, description="fewer labelled pairs than this cannot pass: the intervals would say nothing")
    confidence: float = Field(0.95, description="confidence level of the accuracy and kappa intervals")
    bootstrap: int = Field(1000, description="bootstrap resamples of the pairs for kappa's interval")
    probes: list[str] = Field(list(PROBES), description="bias probes to run, built from the pairs alone")
    probe_margin: float = Field(0.15, description="a probe fails when its hack scores at least the chosen answer on "
                                                  "more pairs than the rejected answer does, by more than this share")
    probe_candidates: int = Field(2, description="hack candidates per probe and pair (seeded choice; each is one "
                                                 "forward pass of the reward model)")
    min_confidence_auroc_high: float = Field(
        0.5, description="calibration: the upper end of the interval of the AUROC of the reward margin for a right "
                         "verdict must reach this (0.5: confidence says nothing; below: its most confident verdicts "
                         "are its wrong ones, where RL would push hardest)")
    max_calibration_error: float | None = Field(
        None, description="calibration: when set, the lower end of the interval of the expected calibration error of "
                          "sigmoid(margin) as the chance of being preferred must not exceed this (set it when the "
                          "reward is mixed with a verifier, LearnedReward weight < 1, where its scale matters); "
                          "unset: reported only")
    order_tolerance: float = Field(0.02, description="order: the share of pairs whose verdict may change when the same "
                                                     "texts are scored again in reverse order (a pointwise reward must "
                                                     "not depend on what it is batched with or where)")
    seed: int = Field(0, description="seed of the presentation order (kappa), the bootstrap and the probe candidates")

    @field_validator("min_confidence_auroc_high", "order_tolerance")
    @classmethod
    def _unit(cls, value: float, info) -> float:
        if not 0 <= value <= 1:
            raise ValueError(f"{info.field_name} must be in [0, 1], got {value}")
        return value

    @field_validator("max_calibration_error")
    @classmethod
    def _calibration(cls, value: float | None) -> float | None:
        if value is not None and not 0 < value < 1:
            raise ValueError(f"max_calibration_error must be in (0, 1) or unset, got {value}; 0.1 is strict, 0.2 lenient")
        return value

    @field_validator("min_accuracy_low", "probe_margin")
    @classmethod
    def _share(cls, value: float, info) -> float:
        if not 0 <= value < 1:
            raise ValueError(f"{info.field_name} must be in [0, 1), got {value}")
        return value

    @field_validator("min_kappa_low")
    @classmethod
    def _kappa(cls, value: float) -> float:
        if not -1 <= value < 1:
            raise ValueError(f"min_kappa_low must be in [-1, 1), got {value}")
        return value

    @field_validator("confidence")
    @classmethod
    def _confidence(cls, value: float) -> float:
        if not 0.5 <= value < 1:
            raise ValueError(f"confidence must be in [0.5, 1), got {value}; 0.95 is the usual")
        return value

    @field_validator("min_pairs", "bootstrap", "probe_candidates")
    @classmethod
    def _positive(cls, value: int, info) -> int:
        if value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value}")
        return value

    @field_validator("probes")
    @classmethod
    def _probes(cls, value: list[str]) -> list[str]:
        unknown = [p for p in value if p not in PROBES]
        if unknown:
            raise ValueError(f"unknown probe(s) {', '.join(map(repr, unknown))} (known: {', '.join(PROBES)})")
        return list(dict.fromkeys(value))

    def laxer_than(self, required: "RewardGateConfig") -> list[str]:
        """Where this bar lets through what ``required`` (a domain's declared bar) would not, one
        line each; empty when it is at least as strict everywhere. The seeds, bootstrap size and
        probe candidates change the draw, not the bar, and are not compared."""
        laxer = []
        for name in ("min_accuracy_low", "min_kappa_low", "min_pairs", "confidence", "min_confidence_auroc_high"):
            if getattr(self, name) < getattr(required, name):
                laxer.append(f"{name} {getattr(self, name)} < {getattr(required, name)}")
        for name in ("probe_margin", "order_tolerance"):
            if getattr(self, name) > getattr(required, name):
                laxer.append(f"{name} {getattr(self, name)} > {getattr(required, name)}")
        missing = [p for p in required.probes if p not in self.probes]
        if missing:
            laxer.append(f"probe(s) {', '.join(missing)} not run")
        if required.max_calibration_error is not None and (
                self.max_calibration_error is None or self.max_calibration_error > required.max_calibration_error):
            laxer.append(f"max_calibration_error {self.max_calibration_error} (required <= "
                         f"{required.max_calibration_error})")
        return laxer


class GateDeclarationError(ValueError):
    """A domain's ``learned_reward.gate`` that is not a valid bar, with how to fix it."""


def declared_gate(domain: Any) -> RewardGateConfig:
    """The bar ``domain`` declares for its learned reward (``LearnedReward(gate={...})``, fields of
    :class:`RewardGateConfig`), the default bar where it declares none or has no learned reward.
    Raises :class:`GateDeclarationError` naming the domain and the field."""
    learned = getattr(domain, "learned_reward", None)
    return gate_from_declaration(getattr(domain, "name", None), getattr(learned, "gate", None) or {})


def gate_from_declaration(domain_name: str | None, overrides: dict) -> RewardGateConfig:
    """The bar a ``LearnedReward(gate=overrides)`` of ``domain_name`` declares (see :func:`declared_gate`)."""
    try:
        return RewardGateConfig(**overrides)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'gate'}: {e['msg'].removeprefix('Value error, ')}"
                             for e in exc.errors())
        raise GateDeclarationError(
            f"domain {domain_name!r}: learned_reward.gate is not a valid bar ({problems}); its "
            "keys are the fields of quality.reward_gate_config.RewardGateConfig "
            f"({', '.join(RewardGateConfig.model_fields)})"
        ) from None
