"""GRPO loss, advantages and k3 KL against an independent float64 reference of the published formulas."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from training.losses import LOSS_TYPES, aggregate, group_advantages, grpo_loss, k3_kl


def reference_advantages(rewards: np.ndarray, g: int, scale: str) -> np.ndarray:
    out = np.empty_like(rewards)
    batch_std = rewards.std(ddof=1)
    for start in range(0, len(rewards), g):
        group = rewards[start:start + g]
        centered = group - group.mean()
        if scale == "group":
            centered = centered / (group.std(ddof=1) + 1e-4)
        elif scale == "batch":
            centered = centered / (batch_std + 1e-4)
        out[start:start + g] = centered
    return out


def reference_loss(logp, old, ref, adv, mask, loss_type, beta, eps_low, eps_high, max_len, is_weights=None) -> float:
    """Token by token, in plain float64 Python, straight from the papers' definitions;
    ``is_weights`` (b x t) weight each token's policy-gradient term, never the KL term."""
    b, t = logp.shape
    per_token = np.zeros((b, t))
    for i in range(b):
        for j in range(t):
            ratio = np.exp(logp[i, j] - old[i, j])
            clipped = min(max(ratio, 1 - eps_low), 1 + eps_high)
            surrogate = min(ratio * adv[i], clipped * adv[i])
            kl = np.exp(ref[i, j] - logp[i, j]) - (ref[i, j] - logp[i, j]) - 1
            weight = 1.0 if is_weights is None else is_weights[i, j]
            per_token[i, j] = -weight * surrogate + beta * kl
    if loss_type == "grpo":  # Shao et al.: mean over sequences of the per-sequence token mean
        return float(np.mean([(per_token[i] * mask[i]).sum() / max(mask[i].sum(), 1) for i in range(b)]))
    if loss_type == "dr_grpo":  # Liu et al.: constant normaliser, no length bias
        return float((per_token * mask).sum() / (b * max_len))
    return float((per_token * mask).sum() / mask.sum())  # DAPO: token-level mean


def random_batch(seed: int, b: int = 6, t: int = 7):
    rng = np.random.default_rng(seed)
    logp = -rng.gamma(2.0, 0.7, size=(b, t))
    old = logp + rng.normal(0, 0.3, size=(b, t))  # ratios far enough from 1 that clipping happens
    ref = logp + rng.normal(0, 0.5, size=(b, t))
    adv = rng.normal(0, 1, size=b)
    lengths = rng.integers(1, t + 1, size=b)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float64)
    return logp, old, ref, adv, mask


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_matches_float64_reference(loss_type, seed):
    logp, old, ref, adv, mask = random_batch(seed)
    beta, eps_low, eps_high, max_len = 0.04, 0.2, 0.28, 9
    expected = reference_loss(logp, old, ref, adv, mask, loss_type, beta, eps_low, eps_high, max_len)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    logp_t = t(logp).requires_grad_(True)
    loss, terms = grpo_loss(logp_t, t(old), t(ref), t(adv), t(mask), loss_type=loss_type, beta=beta,
                            epsilon=eps_low, epsilon_high=eps_high, max_completion_length=max_len)
    assert loss.dtype == torch.float64
    assert abs(loss.item() - expected) < 1e-12
    assert bool(terms.clipped.any()), "the random batch should exercise the clip"
    # The gradient agrees with central differences of the reference.
    loss.backward()
    h = 1e-6
    for (i, j) in [(0, 0), (2, 1), (5, 0)]:
        up, down = logp.copy(), logp.copy()
        up[i, j] += h
        down[i, j] -= h
        numeric = (reference_loss(up, old, ref, adv, mask, loss_type, beta, eps_low, eps_high, max_len)
                   - reference_loss(down, old, ref, adv, mask, loss_type, beta, eps_low, eps_high, max_len)) / (2 * h)
        assert abs(logp_t.grad[i, j].item() - numeric) < 1e-6


def test_loss_types_differ_on_unequal_lengths():
    logp, old, ref, adv, mask = random_batch(3)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    values = {lt: grpo_loss(t(logp), t(old), t(ref), t(adv), t(mask), loss_type=lt, beta=0.04, epsilon=0.2,
                            epsilon_high=None, max_completion_length=9)[0].item() for lt in LOSS_TYPES}
    assert len({round(v, 9) for v in values.values()}) == 3


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_micro_batches_add_up_to_the_full_batch(loss_type):
    logp, old, ref, adv, mask = random_batch(4)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    kwargs = dict(loss_type=loss_type, beta=0.04, epsilon=0.2, epsilon_high=0.3, max_completion_length=9)
    full, _ = grpo_loss(t(logp), t(old), t(ref), t(adv), t(mask), **kwargs)
    parts = [grpo_loss(t(logp[s]), t(old[s]), t(ref[s]), t(adv[s]), t(mask[s]), num_sequences=6,
                       num_tokens=mask.sum(), **kwargs)[0] for s in (slice(0, 2), slice(2, 6))]
    assert abs(sum(p.item() for p in parts) - full.item()) < 1e-12


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_match_reference(scale):
    rng = np.random.default_rng(5)
    rewards = rng.uniform(0, 1, size=12)
    rewards[8:12] = 0.5  # one group with no variance
    stats = group_advantages(torch.tensor(rewards, dtype=torch.float64), 4, scale)
    assert np.allclose(stats.advantages.numpy(), reference_advantages(rewards, 4, scale), atol=1e-12)
    assert stats.zero_variance.tolist() == [False, False, True]
    assert np.allclose(stats.advantages.numpy()[8:], 0.0)


def test_k3_kl_is_nonnegative_and_unbiased():
    rng = np.random.default_rng(6)
    # Samples from p, log-densities of p and q (two Gaussians): E_p[k3] = KL(p || q).
    mu_p, mu_q, sigma = 0.0, 0.4, 1.0
    x = rng.normal(mu_p, sigma, size=400_000)
    logp = -0.5 * ((x - mu_p) / sigma) ** 2
    logq = -0.5 * ((x - mu_q) / sigma) ** 2
    k3 = k3_kl(torch.tensor(logp), torch.tensor(logq))
    assert float(k3.min()) >= 0.0
    exact = (mu_p - mu_q) ** 2 / (2 * sigma ** 2)
    assert abs(float(k3.mean()) - exact) < 0.005


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="loss_type 'ppo'"):
        aggregate(torch.zeros(1, 1), torch.ones(1, 1), "ppo", 4)
    with pytest.raises(ValueError, match="scale_rewards 'median'"):
        group_advantages(torch.zeros(4), 2, "median")
    with pytest.raises(ValueError, match="groups of 3"):
        group_advantages(torch.zeros(4), 3)


def _step_loss(logp, old, ref, rewards, mask, *, g, skip, loss_type, beta, eps_low, eps_high, max_len, micro=2):
    """The loss of one step as the trainer assembles it: advantages, the rows that enter the update
    (training.losses.update_rows), normalisers counted over those rows, micro-batches that add up."""
    from training.losses import update_rows

    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    stats = group_advantages(t(rewards), g, "group")
    rows = update_rows(stats.zero_variance, g, skip)
    logp_t = t(logp).requires_grad_(True)
    n_seq, n_tok = float(len(rows)), float(mask[rows].sum())
    total = 0.0
    for part in np.array_split(np.array(rows), micro):
        part = torch.tensor(part, dtype=torch.long)
        loss, _ = grpo_loss(logp_t[part], t(old)[part], t(ref)[part], stats.advantages[part], t(mask)[part],
                            loss_type=loss_type, beta=beta, epsilon=eps_low, epsilon_high=eps_high,
                            max_completion_length=max_len, num_sequences=n_seq, num_tokens=n_tok)
        total = total + loss
    total.backward()
    return total.item(), logp_t.grad.numpy(), rows


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("skip", [False, True])
def test_zero_variance_groups_against_trl_definition(loss_type, skip):
    """TRL keeps zero-variance groups (advantage 0): their KL terms stay and they count in every
    normaliser. skip_zero_variance_groups=False must be exactly that, over the whole batch;
    True must be the same formula over the kept groups only (normalisers count kept rows/tokens)."""
    g, b, t_len = 4, 12, 7
    logp, old, ref, _, mask = random_batch(7, b=b, t=t_len)
    rng = np.random.default_rng(8)
    rewards = rng.uniform(0, 1, size=b)
    rewards[4:8] = 1.0  # group 1: every sample right, no signal
    beta, eps_low, eps_high, max_len = 0.1, 0.2, 0.28, 9
    adv = reference_advantages(rewards, g, "group")
    assert np.all(adv[4:8] == 0.0)
    whole = list(range(b))
    kept = [i for i in whole if i // g != 1]
    rows = kept if skip else whole

    def reference(lp):  # TRL's formula over `rows`, token by token in float64
        return reference_loss(lp[rows], old[rows], ref[rows], adv[rows], mask[rows], loss_type, beta,
                              eps_low, eps_high, max_len)

    loss, grad, used = _step_loss(logp, old, ref, rewards, mask, g=g, skip=skip, loss_type=loss_type, beta=beta,
                                  eps_low=eps_low, eps_high=eps_high, max_len=max_len)
    assert used == rows
    assert abs(loss - reference(logp)) < 1e-12
    # the choice matters: the zero-variance group's KL and its share of the normaliser
    other = kept if not skip else whole
    assert abs(reference_loss(logp[other], old[other], ref[other], adv[other], mask[other], loss_type, beta,
                              eps_low, eps_high, max_len) - loss) > 1e-4
    h = 1e-6
    for (i, j) in [(0, 0), (5, 0), (6, 1), (9, 0)]:  # rows 5 and 6 are in the zero-variance group
        up, down = logp.copy(), logp.copy()
        up[i, j] += h
        down[i, j] -= h
        numeric = (reference(up) - reference(down)) / (2 * h) if i in rows else 0.0
        assert abs(grad[i, j] - numeric) < 1e-6, (i, j, grad[i, j], numeric)
    if not skip:  # in TRL's definition the zero-variance rows still get the KL gradient
        assert np.abs(grad[4:8] * mask[4:8]).max() > 1e-4
    else:
        assert np.all(grad[4:8] == 0.0)


# -- rollout/training mismatch: truncated importance sampling (Yao et al. 2025) and TRL's modes ----


def reference_is_weights(train, rollout, mask, mode: str, cap: float) -> np.ndarray:
    """Per token, in plain float64 Python: token modes weigh each token by its own ratio
    pi_train / pi_rollout, sequence modes every token of a sequence by the product of its tokens'
    ratios; truncate caps at ``cap``, mask drops (0) a weight whose ratio exceeds it."""
    b, t = train.shape
    weights = np.zeros((b, t))
    for i in range(b):
        seq_ratio = float(np.exp(sum(train[i, j] - rollout[i, j] for j in range(t) if mask[i, j])))
        for j in range(t):
            ratio = seq_ratio if mode.startswith("sequence") else float(np.exp(train[i, j] - rollout[i, j]))
            if mode.endswith("truncate"):
                weights[i, j] = min(ratio, cap)
            else:
                weights[i, j] = ratio if ratio <= cap else 0.0
            if not mode.startswith("sequence"):
                weights[i, j] *= mask[i, j]
    return weights


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_truncate", "token_mask", "sequence_mask"])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_importance_weighted_loss_matches_float64_reference(mode, loss_type):
    from training.losses import rollout_correction

    logp, old, ref, adv, mask = random_batch(4)
    rng = np.random.default_rng(9)
    rollout = old + rng.normal(0, 0.25, size=old.shape)  # the sampler's log-probs, off by engine noise
    cap = 1.3
    beta, eps_low, eps_high, max_len = 0.04, 0.2, 0.28, 9
    w = reference_is_weights(old, rollout, mask, mode, cap)
    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    correction = rollout_correction(t(old), t(rollout), t(mask), mode=mode, cap=cap)
    weights = correction.weights.expand(mask.shape) * (t(mask) if mode.startswith("sequence") else 1.0)
    assert np.allclose(weights.numpy() * mask, w * mask, rtol=1e-12, atol=1e-15)
    assert 0 < correction.corrected_frac < 1, "the batch should have weights on both sides of the cap"

    def reference(logp_):
        return reference_loss(logp_, old, ref, adv, mask, loss_type, beta, eps_low, eps_high, max_len, is_weights=w)

    logp_t = t(logp).requires_grad_(True)
    loss, _ = grpo_loss(logp_t, t(old), t(ref), t(adv), t(mask), loss_type=loss_type, beta=beta, epsilon=eps_low,
                        epsilon_high=eps_high, max_completion_length=max_len, is_weights=correction.weights)
    assert abs(loss.item() - reference(logp)) < 1e-12
    unweighted, _ = grpo_loss(t(logp), t(old), t(ref), t(adv), t(mask), loss_type=loss_type, beta=beta,
                              epsilon=eps_low, epsilon_high=eps_high, max_completion_length=max_len)
    assert abs(unweighted.item() - loss.item()) > 1e-6  # the weights change the loss: the test can tell
    loss.backward()  # the weights are constants: the gradient is the reference's
    h = 1e-6
    for (i, j) in [(0, 0), (3, 2), (5, 0)]:
        up, down = logp.copy(), logp.copy()
        up[i, j] += h
        down[i, j] -= h
        assert abs(logp_t.grad[i, j].item() - (reference(up) - reference(down)) / (2 * h)) < 1e-6


def test_importance_correction_figures_and_settings():
    from training.losses import rollout_correction

    t = lambda a: torch.tensor(a, dtype=torch.float64)  # noqa: E731
    train = t([[-1.0, -2.0, -0.5], [-1.0, -1.0, 0.0]])
    rollout = t([[-1.5, -2.0, -3.0], [-1.0, float("nan"), 0.0]])  # a NaN: no log-prob returned for it
    mask = t([[1, 1, 0], [1, 1, 0]])
    c = rollout_correction(train, rollout, mask, mode="token_truncate", cap=2.0)
    assert c.count == 4 and c.tokens == 4
    assert c.ratio_max == pytest.approx(np.exp(0.5)) and c.ratio_min == pytest.approx(1.0)
    assert c.logp_gap_max == pytest.approx(0.5) and c.logp_gap_mean == pytest.approx(0.125)
    assert c.corrected_frac == 0.0 and float(c.weights[1, 1]) == 1.0 and float(c.weights[0, 2]) == 0.0
    assert rollout_correction(train, rollout, mask, mode="token_truncate", cap=1.2).corrected_frac == 0.25
    assert not c.weights.requires_grad
    with pytest.raises(ValueError, match="importance sampling mode 'none' is not one of token_truncate"):
        rollout_correction(train, rollout, mask, mode="none")
    with pytest.raises(ValueError, match="cap must be >= 1"):
        rollout_correction(train, rollout, mask, cap=0.5)
