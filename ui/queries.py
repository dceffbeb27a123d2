"""What the dashboard asks the lake, as plain functions over a DuckDB connection (no Streamlit here).

The lake is many small Parquet files (one folder per partition). ``Lake.connect()`` binds a view
over every file of every table, which at 300 domains x 20 checkpoints means ~15k files and seconds
before the first query. A page needs only a few tables, and often one domain's partitions, so
:func:`open_views` builds the same views (same ``read_parquet`` options as ``Lake.connect``) for the
named tables only, optionally restricted to partitions (``{"domain": d}``), binding each view
cheaply first (:class:`LakeViews`). Absent tables get no
view; readers check :func:`has_view` and the pages show an empty state that says what to run.

Scores in the lake are fractions in [0, 1]; the pages show them as percent / percentage points.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Iterable, Mapping, Sequence

import polars as pl

from storage import tables as T
from storage.lake import Lake

# view name -> (table folder, file stem); see storage/lake.py and storage/tables.py
VIEW_SOURCES: dict[str, tuple[str, str]] = {
    "samples": ("ingest", "samples"),
    "quarantine": ("ingest", "quarantine"),
    **{name: (name, "part") for name in (
        "gate_results", "difficulty", "train_set", "checkpoints", "training_history", "results",
        "sweep_summary", "regression", "promotions", "pass_rates", "variants", "variant_domains",
        "reward_attacks", "reward_gates", "report_cards",
    )},
}

PASS_THRESHOLD = 0.5  # an item counts as solved when its mean score over K samples reaches this
# overview colour classes; "underpowered" (the test could not have flagged a drop) and
# "not_comparable" (swept under different generation configs) carry no verdict either way
STATUSES = ("regressed", "warn", "underpowered", "not_comparable", "improved", "unchanged")
# columns of lake table regression added since its first contract: absent in older files
REGRESSION_LATER_COLUMNS = {"underpowered": pl.Boolean, "p_min": pl.Float64, "gen_config": pl.Utf8,
                            "detail": pl.Utf8}


def view_files(lake: Lake, view: str, where: Sequence[Mapping[str, str]] | None = None,
               modified_since: float | None = None):
    """Committed files that feed ``view``; ``where`` is a list of partition filters (OR-ed);
    ``modified_since`` (epoch seconds) keeps only files written at or after that time."""
    if view not in VIEW_SOURCES:
        raise ValueError(f"unknown lake view {view!r} (known: {', '.join(VIEW_SOURCES)})")
    table, stem = VIEW_SOURCES[view]
    if not where:
        found = set(lake.files(table, stem))
    else:
        found = set()
        for clause in where:
            found.update(lake.files(table, stem, clause))
    if modified_since is not None:
        found = {f for f in found if f.stat().st_mtime >= modified_since}
    return sorted(found)


class LakeViews:
    """DuckDB views over chosen lake tables (see :func:`open_views`).

    Views first bind by the first file's schema (``union_by_name=false``), about twice as fast
    over hundreds of small files as matching every file's columns by name. Files written under an
    older contract (a column added since) make that binding fail; then every view is rebound by
    name, as ``Lake.connect`` does, and the query runs again, so drift costs time, never rows."""

    def __init__(self, files: Mapping[str, list]):
        import duckdb

        self._files = dict(files)
        self._error = duckdb.Error
        self._con = duckdb.connect(":memory:")
        self.by_name = False
        self._bind()

    def _bind(self) -> None:
        for view, files in self._files.items():
            listing = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
            self._con.execute(
                f'CREATE OR REPLACE VIEW "{view}" AS SELECT * FROM read_parquet([{listing}], '
                f"hive_partitioning=true, union_by_name={'true' if self.by_name else 'false'})"
            )

    def _run(self, query: str, params: list | None, fetch):
        try:
            return fetch(self._con.sql(query, params=params or []))
        except self._error:
            if self.by_name:
                raise
            self.by_name = True  # files disagree on columns: match them by name from now on
            self._bind()
            return fetch(self._con.sql(query, params=params or []))

    def frame(self, query: str, params: list | None = None) -> pl.DataFrame:
        return self._run(query, params, lambda rel: rel.pl())

    def rows(self, query: str, params: list | None = None) -> list[tuple]:
        return self._run(query, params, lambda rel: rel.fetchall())

    def has(self, view: str) -> bool:
        return view in self._files

    def close(self) -> None:
        self._con.close()


def open_views(lake: Lake, views: Iterable[str] | Mapping[str, Sequence[Mapping[str, str]] | None],
               modified_since: Mapping[str, float] | None = None) -> LakeViews:
    """Views over the named tables that have files, optionally only some partitions of each.

    ``modified_since`` prunes a view's files by modification time. It is exact for "rows stamped
    after T" queries: a batch file is written after the timestamps inside it are taken, so a file
    last modified before T holds no row stamped after T. It keeps the overview's "gate failures in
    the last day" from reading every gate evaluation ever run."""
    wanted = views if isinstance(views, Mapping) else {name: None for name in views}
    for view in wanted:
        if view not in VIEW_SOURCES:
            raise ValueError(f"unknown lake view {view!r} (known: {', '.join(VIEW_SOURCES)})")

    def found(item):
        view, where = item
        return view, view_files(lake, view, where, (modified_since or {}).get(view))

    if len(wanted) > 1:  # the team lake exports each view from object storage: latency, not CPU
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(len(wanted), 8)) as pool:
            listed = list(pool.map(found, wanted.items()))
    else:
        listed = [found(item) for item in wanted.items()]
    return LakeViews({view: files for view, files in listed if files})


def has_view(con: LakeViews, view: str) -> bool:
    return con.has(view)


def _frame(con: LakeViews, query: str, params: list | None = None) -> pl.DataFrame:
    return con.frame(query, params)


# -- champion and comparisons -----------------------------------------------------------------

def last_promotion(con) -> dict | None:
    """The newest decision that promoted (lake table ``promotions``): Assay's record of who it made
    champion and when. The champion itself is the MLflow alias (``ui.data.champion``)."""
    if not has_view(con, "promotions"):
        return None
    frame = _frame(con, "SELECT decision, candidate, previous_champion, reason, created_at FROM promotions "
                        "WHERE promoted ORDER BY created_at DESC, decision DESC LIMIT 1")
    return frame.row(0, named=True) if frame.height else None


def reconcile_champion(alias: str | None, recorded: dict | None, store_error: str | None = None) -> dict:
    """The champion a page shows: ``name`` is the MLflow alias (the one source of truth; promotion
    moves it under its lock), ``recorded`` the candidate of Assay's last promotion record
    (:func:`last_promotion`). ``warning`` says when they disagree (the alias was moved without
    Assay) or when the alias could not be read (``store_error``: then ``name`` is the record)."""
    recorded_name = recorded["candidate"] if recorded else None
    if store_error is not None:
        return {"name": recorded_name, "source": "lake", "recorded": recorded_name,
                "warning": f"{store_error}; showing the last promotion recorded in the lake" if recorded_name else None}
    warning = None
    if alias != recorded_name:
        when = f" on {recorded['created_at']}" if recorded and recorded.get("created_at") else ""
        warning = (f"The MLflow alias 'champion' points at {alias or 'no model version'}, but Assay's last "
                   f"promotion made {recorded_name or 'no checkpoint'} champion{when}: the alias was moved "
                   "outside Assay (MLflow UI, another tool). Promotions compare against the alias; "
                   "the promotions table has no record of this change.")
    return {"name": alias, "source": "mlflow", "recorded": recorded_name, "warning": warning}


def comparisons(con) -> pl.DataFrame:
    """One row per (candidate, baseline) comparison, newest first."""
    if not has_view(con, "regression"):
        return pl.DataFrame()
    return _frame(con, """
        SELECT candidate, baseline, max(created_at) AS created_at, count(*)::BIGINT AS domains,
               (count(*) FILTER (verdict = 'regression'))::BIGINT AS regressions,
               (count(*) FILTER (verdict = 'warn'))::BIGINT AS warnings,
               (count(*) FILTER (verdict = 'underpowered'))::BIGINT AS underpowered,
               (count(*) FILTER (verdict = 'not_comparable'))::BIGINT AS not_comparable
        FROM regression GROUP BY candidate, baseline ORDER BY created_at DESC, candidate DESC""")


def with_later_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the regression columns older files lack, as nulls."""
    return frame.with_columns([pl.lit(None, dtype).alias(name) for name, dtype in REGRESSION_LATER_COLUMNS.items()
                               if name not in frame.columns])


def comparison_rows(con, candidate: str, baseline: str) -> pl.DataFrame:
    # SELECT *: a lake written before a column was added has no such column to name
    frame = _frame(con, """
        SELECT * FROM regression WHERE candidate = $1 AND baseline = $2
        QUALIFY row_number() OVER (PARTITION BY domain ORDER BY created_at DESC) = 1
        ORDER BY domain""", [candidate, baseline])
    return with_later_columns(frame).select(
        "domain", "verdict", "protected", "delta", "ci_low", "ci_high", "p", "q", "mde", "items_lost", "items_gained",
        "n", "k", "test", "created_at", *REGRESSION_LATER_COLUMNS)


def promotion_of(con, candidate: str) -> dict | None:
    if not has_view(con, "promotions"):
        return None
    frame = _frame(con, "SELECT * FROM promotions WHERE candidate = $1 ORDER BY created_at DESC LIMIT 1",
                   [candidate])
    return frame.row(0, named=True) if frame.height else None


# -- overview --------------------------------------------------------------------------------

def status_expr() -> pl.Expr:
    """Overview colour class from the ``verdict`` and ``ci_low`` columns: the regression stage's
    verdict (regression -> regressed, warn -> warn, underpowered, not_comparable), else 'improved' when the delta's CI lies above
    zero, else 'unchanged'."""
    return (pl.when(pl.col("verdict") == "regression").then(pl.lit("regressed"))
            .when(pl.col("verdict") == "warn").then(pl.lit("warn"))
            .when(pl.col("verdict") == "underpowered").then(pl.lit("underpowered"))
            .when(pl.col("verdict") == "not_comparable").then(pl.lit("not_comparable"))
            .when(pl.col("ci_low") > 0).then(pl.lit("improved"))
            .otherwise(pl.lit("unchanged")).alias("status"))


def recent_cells(con, recent: int) -> pl.DataFrame:
    """Regression rows of the ``recent`` newest candidates, the newest row per (candidate, domain),
    with a ``status`` column (see :func:`status_expr`) and the candidate's order (0 = oldest shown)."""
    if not has_view(con, "regression"):
        return pl.DataFrame()
    frame = _frame(con, """
        WITH cands AS (
            SELECT candidate, max(created_at) AS last_at FROM regression GROUP BY candidate
            ORDER BY last_at DESC, candidate DESC LIMIT $1),
        ordered AS (SELECT candidate, row_number() OVER (ORDER BY last_at, candidate) - 1 AS position
                    FROM cands)
        SELECT r.candidate, r.baseline, r.domain, r.delta, r.ci_low, r.ci_high, r.p, r.q, r.mde,
               r.verdict, r.protected, r.items_lost, r.items_gained, r.created_at, o.position
        FROM regression r JOIN ordered o USING (candidate)
        QUALIFY row_number() OVER (PARTITION BY r.candidate, r.domain ORDER BY r.created_at DESC) = 1""",
                   [int(recent)])
    return frame.with_columns(status_expr())


def gate_failures_since(con, since: datetime) -> pl.DataFrame:
    """Failed gate expectations evaluated at or after ``since``, counted per domain and severity."""
    if not has_view(con, "gate_results"):
        return pl.DataFrame(schema={"domain": pl.Utf8, "severity": pl.Utf8, "failures": pl.Int64})
    return _frame(con, """
        SELECT domain, severity, count(*)::BIGINT AS failures FROM gate_results
        WHERE NOT success AND try_cast(evaluated_at AS TIMESTAMPTZ) >= $1::TIMESTAMPTZ
        GROUP BY domain, severity ORDER BY domain""", [since.isoformat()])


def last_day(now: datetime | None = None) -> datetime:
    return (now or datetime.now(timezone.utc)) - timedelta(days=1)


@dataclass(frozen=True)
class OverviewQuery:
    """Search, filters, sort and page of the overview's domain list (all validated here)."""

    search: str = ""
    owners: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    sort: str = "worst delta first"
    page: int = 1
    page_size: int = 25

    SORTS = ("worst delta first", "best delta first", "regressions first", "most gate failures", "name")

    def __post_init__(self) -> None:
        if self.sort not in self.SORTS:
            raise ValueError(f"sort {self.sort!r} is not one of {', '.join(self.SORTS)}")
        if self.page < 1 or self.page_size < 1:
            raise ValueError(f"page ({self.page}) and page_size ({self.page_size}) must be >= 1")


def domain_table(latest: pl.DataFrame, registry: pl.DataFrame, failures: pl.DataFrame,
                 lake_domains: Iterable[str]) -> pl.DataFrame:
    """One row per domain known to the registry or the lake: owner, tags, the latest candidate's
    verdict and delta, and gate failures in the last day."""
    names = sorted(set(registry["domain"].to_list() if registry.height else []) | set(lake_domains))
    table = pl.DataFrame({"domain": names}, schema={"domain": pl.Utf8})
    if registry.height:
        table = table.join(registry.select("domain", "owner", "tags"), on="domain", how="left")
    else:
        table = table.with_columns(pl.lit(None, pl.Utf8).alias("owner"), pl.lit(None, pl.List(pl.Utf8)).alias("tags"))
    table = table.with_columns(pl.col("owner").fill_null("(not in registry)"),
                               pl.col("tags").fill_null(pl.lit([], pl.List(pl.Utf8))))
    if latest.height:
        table = table.join(latest.select("domain", "verdict", "status", "protected", "delta", "ci_low",
                                         "ci_high", "q", "mde"), on="domain", how="left")
    else:
        table = table.with_columns(
            *[pl.lit(None, pl.Utf8).alias(c) for c in ("verdict", "status")],
            pl.lit(None, pl.Boolean).alias("protected"),
            *[pl.lit(None, pl.Float64).alias(c) for c in ("delta", "ci_low", "ci_high", "q", "mde")])
    per_domain = (failures.group_by("domain").agg(pl.col("failures").sum().alias("gate_failures_24h"))
                  if failures.height else pl.DataFrame(schema={"domain": pl.Utf8, "gate_failures_24h": pl.Int64}))
    return table.join(per_domain, on="domain", how="left").with_columns(pl.col("gate_failures_24h").fill_null(0))


def filter_sort_page(table: pl.DataFrame, query: OverviewQuery) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(all matching rows sorted, the rows of the requested page, number of pages)."""
    rows = table
    if query.search.strip():
        needle = query.search.strip().lower()
        rows = rows.filter(pl.col("domain").str.to_lowercase().str.contains(needle, literal=True)
                           | pl.col("owner").str.to_lowercase().str.contains(needle, literal=True))
    if query.owners:
        rows = rows.filter(pl.col("owner").is_in(list(query.owners)))
    if query.tags:
        rows = rows.filter(pl.col("tags").list.eval(pl.element().is_in(list(query.tags))).list.any())
    rank = {"regressed": 0, "warn": 1, "not_comparable": 2, "underpowered": 3, "unchanged": 4, "improved": 5}
    if query.sort == "worst delta first":
        rows = rows.sort(["delta", "domain"], nulls_last=True)
    elif query.sort == "best delta first":
        rows = rows.sort(["delta", "domain"], descending=[True, False], nulls_last=True)
    elif query.sort == "regressions first":
        rows = rows.with_columns(pl.col("status").replace_strict(rank, default=6).alias("_rank")) \
                   .sort(["_rank", "delta", "domain"], nulls_last=True).drop("_rank")
    elif query.sort == "most gate failures":
        rows = rows.sort(["gate_failures_24h", "domain"], descending=[True, False])
    else:
        rows = rows.sort("domain")
    pages = max(1, -(-rows.height // query.page_size))
    page = min(query.page, pages)
    return rows, rows.slice((page - 1) * query.page_size, query.page_size), pages


def status_counts(latest: pl.DataFrame, domains: Iterable[str]) -> dict[str, int]:
    wanted = set(domains)
    counts = {s: 0 for s in STATUSES}
    if latest.height:
        for status in latest.filter(pl.col("domain").is_in(list(wanted)))["status"].to_list():
            counts[status] += 1
    return counts


# -- domain page ------------------------------------------------------------------------------

def latest_reward_attacks(con, domain: str) -> pl.DataFrame:
    """The newest reward-attack run of ``domain`` (`assay domains attack`), one row per hack
    family, paid families first; the columns of ``storage.tables.REWARD_ATTACKS``."""
    if not has_view(con, "reward_attacks"):
        return T.empty(T.REWARD_ATTACKS)
    return T.conform(_frame(con, f"""
        SELECT {', '.join(T.REWARD_ATTACKS)} FROM reward_attacks
        WHERE domain = $1 AND attacked_at = (SELECT max(attacked_at) FROM reward_attacks WHERE domain = $1)
        ORDER BY paid DESC, family""", [domain]), T.REWARD_ATTACKS)


def latest_reward_gate(con, domain: str) -> pl.DataFrame:
    """The newest gate check of ``domain``'s learned reward (`assay reward check`), one row per
    criterion, failed ones first; the columns of ``storage.tables.REWARD_GATES`` (``*`` and conform:
    a lake whose checks predate a column, ``gate_config``, reads it as nulls)."""
    if not has_view(con, "reward_gates"):
        return T.empty(T.REWARD_GATES)
    return T.conform(_frame(con, """
        SELECT * FROM reward_gates
        WHERE domain = $1 AND "check" = (SELECT "check" FROM reward_gates WHERE domain = $1
                                         ORDER BY checked_at DESC, "check" DESC LIMIT 1)
        ORDER BY passed, criterion""", [domain]), T.REWARD_GATES)


def gate_history(con, domain: str) -> pl.DataFrame:
    """Per (evaluation, gate): when, expectations passed, and the share of row checks that passed."""
    if not has_view(con, "gate_results"):
        return pl.DataFrame()
    return _frame(con, """
        SELECT evaluation, gate, min(evaluated_at) AS evaluated_at, count(*)::BIGINT AS expectations,
               (count(*) FILTER (success))::BIGINT AS expectations_passed,
               sum(rows_checked)::BIGINT AS rows_checked, sum(rows_failed)::BIGINT AS rows_failed,
               (100.0 * (1 - sum(rows_failed) / nullif(sum(rows_checked), 0)))::DOUBLE AS rows_passed_pct
        FROM gate_results WHERE domain = $1 GROUP BY evaluation, gate ORDER BY evaluated_at, gate""", [domain])


def failed_expectations(con, domain: str) -> pl.DataFrame:
    """Failed expectations of the domain's newest gate evaluation."""
    if not has_view(con, "gate_results"):
        return pl.DataFrame()
    return _frame(con, """
        SELECT gate, expectation, severity, observed, threshold, rows_failed, rows_checked, evaluated_at
        FROM gate_results WHERE domain = $1 AND NOT success AND evaluation = (
            SELECT evaluation FROM gate_results WHERE domain = $1 ORDER BY evaluated_at DESC LIMIT 1)
        ORDER BY severity, gate""", [domain])


def ingest_counts(con, domain: str) -> pl.DataFrame:
    """Per ingest batch: rows admitted and quarantined."""
    parts = []
    if has_view(con, "samples"):
        parts.append("SELECT batch, ingested_at, 1 AS admitted, 0 AS quarantined FROM samples WHERE domain = $1")
    if has_view(con, "quarantine"):
        parts.append("SELECT batch, ingested_at, 0, 1 FROM quarantine WHERE domain = $1")
    if not parts:
        return pl.DataFrame()
    return _frame(con, f"""
        SELECT batch::VARCHAR AS batch, min(ingested_at) AS ingested_at, sum(admitted)::BIGINT AS admitted,
               sum(quarantined)::BIGINT AS quarantined
        FROM ({' UNION ALL '.join(parts)}) GROUP BY 1 ORDER BY ingested_at""", [domain])


def quarantine_reasons_over_time(con, domain: str) -> pl.DataFrame:
    if not has_view(con, "quarantine"):
        return pl.DataFrame()
    return _frame(con, """
        SELECT day, reason, count(*)::BIGINT AS rows FROM (
            SELECT cast(try_cast(ingested_at AS TIMESTAMPTZ) AT TIME ZONE 'UTC' AS DATE) AS day,
                   unnest(reasons) AS reason
            FROM quarantine WHERE domain = $1)
        GROUP BY day, reason ORDER BY day, reason""", [domain])


def quarantined_rows(con, domain: str, limit: int = 20) -> pl.DataFrame:
    if not has_view(con, "quarantine"):
        return pl.DataFrame()
    return _frame(con, """
        SELECT id, split, array_to_string(reasons, ', ') AS reasons, source, line,
               left(raw, 300) AS raw, ingested_at
        FROM quarantine WHERE domain = $1 ORDER BY ingested_at DESC, source, line LIMIT $2""",
                  [domain, int(limit)])


def difficulty_latest(con, domain: str) -> pl.DataFrame:
    """Difficulty rows of the domain's newest difficulty evaluation."""
    if not has_view(con, "difficulty"):
        return pl.DataFrame()
    return _frame(con, """
        SELECT id, difficulty, pass_rate, k, method, in_band, evaluated_at FROM difficulty
        WHERE domain = $1 AND evaluation = (
            SELECT evaluation FROM difficulty WHERE domain = $1 ORDER BY evaluated_at DESC LIMIT 1)""",
                  [domain])


def difficulty_methods(difficulty: pl.DataFrame) -> dict[str, int]:
    """Items per estimator (policy_pass_rate | metadata | heuristic) in the gate's latest evaluation."""
    if not difficulty.height or "method" not in difficulty.columns:
        return {}
    counts = difficulty.group_by("method").len().sort(["len", "method"], descending=[True, False])
    return {str(m): int(n) for m, n in counts.iter_rows()}


# -- difficulty measured on the policy ----------------------------------------------------------

# roles of a policy checkpoint in the pass-rate view: how it relates to the champion history
ROLE_CURRENT, ROLE_FORMER, ROLE_BASE, ROLE_OTHER = "current champion", "former champion", "base policy", \
    "never champion"
ROLES = (ROLE_CURRENT, ROLE_FORMER, ROLE_BASE, ROLE_OTHER)


def pass_rate_rows(con, domain: str) -> pl.DataFrame:
    """Measured pass rates of ``domain``'s train items (lake table ``pass_rates``), one row per
    (checkpoint, item): per checkpoint only its newest measurement key (K = ``samples`` and
    ``gen_config``; one checkpoint may have been measured under several), per item the first
    committed row of that key (the row :func:`evaluation.pass_rates.cached_pass_rates` serves)."""
    if not has_view(con, "pass_rates"):
        return pl.DataFrame()
    return _frame(con, """
        WITH keys AS (
            SELECT checkpoint, samples, gen_config, max(created_at) AS key_at FROM pass_rates
            WHERE domain = $1 GROUP BY checkpoint, samples, gen_config
            QUALIFY row_number() OVER (PARTITION BY checkpoint ORDER BY key_at DESC, samples DESC, gen_config) = 1)
        SELECT p.checkpoint, p.item_id, p.samples, p.passes, p.pass_rate, p.gen_config, p.gen_params, p.engine,
               p.created_at
        FROM pass_rates p JOIN keys k USING (checkpoint, samples, gen_config)
        WHERE p.domain = $1
        QUALIFY row_number() OVER (PARTITION BY p.checkpoint, p.item_id ORDER BY p.created_at, p.engine) = 1
        ORDER BY p.checkpoint, p.item_id""", [domain])


def champion_history(con) -> pl.DataFrame:
    """When each checkpoint first became champion (lake table ``promotions``, promoted decisions)."""
    if not has_view(con, "promotions"):
        return pl.DataFrame(schema={"checkpoint": pl.Utf8, "champion_since": pl.Utf8})
    return _frame(con, """
        SELECT candidate AS checkpoint, min(created_at) AS champion_since FROM promotions
        WHERE promoted GROUP BY candidate ORDER BY champion_since""")


def checkpoint_times(con) -> pl.DataFrame:
    """When each checkpoint was saved (lake table ``checkpoints``)."""
    if not has_view(con, "checkpoints"):
        return pl.DataFrame(schema={"checkpoint": pl.Utf8, "saved_at": pl.Utf8})
    return _frame(con, "SELECT checkpoint, min(created_at) AS saved_at FROM checkpoints GROUP BY checkpoint")


PASS_RATE_BUCKETS = ("all fail", "<10%", "10-20%", "20-30%", "30-40%", "40-50%", "50-60%", "60-70%", "70-80%",
                     "80-90%", "90-<100%", "all pass")


def pass_rate_bucket() -> pl.Expr:
    """Histogram bucket of ``pass_rate``: all-fail and all-pass items (no GRPO signal) get their own
    bars, the rest fall in 10-point bins (so 1/K never shares a bar with 0 whatever K is)."""
    inner = (pl.col("pass_rate") * 10).floor().clip(0, 9).cast(pl.Int64) + 1
    return (pl.when(pl.col("passes") == 0).then(0).when(pl.col("passes") == pl.col("samples")).then(11)
            .otherwise(inner).cast(pl.Int64).alias("bucket"))


def pass_rate_panels(rows: pl.DataFrame, champions: pl.DataFrame, saved: pl.DataFrame, champion: str | None,
                     band: tuple[float, float]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(items, per_checkpoint) of the pass-rate view.

    ``items``: ``rows`` (:func:`pass_rate_rows`) with each item's ``verdict`` against ``band``
    (``evaluation.domain_catalog.pass_rate_verdicts``: what the gate would decide), its histogram
    ``bucket`` and its checkpoint's ``label``/``role``/``position``. ``per_checkpoint``: one row per
    checkpoint in panel order (base policies first, then by when they became champion, checkpoints
    never champion by when they were saved or measured) with items, K, generation config, mean pass
    rate, in-band / too-easy / too-hard shares. ``champion``: the current one (highlighted)."""
    from evaluation.domain_catalog import pass_rate_verdicts  # light, and only the domain page needs it

    if not rows.height:
        return pl.DataFrame(), pl.DataFrame()
    items = rows.with_columns(
        pl.Series("verdict", pass_rate_verdicts(rows["passes"].to_list(), rows["samples"].to_list(), band),
                  dtype=pl.Utf8),
        pass_rate_bucket())
    per = items.group_by("checkpoint").agg(
        pl.len().alias("items"), pl.col("samples").first().alias("samples"),
        pl.col("gen_config").first().alias("gen_config"), pl.col("gen_params").first().alias("gen_params"),
        pl.col("engine").drop_nulls().unique().sort().str.join(", ").alias("engine"),
        pl.col("pass_rate").mean().alias("mean_pass_rate"),
        (pl.col("verdict") == "in_band").mean().alias("in_band_share"),
        (pl.col("verdict") == "too_easy").mean().alias("too_easy_share"),
        (pl.col("verdict") == "too_hard").mean().alias("too_hard_share"),
        pl.col("created_at").max().alias("measured_at"))
    per = per.join(champions, on="checkpoint", how="left").join(saved, on="checkpoint", how="left")
    per = per.with_columns(
        pl.when(pl.col("checkpoint") == (champion or "")).then(pl.lit(ROLE_CURRENT))
        .when(pl.col("champion_since").is_not_null()).then(pl.lit(ROLE_FORMER))
        .when(pl.col("checkpoint").str.starts_with("base-")).then(pl.lit(ROLE_BASE))
        .otherwise(pl.lit(ROLE_OTHER)).alias("role"),
        # base policies lead (champion before any promotion), then the order of the champion history
        pl.when(pl.col("checkpoint").str.starts_with("base-") & pl.col("champion_since").is_null())
        .then(pl.lit("")).otherwise(pl.coalesce("champion_since", "saved_at", "measured_at")).alias("_order"),
    ).sort(["_order", "checkpoint"]).drop("_order").with_row_index("position")
    per = per.with_columns(pl.col("position").cast(pl.Int64), pl.format(
        "{}. {} ({})", pl.col("position") + 1, pl.col("checkpoint"), pl.col("role")).alias("label"))
    items = items.join(per.select("checkpoint", "label", "role", "position"), on="checkpoint", how="left")
    return items.sort(["position", "item_id"]), per


def score_trend(con, domain: str) -> pl.DataFrame:
    """Sweep summary of the domain per checkpoint, oldest checkpoint first."""
    if not has_view(con, "sweep_summary"):
        return pl.DataFrame()
    order = "s.created_at"
    join = ""
    if has_view(con, "checkpoints"):
        join = "LEFT JOIN (SELECT checkpoint, min(created_at) AS ck_at FROM checkpoints GROUP BY 1) c USING (checkpoint)"
        order = "coalesce(c.ck_at, s.created_at)"
    return _frame(con, f"""
        SELECT s.checkpoint, s.n, s.k, s.mean, s.ci_low, s.ci_high, s.stderr, s.created_at,
               {order} AS checkpoint_at
        FROM sweep_summary s {join} WHERE s.domain = $1
        QUALIFY row_number() OVER (PARTITION BY s.checkpoint ORDER BY s.created_at DESC) = 1
        ORDER BY checkpoint_at, s.checkpoint""", [domain])


def latest_scores(con, domains: Sequence[str]) -> pl.DataFrame:
    """Latest sweep summary per (checkpoint, domain) of ``domains``."""
    if not has_view(con, "sweep_summary") or not domains:
        return pl.DataFrame()
    return _frame(con, """
        SELECT checkpoint, domain, n, k, mean, ci_low, ci_high, created_at FROM sweep_summary
        WHERE list_contains($1, domain)
        QUALIFY row_number() OVER (PARTITION BY checkpoint, domain ORDER BY created_at DESC) = 1
        ORDER BY checkpoint, domain""", [list(domains)])


def latest_regression(con, domain: str) -> dict | None:
    if not has_view(con, "regression"):
        return None
    frame = _frame(con, "SELECT * FROM regression WHERE domain = $1 ORDER BY created_at DESC LIMIT 1", [domain])
    return with_later_columns(frame).row(0, named=True) if frame.height else None


def item_changes(con, domain: str, baseline_rows: pl.DataFrame, candidate_rows: pl.DataFrame) -> pl.DataFrame:
    """Per eval item both sides scored: mean score and first completion under baseline and
    candidate, a ``change`` (lost | gained | same, as evaluation.regression counts them), and the
    prompt and answer when the samples table has them. The rows are the ones the comparison used
    (:func:`evaluation.results.compared_rows`: its generation config, each sample once)."""
    if not baseline_rows.height or not candidate_rows.height:
        return pl.DataFrame()

    def per_item(rows: pl.DataFrame, side: str) -> pl.DataFrame:
        return (rows.sort("sample_idx").group_by("item_id", maintain_order=True)
                .agg(pl.col("score").mean().alias(f"{side}_score"), pl.col("completion").first().alias(f"{side}_completion")))

    items = per_item(baseline_rows, "baseline").join(per_item(candidate_rows, "candidate"), on="item_id")
    solved_before, solved_now = pl.col("baseline_score") >= PASS_THRESHOLD, pl.col("candidate_score") >= PASS_THRESHOLD
    items = items.with_columns(pl.when(solved_before & ~solved_now).then(pl.lit("lost"))
                               .when(solved_now & ~solved_before).then(pl.lit("gained"))
                               .otherwise(pl.lit("same")).alias("change"))
    prompts = pl.DataFrame(schema={"item_id": pl.Utf8, "prompt": pl.Utf8, "answer": pl.Utf8})
    if has_view(con, "samples"):
        prompts = _frame(con, "SELECT id AS item_id, any_value(prompt) AS prompt, any_value(answer) AS answer "
                              "FROM samples WHERE domain = $1 AND split = 'eval' GROUP BY id", [domain])
    items = items.join(prompts, on="item_id", how="left")
    return items.select("item_id", "baseline_score", "candidate_score", "change", "prompt", "answer",
                        "baseline_completion", "candidate_completion").sort(["change", "item_id"])


# -- variants page ----------------------------------------------------------------------------

# verdicts of a domain's non-inferiority test of variant vs parent, worst first: underpowered
# (neither non-inferiority nor inferiority shown at the items swept) is no pass
VARIANT_VERDICTS = ("inferior", "underpowered", "non_inferior")


def latest_variants(con) -> pl.DataFrame:
    """Each variant's newest certification (lake table ``variants``), one row per variant, by
    parent and fastest first: a variant certified again (more items, a quieter machine) is judged
    by its last decision. The columns of ``storage.tables.VARIANTS``, also when the table is absent
    (a lake older than variants)."""
    if not has_view(con, "variants"):
        return T.empty(T.VARIANTS)
    # columns named, not SELECT *: a view bound by an older first file would drop a later column
    # silently, where naming it fails and makes LakeViews rebind every file by name
    return T.conform(_frame(con, f"""
        SELECT {', '.join(T.VARIANTS)} FROM variants
        QUALIFY row_number() OVER (PARTITION BY variant ORDER BY created_at DESC, decision DESC) = 1
        ORDER BY parent, speedup_batch1 DESC NULLS LAST, variant"""), T.VARIANTS)


def fast_alias_holder(con) -> dict | None:
    """The newest certification that moved the ``fast`` alias (variant, parent, decision,
    created_at): the lake's record of where the alias points. A later refused certification does
    not move it back, so the holder's own latest decision may be a refusal."""
    if not has_view(con, "variants"):
        return None
    frame = _frame(con, "SELECT variant, parent, decision, created_at FROM variants WHERE fast_alias "
                        "ORDER BY created_at DESC, decision DESC LIMIT 1")
    return frame.row(0, named=True) if frame.height else None


def variant_domain_rows(con, decisions: Sequence[str]) -> pl.DataFrame:
    """The per-domain non-inferiority tests of ``decisions`` (lake table ``variant_domains``),
    worst verdict first within a decision. The columns of ``storage.tables.VARIANT_DOMAINS``, also
    when the table is absent."""
    if not has_view(con, "variant_domains") or not decisions:
        return T.empty(T.VARIANT_DOMAINS)
    rank = " ".join(f"WHEN '{v}' THEN {i}" for i, v in enumerate(VARIANT_VERDICTS))
    return T.conform(_frame(con, f"""
        SELECT {', '.join(T.VARIANT_DOMAINS)} FROM variant_domains WHERE list_contains($1, decision)
        ORDER BY decision, CASE verdict {rank} ELSE {len(VARIANT_VERDICTS)} END, delta, domain""",
                            [list(decisions)]), T.VARIANT_DOMAINS)


# -- training page ----------------------------------------------------------------------------

def training_runs(con) -> pl.DataFrame:
    if not has_view(con, "training_history"):
        return pl.DataFrame()
    return _frame(con, """
        SELECT run_id, min(created_at) AS started_at, max(created_at) AS last_at, max(step) AS steps,
               list(DISTINCT domain ORDER BY domain) FILTER (domain <> '_all') AS domains
        FROM training_history GROUP BY run_id ORDER BY last_at DESC""")


# training_history columns added since its first contract (reward-hacking signals), then since those
# (a learned reward's mean, the verifier's beside it and the over-optimisation watch): absent in lakes
# written before, read as nulls
TRAINING_LATER_COLUMNS = ("multi_answer_share", "prompt_copy_share", "prompt_copy_reward")
TRAINING_LEARNED_COLUMNS = ("learned_mean", "score_mean", "reward_hacking")
# then the in-loop validation (training.validation): held-out score, change since step 0, BH q, flag
TRAINING_VALIDATION_COLUMNS = ("val_score", "val_delta", "val_q", "forgetting")
TRAINING_CURVE_COLUMNS = ("step", "domain", "reward_mean", "reward_std", "accuracy", "kl", "loss", "clip_frac",
                          "entropy", "zero_var_frac", "tokens_per_s", "created_at")
# a domain's hacking share "rises" when its mean over the run's last third of steps exceeds its mean
# over the first third by more than this (0.10 = ten percentage points of the domain's rollouts)
RISING_SHARE_THRESHOLD = 0.10
RISING_SHARE_MIN_STEPS = 3  # fewer recorded steps have no first and last third to compare


def training_curves(con, run_id: str) -> pl.DataFrame:
    """Per (step, domain) curves of a run, with the later columns null where no file has them."""
    import duckdb

    if not has_view(con, "training_history"):
        return pl.DataFrame()
    query = "SELECT {} FROM training_history WHERE run_id = $1 ORDER BY step, domain"
    later = (*TRAINING_LATER_COLUMNS, *TRAINING_LEARNED_COLUMNS, *TRAINING_VALIDATION_COLUMNS)
    try:  # named: a view bound by an old first file fails here and is rebound by name (LakeViews)
        frame = _frame(con, query.format(", ".join((*TRAINING_CURVE_COLUMNS, *later))), [run_id])
    except duckdb.BinderException:  # no file of the lake has some of them: written before they existed
        present = set(_frame(con, "SELECT * FROM training_history LIMIT 0").columns)  # bound by name by now
        frame = _frame(con, query.format(", ".join((*TRAINING_CURVE_COLUMNS,
                                                    *(name for name in later if name in present)))), [run_id])
    return frame.with_columns([pl.lit(None, pl.Float64).alias(name) for name in later if name not in frame.columns])


def rising_shares(curves: pl.DataFrame, metric: str, threshold: float = RISING_SHARE_THRESHOLD) -> pl.DataFrame:
    """Domains (not "_all") whose ``metric`` rose over the run: the mean over the last third of its
    recorded steps minus the mean over the first third exceeds ``threshold``. Columns domain,
    first, last, rise, steps; largest rise first."""
    out = {"domain": [], "first": [], "last": [], "rise": [], "steps": []}
    if metric in curves.columns:
        for (domain,), rows in curves.filter((pl.col("domain") != "_all") & pl.col(metric).is_not_null()) \
                .sort("step").group_by("domain", maintain_order=True):
            values = rows[metric].to_list()
            if len(values) < RISING_SHARE_MIN_STEPS:
                continue
            third = len(values) // 3
            first, last = sum(values[:third]) / third, sum(values[-third:]) / third
            if last - first > threshold:
                for key, value in zip(out, (domain, first, last, last - first, len(values))):
                    out[key].append(value)
    frame = pl.DataFrame(out, schema={"domain": pl.Utf8, "first": pl.Float64, "last": pl.Float64,
                                      "rise": pl.Float64, "steps": pl.Int64})
    return frame.sort("rise", descending=True)


def overoptimised_domains(curves: pl.DataFrame) -> pl.DataFrame:
    """Domains the trainer's reward-hacking watch (training.overoptimisation) flagged in a run: its
    learned reward rising while the verifier fell over the trailing window ending at a step (column
    ``reward_hacking`` 1). Columns domain, first_step, last_step (the first and last flagged steps),
    flagged_steps, judged_steps (steps with a verdict); domains without a flag are left out."""
    schema = {"domain": pl.Utf8, "first_step": pl.Int64, "last_step": pl.Int64, "flagged_steps": pl.UInt32,
              "judged_steps": pl.UInt32}
    if "reward_hacking" not in curves.columns or not curves.height:
        return pl.DataFrame(schema=schema)
    judged = curves.filter((pl.col("domain") != "_all") & pl.col("reward_hacking").is_not_null())
    out = judged.group_by("domain").agg(
        pl.col("step").filter(pl.col("reward_hacking") >= 1).min().alias("first_step"),
        pl.col("step").filter(pl.col("reward_hacking") >= 1).max().alias("last_step"),
        (pl.col("reward_hacking") >= 1).sum().alias("flagged_steps"),
        pl.len().alias("judged_steps"))
    return out.filter(pl.col("flagged_steps") > 0).sort("first_step", "domain").cast(schema)


def forgotten_domains(curves: pl.DataFrame) -> pl.DataFrame:
    """Domains the in-loop validation flagged for forgetting in a run (training.forgetting: held-out
    score significantly below step 0, column ``forgetting`` 1). Columns domain, first_step, last_step,
    flagged_steps, judged_steps (validations with a test), start (its step-0 score), latest (its last
    validation score), delta and q (of the last flagged validation), flagged_now (flagged at the run's
    last validation); domains never flagged are left out."""
    schema = {"domain": pl.Utf8, "first_step": pl.Int64, "last_step": pl.Int64, "flagged_steps": pl.UInt32,
              "judged_steps": pl.UInt32, "start": pl.Float64, "latest": pl.Float64, "delta": pl.Float64,
              "q": pl.Float64, "flagged_now": pl.Boolean}
    if "forgetting" not in curves.columns or not curves.height:
        return pl.DataFrame(schema=schema)
    validated = curves.filter((pl.col("domain") != "_all") & pl.col("val_score").is_not_null()).sort("step")
    judged = validated.filter(pl.col("forgetting").is_not_null())
    if not judged.height:
        return pl.DataFrame(schema=schema)
    last_validation = judged["step"].max()
    flagged = pl.col("forgetting") >= 1
    out = judged.group_by("domain").agg(
        pl.col("step").filter(flagged).min().alias("first_step"),
        pl.col("step").filter(flagged).max().alias("last_step"),
        flagged.sum().alias("flagged_steps"), pl.len().alias("judged_steps"),
        pl.col("val_score").last().alias("latest"),
        pl.col("val_delta").filter(flagged).last().alias("delta"), pl.col("val_q").filter(flagged).last().alias("q"),
        ((pl.col("step") == last_validation) & flagged).any().alias("flagged_now"))
    start = validated.filter(pl.col("step") == 0).select("domain", pl.col("val_score").alias("start"))
    return (out.filter(pl.col("flagged_steps") > 0).join(start, on="domain", how="left")
            .select(list(schema)).sort("first_step", "domain").cast(schema))


def lake_domains(con, views: Sequence[str] = ("regression",)) -> list[str]:
    names: set[str] = set()
    for view in views:
        if has_view(con, view):
            names.update(r[0] for r in con.rows(f'SELECT DISTINCT domain FROM "{view}"') if r[0])
    return sorted(names)


# -- environment report cards --------------------------------------------------------------------

def latest_report_cards(con) -> pl.DataFrame:
    """The newest report card of every domain (lake table ``report_cards``), worst first: failed
    cards, then lowest recall, then most hacks paid; domains without a verifier last."""
    if not has_view(con, "report_cards"):
        return pl.DataFrame(schema=T.REPORT_CARDS)
    frame = _frame(con, f"""
        SELECT * EXCLUDE (rank) FROM (
            SELECT *, row_number() OVER (PARTITION BY domain ORDER BY created_at DESC) AS rank FROM report_cards)
        WHERE rank = 1""")
    frame = T.conform(frame, T.REPORT_CARDS)
    return report_card_order(frame)


def report_card_order(frame: pl.DataFrame) -> pl.DataFrame:
    """Worst first (see :func:`latest_report_cards`); ``paid`` = fixed families + search hacks paid."""
    if not frame.height:
        return frame
    return (frame.with_columns(
        (pl.col("fixed_families_paid").fill_null(0) + pl.col("hack_search_paid").fill_null(0)).alias("_paid"),
        pl.col("passed").is_null().alias("_skipped"))
        .sort(["_skipped", "passed", "recall", "_paid", "domain"], descending=[False, False, False, True, False],
              nulls_last=True)
        .drop("_paid", "_skipped"))


def report_card_totals(cards: pl.DataFrame) -> dict:
    """Counts over the newest cards: carded, failed, below their recall bar, hackable."""
    carded = cards.filter(pl.col("passed").is_not_null()) if cards.height else cards
    if not carded.height:
        return {"carded": 0, "failed": 0, "below_bar": 0, "hackable": 0, "skipped": cards.height}
    below = carded.filter(pl.col("recall") < pl.col("recall_bar")).height
    hackable = carded.filter((pl.col("fixed_families_paid").fill_null(0) + pl.col("hack_search_paid").fill_null(0)
                              + (pl.col("nop_paid").fill_null(0) > 0).cast(pl.Int64)) > 0).height
    return {"carded": carded.height, "failed": carded.filter(~pl.col("passed")).height, "below_bar": below,
            "hackable": hackable, "skipped": cards.height - carded.height}

