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

Rollout/training mismatch (:func:`rollout_correction`): rollouts sampled by another engine (vLLM,
in bfloat16, with its own kernels) come from a slightly different distribution pi_rollout than the
policy pi_train whose gradient is taken, so the samples are off-policy even at ``num_iterations``
1 (Yao, Liu, Zhang, Dong, Shang, Gao 2025, "Your Efficient RL Framework Secretly Brings You
Off-Policy RL Training", https://fengyao.notion.site/off-policy-rl). Their truncated importance
sampling (TIS) weights each token's policy-gradient term by

    w_it = min(pi_train(y_it) / pi_rollout(y_it), C)      (detached; C = ``importance_sampling_cap``, 2)

    loss_it = -w_it * surrogate_it + beta * kl_it

where pi_train is the policy before this step's update (``old_logp``; at ``num_iterations`` 1 the
update's own forward, detached: no extra pass) and pi_rollout the log-prob the engine returned with
the sample. Both must be taken at the sampling temperature (``log_softmax(logits / T)``; vLLM's
``processed_logprobs``), or every ratio is off by the temperature's effect instead of the engines'
difference. The KL term is not weighted. Modes: ``token_truncate`` (the above, the default with
vLLM), ``sequence_truncate`` (one weight per sequence, exp of the summed log-ratios, capped),
``token_mask`` / ``sequence_mask`` (weight = ratio where it is <= C, else 0: the token or sequence
is dropped).

TRL 1.16 (``vllm_importance_sampling_correction=True`` when ``use_vllm``) computes the same ratio
from an extra no-grad forward at ``logits / temperature`` and multiplies ``per_token_loss`` by it
before adding the KL term, as here; its default mode is ``sequence_mask`` with cap 3.0
(``vllm_importance_sampling_clip_max``). Assay defaults to Yao et al.'s per-token truncation: a
sequence's ratio is a product over its tokens, whose spread grows with length (measured on
SmolLM2, bf16 engine vs fp32 trainer, 32-token completions: token ratios 0.45-1.51, sequence
ratios 0.31-1.35), so masking whole sequences discards more data as completions grow. With top-k /
top-p, vLLM's log-probs are renormalised over the kept tokens while the trainer's are not: the
weight then also corrects the truncation (as in TRL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

# The one list of each: the recipe schema (training.config) types its fields with these.
LossType = Literal["grpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]
ImportanceSamplingMode = Literal["token_truncate", "sequence_truncate", "token_mask", "sequence_mask", "none"]
LOSS_TYPES: tuple[str, ...] = get_args(LossType)
SCALE_REWARDS: tuple[str, ...] = get_args(ScaleRewards)
IMPORTANCE_SAMPLING_MODES: tuple[str, ...] = get_args(ImportanceSamplingMode)
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


@dataclass
class RolloutCorrection:
    """Importance weights for rollouts sampled by another engine, and what they looked like."""

    weights: "object"          # (B, T) token modes (0 on padding), (B, 1) sequence modes; detached
    ratio_min: float
    ratio_mean: float
    ratio_max: float
    corrected_frac: float      # share of tokens (token modes) or sequences (sequence modes) capped or dropped
    logp_gap_mean: float       # mean |log pi_train - log pi_rollout| over completion tokens
    logp_gap_max: float
    count: int                 # tokens (token modes) or sequences the ratios were taken over
    tokens: int                # completion tokens the gap was taken over

    def metrics(self) -> dict[str, float]:
        return {"is_ratio_min": self.ratio_min, "is_ratio_mean": self.ratio_mean, "is_ratio_max": self.ratio_max,
                "is_corrected_frac": self.corrected_frac, "logp_gap_mean": self.logp_gap_mean,
                "logp_gap_max": self.logp_gap_max}


def rollout_correction(train_logp, rollout_logp, mask, *, mode: str = "token_truncate",
                       cap: float = 2.0) -> RolloutCorrection:
    """Importance weights pi_train / pi_rollout for rollouts from another engine (see the module
    docstring, "Rollout/training mismatch"). ``train_logp``: the policy's log-probs of the sampled
    tokens before the update, ``rollout_logp``: the sampler's, both (B, T) at the sampling
    temperature; ``mask``: (B, T), 1 on completion tokens. A NaN log-prob (none returned) counts
    as no mismatch (ratio 1), as in TRL."""
    import torch

    if mode not in IMPORTANCE_SAMPLING_MODES or mode == "none":
        raise ValueError(f"importance sampling mode {mode!r} is not one of "
                         f"{', '.join(m for m in IMPORTANCE_SAMPLING_MODES if m != 'none')}")
    if not cap >= 1.0:
        raise ValueError(f"the importance sampling cap must be >= 1, got {cap!r}")
    mask = mask.to(train_logp.dtype)
    gap = torch.nan_to_num((train_logp - rollout_logp).detach(), nan=0.0) * mask
    sequence = mode.startswith("sequence")
    log_ratio = gap.sum(-1, keepdim=True) if sequence else gap
    ratio = torch.exp(log_ratio.clamp(max=80.0))  # exp overflows float32 past ~88; capped below anyway
    over = ratio > cap
    weights = ratio.clamp(max=cap) if mode.endswith("truncate") else ratio.masked_fill(over, 0.0)
    if not sequence:
        weights = weights * mask  # 0 on padding (the loss masks it anyway)
    valid = mask.any(-1, keepdim=True) if sequence else mask.bool()
    ratios, flagged = ratio[valid], over[valid]
    gaps = gap.abs()[mask.bool()]
    count = int(ratios.numel())
    nan = float("nan")
    return RolloutCorrection(
        weights=weights.detach(),
        ratio_min=float(ratios.min()) if count else nan, ratio_mean=float(ratios.mean()) if count else nan,
        ratio_max=float(ratios.max()) if count else nan,
        corrected_frac=float(flagged.float().mean()) if count else nan,
        logp_gap_mean=float(gaps.mean()) if gaps.numel() else nan,
        logp_gap_max=float(gaps.max()) if gaps.numel() else nan, count=count, tokens=int(gaps.numel()))


def per_token_terms(logp, old_logp, ref_logp, advantages, *, beta: float, epsilon: float,
                    epsilon_high: float | None, is_weights=None) -> LossTerms:
    import torch

    eps_high = epsilon if epsilon_high is None else epsilon_high
    ratio = torch.exp(logp - old_logp)
    clipped_ratio = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    adv = advantages.unsqueeze(1)
    unclipped_obj, clipped_obj = ratio * adv, clipped_ratio * adv
    per_token = -torch.min(unclipped_obj, clipped_obj)
    if is_weights is not None:  # rollout/training mismatch: weights the policy-gradient term only
        per_token = per_token * is_weights
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
              num_sequences: float | None = None, num_tokens: float | None = None, is_weights=None):
    """``(loss, terms)`` for one batch; see the module docstring for the formulas. ``is_weights``
    (:func:`rollout_correction`) weights each token's policy-gradient term."""
    terms = per_token_terms(logp, old_logp, ref_logp, advantages, beta=beta, epsilon=epsilon,
                            epsilon_high=epsilon_high, is_weights=is_weights)
    loss = aggregate(terms.per_token_loss, mask, loss_type, max_completion_length,
                     num_sequences=num_sequences, num_tokens=num_tokens)
    return loss, terms
