"""Non-inferiority of a variant to its parent: the verdicts, their honesty at small n, calibration
at the H0 boundary, power at the reported sample size, and what blocks "equivalent"."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from scipy import stats

from evaluation.noninferiority import (DEFAULT_NI_ALPHA, DEFAULT_NI_MARGIN, NI_VERDICTS, _binary_tests, _exact_p,
                                       _tango_interval, _verdict, all_agree_items, noninferiority_report)
from evaluation.regression import RegressionInputError, exact_unconditional_p, tango_z, compare_results

M, ALPHA = DEFAULT_NI_MARGIN, DEFAULT_NI_ALPHA


def _binary(scores: dict[str, np.ndarray]) -> pl.DataFrame:
    """K=1 rows from {name: 0/1 scores}: an (items,) array is one domain, a (reps, items) array is
    reps domains name0000, name0001, ...; item ids are positional, so equal positions pair up."""
    parts = []
    for domain, values in scores.items():
        values = np.atleast_2d(np.asarray(values, dtype=float))
        reps, n = values.shape
        names = [domain] if reps == 1 else [f"{domain}{r:04d}" for r in range(reps)]
        parts.append(pl.DataFrame({"domain": np.repeat(names, n), "item_id": np.tile([f"i{j}" for j in range(n)], reps),
                                   "sample_idx": np.zeros(reps * n, dtype=np.int64), "score": values.ravel()}))
    return pl.concat(parts)


def _pairs(rng, reps: int, n: int, p_lost: float, p_gained: float) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, candidate) 0/1 scores of reps x n pairs: lost (1 -> 0), gained (0 -> 1), or agreeing."""
    u = rng.random((reps, n))
    agree = (rng.random((reps, n)) < 0.5).astype(float)
    lost, gained = u < p_lost, (u >= p_lost) & (u < p_lost + p_gained)
    return np.where(lost, 1.0, np.where(gained, 0.0, agree)), np.where(lost, 0.0, np.where(gained, 1.0, agree))


def _table(n: int, lost: int, gained: int) -> tuple[np.ndarray, np.ndarray]:
    """(baseline, candidate) of n K=1 pairs with the given losses and gains; half the rest both 1."""
    agree = n - lost - gained
    ones = agree // 2
    b = np.array([1.0] * lost + [0.0] * gained + [1.0] * ones + [0.0] * (agree - ones))
    c = np.array([0.0] * lost + [1.0] * gained + [1.0] * ones + [0.0] * (agree - ones))
    return b, c


def _samples(domain: str, means: np.ndarray, k: int, clusters: np.ndarray | None = None) -> pl.DataFrame:
    """K samples per item whose mean is exactly ``means[i]`` (round(mean * k) ones)."""
    n = means.size
    ones = np.round(means * k).astype(int)
    frame = pl.DataFrame({
        "domain": [domain] * (n * k), "item_id": np.repeat([f"{domain}-{i}" for i in range(n)], k),
        "sample_idx": np.tile(np.arange(k), n), "score": (np.tile(np.arange(k), n) < np.repeat(ones, k)).astype(float),
    })
    if clusters is None:
        return frame
    return frame.with_columns(pl.Series("cluster_id", np.repeat([f"c{c}" for c in clusters], k)))


# -- the honesty property: agreement on few items proves nothing ------------------------------------

def test_twenty_items_that_all_agree_are_underpowered_not_non_inferior():
    b, _ = _table(20, 0, 0)
    report = noninferiority_report(_binary({"a": b}), _binary({"a": b}))
    (d,) = report.domains
    assert d.delta == 0 and d.items_lost == d.items_gained == 0
    assert d.verdict == "underpowered" and not report.equivalent
    # 20 agreeing items are consistent with losing 2% (or 10%) of items: p is at least (1 - m)^20
    assert d.p_noninferior >= (1 - M) ** 20 - 1e-12 and d.p_noninferior > 0.6
    assert d.ci_low < -0.1 and d.test.startswith("exact unconditional")
    (reason,) = report.reasons()
    assert reason.startswith("a: underpowered") and f"about {d.items_for_power} items" in reason
    # Connor's n with the discordance (0 observed) floored at the margin
    assert d.items_for_power == math.ceil((stats.norm.ppf(1 - ALPHA) + stats.norm.ppf(0.8)) ** 2 / M) == 393


def test_items_needed_when_every_item_agrees():
    # any level-alpha test: the all-agree table has probability (1 - m)^n when no item is ever gained
    assert all_agree_items(M, ALPHA) == 183
    assert (1 - M) ** 182 > ALPHA >= (1 - M) ** 183
    # this test's p is never below that bound (182 can never pass), and it also carries the normal
    # tail at z = -sqrt(n m / (1 - m)), so it passes only from 191 on (always from 195)
    for n in (182, 183, 190, 191, 192, 195, 200):
        p_ni, _ = _exact_p(np.array([0.0]), np.array([0.0]), n, M)
        assert p_ni[0] >= (1 - M) ** n - 1e-12
        assert bool(p_ni[0] <= ALPHA) == (n in (191, 195, 200)), n
    b, _ = _table(200, 0, 0)
    report = noninferiority_report(_binary({"a": b}), _binary({"a": b}))
    assert report.domains[0].verdict == "non_inferior" and report.equivalent and report.reasons() == []
    assert report.domains[0].ci_low > -M


# -- verdicts ---------------------------------------------------------------------------------------

def test_variant_losing_ten_percent_of_items_is_inferior():
    b, c = _table(400, 40, 0)
    report = noninferiority_report(_binary({"a": b}), _binary({"a": c}), baseline_name="parent", candidate_name="q4")
    (d,) = report.domains
    assert d.verdict == "inferior" and d.p_inferior < 1e-6 and d.p_noninferior > 0.999
    assert d.delta == pytest.approx(-0.1) and d.ci_high < -M and d.items_lost == 40
    assert not report.equivalent and report.reasons()[0].startswith("a: inferior, delta -10.0 pts")


def test_losing_one_point_of_two_thousand_items_is_never_inferior():
    b, c = _table(2000, 30, 10)     # -1 point, within the 2-point margin
    (d,) = noninferiority_report(_binary({"a": b}), _binary({"a": c})).domains
    assert d.test == "Tango score (asymptotic)" and d.delta == pytest.approx(-0.01)
    assert d.verdict != "inferior" and d.p_inferior > 0.5
    assert d.verdict == "non_inferior" and d.ci_low > -M  # and 2000 items are plenty to show it


def test_a_gain_on_one_domain_cannot_hide_a_loss_on_another():
    b_up, c_up = _table(400, 0, 40)
    b_down, c_down = _table(400, 40, 0)
    report = noninferiority_report(_binary({"gain": b_up, "loss": b_down}), _binary({"gain": c_up, "loss": c_down}))
    by = {d.domain: d for d in report.domains}
    assert by["gain"].verdict == "non_inferior" and by["loss"].verdict == "inferior"
    assert not report.equivalent   # pooled, the two domains would have delta 0
    assert [r.split(":")[0] for r in report.reasons()] == ["loss"]


def test_clustered_repeated_samples_with_identical_means_are_not_an_instant_pass():
    means = np.tile([0.25, 0.5, 0.75], 10)                 # 30 items, K=4, in 6 clusters
    clusters = np.repeat(np.arange(6), 5)
    same = _samples("a", means, 4, clusters)
    (d,) = noninferiority_report(same, same).domains
    assert d.delta == 0 and "cluster-robust, 6 clusters" in d.test and "SE floored" in d.test
    # the raw SE is 0; the floored SE sqrt(m (1 - m) / (K n)) with 5 df still cannot rule out -m
    floor = math.sqrt(M * (1 - M) / (4 * 30))
    assert d.p_noninferior == pytest.approx(stats.t.sf(M / floor, 5))
    assert d.verdict == "underpowered" and d.p_noninferior > ALPHA and d.ci_low < -M
    # the floor is not a wall: 400 identical items (K=4, 40 clusters) do show non-inferiority
    big = _samples("a", np.tile([0.25, 0.5, 0.75, 1.0], 100), 4, np.repeat(np.arange(40), 10))
    (d,) = noninferiority_report(big, big).domains
    assert d.verdict == "non_inferior" and d.ci_low > -M


def test_one_cluster_gives_no_variance_estimate():
    same = _samples("a", np.full(30, 0.5), 4, np.zeros(30, dtype=int))
    report = noninferiority_report(same, same)
    (d,) = report.domains
    assert d.verdict == "underpowered" and d.p_noninferior == 1.0 and d.items_for_power is None
    assert math.isnan(d.ci_low) and d.to_json()["ci_low"] is None
    assert "items for power unknown" in report.reasons()[0]


# -- what blocks "equivalent" besides the tests ---------------------------------------------------

def test_a_domain_or_items_only_one_side_scored_block_equivalence():
    b, _ = _table(300, 0, 0)
    base = _binary({"a": b, "b": b})
    only_a = noninferiority_report(base, _binary({"a": b}))
    assert [d.verdict for d in only_a.domains] == ["non_inferior"] and not only_a.equivalent
    assert only_a.missing["baseline_only_domains"] == ["b"] and "b: scored only by the baseline" in only_a.reasons()
    # the variant's run dropped five items of "a" (say, the ones it got wrong)
    dropped = _binary({"a": b, "b": b}).filter(~pl.col("item_id").is_in([f"i{j}" for j in range(5)])
                                                | (pl.col("domain") == "b"))
    report = noninferiority_report(base, dropped)
    assert all(d.verdict == "non_inferior" for d in report.domains) and not report.equivalent
    assert report.missing["count"] == 5
    assert report.reasons() == ["a: 5 item(s) scored only by the baseline, e.g. i0, i1, i2"]


def test_different_generation_configs_are_not_comparable_and_not_equivalent():
    b, _ = _table(300, 0, 0)
    greedy = _binary({"a": b, "b": b}).with_columns(pl.lit('{"temperature": 0.0}').alias("gen_params"))
    sampled_b = greedy.with_columns(pl.when(pl.col("domain") == "b").then(pl.lit('{"temperature": 0.7}'))
                                    .otherwise(pl.col("gen_params")).alias("gen_params"))
    report = noninferiority_report(greedy, sampled_b)
    assert [d.domain for d in report.domains] == ["a"] and report.domains[0].verdict == "non_inferior"
    (nc,) = report.not_comparable
    assert nc["domain"] == "b" and "temperature: 0.0 vs 0.7" in nc["difference"]
    assert not report.equivalent and report.reasons()[0].startswith("b: not comparable")
    rows = report.to_frame()
    assert rows["verdict"].to_list() == ["non_inferior", "not_comparable"] and rows["delta"].null_count() == 1


@pytest.mark.parametrize("kwargs, message", [
    ({"margin": 0.0}, "untestable"), ({"margin": 1.0}, r"\(0, 1\)"), ({"margin": {"a": 0}}, "for 'a'"),
    ({"alpha": 0.5}, r"\(0, 0.5\)"), ({"alpha": 0.0}, r"\(0, 0.5\)"), ({"power": 1.0}, "power"),
])
def test_bad_settings_are_refused_with_a_fix(kwargs, message):
    b, _ = _table(10, 0, 0)
    with pytest.raises(ValueError, match=message):
        noninferiority_report(_binary({"a": b}), _binary({"a": b}), **kwargs)


def test_bad_frames_are_refused():
    b, _ = _table(10, 0, 0)
    good = _binary({"a": b})
    with pytest.raises(RegressionInputError, match="missing column"):
        noninferiority_report(good.drop("score"), good)
    with pytest.raises(RegressionInputError, match="outside"):
        noninferiority_report(good, good.with_columns(pl.col("score") * 2))
    with pytest.raises(RegressionInputError, match="not in the results"):
        noninferiority_report(good, good, margin={"zzz": 0.05})


def test_json_and_frame():
    b, c = _table(300, 5, 3)
    one = _samples("one", np.array([0.5]), 2)               # one item: no variance estimate
    report = noninferiority_report(pl.concat([_binary({"a": b}), one]), pl.concat([_binary({"a": c}), one]),
                                   margin={"a": 0.05}, baseline_name="parent", candidate_name="variant")
    out = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert out["equivalent"] is False and out["summary"]["non_inferior"] == 1 and out["summary"]["underpowered"] == 1
    assert {d["domain"]: d["margin"] for d in out["domains"]} == {"a": 0.05, "one": DEFAULT_NI_MARGIN}
    frame = report.to_frame()
    assert frame.columns == ["candidate", "baseline", "domain", "n", "k", "margin", "delta", "ci_low", "ci_high",
                             "p_noninferior", "p_inferior", "verdict", "test", "items_for_power", "created_at"]
    assert frame["candidate"].to_list() == ["variant"] * 2 and frame["ci_low"].null_count() == 1
    assert set(frame["verdict"]) <= set(NI_VERDICTS)


# -- the statistics themselves ----------------------------------------------------------------------

def test_p_inferior_is_the_regression_tests_p():
    for n, lost, gained in [(60, 6, 1), (300, 12, 1), (300, 18, 12)]:
        b, c = _table(n, lost, gained)
        (d,) = noninferiority_report(_binary({"a": b}), _binary({"a": c})).domains
        (r,) = compare_results(_binary({"a": b}), _binary({"a": c}), margin=M).domains
        assert r.p == exact_unconditional_p(lost, gained, n, M)
        # the same test on the same grid, plus the boundary's end points (regression's grid stops
        # just short of them; at (18, 12) the supremum lies at "no gains", so p is a bit larger)
        assert d.p_inferior >= r.p * (1 - 1e-12) and d.p_inferior == pytest.approx(r.p, rel=1e-6)


def test_exact_p_matches_brute_force_on_small_n():
    n = 12
    lost, gained = (a.ravel() for a in np.meshgrid(np.arange(n + 1.0), np.arange(n + 1.0), indexing="ij"))
    keep = lost + gained <= n
    lost, gained = lost[keep], gained[keep]
    p_ni, p_inf = _exact_p(lost, gained, n, M)
    z = tango_z(lost, gained, n, M)
    rest = n - lost - gained
    coef = np.array([math.comb(n, int(a)) * math.comb(n - int(a), int(g)) for a, g in zip(lost, gained)])
    # the supremum over the H0 boundary P(lost) = x + m, P(gained) = x, by brute force on a fine grid
    x = np.linspace(0, (1 - M) / 2, 20001)[:, None]
    prob = coef * (x + M) ** lost * x ** gained * np.maximum(1 - 2 * x - M, 0) ** rest    # (grid, table)
    brute_ni = (prob @ (z[None, :] <= z[:, None] + 1e-9).T).max(0)   # tables at least as low as each z
    brute_inf = (prob @ (z[None, :] >= z[:, None] - 1e-9).T).max(0)
    np.testing.assert_allclose(p_ni, brute_ni, rtol=2e-3, atol=1e-12)
    np.testing.assert_allclose(p_inf, brute_inf, rtol=2e-3, atol=1e-12)


def test_the_ci_agrees_with_the_verdict():
    rng = np.random.default_rng(7)
    disagree, total = 0, 0
    for n in (60, 200, 500, 1500):
        lost = rng.binomial(n, rng.uniform(0.0, 0.08, 120)).astype(float)
        gained = np.minimum(rng.binomial(n, rng.uniform(0.0, 0.08, 120)), n - lost).astype(float)
        if n <= 1000:
            p_ni, _ = _exact_p(lost, gained, n, M)
        else:
            p_ni = stats.norm.cdf(tango_z(lost, gained, n, M))
        low, high = _tango_interval(lost, gained, n, ALPHA)
        assert np.all(low <= (gained - lost) / n + 1e-12) and np.all((gained - lost) / n <= high + 1e-12)
        mismatch = int(np.sum((p_ni <= ALPHA) != (low > -M)))
        if n > 1000:
            assert mismatch == 0      # the asymptotic test is the interval, inverted
        disagree, total = disagree + mismatch, total + lost.size
    assert disagree <= 0.03 * total   # exact vs asymptotic at the edge only
    # the t path: the interval is the test, exactly
    means = np.random.default_rng(8).uniform(0.2, 0.8, (40, 60))
    for i, m in enumerate(means):
        base = _samples("a", m, 3)
        cand = _samples("a", np.clip(m + np.random.default_rng(i).normal(-0.01, 0.05, 60), 0, 1), 3)
        (d,) = noninferiority_report(base, cand).domains
        assert (d.verdict == "non_inferior") is (d.ci_low > -M)


def test_type_one_error_at_the_margin_boundary():
    # true delta = -margin exactly: p_lost 0.06, p_gained 0.04; a non_inferior verdict is a false claim
    rng = np.random.default_rng(11)
    b, c = _pairs(rng, 200, 300, 0.06, 0.04)
    report = noninferiority_report(_binary({"d": b}), _binary({"d": c}))
    assert len(report.domains) == 200 and report.domains[0].test.startswith("exact unconditional")
    # the report's binary domains go through _binary_tests; many more tables go straight there
    lost, gained = ((b == 1) & (c == 0)).sum(1), ((b == 0) & (c == 1)).sum(1)
    direct = _binary_tests(lost, gained, 300, M, ALPHA, 0.8)
    np.testing.assert_array_equal([d.p_noninferior for d in report.domains], direct["p_noninferior"])
    reps = 4000
    lost = rng.binomial(300, 0.06, reps)
    gained = rng.binomial(300 - lost, 0.04 / 0.94)
    out = _binary_tests(lost, gained, 300, M, ALPHA, 0.8)
    verdicts = [_verdict(ni, inf, ALPHA) for ni, inf in zip(out["p_noninferior"], out["p_inferior"])]
    rate = np.mean([v == "non_inferior" for v in verdicts])
    assert rate <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)   # the test's level, plus Monte Carlo noise


def test_type_one_error_of_the_t_path_at_the_margin_boundary():
    rng = np.random.default_rng(12)
    reps, n, k = 800, 50, 4
    p = rng.uniform(0.3, 0.7, (reps, n, 1))
    frames = []
    for shift in (0.0, -M):    # true delta = -margin
        score = (rng.random((reps, n, k)) < p + shift).astype(float).ravel()
        frames.append(pl.DataFrame({"domain": np.repeat([f"d{r:04d}" for r in range(reps)], n * k),
                                    "item_id": np.tile(np.repeat([f"i{i}" for i in range(n)], k), reps),
                                    "sample_idx": np.tile(np.arange(k), reps * n), "score": score}))
    report = noninferiority_report(*frames)
    assert len(report.domains) == reps and report.domains[0].test == "paired t"
    rate = np.mean([d.verdict == "non_inferior" for d in report.domains])
    assert rate <= ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / reps)


def test_power_at_items_for_power():
    b, c = _table(500, 10, 10)                 # observed discordance 0.04, delta 0
    (d,) = noninferiority_report(_binary({"a": b}), _binary({"a": c})).domains
    n = d.items_for_power
    assert n == math.ceil((stats.norm.ppf(1 - ALPHA) + stats.norm.ppf(0.8)) ** 2 * 0.04 / M ** 2) == 785
    reps = 60
    b, c = _pairs(np.random.default_rng(13), reps, n, 0.02, 0.02)   # true delta 0 at that discordance
    report = noninferiority_report(_binary({"d": b}), _binary({"d": c}))
    rate = np.mean([d.verdict == "non_inferior" for d in report.domains])
    assert rate >= 0.7
    assert all(d.verdict != "inferior" for d in report.domains)
