"""Paired per-item tests and multiplicity corrections: pure statistics on arrays, below every layer.

The tests the regression report runs per domain (:mod:`evaluation.regression`, whose docstring says
what each one means and where it comes from) and the corrections it applies across domains live
here, in a module that imports only numpy (scipy inside functions), so every layer uses the same
statistics: evaluation's regression and non-inferiority reports, and training's in-loop validation
(:mod:`training.forgetting`), which may not import evaluation.

- :func:`paired_test`: one domain's one-sided paired test of H0: delta >= -margin (exact McNemar or
  an exact unconditional Tango test for K=1 binary scores, a sign-flip permutation test for few
  units, else a paired t test with the plain or cluster-robust CR1 SE), its CI, MDE and the smallest
  p it can produce (:attr:`PairedTest.underpowered`);
- :func:`standard_error`, :func:`paired_se`, :func:`minimum_detectable_drop`, :func:`tango_z`;
- :func:`benjamini_hochberg` (FDR) and :func:`holm` (FWER) adjusted p-values.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

DEFAULT_MARGIN = 0.01       # one point on a 0-1 score
DEFAULT_ALPHA = 0.05        # one-sided level of each test, and the Holm family-wise level
DEFAULT_Q = 0.05            # BH false discovery rate across domains
POWER = 0.80                # the power at which `mde` is reported
EXACT_MAX_N = 1000          # the exact unconditional test costs O(n^2) per nuisance grid point
PERMUTATION_BELOW_UNITS = 20
PERMUTATION_DRAWS = 20_000
EXACT_PERMUTATION_UNITS = 16  # enumerate all 2^units sign flips up to this many units
NUISANCE_GRID = 60


# -- per-domain statistics (pure functions on arrays) ---------------------------------------------

@dataclass(frozen=True)
class PairedTest:
    """One domain's paired test of H0: delta >= -margin against H1: delta < -margin."""

    n: int
    delta: float
    se: float
    df: float               # degrees of freedom of the reference t (inf for normal/exact)
    p: float
    ci_low: float
    ci_high: float
    mde: float              # inf when the test cannot reject at alpha (see ``underpowered``)
    test: str               # which test produced p
    units: int              # independent units (items, or clusters when clustered)
    p_min: float = 0.0      # the smallest p this test can produce on this design (see below)
    alpha: float = DEFAULT_ALPHA

    @property
    def underpowered(self) -> bool:
        """The test cannot reject at ``alpha`` whatever the candidate's scores: even the most
        extreme outcome it can observe has p > alpha, so "not flagged" carries no evidence."""
        return self.p_min > self.alpha


def paired_test(baseline_means: np.ndarray, candidate_means: np.ndarray, *, margin: float = DEFAULT_MARGIN,
                alpha: float = DEFAULT_ALPHA, clusters: np.ndarray | None = None, k: int = 1,
                binary_single_sample: bool = False, method: str = "auto", seed: int = 0) -> PairedTest:
    """Test one domain. Arrays are aligned per item; ``clusters`` holds a cluster label per item
    (None = independent items). ``binary_single_sample`` says both sides have K=1 scores in {0, 1}.
    ``method``: "auto" (see the module docstring), "t", "permutation", or "exact"."""
    b = np.asarray(baseline_means, dtype=float)
    c = np.asarray(candidate_means, dtype=float)
    if b.shape != c.shape or b.ndim != 1:
        raise ValueError("baseline and candidate means must be 1-d arrays of the same length")
    if method not in ("auto", "t", "permutation", "exact"):
        raise ValueError(f"method {method!r} is not one of auto, t, permutation, exact")
    if not 0 <= margin < 1:
        raise ValueError(f"margin {margin!r} must be in [0, 1) (score units: 0.01 = one point)")
    n = int(b.size)
    if n == 0:
        raise ValueError("no paired items to compare")
    d = c - b
    delta = float(d.mean())
    clustered = clusters is not None and len(set(clusters.tolist())) < n
    if method == "exact" or (method == "auto" and binary_single_sample and not clustered):
        if not binary_single_sample:
            raise ValueError("the exact test needs K=1 binary scores on both sides")
        return _binary_paired_test(b, c, margin=margin, alpha=alpha)
    se, df, unit_sums = paired_se(d, clusters if clustered else None)
    units = unit_sums.size
    if method == "permutation" or (method == "auto" and units < PERMUTATION_BELOW_UNITS):
        p, p_min = _sign_flip_p(d, margin, clusters if clustered else None, seed=seed)
        test = "sign-flip permutation" + (" (clusters)" if clustered else "")
    else:
        p = _t_p(delta, margin, se, df)
        # with a variance estimate (df >= 1) t -> -inf drives p to 0; without one p is always 1
        p_min = 0.0 if math.isfinite(se) and df > 0 else 1.0
        test = "paired t" + (f" (cluster-robust, {units} clusters)" if clustered else "")
    tcrit = _t_ppf(0.975, df)
    mde = math.inf if p_min > alpha else minimum_detectable_drop(se, n, k, margin, alpha, df)
    return PairedTest(n=n, delta=delta, se=se, df=df, p=p, ci_low=delta - tcrit * se,
                      ci_high=delta + tcrit * se, mde=mde, test=test, units=units, p_min=p_min, alpha=alpha)


def standard_error(values: np.ndarray, clusters: np.ndarray | None = None) -> tuple[float, float]:
    """(SE of the mean of per-item ``values``, t degrees of freedom): the plain SE, or the
    cluster-robust CR1 SE with G-1 df when ``clusters`` labels the items (None = independent).
    Used for paired differences here and for single-checkpoint means in sweep summaries."""
    values = np.asarray(values, dtype=float)
    if values.size == 0:
        return float("nan"), 0.0
    clustered = clusters is not None and len(set(np.asarray(clusters).tolist())) < values.size
    se, df, _ = paired_se(values, np.asarray(clusters) if clustered else None)
    return se, df


def paired_se(d: np.ndarray, clusters: np.ndarray | None) -> tuple[float, float, np.ndarray]:
    """(SE of mean(d), t degrees of freedom, per-unit sums of centred d)."""
    n = d.size
    resid = d - d.mean()
    if clusters is None:
        se = float(np.sqrt(resid @ resid / (n - 1) / n)) if n > 1 else float("nan")
        return se, float(n - 1), resid
    _, inverse = np.unique(np.asarray(clusters).astype(str), return_inverse=True)
    sums = np.bincount(inverse, weights=resid)
    g = sums.size
    if g < 2:
        return float("nan"), 0.0, sums
    # CR1: the G/(G-1) factor corrects the downward bias of the sandwich with few clusters.
    se = float(np.sqrt(g / (g - 1) * (sums @ sums)) / n)
    return se, float(g - 1), sums


def _t_p(delta: float, margin: float, se: float, df: float) -> float:
    """One-sided p of H0: delta >= -margin (small when delta is well below -margin)."""
    if not math.isfinite(se) or df <= 0:
        return 1.0  # one item (or one cluster): no variance estimate, no evidence either way
    if se == 0:
        return 0.0 if delta < -margin else 1.0
    from scipy import stats

    return float(stats.t.cdf((delta + margin) / se, df))


def _t_ppf(q: float, df: float) -> float:
    from scipy import stats

    if not math.isfinite(df) or df <= 0:
        return float(stats.norm.ppf(q)) if not math.isfinite(df) else float("nan")
    return float(stats.t.ppf(q, df))


def minimum_detectable_drop(se: float, n: int, k: int, margin: float, alpha: float = DEFAULT_ALPHA,
                            df: float = math.inf, power: float = POWER) -> float:
    """Smallest true drop detected with ``power`` by a one-sided level-``alpha`` test, given SE.

    The observed SE is floored at the SE that a drop of that size must itself produce with K
    Bernoulli samples per item, ``sqrt(drop (1 - drop) / (K n))``; solved by fixed-point iteration."""
    if n < 2:
        return float("nan")
    z = _t_ppf(1 - alpha, df) + _t_ppf(power, df)
    if not math.isfinite(z):
        return float("nan")
    observed = se if math.isfinite(se) else 0.0
    drop = margin + z * observed
    for _ in range(100):
        floor = math.sqrt(max(drop * (1 - drop), 0.0) / (max(k, 1) * n))
        new = min(1.0, margin + z * max(observed, floor))
        if abs(new - drop) < 1e-9:
            break
        drop = new
    return float(drop)


def _sign_flip_p(d: np.ndarray, margin: float, clusters: np.ndarray | None, seed: int) -> tuple[float, float]:
    """(p, smallest attainable p) of the sign-flip permutation test of H0: E[d] >= -margin,
    flipping whole clusters when clustered. Exactly enumerated, the smallest p is the share of
    the 2^m sign vectors that reach the most extreme sum: 2^-m, more when some units are 0. With
    random draws it is 1/(1 + draws)."""
    shifted = d + margin
    if clusters is None:
        units = shifted
    else:
        _, inverse = np.unique(np.asarray(clusters).astype(str), return_inverse=True)
        units = np.bincount(inverse, weights=shifted)
    observed = units.sum()
    m = units.size
    if m <= EXACT_PERMUTATION_UNITS:
        signs = 1 - 2 * ((np.arange(2 ** m)[:, None] >> np.arange(m)) & 1)
        stats_ = signs @ units
        return float(np.mean(stats_ <= observed + 1e-12)), float(np.mean(stats_ <= stats_.min() + 1e-12))
    rng = np.random.default_rng(seed)
    signs = rng.choice((-1.0, 1.0), size=(PERMUTATION_DRAWS, m))
    stats_ = signs @ units
    return (float((1 + np.sum(stats_ <= observed + 1e-12)) / (1 + PERMUTATION_DRAWS)),
            1.0 / (1 + PERMUTATION_DRAWS))


def _tango_restricted(lost: np.ndarray, gained: np.ndarray, n: int, margin: float) -> np.ndarray:
    """Restricted MLE of P(gain) under p_lost - p_gained = margin (root of 2n x^2 - B x - C)."""
    rest = n - lost - gained
    b_coef = (lost + gained) - margin * (lost + 3 * gained + 2 * rest)
    c_coef = gained * margin * (1 - margin)
    return (b_coef + np.sqrt(b_coef ** 2 + 8 * n * c_coef)) / (4 * n)


def tango_z(lost, gained, n: int, margin: float):
    """Tango's score statistic for H0: p_lost - p_gained <= margin (large = regression)."""
    lost = np.asarray(lost, dtype=float)
    gained = np.asarray(gained, dtype=float)
    x = _tango_restricted(lost, gained, n, margin)
    var = n * (2 * x + margin - margin ** 2)
    diff = lost - gained - n * margin
    with np.errstate(divide="ignore", invalid="ignore"):
        z = np.where(var > 0, diff / np.sqrt(np.where(var > 0, var, 1.0)), np.where(diff > 0, np.inf, -np.inf))
    return z


def _binary_paired_test(b: np.ndarray, c: np.ndarray, *, margin: float, alpha: float) -> PairedTest:
    from scipy import stats

    n = b.size
    lost = int(np.sum((b == 1) & (c == 0)))
    gained = int(np.sum((b == 0) & (c == 1)))
    delta = (gained - lost) / n
    if margin == 0:
        discordant = lost + gained
        p = float(stats.binomtest(lost, discordant, 0.5, alternative="greater").pvalue) if discordant else 1.0
        # conditional on the d discordant pairs: at best all d are losses, p = 2^-d
        p_min = 0.5 ** discordant
        test = "exact McNemar"
    elif n <= EXACT_MAX_N:
        p = exact_unconditional_p(lost, gained, n, margin)
        # the most extreme table is every item lost (Tango's z is largest there); its probability
        # on the H0 boundary, (p_gain + margin)^n, is largest at p_gain -> (1 - margin) / 2
        p_min = ((1 + margin) / 2) ** n
        test = "exact unconditional (Tango score)"
    else:
        p = float(stats.norm.sf(tango_z(lost, gained, n, margin)))
        p_min = float(stats.norm.sf(tango_z(n, 0, n, margin)))
        test = "Tango score (asymptotic)"
    # Wald interval for a paired difference of proportions (descriptive; the verdict uses p).
    se = math.sqrt(max((lost + gained) / n - delta ** 2, 0.0) / n)
    z = float(stats.norm.ppf(0.975))
    mde = math.inf if p_min > alpha else minimum_detectable_drop(se, n, 1, margin, alpha)
    return PairedTest(n=n, delta=delta, se=se, df=math.inf, p=min(1.0, p), ci_low=delta - z * se,
                      ci_high=delta + z * se, mde=mde, test=test, units=n, p_min=p_min, alpha=alpha)


def exact_unconditional_p(lost: int, gained: int, n: int, margin: float) -> float:
    """sup over the H0 boundary (p_lost = p_gained + margin) of P(Z >= Z_observed)."""
    from scipy.special import gammaln

    z_obs = float(tango_z(lost, gained, n, margin))
    if z_obs == -np.inf:
        return 1.0
    ls, gs = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    valid = ls + gs <= n
    ls, gs = ls[valid], gs[valid]
    extreme = tango_z(ls, gs, n, margin) >= z_obs - 1e-9
    ls, gs = ls[extreme].astype(float), gs[extreme].astype(float)
    rs = n - ls - gs
    log_coef = gammaln(n + 1) - gammaln(ls + 1) - gammaln(gs + 1) - gammaln(rs + 1)
    upper = (1 - margin) / 2

    def tail(x: float) -> float:
        logp = (log_coef + ls * math.log(x + margin) + gs * math.log(x)
                + rs * math.log(max(1 - 2 * x - margin, 1e-300)))
        return float(np.exp(logp).sum())

    # A coarse grid over the nuisance P(gain), then a finer one around the coarse maximum.
    coarse = np.linspace(0, upper, NUISANCE_GRID + 2)[1:-1]
    values = [tail(x) for x in coarse]
    step = coarse[1] - coarse[0]
    centre = coarse[int(np.argmax(values))]
    fine = np.linspace(max(centre - step, step * 1e-3), min(centre + step, upper - step * 1e-3), 21)
    return max(max(values), *(tail(x) for x in fine))


# -- multiplicity --------------------------------------------------------------------------------

def benjamini_hochberg(pvalues: Sequence[float]) -> np.ndarray:
    """BH-adjusted p-values (q-values): reject those <= q to control the FDR at q."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p)
    ranked = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values: reject those <= alpha for FWER control at alpha."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p)
    stepped = np.maximum.accumulate(p[order] * (m - np.arange(m)))
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out
