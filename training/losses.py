"""GRPO objective: group-relative advantages, the clipped surrogate, k3 KL, and loss aggregation.

Names follow TRL's ``GRPOConfig`` so users feel at home. For completion token t of sequence i:

    ratio_it   = exp(logp_it - old_logp_it)
    surrogate  = min(ratio_it * A_i, clip(ratio_it, 1 - epsilon, 1 + epsilon_high) * A_i)
    kl_it      = exp(ref_it - logp_it) - (ref_it - logp_it) - 1          (k3, Schulman 2020)
    loss_it    = -surrogate + beta * kl_it

aggregated over the completion mask m by ``loss_type``:

- ``grpo`` (Shao et al. 2024): mean over sequences of the per-sequence token mean;
- ``dr_grpo`` (Liu et al. 2025, "Dr. GRPO"): sum over all tokens / (sequences * max_completion_length),
  which removes the length bias of the per-sequence mean;
- ``dapo`` (Yu et al. 2025): token-level mean, sum over all tokens / number of completion tokens.

Advantages (``scale_rewards``): A_i = r_i - mean(group); divided by the group's std (``group``,
GRPO), by the std of the whole batch (``batch``) or not at all (``none``, Dr. GRPO); std is the
unbiased sample std and ``1e-4`` keeps the division finite, as in TRL.

Log-probabilities (``logp``, ``old_logp``, ``ref_logp``) are those of the sampling distribution,
``log_softmax(logits / temperature)`` (see :func:`training.trainer.completion_logprobs`).

Zero-variance groups (all G rewards equal, so A_i = 0 for the whole group):

- **TRL** (``GRPOTrainer._compute_loss``) keeps them in the batch. Their surrogate is 0, but their
  ``beta * kl_it`` terms stay in the loss, and they count in every normaliser: the sequences of
  ``grpo``/``dr_grpo`` and the completion tokens of ``dapo``. They dilute the step (the other
  groups' gradient is divided by the whole batch) and, with ``beta > 0``, pull those prompts'
  completions towards the reference.
- **Assay, ``skip_zero_variance_groups: true`` (the default)** leaves them out before the loss:
  no forward/backward pass, no KL term, and the normalisers count the kept sequences/tokens only
  (:func:`update_rows`). The loss is then exactly TRL's formula applied to the kept groups, i.e.
  what DAPO's dynamic sampling (Yu et al. 2025) optimises, without its refill of the batch with
  new prompts. Why the default: on CPU the update is about half of a step, and zero-variance
  groups can be most of the batch (all wrong early on, all right later); they carry no policy
  signal, only KL, and with ``beta = 0`` (DAPO, Dr. GRPO, TRL's own default) skipping changes
  only the normaliser. The price: with ``beta > 0`` the KL term constrains only the prompts that
  had signal, and the effective step size grows as groups are dropped. Changing the default
  would also change every recipe's fingerprint, so existing runs could not resume.
- **``skip_zero_variance_groups: false``** gives TRL's definition exactly (every group, its KL,
  full normalisers), at the cost of their forward/backward passes.

Either way the normalisers are those of the whole step on every process, so micro-batches and
ranks add up to the full-batch loss exactly; TRL divides ``grpo``/``dr_grpo`` per micro-batch,
which is the same when micro-batches are the same size.

``zero_var_frac`` (logged per step and domain) says how much of the batch either choice concerns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# The one list of each: the recipe schema (training.config) types its fields with these.
LossType = Literal["grpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]
LOSS_TYPES: tuple[str, ...] = get_args(LossType)
SCALE_REWARDS: tuple[str, ...] = get_args(ScaleRewards)
STD_EPS = 1e-4


@dataclass
class GroupStats:
    advantages: "object"       # (B,) tensor
    zero_variance: "object"    # (B // G,) bool tensor: groups whose rewards are all equal


def group_advantages(rewards, num_generations: int, scale_rewards: str = "group") -> GroupStats:
    """Advantages for rewards laid out group-major: ``rewards[g * G + j]`` is sample j of group g."""
    import torch

    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards {scale_rewards!r} is not one of {', '.join(SCALE_REWARDS)}")
    if rewards.numel() % num_generations:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {num_generations}")
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1, keepdim=True)
    std = grouped.std(dim=1, keepdim=True)
    centered = grouped - mean
    if scale_rewards == "group":
        centered = centered / (std + STD_EPS)
    elif scale_rewards == "batch":
        centered = centered / (rewards.std() + STD_EPS)
    zero_variance = torch.isclose(std.squeeze(1), torch.zeros_like(std.squeeze(1)))
    return GroupStats(advantages=centered.reshape(-1), zero_variance=zero_variance)


def update_rows(zero_variance, num_generations: int, skip_zero_variance_groups: bool) -> list[int]:
    """Indices (group-major layout) of the sequences that enter the loss: all of them, or only
    those of groups with some reward variance when ``skip_zero_variance_groups``. The normalisers
    of :func:`aggregate` (``num_sequences``, ``num_tokens``) are then counted over these rows only,
    so the loss is TRL's over the kept groups (see the module docstring)."""
    flags = [bool(z) for z in zero_variance.tolist()] if hasattr(zero_variance, "tolist") else list(zero_variance)
    return [g * num_generations + j for g, zero in enumerate(flags)
            if not (skip_zero_variance_groups and zero) for j in range(num_generations)]


def k3_kl(logp, ref_logp):
    """Per-token k3 estimate of KL(pi || pi_ref): unbiased, always >= 0."""
    import torch

    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


@dataclass
class LossTerms:
    per_token_loss: "object"  # (B, T)
    per_token_kl: "object | None"
    clipped: "object"         # (B, T) bool: tokens where the clip was active


def per_token_terms(logp, old_logp, ref_logp, advantages, *, beta: float, epsilon: float,
                    epsilon_high: float | None) -> LossTerms:
    import torch

    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - old_logp)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    adv = advantages.unsqueeze(1)
    unclipped_obj, clipped_obj = ratio * adv, clipped_ratio * adv
    per_token = -torch.min(unclipped_obj, clipped_obj)
    clipped = clipped_obj < unclipped_obj
    kl = None
    if beta != 0.0:
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + beta * kl
    return LossTerms(per_token, kl, clipped)


def aggregate(per_token_loss, mask, loss_type: str, max_completion_length: int, *,
              num_sequences: float | None = None, num_tokens: float | None = None):
    """Reduce per-token losses to a scalar by ``loss_type``.

    ``num_sequences``/``num_tokens`` are the normalisers of the *whole* optimisation batch; pass
    them when this call sees one micro-batch (or one rank) of it, so micro-batch losses add up to
    exactly the full-batch loss. Left as None, the normalisers come from this batch.
    """
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type {loss_type!r} is not one of {', '.join(LOSS_TYPES)}")
    mask = mask.to(per_token_loss.dtype)
    masked = per_token_loss * mask
    n_seq = float(per_token_loss.shape[0]) if num_sequences is None else float(num_sequences)
    if loss_type == "grpo":
        per_seq = masked.sum(-1) / mask.sum(-1).clamp(min=1.0)
        return per_seq.sum() / n_seq
    if loss_type == "dr_grpo":
        return masked.sum() / (n_seq * max_completion_length)
    n_tok = float(mask.sum().clamp(min=1.0)) if num_tokens is None else max(1.0, float(num_tokens))
    return masked.sum() / n_tok


def grpo_loss(logp, old_logp, ref_logp, advantages, mask, *, loss_type: str, beta: float,
              epsilon: float, epsilon_high: float | None, max_completion_length: int,
              num_sequences: float | None = None, num_tokens: float | None = None):
    """``(loss, terms)`` for one batch; see the module docstring for the formulas."""
    terms = per_token_terms(logp, old_logp, ref_logp, advantages, beta=beta, epsilon=epsilon,
                            epsilon_high=epsilon_high)
    loss = aggregate(terms.per_token_loss, mask, loss_type, max_completion_length,
                     num_sequences=num_sequences, num_tokens=num_tokens)
    return loss, terms
