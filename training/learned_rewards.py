"""Learned rewards in GRPO: a domain's declared reward model, refused unless its gate passed.

A domain declares ``learned_reward=LearnedReward(reward_model="latest", weight=1.0)``
(:class:`domains.base.LearnedReward`). Before a run starts (:func:`training.data.load_training_data`,
so the CLI, the Dagster asset and the trainer alike) :func:`gated_reward_model` resolves the
reward model (:func:`generation.reward_models.resolve_reward_model`) and reads its newest check in
lake table ``reward_gates`` (:func:`quality.reward_gate.latest_reward_gate`): no check, or a check
with any failed criterion, refuses the domain with the reasons and the command to run
(``assay reward check DOMAIN``), and so does a check whose bar was laxer than the domain's declared
one (``LearnedReward(gate=...)``, :func:`quality.reward_gate_config.declared_gate`). A passed check
at the domain's bar lets it train, and the reward model's id enters the run's data fingerprint
(another reward model is another run).

During the run :class:`LearnedRewardScorer` loads the reward model once, on first use, and scores
each step's completions of the domain in batches; the raw Bradley-Terry output ``r`` is mapped to
``sigmoid(r)`` in (0, 1) (:func:`to_unit`). :class:`training.rewards.RewardComposer` logs it as the
``learned`` component beside the domain's own ``score`` (the gold signal; accuracy stays the
verifier's) and rewards ``weight * learned + (1 - weight) * score`` in the ``score`` term.

torch is imported only when a reward model is first scored.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence


def to_unit(raw: float) -> float:
    """A reward model's raw output mapped to (0, 1): the logistic sigmoid, computed stably."""
    if raw >= 0:
        return 1.0 / (1.0 + math.exp(-raw))
    e = math.exp(raw)
    return e / (1.0 + e)


def gate_problem(rows: list[dict], domain: str, reward_model: str, required=None) -> str | None:
    """Why the reward model may not be trained on, from its newest gate check's rows (None: it passed
    at a bar at least as strict as ``required``, the domain's declared one, a RewardGateConfig)."""
    from quality.reward_gate import bar_shortfall

    command = f"`assay reward check {domain}`"
    if not rows:
        return (f"domain {domain!r} declares a learned reward, and its reward model {reward_model} has never been "
                f"checked: run {command} (it must pass before GRPO trains on it)")
    failed = [r for r in rows if not r.get("passed")]
    if failed:
        reasons = "; ".join(f"{r['criterion']}: {r.get('detail') or 'failed'}" for r in failed)
        return (f"domain {domain!r} declares a learned reward, and its reward model {reward_model} failed its gate "
                f"(check {rows[0].get('check')}, {rows[0].get('checked_at')}): {reasons}. Train a better one "
                f"(`assay reward train {domain} --pairs FILE`) and run {command} until it passes")
    shortfall = bar_shortfall(rows, required) if required is not None else []
    if shortfall:  # a check passed at a laxer bar than the domain set cannot let the model into training
        return (f"domain {domain!r} declares a learned reward, and its reward model {reward_model} passed a gate laxer "
                f"than the domain's bar (check {rows[0].get('check')}: {'; '.join(shortfall)}): run {command} "
                f"without the laxer flags (the domain's learned_reward.gate sets its bar)")
    return None


def gated_reward_model(lake, domain) -> dict:
    """``domain``'s declared reward model if its newest gate check passed: ``{"reward_model", "path",
    "weight", "gate_check"}``; else :class:`training.data.TrainingDataError` with the reason and the
    command to run."""
    from generation.reward_models import RewardModelNotFound, resolve_reward_model
    from quality.reward_gate import latest_reward_gate
    from quality.reward_gate_config import GateDeclarationError, declared_gate
    from training.data import TrainingDataError

    spec = domain.learned_reward
    try:
        required = declared_gate(domain)
    except GateDeclarationError as exc:
        raise TrainingDataError(str(exc)) from None
    try:
        record = resolve_reward_model(lake, domain.name, spec.reward_model)
    except RewardModelNotFound as exc:
        raise TrainingDataError(f"domain {domain.name!r} declares a learned reward "
                                f"(reward_model={spec.reward_model!r}): {exc}") from exc
    rows = latest_reward_gate(lake, domain.name, record.reward_model)
    problem = gate_problem(rows, domain.name, record.reward_model, required)
    if problem:
        raise TrainingDataError(problem)
    return {"reward_model": record.reward_model, "path": record.path, "weight": spec.weight,
            "gate_check": rows[0]["check"]}


@dataclass
class LearnedRewardScorer:
    """One domain's reward model in a run: ``scorer(prompts, completions) -> [sigmoid(raw)]``, the
    model loaded on the first call (once per run) and scored ``batch_size`` at a time."""

    reward_model: str
    path: str
    weight: float = 1.0
    batch_size: int = 16
    _scorer: Any = field(default=None, repr=False)

    @classmethod
    def from_gated(cls, gated: dict, batch_size: int = 16) -> "LearnedRewardScorer":
        return cls(gated["reward_model"], gated["path"], float(gated["weight"]), batch_size)

    @property
    def loaded(self) -> bool:
        return self._scorer is not None

    def raw(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        if self._scorer is None:
            from generation.reward_scorer import RewardScorer

            self._scorer = RewardScorer.load(self.path, batch_size=self.batch_size)
        values = self._scorer(list(prompts), list(completions))
        bad = [v for v in values if not math.isfinite(v)]
        if bad:
            raise ValueError(f"reward model {self.reward_model} returned a non-finite reward ({bad[0]}): "
                             "it cannot be trained on; train and check it again")
        return values

    def __call__(self, prompts: Sequence[str], completions: Sequence[str]) -> list[float]:
        return [to_unit(v) for v in self.raw(prompts, completions)]
