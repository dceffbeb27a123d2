"""A GRPO run's history: one row per (step, domain), what each column means, and where rows go.

Rows are plain dicts (kept in the run state, ``state.json``), written to lake table
``training_history`` (:data:`storage.tables.TRAINING_HISTORY` documents every column) at each save
and logged to MLflow per step (:func:`mlflow_metrics`: ``<metric>/<domain>``, the batch's ``_all``
row without the suffix). Domain ``_all`` holds the batch-level numbers.

A domain row exists for every domain drawn at a step, and for every validated domain at a step the
in-loop validation ran (:mod:`training.validation`), also step 0 (the starting policy) and domains
the run only watches: those rows carry the validation columns and no training metrics (null).
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.lake import Lake

HISTORY_TABLE = "training_history"
ALL = "_all"
# reward-hacking signals per (step, domain) (training.hacking_signals): shares of hedging and of
# prompt-copying rollouts, the copiers' mean reward (None when none copies)
HACKING_SIGNALS = ("multi_answer_share", "prompt_copy_share", "prompt_copy_reward")
# a domain with a learned reward (training.learned_rewards): its reward model's mean (sigmoid) value
# and the verifier's mean score, the gold signal, per step (None for other domains)
LEARNED_SIGNALS = ("learned_mean", "score_mean")
# the proxy over-optimisation watch of such a domain (training.overoptimisation) per step: 1.0 when it
# fired on the trailing window ending at this step, 0.0 when it judged and did not, None before a
# full window (and for domains without a learned reward); MLflow metric reward_hacking/<domain>
REWARD_HACKING = "reward_hacking"
# in-loop validation (training.validation) at the steps it ran: the greedy mean score on the domain's
# held-out items (MLflow val/<domain>), its change since step 0 on the same items, the one-sided p of
# "below step 0" and its BH q across the validated domains, the items, and the forgetting flag (1.0
# flagged, 0.0 judged and not); None at other steps (and p, q, delta, flag at step 0)
VALIDATION = ("val_score", "val_delta", "val_p", "val_q", "val_n", "forgetting")
METRICS = ("reward_mean", "reward_std", "accuracy", "kl", "loss", "clip_frac", "entropy",
           "zero_var_frac", "tokens_per_s", *HACKING_SIGNALS, *LEARNED_SIGNALS, REWARD_HACKING)
# MLflow names of the validation columns (the rest are logged under their own names)
VALIDATION_METRICS = {"val_score": "val", "val_delta": "val_delta", "val_q": "val_q", "forgetting": "forgetting"}
# batch-level timings (seconds) and rollout/training mismatch figures, on the "_all" row only;
# validation_s / remeasure_s: the in-loop validation after this step (step 1's includes the step-0
# baseline) and the pass-rate re-measure it triggered
STEP_EXTRAS = ("generation_s", "step_s", "sync_s", "ref_s", "update_s", "is_ratio_min", "is_ratio_mean",
               "is_ratio_max", "is_corrected_frac", "logp_gap_mean", "logp_gap_max", "validation_s", "remeasure_s")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def std(values: list[float]) -> float | None:
    if not values:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def policy_tokens(rollout) -> float:
    """Tokens of a rollout that enter the loss: all of a completion, the policy's own of an episode."""
    return float(len(rollout.completion_ids) if rollout.policy_mask is None else sum(rollout.policy_mask))


def learned_signals(rollouts: list) -> dict:
    """``learned_mean`` (the learned reward) and ``score_mean`` (the verifier, the gold signal) over the
    rollouts a learned reward scored; both None when none was."""
    learned = [r for r in rollouts if r.learned is not None]
    if not learned:
        return {name: None for name in LEARNED_SIGNALS}
    gold = [r.score for r in learned if r.score is not None]  # none for a domain with no verifier
    return {"learned_mean": mean([r.learned for r in learned]), "score_mean": mean(gold) if gold else None}


def step_rows(step: int, rollouts: list, zero_var: list[bool], seconds: float, gen_seconds: float,
              loss_total: float | None, run_id: str | None, extras: dict) -> list[dict]:
    """A step's rows from its scored and updated rollouts (``training.trainer.Rollout``): one per
    domain drawn, then ``_all`` with the batch's ``extras`` (timings, mismatch figures)."""
    from training.hacking_signals import step_signals

    created = now()
    groups_by_domain: dict[str, set[int]] = {}
    for r in rollouts:
        groups_by_domain.setdefault(r.domain, set()).add(r.group)
    rows = []
    for domain in [*sorted(groups_by_domain), ALL]:
        mine = rollouts if domain == ALL else [r for r in rollouts if r.domain == domain]
        groups = {r.group for r in mine}
        used = [r for r in mine if r.loss is not None]
        tokens = sum(policy_tokens(r) for r in mine)  # generated: an episode's tool output is not
        rows.append({
            "run_id": run_id, "step": step, "domain": domain,
            "reward_mean": mean([r.reward for r in mine]),
            "reward_std": std([r.reward for r in mine]),
            "accuracy": mean([1.0 if r.score >= 1.0 - 1e-9 else 0.0 for r in mine if r.score is not None]),
            "kl": mean([r.kl for r in used if r.kl is not None]),
            "loss": (loss_total if domain == ALL else mean([r.loss for r in used])),
            "clip_frac": mean([r.clip_frac for r in used]),
            "entropy": mean([r.entropy for r in used if r.entropy is not None]),
            "zero_var_frac": mean([1.0 if zero_var[g] else 0.0 for g in groups]),
            "tokens_per_s": tokens / seconds if seconds > 0 else None,
            "created_at": created,
            "generation_s": gen_seconds if domain == ALL else None,
            "step_s": seconds if domain == ALL else None,
            **step_signals([r.text for r in mine], [str(r.row.get("prompt") or "") for r in mine],
                           [r.reward for r in mine]),
            **learned_signals(mine),
            REWARD_HACKING: None,  # set by the trainer's watch for a domain with a learned reward
            **{name: None for name in VALIDATION},  # set by the in-loop validation at the steps it runs
            **(extras if domain == ALL else {}),
        })
    return rows


def blank_row(run_id: str | None, step: int, domain: str) -> dict:
    """A history row with no measurement yet: every metric and validation column None."""
    return {"run_id": run_id, "step": step, "domain": domain, **{name: None for name in METRICS},
            "created_at": now(), "generation_s": None, "step_s": None, **{name: None for name in VALIDATION}}


def row_for(rows: list[dict], run_id: str | None, step: int, domain: str) -> dict:
    """``domain``'s row among a step's ``rows``, appended (blank) when the step has none (a domain
    validated but not drawn at that step, or only watched)."""
    for row in rows:
        if row["domain"] == domain:
            return row
    row = blank_row(run_id, step, domain)
    rows.insert(sum(r["domain"] != ALL for r in rows), row)  # before the "_all" row, as a step's rows are
    return row


def mlflow_metrics(rows: list[dict]) -> dict[str, float]:
    """A step's rows as MLflow metrics: ``<metric>/<domain>`` (``val/<domain>`` for the validation
    score), the ``_all`` row's under the bare name, its timings and mismatch figures too."""
    metrics = {}
    for row in rows:
        suffix = "" if row["domain"] == ALL else f"/{row['domain']}"
        for name in METRICS:
            value = row.get(name)
            if value is not None:
                metrics[name + suffix] = value
        for column, name in VALIDATION_METRICS.items():
            value = row.get(column)
            if value is not None and math.isfinite(value):
                metrics[name + suffix] = value
        if row["domain"] == ALL:
            for extra in STEP_EXTRAS:
                if row.get(extra) is not None and math.isfinite(row[extra]):
                    metrics[extra] = row[extra]
    return metrics


def write_history(lake: "Lake", state: dict) -> None:
    """The run's whole history as one lake batch (``training_history/run=<mlflow run id>``)."""
    import polars as pl

    from storage import tables

    if not state["history"]:
        return
    frame = tables.conform(pl.DataFrame(state["history"], infer_schema_length=None), tables.TRAINING_HISTORY)
    lake.write_batch(HISTORY_TABLE, {"run": state["run_id"]}, {"part": frame})
