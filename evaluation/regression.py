"""Per-domain regression detection: paired, per-item tests of a candidate against a baseline.

What a flag means. For each domain we test

    H0: delta >= -margin   (the candidate is no worse than the baseline by more than ``margin``)
    H1: delta <  -margin   (a regression beyond the margin)

where ``delta`` is the domain's mean score difference (candidate - baseline) over the population
of items the eval set is drawn from. Rejecting H0 is the *regression* claim, so the error rate we
control is the rate of false regression claims. (Testing the other direction, "non-inferiority
shown", would flag every small, underpowered domain; that direction is reported as ``noninferior``,
i.e. the 95% CI lies above ``-margin``.) Gains have p close to 1 and are never flagged.

Per domain (all on the items both sides scored, paired):

1. Per-item mean over the K samples of each side, ``d_i = mean(candidate_i) - mean(baseline_i)``.
   Averaging the K samples first makes the item the unit of analysis: K samples of one item are
   not independent evidence about the domain (Miller 2024, "Adding Error Bars to Evals",
   arXiv:2411.00640, sections 2-4: per-item means, paired differences, clustered errors).
2. Standard error of ``mean(d)``: the paired SE ``sd(d)/sqrt(n)``, or, when items carry a
   ``cluster_id`` (a template or source whose items move together), the cluster-robust (CR1)
   sandwich SE with G clusters, ``sqrt(G/(G-1) * sum_g (sum_{i in g} (d_i - mean d))^2) / n``,
   referred to a t distribution with G-1 degrees of freedom (Cameron & Miller 2015, "A
   Practitioner's Guide to Cluster-Robust Inference", J. Human Resources 50(2), sections IV and
   VI). Ignoring clusters understates the SE and inflates false flags; the bench shows it.
3. The test:
   - K=1 and binary scores on both sides, no clusters: margin 0 -> the exact McNemar test
     (binomial test on the discordant pairs, McNemar 1947); margin > 0 -> an exact unconditional
     test (the p-value is the supremum over the nuisance discordance rate on the H0 boundary) with
     Tango's restricted-MLE score statistic as the ordering (Tango 1998, Stat. Med. 17:891-908,
     "Equivalence test and confidence interval for the difference in proportions for the paired-
     sample design"). For n > ``EXACT_MAX_N`` the asymptotic Tango score test is used.
   - otherwise: a one-sided paired t test of ``mean(d) + margin`` with the (clustered) SE, or,
     when there are fewer than ``PERMUTATION_BELOW_UNITS`` independent units (items or clusters),
     a sign-flip permutation test on the unit sums of ``d_i + margin`` (Fisher 1935;
     Good 2005, "Permutation, Parametric and Bootstrap Tests of Hypotheses", ch. 3).
4. ``mde``: the smallest true drop (a positive number, in score units, margin included) this
   domain's test detects with 80% power at one-sided level ``alpha`` (unadjusted):
   ``margin + (t_{1-alpha,df} + t_{0.8,df}) * SE`` with SE floored at the Bernoulli variance such a
   drop implies, ``sqrt(mde (1 - mde) / (K n))``, so a domain where nothing moved does not claim
   to see arbitrarily small drops (power analysis as in Cohen 1988, ch. 2; for paired binary data
   Connor 1987, Biometrics 43:207-211). With BH across many domains the per-test threshold is
   stricter than ``alpha``, so realised power at 1x MDE is lower; the bench reports power at 1x
   and 2x.

Across domains: Benjamini-Hochberg at ``q`` over every domain's p (Benjamini & Hochberg 1995,
JRSS-B 57:289-300) gives ``q`` (BH-adjusted p) and the WARN list; Holm's step-down over the
*protected* domains (Holm 1979, Scand. J. Stat. 6:65-70) controls the family-wise error rate of the
ERROR (``regression``) verdicts. Verdicts: ``regression`` (protected, Holm-adjusted p <= alpha),
``warn`` (q <= q_level), ``underpowered`` (not flagged, and the test *could not* have flagged it:
see below), else ``ok``.

Underpowered. Each test has a smallest attainable p on the design at hand, ``p_min``: a sign-flip
test over m units cannot go below 2^-m when all 2^m flips are enumerated (1/(1 + draws) when
drawn), so with m <= 4 units it can never reject at 0.05; the exact McNemar test, conditional on
its d discordant pairs, cannot go below 2^-d; the exact unconditional test cannot go below
((1 + margin) / 2)^n (every item lost); a t test without a variance estimate (df <= 0) always
gives p = 1. When ``p_min > alpha`` (alpha is also the per-test level used for BH here) a
non-flag says nothing: the domain's verdict is ``underpowered``, ``mde`` is infinite (JSON null,
with ``underpowered: true``), never a finite number that would suggest the drop was ruled out.
What an underpowered domain does to a promotion is the promotion policy's choice
(:mod:`evaluation.promotion_policy`, ``on_underpowered``).

Comparability. A domain whose two sides record different generation configs (``gen_config`` /
``gen_params`` columns, :mod:`evaluation.comparability`) is not tested at all: it is listed in
``not_comparable`` with the differing fields.

Items are matched on (domain, item_id). Items or domains only one side scored, items whose
cluster_id or sample count differ between the sides are reported in :attr:`RegressionReport.missing`
(never dropped silently); comparisons use the items both sides scored. Bad input (missing columns,
scores outside [0, 1] or null, duplicate (domain, item_id, sample_idx) rows) raises
:class:`RegressionInputError`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone
from typing import Iterable

import polars as pl

from storage.errors import UserError
# the statistics (tests, SEs, multiplicity) live below every layer (training's in-loop validation uses
# them too); imported here under the names this module has always had
from storage.paired_statistics import (  # noqa: F401
    DEFAULT_ALPHA, DEFAULT_MARGIN, DEFAULT_Q, EXACT_MAX_N, EXACT_PERMUTATION_UNITS, NUISANCE_GRID,
    PERMUTATION_BELOW_UNITS, PERMUTATION_DRAWS, POWER, PairedTest, benjamini_hochberg, exact_unconditional_p, holm,
    minimum_detectable_drop, paired_se, paired_test, standard_error, tango_z)

REQUIRED_COLUMNS = ("domain", "item_id", "sample_idx", "score")
VERDICTS = ("ok", "warn", "regression", "underpowered")
NOT_COMPARABLE = "not_comparable"   # the lake verdict of a domain swept under different gen configs


class RegressionInputError(UserError, ValueError):
    """The results given to the regression report break the input contract."""


# -- reports on result tables --------------------------------------------------------------------

@dataclass
class DomainComparison:
    domain: str
    n: int
    k: int
    delta: float
    ci_low: float
    ci_high: float
    p: float
    q: float
    mde: float
    verdict: str
    protected: bool
    p_holm: float | None
    noninferior: bool
    items_lost: int
    items_gained: int
    test: str
    se: float
    clusters: int | None
    lost_items: list[str] = field(default_factory=list)
    gained_items: list[str] = field(default_factory=list)
    underpowered: bool = False      # the test cannot reject at alpha (then mde is inf)
    p_min: float | None = None      # the smallest p the test can produce on this design
    gen_config: str | None = None   # the generation config both sides were swept with (if recorded)

    def to_json(self) -> dict:
        return json_safe(asdict(self))

    @classmethod
    def from_json(cls, row: dict) -> "DomainComparison":
        """The inverse of :meth:`to_json`: a statistic JSON carried as null is NaN again (``mde`` of
        an underpowered domain, which was infinite, is infinite again)."""
        known = {f.name: f for f in fields(cls)}
        values = {k: v for k, v in row.items() if k in known}
        for name, f in known.items():
            if f.type == "float" and values.get(name) is None:
                values[name] = math.inf if name == "mde" and row.get("underpowered") else math.nan
        return cls(**values)


def json_safe(row: dict) -> dict:
    """``row`` with every non-finite float as None: JSON has no NaN, and a statistic that cannot be
    computed is null, never a number."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


@dataclass
class RegressionReport:
    domains: list[DomainComparison]
    missing: dict
    margin: float
    alpha: float
    q_level: float
    baseline: str | None = None
    candidate: str | None = None
    # domains both sides scored under different generation configs: listed, never compared
    # ({"domain", "protected", "difference"}; see evaluation.comparability)
    not_comparable: list[dict] = field(default_factory=list)

    @property
    def regressions(self) -> list[DomainComparison]:
        return [d for d in self.domains if d.verdict == "regression"]

    @property
    def warnings(self) -> list[DomainComparison]:
        return [d for d in self.domains if d.verdict == "warn"]

    @property
    def underpowered(self) -> list[DomainComparison]:
        return [d for d in self.domains if d.underpowered]

    def to_json(self) -> dict:
        return {
            "baseline": self.baseline, "candidate": self.candidate,
            "margin": self.margin, "alpha": self.alpha, "q_level": self.q_level,
            "domains": [d.to_json() for d in self.domains],
            "not_comparable": self.not_comparable,
            "missing": self.missing,
            "summary": {"domains": len(self.domains), "regression": len(self.regressions),
                        "warn": len(self.warnings),
                        "underpowered": sum(d.verdict == "underpowered" for d in self.domains),
                        "ok": sum(d.verdict == "ok" for d in self.domains),
                        "not_comparable": len(self.not_comparable)},
        }

    @classmethod
    def from_json(cls, payload: dict) -> "RegressionReport":
        """The report :meth:`to_json` wrote (the regression asset's metadata, a CLI's ``--json``)."""
        return cls(domains=[DomainComparison.from_json(d) for d in payload.get("domains", [])],
                   missing=dict(payload.get("missing") or {}), margin=payload["margin"], alpha=payload["alpha"],
                   q_level=payload["q_level"], baseline=payload.get("baseline"), candidate=payload.get("candidate"),
                   not_comparable=list(payload.get("not_comparable") or []))

    def to_frame(self) -> pl.DataFrame:
        """Rows of lake table ``regression`` (storage.tables.REGRESSION); a not-comparable
        domain is a row with verdict ``not_comparable``, null statistics and the difference."""
        from storage.tables import REGRESSION, conform

        now = datetime.now(timezone.utc).isoformat()
        rows = [{**{k: v for k, v in d.to_json().items() if k in REGRESSION},
                 "candidate": self.candidate, "baseline": self.baseline, "created_at": now}
                for d in self.domains]
        rows += [{"candidate": self.candidate, "baseline": self.baseline, "domain": nc["domain"],
                  "verdict": NOT_COMPARABLE, "protected": nc["protected"], "detail": nc["difference"],
                  "created_at": now} for nc in self.not_comparable]
        keys = {k for row in rows for k in row}
        return conform(pl.DataFrame(rows, schema={k: v for k, v in REGRESSION.items() if k in keys})
                       if rows else pl.DataFrame(), REGRESSION)


def validate_results(frame: pl.DataFrame, side: str) -> pl.DataFrame:
    """Check one side's per-sample rows; returns them with cluster_id present (maybe null)."""
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise RegressionInputError(
            f"{side}: missing column(s) {', '.join(missing)}; each row needs domain, item_id, "
            f"sample_idx, score in [0, 1] and optionally cluster_id (found: {', '.join(frame.columns) or 'none'})")
    if frame.height == 0:
        raise RegressionInputError(f"{side}: no rows")
    try:
        out = frame.select(
            pl.col("domain").cast(pl.Utf8), pl.col("item_id").cast(pl.Utf8),
            pl.col("sample_idx").cast(pl.Int64), pl.col("score").cast(pl.Float64),
            (pl.col("cluster_id").cast(pl.Utf8) if "cluster_id" in frame.columns
             else pl.lit(None, dtype=pl.Utf8)).alias("cluster_id"),
        )
    except pl.exceptions.PolarsError as exc:
        raise RegressionInputError(f"{side}: columns have the wrong types ({exc}); sample_idx must be "
                                   "an integer and score a number in [0, 1]") from None
    for column in ("domain", "item_id", "sample_idx", "score"):
        nulls = out.filter(pl.col(column).is_null() | (pl.col(column).is_nan() if column == "score" else False))
        if nulls.height:
            row = nulls.row(0, named=True)
            raise RegressionInputError(f"{side}: {nulls.height} row(s) with a null {column}, e.g. "
                                       f"domain={row['domain']!r} item_id={row['item_id']!r}")
    bad = out.filter((pl.col("score") < 0) | (pl.col("score") > 1))
    if bad.height:
        row = bad.row(0, named=True)
        raise RegressionInputError(
            f"{side}: {bad.height} score(s) outside [0, 1], e.g. {row['score']!r} for domain="
            f"{row['domain']!r} item_id={row['item_id']!r}; rescale scores to [0, 1]")
    dupes = out.group_by("domain", "item_id", "sample_idx").len().filter(pl.col("len") > 1)
    if dupes.height:
        row = dupes.row(0, named=True)
        raise RegressionInputError(
            f"{side}: {dupes.height} duplicated (domain, item_id, sample_idx) key(s), e.g. "
            f"({row['domain']!r}, {row['item_id']!r}, {row['sample_idx']}); each sample must appear once")
    return out


def per_item_means(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.group_by("domain", "item_id").agg(
        pl.col("score").mean().alias("mean"), pl.len().alias("k"),
        pl.col("score").is_in([0.0, 1.0]).all().alias("binary"),
        pl.col("cluster_id").drop_nulls().first().alias("cluster_id"),
        pl.col("cluster_id").drop_nulls().n_unique().alias("cluster_ids"),
    )


def compare_results(baseline: pl.DataFrame, candidate: pl.DataFrame, *, margin: float | dict = DEFAULT_MARGIN,
                    protected: Iterable[str] = (), alpha: float = DEFAULT_ALPHA, q_level: float = DEFAULT_Q,
                    method: str = "auto", baseline_name: str | None = None,
                    candidate_name: str | None = None) -> RegressionReport:
    """Compare per-sample results (columns domain, item_id, sample_idx, score, optional
    cluster_id, gen_config, gen_params) domain by domain. ``margin`` is one number or
    ``{domain: margin}`` (others get :data:`DEFAULT_MARGIN`); ``protected`` names the domains
    whose regressions are ERRORs. A domain whose recorded generation configs differ between the
    sides is not tested: it is listed in :attr:`RegressionReport.not_comparable`."""
    from evaluation.comparability import incomparable_domains

    if not 0 < alpha < 1 or not 0 < q_level < 1:
        raise ValueError(f"alpha ({alpha}) and q_level ({q_level}) must be in (0, 1)")
    differences = incomparable_domains(baseline, candidate)
    configs = recorded_configs(baseline)
    base = validate_results(baseline, "baseline")
    cand = validate_results(candidate, "candidate")
    protected = set(protected)
    margins = margin if isinstance(margin, dict) else {}
    default_margin = DEFAULT_MARGIN if isinstance(margin, dict) else float(margin)

    bi, ci = per_item_means(base), per_item_means(cand)
    joined = bi.join(ci, on=["domain", "item_id"], how="full", suffix="_c", coalesce=True)
    only_b = joined.filter(pl.col("mean_c").is_null())
    only_c = joined.filter(pl.col("mean").is_null())
    paired = joined.filter(pl.col("mean").is_not_null() & pl.col("mean_c").is_not_null())

    mismatched = []
    for row in paired.filter((pl.col("cluster_ids") > 1) | (pl.col("cluster_ids_c") > 1)).iter_rows(named=True):
        mismatched.append({"domain": row["domain"], "item_id": row["item_id"],
                           "reason": "several cluster_ids across the item's samples"})
    for row in paired.filter(pl.col("cluster_id").is_not_null() & pl.col("cluster_id_c").is_not_null()
                             & (pl.col("cluster_id") != pl.col("cluster_id_c"))).iter_rows(named=True):
        mismatched.append({"domain": row["domain"], "item_id": row["item_id"],
                           "reason": f"cluster_id {row['cluster_id']!r} in baseline, "
                                     f"{row['cluster_id_c']!r} in candidate (baseline's used)"})
    for row in paired.filter(pl.col("k") != pl.col("k_c")).iter_rows(named=True):
        mismatched.append({"domain": row["domain"], "item_id": row["item_id"],
                           "reason": f"{row['k']} samples in baseline, {row['k_c']} in candidate "
                                     "(per-item means compared)"})

    domains_b = set(base["domain"].unique().to_list())
    domains_c = set(cand["domain"].unique().to_list())
    unknown_margins = set(margins) - domains_b - domains_c
    if unknown_margins:
        raise RegressionInputError(f"margin given for domain(s) not in the results: {', '.join(sorted(unknown_margins))}")
    for name, value in margins.items():
        if not 0 <= value < 1:
            raise RegressionInputError(f"margin for {name!r} is {value}; use a value in [0, 1) (0.01 = one point)")

    tests: list[tuple[str, PairedTest, dict]] = []
    for domain in sorted((domains_b & domains_c) - set(differences)):
        part = paired.filter(pl.col("domain") == domain).sort("item_id")
        if part.height == 0:
            continue  # reported below as a domain with no common items
        clusters = part["cluster_id"].fill_null(part["cluster_id_c"])
        has_clusters = clusters.null_count() < part.height
        cluster_arr = None
        if has_clusters:  # an item without a cluster is its own cluster
            cluster_arr = clusters.fill_null(pl.lit("__item__:") + part["item_id"]).to_numpy()
        binary = bool(part["binary"].all() and part["binary_c"].all()
                      and (part["k"] == 1).all() and (part["k_c"] == 1).all())
        k = int(min(part["k"].min(), part["k_c"].min()))
        result = paired_test(part["mean"].to_numpy(), part["mean_c"].to_numpy(),
                             margin=margins.get(domain, default_margin), alpha=alpha, clusters=cluster_arr,
                             k=k, binary_single_sample=binary, method=method)
        bm, cm = part["mean"], part["mean_c"]
        lost_mask = (bm >= 0.5) & (cm < 0.5)
        gained_mask = (cm >= 0.5) & (bm < 0.5)
        extra = {"k": k, "lost": part.filter(lost_mask)["item_id"].to_list(),
                 "gained": part.filter(gained_mask)["item_id"].to_list(),
                 "clusters": result.units if has_clusters else None}
        tests.append((domain, result, extra))

    qs = benjamini_hochberg([t.p for _, t, _ in tests])
    protected_idx = [i for i, (d, _, _) in enumerate(tests) if d in protected]
    holm_adj = dict(zip(protected_idx, holm([tests[i][1].p for i in protected_idx])))
    rows = []
    for i, (domain, t, extra) in enumerate(tests):
        p_holm = float(holm_adj[i]) if i in holm_adj else None
        if p_holm is not None and p_holm <= alpha:
            verdict = "regression"
        elif qs[i] <= q_level:
            verdict = "warn"
        elif t.underpowered:  # not flagged, but it could not have been: no evidence either way
            verdict = "underpowered"
        else:
            verdict = "ok"
        m = margins.get(domain, default_margin)
        rows.append(DomainComparison(
            domain=domain, n=t.n, k=extra["k"], delta=t.delta, ci_low=t.ci_low, ci_high=t.ci_high, p=t.p,
            q=float(qs[i]), mde=t.mde, verdict=verdict, protected=domain in protected, p_holm=p_holm,
            noninferior=bool(math.isfinite(t.ci_low) and t.ci_low > -m),
            items_lost=len(extra["lost"]), items_gained=len(extra["gained"]), test=t.test, se=t.se,
            clusters=extra["clusters"], lost_items=extra["lost"][:50], gained_items=extra["gained"][:50],
            underpowered=t.underpowered, p_min=t.p_min, gen_config=configs.get(domain)))

    compared = {d for d, _, _ in tests}
    not_comparable = [{"domain": d, "protected": d in protected, "difference": why}
                      for d, why in sorted(differences.items())]
    missing = {
        "baseline_only_items": [{"domain": r["domain"], "item_id": r["item_id"]} for r in
                                only_b.filter(pl.col("domain").is_in(list(domains_c))).sort("domain", "item_id").iter_rows(named=True)],
        "candidate_only_items": [{"domain": r["domain"], "item_id": r["item_id"]} for r in
                                 only_c.filter(pl.col("domain").is_in(list(domains_b))).sort("domain", "item_id").iter_rows(named=True)],
        "mismatched_items": sorted(mismatched, key=lambda r: (r["domain"], r["item_id"], r["reason"])),
        "baseline_only_domains": sorted(domains_b - domains_c),
        "candidate_only_domains": sorted(domains_c - domains_b),
        "domains_without_common_items": sorted((domains_b & domains_c) - compared - set(differences)),
        # a protected domain one side scored but that could not be compared (blocks promotion);
        # protected domains neither side swept are listed apart (nothing to compare, nothing lost);
        # a not-comparable protected domain is in ``not_comparable``, not here
        "protected_not_compared": sorted((protected & (domains_b | domains_c)) - compared - set(differences)),
        "protected_not_swept": sorted(protected - domains_b - domains_c),
    }
    missing["count"] = sum(len(v) for k, v in missing.items() if k != "protected_not_swept")
    return RegressionReport(domains=rows, missing=missing, margin=default_margin, alpha=alpha, q_level=q_level,
                            baseline=baseline_name, candidate=candidate_name, not_comparable=not_comparable)


def recorded_configs(frame: pl.DataFrame) -> dict[str, str]:
    """domain -> its one recorded gen_config (domains with none or several are left out)."""
    if "gen_config" not in frame.columns or "domain" not in frame.columns:
        return {}
    found = (frame.select(pl.col("domain").cast(pl.Utf8), pl.col("gen_config").cast(pl.Utf8)).drop_nulls().unique()
             .group_by("domain").agg(pl.col("gen_config")))
    return {d: c[0] for d, c in found.iter_rows() if len(c) == 1}


def read_results_file(path: str) -> pl.DataFrame:
    """Read a per-sample results file (Parquet, CSV or JSONL) for :func:`compare_results`."""
    from storage.readers import UnreadableFile, check_readable

    try:
        p = check_readable(path)
    except UnreadableFile as exc:
        raise RegressionInputError(str(exc)) from None
    suffix = p.suffix.lower()
    try:
        if suffix == ".parquet":
            return pl.read_parquet(p)
        if suffix == ".csv":
            return pl.read_csv(p, schema_overrides={"item_id": pl.Utf8, "domain": pl.Utf8, "cluster_id": pl.Utf8})
        if suffix in (".jsonl", ".ndjson"):
            return pl.read_ndjson(p)
    except Exception as exc:  # noqa: BLE001 - any reader failure is bad input for the user to fix
        raise RegressionInputError(f"{path}: cannot read as {suffix[1:]}: {exc}") from None
    raise RegressionInputError(f"{path}: unsupported format {suffix or '(none)'}; use .parquet, .csv or .jsonl")
