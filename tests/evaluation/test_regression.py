"""Regression statistics: calibration, the test paths, multiplicity, and what gets reported."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from evaluation.regression import (RegressionInputError, benjamini_hochberg, compare_results, holm,
                                minimum_detectable_drop, paired_test)


def _frame(domain: str, means_by_item: np.ndarray, k: int, rng, clusters=None) -> pl.DataFrame:
    """Per-sample Bernoulli scores for items with the given success probabilities."""
    rows = {"domain": [], "item_id": [], "sample_idx": [], "score": [], "cluster_id": []}
    for i, p in enumerate(means_by_item):
        draws = rng.random(k) < p
        for s in range(k):
            rows["domain"].append(domain)
            rows["item_id"].append(f"{domain}-{i}")
            rows["sample_idx"].append(s)
            rows["score"].append(float(draws[s]))
            rows["cluster_id"].append(None if clusters is None else f"t{clusters[i]}")
    return pl.DataFrame(rows, schema_overrides={"cluster_id": pl.Utf8})


def test_bh_and_holm_match_references():
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    np.testing.assert_allclose(benjamini_hochberg(p), stats.false_discovery_control(p, method="bh"))
    # Holm by hand: sorted p * (m - rank), running max, capped at 1.
    expected = np.minimum(np.maximum.accumulate(np.sort(p) * (10 - np.arange(10))), 1)
    np.testing.assert_allclose(holm(p), expected)


def test_identical_results_are_ok_with_p_one():
    rng = np.random.default_rng(0)
    frame = _frame("a", rng.uniform(0.2, 0.8, 50), 4, rng)
    report = compare_results(frame, frame, protected=["a"])
    (d,) = report.domains
    assert d.verdict == "ok" and d.delta == 0 and d.p == 1.0 and d.n == 50 and d.k == 4
    assert report.missing["count"] == 0 and d.noninferior  # every item equal: CI is [0, 0]


def test_drop_gain_and_within_margin_verdicts():
    rng = np.random.default_rng(1)
    p = rng.uniform(0.3, 0.7, 300)
    base = pl.concat([_frame(d, p, 8, rng) for d in ("drop_prot", "drop_free", "gain", "tiny")])
    cand = pl.concat([_frame("drop_prot", p - 0.15, 8, rng), _frame("drop_free", p - 0.15, 8, rng),
                      _frame("gain", p + 0.2, 8, rng), _frame("tiny", p - 0.003, 8, rng)])
    report = compare_results(base, cand, protected=["drop_prot", "gain"], margin=0.01)
    by = {d.domain: d for d in report.domains}
    assert by["drop_prot"].verdict == "regression" and by["drop_prot"].p_holm <= 0.05
    assert by["drop_free"].verdict == "warn"          # BH flags it; only protected domains error
    assert by["gain"].verdict == "ok" and by["gain"].p > 0.99 and by["gain"].items_gained > 0
    assert by["tiny"].verdict == "ok"
    assert by["drop_prot"].ci_high < -0.1 < by["drop_prot"].ci_low + 0.1
    assert by["drop_prot"].items_lost > by["drop_prot"].items_gained
    assert report.regressions == [by["drop_prot"]]
    frame = report.to_frame()
    assert frame.height == 4 and set(frame["verdict"]) == {"regression", "warn", "ok"}


def test_exact_mcnemar_matches_binomial_test_at_zero_margin():
    b = np.array([1] * 30 + [0] * 10 + [1] * 50 + [0] * 10, dtype=float)
    c = np.array([0] * 30 + [1] * 10 + [1] * 50 + [0] * 10, dtype=float)
    t = paired_test(b, c, margin=0.0, binary_single_sample=True)
    assert t.test == "exact McNemar"
    assert t.p == pytest.approx(stats.binomtest(30, 40, 0.5, alternative="greater").pvalue)
    assert t.delta == pytest.approx(-0.2)


@pytest.mark.parametrize("path", ["exact", "t"])
def test_type_one_error_at_the_margin_boundary(path):
    """At a true drop of exactly the margin, a level-0.05 test rejects at most ~5% of the time."""
    rng = np.random.default_rng(7)
    n, m, reps, k = 120, 0.02, 300, (1 if path == "exact" else 4)
    rejections = 0
    for _ in range(reps):
        p = rng.uniform(0.2, 0.8, n)
        b = rng.binomial(k, p) / k
        c = rng.binomial(k, p - m) / k
        t = paired_test(b, c, margin=m, k=k, binary_single_sample=(k == 1))
        assert t.test.startswith("exact unconditional" if k == 1 else "paired t")
        rejections += t.p <= 0.05
    # binomial sd at 300 reps ~ 1.3%: 0.085 is > 2.5 sd above the nominal rate
    assert rejections / reps <= 0.085


def test_power_at_reported_mde_is_about_eighty_percent():
    rng = np.random.default_rng(3)
    n, k, m = 200, 4, 0.01
    p = rng.uniform(0.3, 0.7, n)
    pilot = paired_test(rng.binomial(k, p) / k, rng.binomial(k, p) / k, margin=m, k=k)
    drop = pilot.mde
    hits = sum(paired_test(rng.binomial(k, p) / k, rng.binomial(k, p - drop) / k, margin=m, k=k).p <= 0.05
               for _ in range(300))
    assert 0.70 <= hits / 300 <= 0.90


def test_clustered_items_widen_the_standard_error():
    """Templates that move together: the cluster-robust SE sees it, the naive SE does not."""
    rng = np.random.default_rng(5)
    clusters = np.repeat(np.arange(20), 15)
    p = rng.uniform(0.35, 0.65, clusters.size)
    shift = rng.uniform(-0.15, 0.15, 20)[clusters]
    b = rng.binomial(8, p) / 8
    c = rng.binomial(8, p + shift) / 8
    robust = paired_test(b, c, clusters=clusters, k=8, method="t")
    naive = paired_test(b, c, k=8, method="t")
    assert robust.se > 1.5 * naive.se and robust.df == 19 and "cluster-robust" in robust.test
    assert robust.mde > naive.mde


def test_permutation_path_for_few_clusters():
    rng = np.random.default_rng(2)
    clusters = np.repeat(np.arange(8), 10)
    p = rng.uniform(0.45, 0.7, 80)
    t = paired_test(rng.binomial(4, p) / 4, rng.binomial(4, p - 0.4) / 4, clusters=clusters, k=4)
    assert t.test.startswith("sign-flip") and t.p == pytest.approx(1 / 256)  # the most extreme of 2^8


def test_mde_floor_when_nothing_moved():
    assert minimum_detectable_drop(0.0, 100, 1, 0.01) > 0.03
    assert minimum_detectable_drop(0.02, 10_000, 1, 0.01) == pytest.approx(0.01 + 2.486 * 0.02, abs=1e-3)


def test_missing_and_mismatched_items_are_reported_not_dropped():
    base = pl.DataFrame({"domain": ["a"] * 4 + ["gone"], "item_id": ["1", "2", "3", "3", "x"],
                         "sample_idx": [0, 0, 0, 1, 0], "score": [1.0, 0.0, 1.0, 1.0, 1.0],
                         "cluster_id": ["t1", "t1", "t2", "t2", None]})
    cand = pl.DataFrame({"domain": ["a"] * 3 + ["new"], "item_id": ["1", "3", "4", "y"],
                         "sample_idx": [0, 0, 0, 0], "score": [1.0, 0.0, 1.0, 0.0],
                         "cluster_id": ["t9", "t2", None, None]})
    report = compare_results(base, cand, protected=["a", "gone"])
    m = report.missing
    assert m["baseline_only_items"] == [{"domain": "a", "item_id": "2"}]
    assert m["candidate_only_items"] == [{"domain": "a", "item_id": "4"}]
    reasons = {(r["item_id"], r["reason"].split()[0]) for r in m["mismatched_items"]}
    assert ("1", "cluster_id") in reasons and ("3", "2") in reasons
    assert m["baseline_only_domains"] == ["gone"] and m["candidate_only_domains"] == ["new"]
    assert m["protected_not_compared"] == ["gone"]
    assert report.domains[0].n == 2


@pytest.mark.parametrize("mutate, message", [
    (lambda f: f.drop("score"), "missing column"),
    (lambda f: f.with_columns(pl.lit(1.5).alias("score")), "outside [0, 1]"),
    (lambda f: pl.concat([f, f]), "duplicated"),
    (lambda f: f.with_columns(pl.lit(None, dtype=pl.Float64).alias("score")), "null score"),
])
def test_bad_input_is_refused_with_a_reason(mutate, message):
    frame = pl.DataFrame({"domain": ["a", "a"], "item_id": ["1", "2"], "sample_idx": [0, 0], "score": [1.0, 0.0]})
    with pytest.raises(RegressionInputError, match=message.replace("[", r"\[").replace("]", r"\]")):
        compare_results(frame, mutate(frame))


# -- underpowered: a test that cannot reject at alpha says so, with an infinite MDE ---------------

def _all_lost(clusters: int, per_cluster: int = 10, k: int = 4):
    """Every item solved by the baseline and failed by the candidate: the largest possible drop."""
    n = clusters * per_cluster
    return np.ones(n), np.zeros(n), np.repeat(np.arange(clusters), per_cluster)


@pytest.mark.parametrize("clusters, underpowered", [(2, True), (4, True), (5, False), (8, False)])
def test_sign_flip_with_few_clusters_is_underpowered(clusters, underpowered):
    b, c, labels = _all_lost(clusters)
    t = paired_test(b, c, clusters=labels, k=4)
    assert t.test.startswith("sign-flip")
    assert t.p_min == pytest.approx(2.0 ** -clusters)   # exactly enumerated: 2^-m
    assert t.p == pytest.approx(2.0 ** -clusters)       # the drop is as large as it gets
    assert t.underpowered is underpowered
    assert (t.mde == float("inf")) is underpowered     # never a finite MDE for a test that cannot reject


def test_sign_flip_with_random_draws_reports_its_floor():
    rng = np.random.default_rng(4)
    b, c = rng.random(30), rng.random(30)
    t = paired_test(b, c, k=4, method="permutation")  # 30 units > 16: random sign flips
    assert t.p_min == pytest.approx(1 / 20_001) and not t.underpowered


@pytest.mark.parametrize("discordant, underpowered", [(0, True), (4, True), (5, False)])
def test_exact_mcnemar_with_few_discordant_pairs_is_underpowered(discordant, underpowered):
    b = np.array([1.0] * discordant + [1.0] * 20)
    c = np.array([0.0] * discordant + [1.0] * 20)  # all discordant pairs are losses
    t = paired_test(b, c, margin=0.0, binary_single_sample=True)
    assert t.test == "exact McNemar" and t.p_min == pytest.approx(0.5 ** discordant)
    assert t.underpowered is underpowered and (t.mde == float("inf")) is underpowered


@pytest.mark.parametrize("n, underpowered", [(4, True), (5, False)])
def test_exact_unconditional_with_few_items_is_underpowered(n, underpowered):
    from evaluation.regression import exact_unconditional_p

    t = paired_test(np.ones(n), np.zeros(n), margin=0.01, binary_single_sample=True)
    assert t.test.startswith("exact unconditional")
    # the closed form is the p of the most extreme table (every item lost), computed the long way
    assert t.p_min == pytest.approx(exact_unconditional_p(n, 0, n, 0.01), rel=1e-3)
    assert t.underpowered is underpowered


def test_t_without_a_variance_estimate_is_underpowered():
    one_cluster = paired_test(np.ones(30), np.zeros(30), clusters=np.zeros(30), k=4, method="t")
    assert one_cluster.df == 0 and one_cluster.p_min == 1.0 and one_cluster.underpowered
    assert one_cluster.mde == float("inf")
    many = paired_test(np.full(30, 0.6), np.full(30, 0.5) + np.linspace(-0.1, 0.1, 30), k=4, method="t")
    assert many.p_min == 0.0 and not many.underpowered and np.isfinite(many.mde)


def test_report_marks_underpowered_domains_with_null_mde():
    rng = np.random.default_rng(6)
    few = np.repeat(np.arange(3), 10)
    base = pl.concat([_frame("few", np.full(30, 0.8), 4, rng, clusters=few),
                      _frame("many", np.full(60, 0.5), 4, rng)])
    cand = pl.concat([_frame("few", np.full(30, 0.1), 4, rng, clusters=few),
                      _frame("many", np.full(60, 0.5), 4, rng)])
    report = compare_results(base, cand, protected=["few"])
    by = {d.domain: d for d in report.domains}
    # a 70-point drop over 3 clusters: the sign-flip test cannot go below 1/8, so not "ok"
    assert by["few"].verdict == "underpowered" and by["few"].underpowered
    assert by["many"].verdict == "ok" and not by["many"].underpowered
    payload = report.to_json()
    few_json = next(d for d in payload["domains"] if d["domain"] == "few")
    assert few_json["mde"] is None and few_json["underpowered"] is True and few_json["p_min"] == pytest.approx(1 / 8)
    assert payload["summary"]["underpowered"] == 1
    frame = report.to_frame()
    row = frame.filter(pl.col("domain") == "few").row(0, named=True)
    assert row["verdict"] == "underpowered" and row["underpowered"] and row["mde"] is None


# -- comparability: different generation configs are listed, never compared ----------------------

def test_different_generation_configs_are_not_comparable():
    from evaluation.comparability import gen_identity

    greedy64 = gen_identity({"max_new_tokens": 64, "temperature": 0.0, "top_p": 1.0, "prompt_format": "raw"})
    sampled256 = gen_identity({"max_new_tokens": 256, "temperature": 0.7, "top_p": 1.0, "prompt_format": "raw"})
    rng = np.random.default_rng(8)
    p = np.full(50, 0.5)

    def tagged(frame, config):
        return frame.with_columns(pl.lit(config[0]).alias("gen_config"), pl.lit(config[1]).alias("gen_params"))

    base = pl.concat([tagged(_frame("a", p, 2, rng), greedy64), tagged(_frame("b", p, 2, rng), greedy64)])
    cand = pl.concat([tagged(_frame("a", p, 2, rng), sampled256), tagged(_frame("b", p, 2, rng), greedy64)])
    report = compare_results(base, cand, protected=["a"])
    assert [d.domain for d in report.domains] == ["b"]          # "a" is not silently compared
    assert report.domains[0].gen_config == greedy64[0]
    (nc,) = report.not_comparable
    assert nc["domain"] == "a" and nc["protected"]
    assert nc["difference"] == "max_new_tokens: 64 vs 256; temperature: 0.0 vs 0.7"
    assert report.missing["protected_not_compared"] == []       # listed once, as not comparable
    rows = report.to_frame().filter(pl.col("domain") == "a")
    assert rows["verdict"].to_list() == ["not_comparable"] and rows["detail"][0] == nc["difference"]
    # without recorded configs (another harness's files) both domains are compared as before
    plain = compare_results(base.drop("gen_config", "gen_params"), cand.drop("gen_config", "gen_params"))
    assert [d.domain for d in plain.domains] == ["a", "b"] and not plain.not_comparable
