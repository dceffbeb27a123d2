"""Cached readers for the pages: each opens only the lake views it needs (see ``ui.queries``).

``st.cache_data`` with a TTL keeps a page fast on reruns (every widget change reruns the script)
and still picks up new sweeps within a minute; the sidebar's *Reload data* clears it at once. The
MLflow client is one per tracking URI (``st.cache_resource``). Nothing here creates files: the
lake and the MLflow store are only read (a missing store is reported, not created).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import streamlit as st

from evaluation import domain_catalog
from evaluation.results import compared_rows
from storage import tracking
from storage.deployment import redacted
from storage.lake import Lake, resolve_home
from ui import queries as Q

TTL_S = 60
MTIME_SLACK_S = 120  # file-time pruning margin (coarse file-system clocks, writers on other hosts)
HOME_KEY = "assay_home"
DOMAINS_PATH_KEY = "assay_domains_path"


def current_home() -> str:
    """ASSAY_HOME as resolved by the router at app start (a page run on its own resolves it)."""
    if HOME_KEY not in st.session_state:
        st.session_state[HOME_KEY] = str(resolve_home())
    return st.session_state[HOME_KEY]


def current_domains_path() -> str | None:
    """``$ASSAY_DOMAINS_PATH`` (the plugin folders of the registry) as read at app start."""
    if DOMAINS_PATH_KEY not in st.session_state:
        st.session_state[DOMAINS_PATH_KEY] = domain_catalog.domains_path()
    return st.session_state[DOMAINS_PATH_KEY]


def mlflow_store(lake) -> tuple[bool, str]:
    """Whether the lake's MLflow store exists, and how to name it on a page: the SQLite file
    (local profile), else the server and database without credentials (team profile)."""
    uri = lake.mlflow_uri
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
        return path.exists(), str(path)
    return True, redacted(uri)


def mlflow_ui_store(home: str) -> str:
    """The ``--backend-store-uri`` to give ``mlflow ui`` for this lake (no password)."""
    return redacted(_lake(home).mlflow_uri)


def _lake(home: str) -> Lake:
    from storage.deployment import open_lake

    return open_lake(Path(home))  # for reading: creates no folders


@st.cache_resource(show_spinner=False)
def _catalog(domains_path: str | None) -> domain_catalog.Catalog:
    return domain_catalog.catalog(domains_path)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _registry_frame(domains_path: str | None) -> pl.DataFrame:
    return _catalog(domains_path).domains


def registry_frame() -> pl.DataFrame:
    """Owners, tags and protection of every registered domain (built-ins and plugins)."""
    return _registry_frame(current_domains_path())


def registry_errors() -> list[str]:
    return list(_catalog(current_domains_path()).errors)


def reward_bar_shortfall(domain: str, gate: pl.DataFrame) -> list[str]:
    """Where the newest reward-gate check of ``domain`` (its rows) fell short of the bar the domain
    declares: a passed check at a laxer bar does not let GRPO train on it."""
    return domain_catalog.reward_bar_shortfall(_catalog(current_domains_path()), domain, gate.to_dicts())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def lake_tables(home: str) -> list[str]:
    return _lake(home).tables()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def overview(home: str, recent: int) -> dict:
    """Heatmap cells of the recent candidates, comparisons, gate failures in the last day."""
    since = Q.last_day(datetime.now(timezone.utc))
    lake = _lake(home)
    con = Q.open_views(lake, ["regression", "promotions", "gate_results"],
                       modified_since={"gate_results": since.timestamp() - MTIME_SLACK_S})
    try:
        return {
            "cells": Q.recent_cells(con, recent),
            "failures": Q.gate_failures_since(con, since),
            "since": since,
            "has_gates": Q.has_view(con, "gate_results") or bool(lake.files("gate_results")),
        }
    finally:
        con.close()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def champion(home: str) -> dict:
    """The champion: the MLflow alias ``champion`` (:func:`storage.tracking.current_champion`, the
    one source of truth), checked against the lake's last promotion record
    (:func:`ui.queries.reconcile_champion`: ``name``, ``source``, ``recorded``, ``warning``)."""
    lake = _lake(home)
    con = Q.open_views(lake, ["promotions"])
    try:
        recorded = Q.last_promotion(con)
    finally:
        con.close()
    found, store = mlflow_store(lake)
    if not found:
        return Q.reconcile_champion(None, recorded, store_error=f"no MLflow store at {store}")
    try:
        alias = tracking.current_champion(lake.mlflow_uri)
    except Exception as exc:  # shown on the page: an unreadable store is not a crash of the page
        return Q.reconcile_champion(None, recorded, store_error=f"cannot read the champion alias from {store}: "
                                                                f"{type(exc).__name__}: {exc}")
    return Q.reconcile_champion(alias, recorded)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def regressions(home: str) -> dict:
    con = Q.open_views(_lake(home), ["regression", "promotions"])
    try:
        listing = Q.comparisons(con)
        rows = {}
        for cand, base in listing.select("candidate", "baseline").iter_rows() if listing.height else []:
            rows[(cand, base)] = Q.comparison_rows(con, cand, base)
        decisions = {cand: Q.promotion_of(con, cand) for cand in (listing["candidate"].unique().to_list()
                                                                 if listing.height else [])}
        return {"comparisons": listing, "rows": rows, "decisions": decisions}
    finally:
        con.close()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _promotion_policy(home: str, domains_path: str | None) -> dict:
    from evaluation.promotion_policy import PolicyError, load_policy

    try:
        active = load_policy(home)
    except PolicyError as exc:
        return {"error": str(exc)}
    registry = _registry_frame(domains_path)
    names = registry["domain"].to_list() if registry.height else []
    marked = registry.filter(pl.col("protected"))["domain"].to_list() if registry.height else []
    protected = active.policy.protected_domains(marked, names)
    return {"source": active.source, "lines": active.describe(protected), "policy": active.to_json()}


def promotion_policy(home: str) -> dict:
    """The promotion policy in force for ``home`` (evaluation.promotion_policy): its source file and
    short lines for a person, the protected set resolved against the registry; or ``error``."""
    return _promotion_policy(home, current_domains_path())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def domain_detail(home: str, domain: str) -> dict:
    """Everything the domain page shows; reads only this domain's partitions where the layout allows."""
    lake = _lake(home)
    mine = [{"domain": domain}]
    con = Q.open_views(lake, {"gate_results": mine, "difficulty": mine, "samples": mine, "quarantine": mine,
                              "sweep_summary": mine, "reward_attacks": mine, "reward_gates": mine,
                              "checkpoints": None, "regression": None})
    try:
        verdict = Q.latest_regression(con, domain)
        detail = {
            "gates": Q.gate_history(con, domain),
            "failed": Q.failed_expectations(con, domain),
            "ingest": Q.ingest_counts(con, domain),
            "reasons": Q.quarantine_reasons_over_time(con, domain),
            "quarantined": Q.quarantined_rows(con, domain),
            "difficulty": Q.difficulty_latest(con, domain),
            "attacks": Q.latest_reward_attacks(con, domain),
            "reward_gate": Q.latest_reward_gate(con, domain),
            "trend": Q.score_trend(con, domain),
            "verdict": verdict,
            "items": pl.DataFrame(),
        }
    finally:
        con.close()
    if verdict:  # the rows the comparison used, read by evaluation's one reader of results
        cand_rows, base_rows = compared_rows(lake, verdict["candidate"], verdict["baseline"], domain,
                                             verdict.get("gen_config"))
        con = Q.open_views(lake, {"samples": mine})
        try:
            detail["items"] = Q.item_changes(con, domain, base_rows, cand_rows)
        finally:
            con.close()
    return detail


def length_siblings(registry: pl.DataFrame, domain: str) -> pl.DataFrame:
    """(domain, context_tokens) of the length buckets of ``domain``'s family (``long_needle_4k`` ->
    every ``long_needle_<bucket>``), shortest first; empty when ``domain`` declares no bucket."""
    if not registry.height or "context_tokens" not in registry.columns:
        return pl.DataFrame(schema={"domain": pl.Utf8, "context_tokens": pl.Int64})
    mine = registry.filter(pl.col("domain") == domain)
    if not mine.height or mine["context_tokens"][0] is None:
        return pl.DataFrame(schema={"domain": pl.Utf8, "context_tokens": pl.Int64})
    family = domain.rsplit("_", 1)[0]
    return (registry.filter(pl.col("context_tokens").is_not_null()
                            & (pl.col("domain").str.replace(r"_[^_]+$", "") == family))
            .select("domain", "context_tokens").sort("context_tokens"))


@st.cache_data(ttl=30, show_spinner=False)
def score_by_length(home: str, buckets: tuple[tuple[str, int], ...]) -> pl.DataFrame:
    """Each checkpoint's latest sweep score per length bucket ``(domain, context_tokens)`` of one
    family (the "score vs context length" curve), with the sweep's CI."""
    lake = _lake(home)
    names = [name for name, _ in buckets]
    con = Q.open_views(lake, {"sweep_summary": [{"domain": d} for d in names], "checkpoints": None})
    try:
        scores = Q.latest_scores(con, names)
    finally:
        con.close()
    lengths = pl.DataFrame(list(buckets), schema={"domain": pl.Utf8, "context_tokens": pl.Int64}, orient="row")
    return scores.join(lengths, on="domain") if scores.height else scores


def difficulty_band(domain: str) -> tuple[float, float]:
    """The domain's difficulty band ``(difficulty_min, difficulty_max)``: its ``gate_thresholds``
    overrides when the registry knows it, else the gate's defaults (evaluation.domain_catalog)."""
    return _catalog(current_domains_path()).band(domain)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def _pass_rate_view(home: str, domain: str, champion: str | None, band: tuple[float, float]) -> dict:
    lake = _lake(home)
    con = Q.open_views(lake, {"pass_rates": [{"domain": domain}], "promotions": None, "checkpoints": None})
    try:
        rows = Q.pass_rate_rows(con, domain)
        champions, saved = Q.champion_history(con), Q.checkpoint_times(con)
    finally:
        con.close()
    items, per_checkpoint = Q.pass_rate_panels(rows, champions, saved, champion, band)
    return {"items": items, "checkpoints": per_checkpoint, "band": band}


def pass_rate_view(home: str, domain: str, champion: str | None) -> dict:
    """Difficulty measured on the policy for the domain page (read only there: the overview never
    lists ``pass_rates``): ``items`` and ``checkpoints`` of :func:`ui.queries.pass_rate_panels`
    against the domain's band, and the ``band``."""
    return _pass_rate_view(home, domain, champion, difficulty_band(domain))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def domains_in_lake(home: str) -> list[str]:
    """Domains that have a partition in any table the dashboard reads (folder names only)."""
    lake = _lake(home)
    names = set()
    for table in ("ingest", "gate_results", "difficulty", "train_set"):
        names.update(lake.partition_values(table, "domain"))
    con = Q.open_views(lake, ["regression"])
    try:
        names.update(Q.lake_domains(con, ["regression"]))
    finally:
        con.close()
    return sorted(names)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def variants(home: str) -> dict:
    """Each variant's newest certification (``variants``), the per-domain tests of those decisions
    (``domains``: only their partitions are read, not every certification ever run) and the lake's
    record of which variant holds the ``fast`` alias (``fast``, or None)."""
    lake = _lake(home)
    con = Q.open_views(lake, ["variants"])
    try:
        latest, holder = Q.latest_variants(con), Q.fast_alias_holder(con)
    finally:
        con.close()
    decisions = latest["decision"].to_list()
    con = Q.open_views(lake, {"variant_domains": [{"decision": d} for d in decisions]} if decisions else [])
    try:
        domains = Q.variant_domain_rows(con, decisions)
    finally:
        con.close()
    return {"variants": latest, "domains": domains, "fast": holder}


@st.cache_data(ttl=TTL_S, show_spinner=False)
def training(home: str) -> dict:
    con = Q.open_views(_lake(home), ["training_history"])
    try:
        runs = Q.training_runs(con)
        curves = {run: Q.training_curves(con, run) for run in (runs["run_id"].to_list() if runs.height else [])}
        return {"runs": runs, "curves": curves}
    finally:
        con.close()


@st.cache_resource(show_spinner=False)
def mlflow_client(tracking_uri: str):
    return tracking.client(tracking_uri)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def mlflow_run(home: str, run_id: str) -> dict:
    """Name, status, experiment, params and a link for an MLflow run; ``error`` says why not."""
    lake = _lake(home)
    found, store = mlflow_store(lake)
    if not found:
        return {"error": f"no MLflow store at {store}: run `make demo` (training logs its runs there)"}
    try:
        run = mlflow_client(lake.mlflow_uri).get_run(run_id)
    except Exception as exc:  # shown to the user as is: a missing run is not a crash of the page
        return {"error": f"MLflow has no run {run_id!r} in {store}: {type(exc).__name__}: {exc}"}
    return {
        "run_id": run_id, "name": run.info.run_name, "status": run.info.status,
        "experiment_id": run.info.experiment_id, "params": dict(run.data.params),
        "metrics": dict(run.data.metrics), "tags": dict(run.data.tags),
        "url": tracking.run_url(run.info.experiment_id, run_id),
        "start": datetime.fromtimestamp(run.info.start_time / 1000, timezone.utc).isoformat(timespec="seconds")
        if run.info.start_time else None,
    }


def reload_all() -> None:
    st.cache_data.clear()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def report_cards(home: str) -> pl.DataFrame:
    """The newest environment report card of every domain, worst first (``ui.queries``)."""
    con = Q.open_views(_lake(home), ["report_cards"])
    try:
        return Q.latest_report_cards(con)
    finally:
        con.close()

