"""Batch gates for one domain partition: difficulty estimate, the GE suites, and what is stored.

:func:`evaluate_batch_gates` is what the ``gated_samples`` asset calls. The suites judge the
**incoming** batch only (:func:`quality.gate_history.incoming_batches`: the ingest batches no
evaluation has judged yet, or the latest evaluation's again when nothing new arrived): its
admitted rows (format), its admitted and quarantined rows (safety), the difficulty of its admitted
train rows (difficulty). Earlier batches never enter the verdict, so a bad old batch cannot fail
a good new one and a good history cannot hide a bad new one. The domain's history is reported
beside the verdict (``stats["history"]``: accepted, rejected and pending batches) with the
distribution drift of the incoming difficulties against the last accepted batch
(``stats["drift"]``; also the non-blocking ``warning`` quantile expectation of the difficulty
suite, the only place the last accepted batch is consulted).

Out-of-band train rows of each judged batch are quarantined as ``difficulty_out_of_band`` in the
batch ``ingest/domain=<d>/batch=difficulty-gate-<batch>/quarantine.parquet``, replaced when that
batch is judged again, so nothing is deleted and ``assay quarantine`` lists them. The evaluation
writes ``gate_results``, ``difficulty`` and ``gate_batches`` (``storage.tables``) under one
evaluation id, once: the environment self-test (:func:`selftest_outcomes`) runs first and is
stored with it as gate ``selftest``, and the MLflow runs (one per gate,
:func:`log_gate_evaluation`) are logged before the write, so their ids are in ``gate_results``
from the start. :func:`write_train_set` is what ``domain_train_set`` calls after the checks pass: the in-band
train rows of every accepted batch (:func:`train_set_rows`), refused while the latest evaluation
failed.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator

from quality import gate_history, reasons
from storage import tables
from quality.difficulty import QUANTILES, Band, estimate_difficulty, quantile_ranges, zero_signal_fraction
from quality.expectations import (ExpectationOutcome, difficulty_advice, gate_parameters, gate_severity,
                                  outcomes_markdown, run_suite)
from quality.gate_history import BATCH_KEY
from storage.lake import Lake

if TYPE_CHECKING:  # pragma: no cover - types only
    from storage.tracking import Tracker

SAFETY_CODES = (reasons.PII, reasons.SECRET, reasons.TOXIC, reasons.HARMFUL, reasons.PROMPT_INJECTION)


class GateSettings(BaseModel):
    """How a domain's batch gates are run (``gated_samples``'s config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    selftest_samples: int = Field(8, description="samples per split for the environment self-test "
                                                 "(quality.domain_check.check_domain)")
    log_to_mlflow: bool = Field(True, description="log one MLflow run per gate evaluation, with the validated dataset")

    @field_validator("selftest_samples")
    @classmethod
    def _some_samples(cls, value):
        if value < 1:
            raise ValueError(f"selftest_samples must be >= 1, got {value}; the self-test needs samples to check")
        return value


@dataclass
class GateEvaluation:
    domain: str
    evaluation: str
    evaluated_at: str
    outcomes: dict[str, list[ExpectationOutcome]]
    frames: dict[str, pl.DataFrame]              # the validated data per gate (logged to MLflow)
    difficulty: pl.DataFrame
    stats: dict[str, Any] = field(default_factory=dict)
    mlflow_runs: dict[str, str] = field(default_factory=dict)  # gate -> MLflow run id, when logged

    def severity(self, gate: str) -> str | None:
        return gate_severity(self.outcomes.get(gate, []))


def _admitted(lake: Lake, domain: str) -> pl.DataFrame:
    frame = lake.read("ingest", "samples", where={"domain": domain})
    return tables.conform(frame, tables.SAMPLES) if frame.height else tables.empty(tables.SAMPLES)


def _quarantined(lake: Lake, domain: str) -> pl.DataFrame:
    frame = lake.read("ingest", "quarantine", where={"domain": domain})
    if frame.height and "batch" in frame.columns:
        frame = frame.filter(~gate_history.gate_batch_expr())
    return tables.conform(frame, tables.QUARANTINE) if frame.height else tables.empty(tables.QUARANTINE)


def last_accepted_difficulty(lake: Lake, domain: str) -> tuple[str, pl.Series] | None:
    """(evaluation, difficulties) of the latest evaluation that passed and estimated any."""
    for verdict in reversed(gate_history.verdicts(lake, domain)):
        if not verdict.passed:
            continue
        frame = lake.read("difficulty", where={"domain": domain, "evaluation": verdict.evaluation})
        if frame.height:
            return verdict.evaluation, frame["difficulty"]
    return None


def _drift(incoming: pl.Series, previous: tuple[str, pl.Series] | None) -> dict | None:
    """Quantiles of the incoming difficulties next to the last accepted batch's (reported only)."""
    if previous is None or len(incoming) == 0:
        return None
    evaluation, before = previous
    now = [round(float(incoming.quantile(q, "linear")), 4) for q in QUANTILES]
    then = [round(float(before.quantile(q, "linear")), 4) for q in QUANTILES]
    return {"last_accepted_evaluation": evaluation, "quantiles": list(QUANTILES), "incoming": now,
            "last_accepted": then, "max_abs_shift": round(max(abs(a - b) for a, b in zip(now, then)), 4)}


def _history(status: pl.DataFrame, incoming: pl.DataFrame) -> dict:
    """The domain's other batches (not judged now), by status: reported, never judged again."""
    others = status.join(incoming.select(BATCH_KEY), on=BATCH_KEY, how="anti")
    out: dict[str, Any] = {}
    for name in ("accepted", "rejected", "pending"):
        mine = others.filter(pl.col("status") == name)
        out[f"{name}_batches"] = mine["batch"].to_list()
        out[f"{name}_admitted"] = int(mine["admitted"].sum()) if mine.height else 0
    accepted = others.filter(pl.col("status") == "accepted")
    out["accepted_train_rows"] = int(accepted["train_rows"].sum()) if accepted.height else 0
    return out


def _safety_frame(admitted: pl.DataFrame, quarantined: pl.DataFrame, domain: Any) -> pl.DataFrame:
    """Incoming rows with ``admitted_flagged`` (a re-scan of admitted rows by the rule-based
    safety detectors) and ``incoming_flagged`` (quarantined with a safety reason)."""
    from quality.detectors import PiiDetector, PromptInjectionDetector, SecretDetector
    from quality.row_gates import GateContext

    ctx = GateContext(domain=domain)
    rescan = pl.Series([False] * admitted.height, dtype=pl.Boolean)
    for det in (PiiDetector(), SecretDetector(), PromptInjectionDetector()):
        rescan = rescan | det.flags(admitted, ctx)
    adm = pl.DataFrame({"id": admitted["id"], "admitted_flagged": rescan, "incoming_flagged": 0.0})
    q_flag = quarantined["reasons"].list.eval(pl.element().is_in(list(SAFETY_CODES))).list.any() \
        if quarantined.height else pl.Series([], dtype=pl.Boolean)
    quar = pl.DataFrame({"id": quarantined["id"], "admitted_flagged": False,
                         "incoming_flagged": q_flag.cast(pl.Float64)})
    return pl.concat([adm, quar], how="vertical_relaxed")


def _skipped(gate: str, why: str) -> ExpectationOutcome:
    return ExpectationOutcome(gate=gate, expectation=f"skipped: {why}", severity="info", success=True,
                              observed="0", threshold="null", rows_checked=0, rows_failed=None, failed_ids=[])


def selftest_outcomes(domain: Any, n: int, *, corpus_rows: list[dict] | None = None) -> list[ExpectationOutcome]:
    """The environment self-test (:func:`quality.domain_check.check_domain` on ``n`` samples per
    split) as gate ``selftest`` outcomes: one per check, all critical. ``corpus_rows``: the
    domain's kept hacks (lake table ``hack_corpus``), replayed by its check ``hack_corpus``."""
    from quality.domain_check import check_domain

    report = check_domain(domain, n=n, corpus_rows=corpus_rows)
    return [ExpectationOutcome(
        gate="selftest", expectation=name, severity="critical", success=bool(check["passed"]),
        observed=json.dumps(check.get("detail", ""))[:2000], threshold='"passed"', rows_checked=None,
        rows_failed=None, failed_ids=[]) for name, check in report["checks"].items()]


def _difficulty_source(lake: Lake, domain: str) -> tuple[pl.DataFrame | None, dict]:
    """(policy rates or None, how the gate estimates difficulty) from the domain's current
    ``policy_difficulty`` measurement (written by :mod:`evaluation.policy_difficulty`, read through :mod:`quality.difficulty_measurements`); without one, the
    heuristic, said so."""
    from quality.difficulty_measurements import current_difficulty, measured_settings

    current = current_difficulty(lake, domain)
    settings = measured_settings(current)
    if settings is None:
        return None, {"estimate": "heuristic", "described": "heuristic (text features; no policy run): "
                      "policy_pass_rates was not materialized for this domain", "policy": None}
    if settings.estimate == "heuristic":
        return None, {"estimate": "heuristic", "described": settings.describe(), "policy": None}
    checkpoint = current["checkpoint"].drop_nulls()
    checkpoint = checkpoint[0] if len(checkpoint) else None
    return current.filter(pl.col("pass_rate").is_not_null()), {
        "estimate": "policy", "described": settings.describe(checkpoint), "policy": checkpoint,
        "measured_at": current["measured_at"][0]}


def _verdict_counts(diff: pl.DataFrame, band: Band) -> dict[str, int]:
    """in_band / too_easy / too_hard counts (difficulty below the band is too easy)."""
    if not diff.height:
        return {}
    easy = int((~diff["in_band"] & (diff["difficulty"] < band.low + 1e-9)).sum())
    inside = int(diff["in_band"].sum())
    return {"in_band": inside, "too_easy": easy, "too_hard": diff.height - inside - easy}


def evaluate_batch_gates(lake: Lake, domain: Any, evaluation: str | None = None, *,
                         extra_outcomes: dict[str, list[ExpectationOutcome]] | None = None,
                         selftest_samples: int | None = None, tracker: "Tracker | None" = None) -> GateEvaluation:
    """Judge the domain's incoming batch and store the evaluation.

    Difficulty: the domain's current ``policy_difficulty`` measurement (the ``policy_pass_rates``
    asset) when it has one: under the ``policy`` estimate every incoming train row is judged by its
    measured pass rate, and a row without one raises
    :class:`evaluation.policy_difficulty.DifficultyNotMeasured` (never a heuristic guess); under
    ``heuristic``, or with no measurement, the heuristic, said so in ``stats["difficulty_estimate"]``.

    ``selftest_samples``: also run the environment self-test (:func:`selftest_outcomes`) as gate
    ``selftest``. ``extra_outcomes``: outcomes of gates run elsewhere. Either is stored with this
    evaluation, so its verdict is complete the moment it is written. ``tracker``: log one MLflow
    run per gate first (:func:`log_gate_evaluation`), so ``gate_results`` is written once, with
    the run ids.
    """
    extra_outcomes = dict(extra_outcomes or {})
    if selftest_samples is not None:
        from quality.report_card.hack_corpus import read_corpus

        extra_outcomes["selftest"] = selftest_outcomes(domain, selftest_samples,
                                                       corpus_rows=read_corpus(lake, domain.name))
    now_dt = datetime.now(timezone.utc)
    evaluation = evaluation or f"{now_dt:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    now = now_dt.isoformat(timespec="microseconds")  # orders evaluations made within one second
    every_admitted, every_quarantined = _admitted(lake, domain.name), _quarantined(lake, domain.name)
    versions = gate_history.versions_of(every_admitted, every_quarantined)
    incoming = gate_history.incoming_batches(lake, domain.name, versions)
    status = gate_history.batch_status(lake, domain.name, versions)
    admitted = every_admitted.join(incoming.select(BATCH_KEY), on=BATCH_KEY, how="semi")
    quarantined = every_quarantined.join(incoming.select(BATCH_KEY), on=BATCH_KEY, how="semi")
    params = gate_parameters(domain)

    # difficulty of the incoming admitted train rows; out-of-band rows are quarantined (kept, not deleted)
    train = admitted.filter(pl.col("split") == "train")
    band = Band.for_domain(domain)
    policy_rates, estimate = _difficulty_source(lake, domain.name)
    params["difficulty_estimate"] = estimate["estimate"]
    try:
        diff = estimate_difficulty(domain, train, band, policy_rates=policy_rates)
    except KeyError as exc:
        from quality.difficulty_measurements import DifficultyNotMeasured

        raise DifficultyNotMeasured(
            f"domain {domain.name!r}: {exc.args[0]} under {estimate['described']}; materialize policy_pass_rates "
            f"for {domain.name!r} (it measures every admitted train row) before gated_samples") from None
    diff_table = diff.with_columns(pl.lit(domain.name).alias("domain"), pl.lit(now).alias("evaluated_at"),
                                   pl.lit(estimate["policy"], dtype=pl.Utf8).alias("policy"))
    diff_table = tables.conform(diff_table, tables.DIFFICULTY)
    previous = last_accepted_difficulty(lake, domain.name)
    params["quantile_ranges"] = quantile_ranges(previous[1] if previous else None,
                                                params["difficulty_quantile_tolerance"])

    frames = {
        "format": admitted,
        "safety": _safety_frame(admitted, quarantined, domain),
        "difficulty": diff.select("id", "difficulty", "pass_rate", pl.col("in_band").cast(pl.Float64).alias("in_band_num"),
                                  ((pl.col("difficulty") <= 1e-9) | (pl.col("difficulty") >= 1 - 1e-9))
                                  .cast(pl.Float64).alias("zero_signal")),
    }
    outcomes = {gate: run_suite(gate, frame.to_pandas(), params) for gate, frame in frames.items()
                if gate != "difficulty" or frame.height}
    if not train.height:  # e.g. a batch whose rows were all duplicates: nothing to estimate
        outcomes["difficulty"] = [_skipped("difficulty", "no admitted train rows in the incoming batch")]
    verdicts = _verdict_counts(diff, band)
    for outcome in outcomes.get("difficulty", []):
        outcome.message = difficulty_advice(outcome, params, verdicts)
    outcomes.update(extra_outcomes or {})

    out_of_band = train.join(diff.filter(~pl.col("in_band")).select("id"), on="id", how="semi")
    stats = {
        "admitted": admitted.height, "quarantined": quarantined.height, "train_rows": train.height,
        "in_band": int(diff["in_band"].sum()) if diff.height else 0, "out_of_band": out_of_band.height,
        "zero_signal_fraction": zero_signal_fraction(diff["difficulty"]),
        "difficulty_method": diff["method"][0] if diff.height else None,
        "difficulty_estimate": estimate, "verdicts": verdicts,
        "mean_pass_rate": float(diff["pass_rate"].mean()) if diff["pass_rate"].null_count() < diff.height else None,
        "band": [band.low, band.high], "previous_batch": previous is not None,
        "incoming_batches": incoming["batch"].to_list(),
        "history": _history(status, incoming),
        "drift": _drift(diff["difficulty"], previous),
    }
    result = GateEvaluation(domain.name, evaluation, now, outcomes, frames, diff_table, stats)
    if tracker is not None:
        result.mlflow_runs = log_gate_evaluation(result, tracker)
    _write(lake, result, incoming, train, out_of_band, now)
    return result


def log_gate_evaluation(result: GateEvaluation, tracker: "Tracker") -> dict[str, str]:
    """One MLflow run per gate of ``result`` in ``tracker``'s experiment: params domain and gate,
    metrics ``expectations_failed`` / ``expectations_total``, the validated frame as a dataset
    input, the outcomes as ``expectations.md``; ended FAILED when a critical expectation failed.
    Returns {gate: run id}."""
    run_ids = {}
    for gate, outcomes in result.outcomes.items():
        tags = {"assay.stage": "quality", "assay.domain": result.domain, "assay.gate": gate,
                "assay.evaluation": result.evaluation}
        with tracker.run(f"gate-{result.domain}-{gate}-{result.evaluation}",
                         params={"domain": result.domain, "gate": gate}, tags=tags):
            tracker.log_metrics(0, {"expectations_failed": sum(not o.success for o in outcomes),
                                    "expectations_total": len(outcomes)})
            frame = result.frames.get(gate)
            if frame is not None:
                tracker.log_dataset(frame, name=f"{result.domain}-{gate}-{result.evaluation}")
            tracker.log_text(outcomes_markdown(outcomes), "expectations.md")
            tracker.finish("FAILED" if gate_severity(outcomes) == "ERROR" else "FINISHED")
        run_ids[gate] = tracker.run_id
    return run_ids


def _write(lake: Lake, result: GateEvaluation, incoming: pl.DataFrame, train: pl.DataFrame,
           out_of_band: pl.DataFrame, now: str) -> None:
    rows = [{
        "domain": result.domain, "evaluation": result.evaluation, "gate": o.gate, "expectation": o.expectation,
        "severity": o.severity, "success": o.success, "observed": o.observed, "threshold": o.threshold,
        "rows_checked": o.rows_checked, "rows_failed": o.rows_failed, "evaluated_at": now,
        "mlflow_run_id": result.mlflow_runs.get(o.gate), "message": o.message or None,
    } for outcomes in result.outcomes.values() for o in outcomes]
    partition = {"domain": result.domain, "evaluation": result.evaluation}
    lake.write_batch("difficulty", partition, {"part": result.difficulty})
    # which batches were judged before the verdict itself: a reader never sees a verdict whose
    # batches are unknown
    gate_history.record_judged(lake, result.domain, result.evaluation, now, incoming)
    lake.write_batch("gate_results", partition, {"part": pl.DataFrame(rows, schema=tables.GATE_RESULTS)})
    for batch in train["batch"].unique().sort().to_list():
        mine = out_of_band.filter(pl.col("batch") == batch)
        quarantine = pl.DataFrame([{
            "domain": result.domain, "split": r["split"], "id": r["id"], "source": r["source"], "line": r["line"],
            "reasons": [reasons.DIFFICULTY_OUT_OF_BAND], "raw": r["prompt"], "prompt": r["prompt"],
            "answer": r["answer"], "metadata": r["metadata"], "batch": gate_history.difficulty_batch(batch),
            "ingested_at": now, "detail": f"difficulty outside the band in gate evaluation {result.evaluation}",
        } for r in mine.iter_rows(named=True)], schema=tables.QUARANTINE)
        lake.write_batch("ingest", {"domain": result.domain, "batch": gate_history.difficulty_batch(batch)},
                         {"quarantine": quarantine},
                         {"evaluation": result.evaluation, "source_batch": batch, "quarantined": quarantine.height})
    # the single whole-domain listing of earlier versions is superseded by the per-batch ones
    lake.delete_partition("ingest", {"domain": result.domain, "batch": gate_history.DIFFICULTY_BATCH})


class TrainSetError(RuntimeError):
    """A domain's train set cannot be built: no gate evaluation yet, or its latest one failed."""


@dataclass
class TrainSet:
    domain: str
    evaluation: str          # the passing evaluation it was built after
    rows: pl.DataFrame       # storage.tables.TRAIN_SET
    path: str
    accepted_batches: list[str]
    rejected_batches: list[str]


def write_train_set(lake: Lake, domain: str) -> TrainSet:
    """Replace lake table ``train_set`` for ``domain`` with the in-band train rows of its accepted
    batches (:func:`train_set_rows`), only when its latest gate evaluation passed and its newest
    report card, if any, did not fail: otherwise :class:`TrainSetError` says which gate failed."""
    from quality.report_card.card import card_problem

    card = card_problem(lake, domain)
    if card is not None:  # a verifier that refuses right answers or pays a hack trains nothing
        raise TrainSetError(card + "; not building its train set")
    latest = gate_history.latest_verdict(lake, domain)
    if latest is None:
        raise TrainSetError(f"domain {domain!r} has no gate results: materialize gated_samples for it first")
    if not latest.passed:
        raise TrainSetError(f"domain {domain!r}: latest batch failed gate {latest.describe()} "
                            f"(evaluation {latest.evaluation}); not building its train set")
    gated_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
    rows = train_set_rows(lake, domain, latest.evaluation, gated_at)
    path = lake.write_batch("train_set", {"domain": domain}, {"part": rows})
    status = gate_history.batch_status(lake, domain)
    return TrainSet(domain, latest.evaluation, rows, str(path),
                    status.filter(pl.col("status") == "accepted")["batch"].to_list(),
                    status.filter(pl.col("status") == "rejected")["batch"].to_list())


def train_set_rows(lake: Lake, domain: str, evaluation: str, gated_at: str) -> pl.DataFrame:
    """The in-band train rows of every accepted batch of ``domain`` (``tables.TRAIN_SET``),
    built after ``evaluation`` (the domain's latest, which passed).

    In band: when the domain's current ``policy_difficulty`` measurement is on a policy, by its
    verdicts (the latest pass rates of the current difficulty policy, re-measured when the champion
    changes), difficulty ``1 - pass rate``; an item it does not list is left out. Otherwise by the
    evaluation that accepted the row's batch, with that evaluation's difficulty."""
    admitted = _admitted(lake, domain).filter(pl.col("split") == "train")
    status = gate_history.batch_status(lake, domain)
    accepted = status.filter(pl.col("status") == "accepted").select(*BATCH_KEY, pl.col("evaluation").alias("judged_by"))
    rows = admitted.join(accepted, on=BATCH_KEY, how="inner")
    if rows.is_empty():
        return tables.empty(tables.TRAIN_SET)
    policy_rates, _ = _difficulty_source(lake, domain)
    if policy_rates is not None:
        current = policy_rates.filter(pl.col("verdict") == "in_band").select(
            "id", (1.0 - pl.col("pass_rate")).alias("difficulty"))
        rows = rows.join(current, on="id", how="inner").with_columns(
            pl.lit(evaluation).alias("evaluation"), pl.lit(gated_at).alias("gated_at"))
        return tables.conform(rows.sort("id"), tables.TRAIN_SET)
    diffs = [lake.read("difficulty", where={"domain": domain, "evaluation": e}).select(
        "id", "difficulty", "in_band", pl.lit(e).alias("judged_by")) for e in rows["judged_by"].unique().to_list()]
    diff = pl.concat([d for d in diffs if d.height]) if any(d.height for d in diffs) else None
    if diff is None:
        return tables.empty(tables.TRAIN_SET)
    rows = rows.join(diff.filter(pl.col("in_band")).select("id", "judged_by", "difficulty"),
                     on=["id", "judged_by"], how="inner")
    rows = rows.with_columns(pl.lit(evaluation).alias("evaluation"), pl.lit(gated_at).alias("gated_at"))
    return tables.conform(rows.sort("id"), tables.TRAIN_SET)
