"""Per-domain non-inferiority: is a variant of a checkpoint (quantized, speculative decoding) no
worse than its parent by more than a margin, on every domain, shown rather than assumed?

What a pass means. For each domain, with ``delta`` the mean score difference (candidate - baseline)
over the population of items the eval set is drawn from, we test

    H0: delta <= -margin   (the variant is worse than its parent by the margin or more)
    H1: delta >  -margin   (non-inferior)

Rejecting H0 is the *equivalence* claim, so the error rate controlled is the rate of false
"equivalent" verdicts. This is the regression test of :mod:`evaluation.regression` with the burden
of proof reversed: there, no evidence means "no regression flagged"; here, no evidence means
``underpowered``, never a pass. A domain is ``non_inferior`` when ``p_noninferior <= alpha``,
``inferior`` when the regression-direction test (H0: delta >= -margin) rejects at ``alpha``, and
``underpowered`` otherwise (not enough items, or a delta too close to ``-margin`` to tell), with
``items_for_power``, the number of items that would show non-inferiority with ``power`` if the
true delta were 0. Defaults follow ICH E9 (1998, section 3.3.2) and E10 practice: ``alpha`` =
0.025 one-sided, i.e. non-inferior when the lower bound of the two-sided 95% CI lies above
``-margin``; the reported CI is the two-sided ``1 - 2 alpha`` interval (Piaggio et al. 2012,
CONSORT extension for non-inferiority trials, JAMA 308:2594-2604; Wellek 2010, "Testing
Statistical Hypotheses of Equivalence and Noninferiority", 2nd ed., ch. 5).

Per domain, on the items both sides scored, paired on (domain, item_id), per-item means over the
K samples (the item is the unit of analysis, as in :mod:`evaluation.regression`):

- K=1 and binary scores on both sides, no clusters: the exact unconditional test of the paired
  difference of proportions, in both directions (Sidik 2003, "Exact unconditional tests for testing
  non-inferiority in matched-pairs design", Stat. Med. 22:265-278), ordering the tables of (lost,
  gained) counts by Tango's restricted-MLE score statistic (Tango 1998, Stat. Med. 17:891-908). The
  p-value is the supremum, over the nuisance rate x of gains on the H0 boundary (P(lost) = x +
  margin, P(gained) = x), of the probability of a table at least as extreme; the nuisance grid is
  the one of ``regression.exact_unconditional_p`` (a coarse grid, then a finer one around its
  maximum) plus the boundary's two end points, which that grid approaches but does not include, so
  ``p_inferior`` is the regression test's p, or slightly above it when the supremum lies at an end.
  The end points matter here: when every item agrees, the table's probability at x = 0 ("no gains,
  losses at rate margin") is (1 - margin)^n, so *no* level-alpha test can show non-inferiority on
  fewer than ln(alpha) / ln(1 - margin) agreeing items (:func:`all_agree_items`: 183 at margin
  0.02 and alpha 0.025). This test's p also carries, at larger x, the normal tail at Tango's z =
  -sqrt(n margin / (1 - margin)), so it first passes an all-agree eval at 191 items (and at every
  size from 195). A 20-item eval on which the variant matched its parent everywhere is consistent
  with the variant losing 10% of items, and is reported ``underpowered``. Beyond ``EXACT_MAX_N``
  items the asymptotic Tango score test is used. The CI is Tango's score interval (the deltas the
  asymptotic score test does not reject at ``alpha`` either way, found by bisection), so
  ``ci_low > -margin`` is the asymptotic verdict; it can differ from the exact verdict at the edge
  (all-agree evals of 189, 190, 192 or 194 items at the defaults: the score CI clears -margin, the
  exact test does not reject). The verdict is always the exact test's.
  All tables of one size are computed together (the report batches domains of equal size), so
  simulations and many equal-sized domains cost little.
- otherwise (K > 1, non-binary scores, or clusters): a paired t test of ``mean(d) + margin`` with
  the SE of :func:`evaluation.regression.paired_se` (cluster-robust CR1 with G-1 df when items
  carry a ``cluster_id``; Cameron & Miller 2015), floored at ``sqrt(margin (1 - margin) / (K n))``,
  the SE of a mean of K n Bernoulli draws at a rate of ``margin``. Without the floor, identical
  per-item means give SE 0 and any n, even 2 items, would "prove" equivalence; but n items that
  agree on K samples each rule out a margin-sized difference no better than K n agreeing binary
  pairs do. With the floor, identical means need K n >= t^2 (1 - margin) / margin (about 189 at
  the defaults with many df), in line with the binary case above, and it mirrors the MDE floor of
  :func:`evaluation.regression.minimum_detectable_drop`. The CI is ``delta -/+ t SE`` with the
  floored SE, so ``ci_low > -margin`` is exactly the verdict. Without a variance estimate (one
  item, one cluster) nothing can be shown: p = 1 both ways, CI NaN.
- ``items_for_power``: the paired-proportions sample size of Connor 1987 (Biometrics
  43:207-211) for a true delta of 0, ``(z_{1-alpha} + z_power)^2 p_d / margin^2``, with the
  observed discordance rate ``p_d`` floored at the margin (none observed does not mean none
  there) and at least the all-agree minimum above; in the t case the normal-data analogue
  ``(z_{1-alpha} + z_power)^2 var_d / margin^2`` (Julious 2004, Stat. Med. 23:1921-1986) with
  the per-item variance (design effect included when clustered) floored like the SE. None when no
  variance estimate exists.

Across domains. ``equivalent`` needs *every* domain to reject its own H0 at ``alpha``: an
intersection-union test (Berger 1982, Technometrics 24:295-300; Berger & Hsu 1996, Stat. Sci.
11:283-319), whose level is ``alpha`` without any multiplicity adjustment, because the union null
(some domain is inferior) is only rejected when each of its parts is. The price is power, not
level: each domain needs its own ``items_for_power``. A variant that gains on one domain cannot
buy back a loss on another.

Comparability and completeness. A domain whose two sides record different generation configs
(:func:`evaluation.comparability.incomparable_domains`) is listed in ``not_comparable`` and never
tested. Items or domains only one side scored, and items whose cluster_id or sample count differ
between the sides, are listed in ``missing`` as in :class:`evaluation.regression.RegressionReport`.
Any of these makes ``equivalent`` False: the claim is about the parent's whole eval under one
protocol, so a variant run that dropped items (or domains) it was bad at cannot pass. Bad frames
raise :class:`evaluation.regression.RegressionInputError`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from functools import lru_cache

import numpy as np
import polars as pl
from scipy import special, stats
from scipy.special import gammaln, xlogy

from evaluation.regression import (EXACT_MAX_N, NOT_COMPARABLE, NUISANCE_GRID, RegressionInputError, paired_se,
                                   per_item_means, recorded_configs, tango_z, json_safe, validate_results)

DEFAULT_NI_MARGIN = 0.02     # two points on a 0-1 score
DEFAULT_NI_ALPHA = 0.025     # one-sided, i.e. the lower bound of a two-sided 95% CI (ICH E9 practice)
DEFAULT_NI_POWER = 0.8
NI_VERDICTS = ("non_inferior", "inferior", "underpowered")
EXACT_TIE = 1e-9             # tables whose Tango z differ by less are equally extreme (as in regression.py)
BISECTION_STEPS = 60         # halvings of (-1, 1) for the score CI: well below float resolution of a delta


@dataclass
class DomainEquivalence:
    domain: str
    n: int
    k: int
    margin: float
    delta: float            # candidate - baseline
    ci_low: float           # two-sided (1 - 2 alpha) interval for delta
    ci_high: float
    p_noninferior: float    # H0: delta <= -margin  vs  H1: delta > -margin
    p_inferior: float       # H0: delta >= -margin  vs  H1: delta < -margin (the regression direction)
    verdict: str            # one of NI_VERDICTS
    test: str
    items_lost: int
    items_gained: int
    items_for_power: int | None  # items for `power` to show non-inferiority at a true delta of 0
    gen_config: str | None = None

    def to_json(self) -> dict:
        return json_safe(asdict(self))


@dataclass
class EquivalenceReport:
    domains: list[DomainEquivalence]
    margin: float
    alpha: float
    power: float
    baseline: str | None
    candidate: str | None
    not_comparable: list[dict]   # {"domain", "margin", "difference"}: swept under different generation configs
    missing: dict                # items / domains only one side scored, mismatched items, and their count

    @property
    def equivalent(self) -> bool:
        """Every domain shown non-inferior (intersection-union test), at least one domain, nothing
        left untested: no not-comparable domain and nothing in ``missing``."""
        return (bool(self.domains) and all(d.verdict == "non_inferior" for d in self.domains)
                and not self.not_comparable and self.missing.get("count", 0) == 0)

    def reasons(self) -> list[str]:
        """Why the variant is not shown equivalent, one line per cause (empty when it is)."""
        level = f"{100 * (1 - 2 * self.alpha):g}% CI"
        out = []
        if not self.domains and not self.not_comparable:
            out.append("no domain was compared")
        for d in self.domains:
            if d.verdict == "non_inferior":
                continue
            shown = f"delta {_pts(d.delta)} ({level} {_pts(d.ci_low)} to {_pts(d.ci_high)}) on {d.n} items"
            if d.verdict == "inferior":
                out.append(f"{d.domain}: inferior, {shown}: worse than the parent by more than the margin "
                           f"({100 * d.margin:g} pts)")
            else:
                need = (f"about {d.items_for_power} items would give {100 * self.power:g}% power if the true delta "
                        "were 0" if d.items_for_power is not None else "no variance estimate, items for power unknown")
                out.append(f"{d.domain}: underpowered, {shown} does not rule out a loss of "
                           f"{100 * d.margin:g} pts; {need}")
        out += [f"{nc['domain']}: not comparable, generation configs differ ({nc['difference']}); not tested"
                for nc in self.not_comparable]
        m = self.missing
        out += [f"{d}: scored only by the baseline" for d in m.get("baseline_only_domains", [])]
        out += [f"{d}: scored only by the candidate" for d in m.get("candidate_only_domains", [])]
        out += [f"{d}: no item scored by both sides" for d in m.get("domains_without_common_items", [])]
        for key, side in (("baseline_only_items", "baseline"), ("candidate_only_items", "candidate")):
            by_domain = defaultdict(list)
            for row in m.get(key, []):
                by_domain[row["domain"]].append(row["item_id"])
            out += [f"{d}: {len(ids)} item(s) scored only by the {side}, e.g. {', '.join(ids[:3])}"
                    for d, ids in sorted(by_domain.items())]
        out += [f"{r['domain']}: item {r['item_id']}: {r['reason']}" for r in m.get("mismatched_items", [])]
        return out

    def to_json(self) -> dict:
        return {
            "baseline": self.baseline, "candidate": self.candidate, "margin": self.margin, "alpha": self.alpha,
            "power": self.power, "equivalent": self.equivalent, "reasons": self.reasons(),
            "domains": [d.to_json() for d in self.domains],
            "not_comparable": self.not_comparable, "missing": self.missing,
            "summary": {"domains": len(self.domains), **{v: sum(d.verdict == v for d in self.domains)
                                                          for v in NI_VERDICTS},
                        "not_comparable": len(self.not_comparable)},
        }

    def to_frame(self) -> pl.DataFrame:
        """One row per domain; a not-comparable domain is a row with verdict ``not_comparable``
        and null statistics."""
        now = datetime.now(timezone.utc).isoformat()
        rows = [{"candidate": self.candidate, "baseline": self.baseline, **d.to_json(), "created_at": now}
                for d in self.domains]
        rows += [{"candidate": self.candidate, "baseline": self.baseline, "domain": nc["domain"],
                  "margin": nc["margin"], "verdict": NOT_COMPARABLE, "created_at": now} for nc in self.not_comparable]
        return pl.DataFrame([{k: row.get(k) for k in FRAME_SCHEMA} for row in rows], schema=FRAME_SCHEMA)


FRAME_SCHEMA = {
    "candidate": pl.Utf8, "baseline": pl.Utf8, "domain": pl.Utf8, "n": pl.Int64, "k": pl.Int64,
    "margin": pl.Float64, "delta": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
    "p_noninferior": pl.Float64, "p_inferior": pl.Float64, "verdict": pl.Utf8, "test": pl.Utf8,
    "items_for_power": pl.Int64, "created_at": pl.Utf8,
}


def _pts(value: float) -> str:
    """A score difference in points (0.01 = 1 point)."""
    return f"{100 * value:+.1f} pts" if math.isfinite(value) else "n/a"


def _verdict(p_noninferior: float, p_inferior: float, alpha: float) -> str:
    if p_noninferior <= alpha:
        return "non_inferior"
    if p_inferior <= alpha:
        return "inferior"
    return "underpowered"


def _ceil(x: float) -> int:
    return math.ceil(x - 1e-9)  # 392.0000000001 items is 392


def all_agree_items(margin: float = DEFAULT_NI_MARGIN, alpha: float = DEFAULT_NI_ALPHA) -> int:
    """Fewest K=1 binary items on which any level-``alpha`` test can show non-inferiority when every
    item agrees: the all-agree table has probability (1 - margin)^n when items are lost at rate
    ``margin`` and never gained, so rejecting on it needs (1 - margin)^n <= alpha."""
    return _ceil(math.log(alpha) / math.log(1 - margin))


# -- binary K=1: exact unconditional test on Tango's score, both directions ------------------------

@lru_cache(maxsize=4)
def _sorted_tables(n: int, margin: float) -> tuple[np.ndarray, ...]:
    """Every (lost, gained, rest) table of n pairs, in ascending order of Tango's z at ``margin``:
    (z, lost, gained, rest, log multinomial coefficient)."""
    lost, gained = np.meshgrid(np.arange(n + 1.0), np.arange(n + 1.0), indexing="ij")
    valid = lost + gained <= n
    lost, gained = lost[valid], gained[valid]
    z = tango_z(lost, gained, n, margin)
    order = np.argsort(z, kind="stable")
    lost, gained, z = lost[order], gained[order], z[order]
    rest = n - lost - gained
    log_coef = gammaln(n + 1) - gammaln(lost + 1) - gammaln(gained + 1) - gammaln(rest + 1)
    out = (z, lost, gained, rest, log_coef)
    for array in out:
        array.setflags(write=False)  # shared through the cache
    return out


def _exact_p(lost: np.ndarray, gained: np.ndarray, n: int, margin: float) -> tuple[np.ndarray, np.ndarray]:
    """(p_noninferior, p_inferior) of the exact unconditional test for each (lost, gained) table.

    On the H0 boundary P(lost) = x + margin, P(gained) = x, x in [0, (1 - margin) / 2]; a table is
    at least as extreme as the observed one when its Tango z is <= z_obs (non-inferiority) or
    >= z_obs (inferiority). Sorted by z, both tail sets are a prefix and a suffix, so one pass of
    cumulative sums per nuisance value serves every table and both directions."""
    z, ls, gs, rs, log_coef = _sorted_tables(n, margin)
    z_obs = tango_z(lost, gained, n, margin)
    below = np.searchsorted(z, z_obs + EXACT_TIE, side="right")   # tables [0, below) have z <= z_obs
    above = np.searchsorted(z, z_obs - EXACT_TIE, side="left")    # tables [above, T) have z >= z_obs

    upper = (1 - margin) / 2

    def tails(x: float) -> np.ndarray:
        if 0 < x < upper:
            logp = log_coef + ls * math.log(x + margin) + gs * math.log(x) + rs * math.log(1 - 2 * x - margin)
        else:  # the end points: 0 * log 0 = 0 (no gains when x = 0, no ties when x = upper)
            logp = log_coef + xlogy(ls, x + margin) + xlogy(gs, x) + xlogy(rs, max(1 - 2 * x - margin, 0.0))
        # tables below e^-60 of the likeliest add < 1e-20 in all; skipping them keeps exp off underflow
        kept = np.flatnonzero(logp > logp.max() - 60)
        p = np.exp(logp[kept])
        low = np.concatenate(([0.0], np.cumsum(p)))[np.searchsorted(kept, below)]
        high = np.concatenate((np.cumsum(p[::-1])[::-1], [0.0]))[np.searchsorted(kept, above)]  # small end first
        return np.stack([low, high])

    # the grid of regression.exact_unconditional_p, plus the boundary's end points
    interior = np.linspace(0, upper, NUISANCE_GRID + 2)[1:-1]
    step = interior[1] - interior[0]
    coarse = np.stack([tails(x) for x in interior])              # (grid, direction, table)
    best = np.maximum(coarse.max(axis=0), np.maximum(tails(0.0), tails(upper)))
    centres = interior[coarse.argmax(axis=0)]
    for centre in np.unique(centres):
        fine = np.linspace(max(centre - step, step * 1e-3), min(centre + step, upper - step * 1e-3), 21)
        mine = centres == centre
        for x in fine:
            best = np.where(mine, np.maximum(best, tails(x)), best)
    return np.minimum(best[0], 1.0), np.minimum(best[1], 1.0)


def _tango_interval(lost: np.ndarray, gained: np.ndarray, n: int, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """Tango's score interval for delta = p_gained - p_lost: the deltas that neither one-sided
    asymptotic score test rejects at ``alpha``. Tango's z falls monotonically in theta = -delta,
    so each end is a bisection on (-1, 1)."""
    crit = float(stats.norm.ppf(1 - alpha))

    def root(target: float) -> np.ndarray:  # theta where z(theta) = target
        lo, hi = np.full(lost.shape, -1.0), np.full(lost.shape, 1.0)
        for _ in range(BISECTION_STEPS):
            mid = (lo + hi) / 2
            # z is 0/0 at the estimate itself when no pair is discordant; its limit there is 0
            z = np.where(lost - gained == n * mid, 0.0, tango_z(lost, gained, n, mid))
            above = z > target
            lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
        return (lo + hi) / 2

    return -root(-crit), -root(crit)


def _binary_tests(lost: np.ndarray, gained: np.ndarray, n: int, margin: float, alpha: float,
                  power: float) -> dict:
    """Both one-sided tests, the CI and items_for_power for tables of n K=1 binary pairs."""
    lost, gained = np.asarray(lost, dtype=float), np.asarray(gained, dtype=float)
    if n <= EXACT_MAX_N:
        p_ni, p_inf = _exact_p(lost, gained, n, margin)
        test = "exact unconditional (Tango score)"
    else:
        z = tango_z(lost, gained, n, margin)
        p_ni, p_inf = stats.norm.cdf(z), stats.norm.sf(z)
        test = "Tango score (asymptotic)"
    ci_low, ci_high = _tango_interval(lost, gained, n, alpha)
    zsum = stats.norm.ppf(1 - alpha) + stats.norm.ppf(power)
    discordance = np.maximum((lost + gained) / n, margin)
    needed = [max(_ceil(zsum ** 2 * p / margin ** 2), all_agree_items(margin, alpha)) for p in discordance]
    return {"delta": (gained - lost) / n, "ci_low": ci_low, "ci_high": ci_high, "p_noninferior": p_ni,
            "p_inferior": p_inf, "test": test, "items_for_power": needed}


# -- the t path: K > 1, non-binary scores or clusters ----------------------------------------------

def _t_test(d: np.ndarray, clusters: np.ndarray | None, k: int, margin: float, alpha: float,
            power: float) -> dict:
    """Paired t of mean(d) + margin with the (cluster-robust) SE floored at sqrt(m (1 - m) / (K n))."""
    n = d.size
    delta = float(d.mean())
    se, df, units = paired_se(d, clusters)
    test = "paired t" + (f" (cluster-robust, {units.size} clusters)" if clusters is not None else "")
    if not math.isfinite(se) or df <= 0:  # one item or one cluster: no variance estimate
        return {"delta": delta, "ci_low": math.nan, "ci_high": math.nan, "p_noninferior": 1.0, "p_inferior": 1.0,
                "test": test + ", no variance estimate", "items_for_power": None}
    floor = math.sqrt(margin * (1 - margin) / (k * n))
    if se < floor:
        test += ", SE floored at the margin's Bernoulli SE"
    se = max(se, floor)
    z = (delta + margin) / se
    crit = float(special.stdtrit(df, 1 - alpha))  # Student t (the normal when df is inf)
    zsum = special.ndtri(1 - alpha) + special.ndtri(power)
    return {"delta": delta, "ci_low": delta - crit * se, "ci_high": delta + crit * se,
            "p_noninferior": float(special.stdtr(df, -z)), "p_inferior": float(special.stdtr(df, z)), "test": test,
            "items_for_power": _ceil(zsum ** 2 * n * se ** 2 / margin ** 2)}


# -- the report ------------------------------------------------------------------------------------

def noninferiority_report(baseline: pl.DataFrame, candidate: pl.DataFrame, *,
                          margin: float | dict = DEFAULT_NI_MARGIN, alpha: float = DEFAULT_NI_ALPHA,
                          power: float = DEFAULT_NI_POWER, baseline_name: str | None = None,
                          candidate_name: str | None = None) -> EquivalenceReport:
    """Test every domain both sides scored for non-inferiority of ``candidate`` (the variant) to
    ``baseline`` (its parent). Frames as for :func:`evaluation.regression.compare_results`
    (domain, item_id, sample_idx, score, optional cluster_id, gen_config, gen_params).
    ``margin`` is one number or ``{domain: margin}`` (others get :data:`DEFAULT_NI_MARGIN`)."""
    from evaluation.comparability import incomparable_domains

    margins = dict(margin) if isinstance(margin, dict) else {}
    default_margin = DEFAULT_NI_MARGIN if isinstance(margin, dict) else margin
    for name, value in [(None, default_margin), *margins.items()]:
        where = f" for {name!r}" if name is not None else ""
        if not (isinstance(value, (int, float)) and 0 < value < 1):
            raise ValueError(f"margin{where} is {value!r}; use a value in (0, 1), e.g. 0.02 for two points. "
                             "A margin of 0 makes non-inferiority untestable: no finite eval can rule out "
                             "an arbitrarily small loss")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha {alpha!r} must be in (0, 0.5): it is one-sided, e.g. 0.025 for the lower "
                         "bound of a two-sided 95% CI")
    if not 0 < power < 1:
        raise ValueError(f"power {power!r} must be in (0, 1), e.g. 0.8")
    differences = incomparable_domains(baseline, candidate)
    configs = recorded_configs(baseline)
    base = validate_results(baseline, "baseline")
    cand = validate_results(candidate, "candidate")
    domains_b = set(base["domain"].unique().to_list())
    domains_c = set(cand["domain"].unique().to_list())
    unknown = set(margins) - domains_b - domains_c
    if unknown:
        raise RegressionInputError(f"margin given for domain(s) not in the results: {', '.join(sorted(unknown))}")

    joined = per_item_means(base).join(per_item_means(cand), on=["domain", "item_id"], how="full", suffix="_c", coalesce=True)
    paired = joined.filter(pl.col("mean").is_not_null() & pl.col("mean_c").is_not_null()).with_columns(
        pl.col("cluster_id").fill_null(pl.col("cluster_id_c")).alias("cluster"),
        (pl.col("binary") & pl.col("binary_c") & (pl.col("k") == 1) & (pl.col("k_c") == 1)).alias("single_binary"))
    tested = sorted((domains_b & domains_c) - set(differences))
    parts = {key[0]: part for key, part in  # partitions keep the item order
             paired.filter(pl.col("domain").is_in(tested)).sort("item_id").partition_by("domain", as_dict=True).items()}

    results: dict[str, dict] = {}
    binary: dict[tuple[int, float], list[tuple[str, int, int]]] = defaultdict(list)
    for domain, part in parts.items():
        m = float(margins.get(domain, default_margin))
        bm, cm = part["mean"].to_numpy(), part["mean_c"].to_numpy()
        k = int(min(part["k"].min(), part["k_c"].min()))
        results[domain] = {"n": part.height, "k": k, "margin": m,
                           "items_lost": int(np.sum((bm >= 0.5) & (cm < 0.5))),
                           "items_gained": int(np.sum((cm >= 0.5) & (bm < 0.5)))}
        cluster_arr = None
        if part["cluster"].null_count() < part.height:  # an item without a cluster is its own cluster
            cluster_arr = np.where(part["cluster"].is_null().to_numpy(), "__item__:" + part["item_id"].to_numpy(),
                                   part["cluster"].to_numpy())
            if len(set(cluster_arr.tolist())) == part.height:
                cluster_arr = None  # every item its own cluster: independent items
        if cluster_arr is None and part["single_binary"].all():
            lost = int(np.sum((bm == 1) & (cm == 0)))
            binary[(part.height, m)].append((domain, lost, int(np.sum((bm == 0) & (cm == 1)))))
        else:
            results[domain].update(_t_test(cm - bm, cluster_arr, k, m, alpha, power))
    for (n, m), tables in binary.items():  # domains of one size share the exact test's tables
        out = _binary_tests(np.array([t[1] for t in tables]), np.array([t[2] for t in tables]), n, m, alpha, power)
        for i, (domain, _, _) in enumerate(tables):
            results[domain].update({key: (value if isinstance(value, str) else value[i]) for key, value in out.items()})

    rows = []
    for domain in sorted(results):
        r = results[domain]
        p_ni, p_inf = float(r["p_noninferior"]), float(r["p_inferior"])
        needed = r["items_for_power"]
        rows.append(DomainEquivalence(
            domain=domain, n=r["n"], k=r["k"], margin=r["margin"], delta=float(r["delta"]),
            ci_low=float(r["ci_low"]), ci_high=float(r["ci_high"]), p_noninferior=p_ni, p_inferior=p_inf,
            verdict=_verdict(p_ni, p_inf, alpha), test=r["test"], items_lost=r["items_lost"],
            items_gained=r["items_gained"], items_for_power=None if needed is None else int(needed),
            gen_config=configs.get(domain)))
    not_comparable = [{"domain": d, "margin": float(margins.get(d, default_margin)), "difference": why}
                      for d, why in sorted(differences.items())]
    return EquivalenceReport(domains=rows, margin=float(default_margin), alpha=alpha, power=power,
                             baseline=baseline_name, candidate=candidate_name, not_comparable=not_comparable,
                             missing=_missing(joined, paired, domains_b, domains_c, set(results), set(differences)))


def _missing(joined: pl.DataFrame, paired: pl.DataFrame, domains_b: set[str], domains_c: set[str],
             compared: set[str], incomparable: set[str]) -> dict:
    """What only one side scored, and items whose samples do not line up (as in RegressionReport)."""
    def items(frame: pl.DataFrame, other_side: set[str]) -> list[dict]:
        return [{"domain": d, "item_id": i} for d, i in
                frame.filter(pl.col("domain").is_in(list(other_side))).sort("domain", "item_id")
                .select("domain", "item_id").iter_rows()]

    several = paired.filter((pl.col("cluster_ids") > 1) | (pl.col("cluster_ids_c") > 1))
    mismatched = [{"domain": r["domain"], "item_id": r["item_id"],
                   "reason": "several cluster_ids across the item's samples"} for r in several.iter_rows(named=True)]
    mismatched += [{"domain": r["domain"], "item_id": r["item_id"],
                    "reason": f"cluster_id {r['cluster_id']!r} in baseline, {r['cluster_id_c']!r} in candidate"}
                   for r in paired.filter(pl.col("cluster_id").is_not_null() & pl.col("cluster_id_c").is_not_null()
                                          & (pl.col("cluster_id") != pl.col("cluster_id_c"))).iter_rows(named=True)]
    mismatched += [{"domain": r["domain"], "item_id": r["item_id"],
                    "reason": f"{r['k']} samples in baseline, {r['k_c']} in candidate"}
                   for r in paired.filter(pl.col("k") != pl.col("k_c")).iter_rows(named=True)]
    missing = {
        "baseline_only_items": items(joined.filter(pl.col("mean_c").is_null()), domains_c),
        "candidate_only_items": items(joined.filter(pl.col("mean").is_null()), domains_b),
        "mismatched_items": sorted(mismatched, key=lambda r: (r["domain"], r["item_id"], r["reason"])),
        "baseline_only_domains": sorted(domains_b - domains_c),
        "candidate_only_domains": sorted(domains_c - domains_b),
        "domains_without_common_items": sorted((domains_b & domains_c) - compared - incomparable),
    }
    missing["count"] = sum(len(v) for v in missing.values())
    return missing
