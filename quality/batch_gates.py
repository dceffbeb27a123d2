"""Batch gates for one domain partition: difficulty estimate, the GE suites, and what is stored.

:func:`evaluate_batch_gates` is what the ``gated_samples`` asset calls. It reads the domain's
admitted and quarantined rows from the lake, estimates difficulty for the admitted train rows,
quarantines the out-of-band ones (``difficulty_out_of_band``, in the batch
``ingest/domain=<d>/batch=difficulty-gate/quarantine.parquet``, replaced on each evaluation, so
nothing is deleted and ``assay quarantine`` lists them), runs the format/safety/difficulty
suites, and writes ``gate_results`` and ``difficulty`` (``quality.lake_tables``) under one
evaluation id. :func:`train_set_rows` is what ``domain_train_set`` writes after the checks pass.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import polars as pl

from quality import lake_tables, reasons
from quality.difficulty import Band, estimate_difficulty, quantile_ranges, zero_signal_fraction
from quality.expectations import ExpectationOutcome, gate_parameters, gate_severity, run_suite
from quality.lake import Lake

SAFETY_CODES = (reasons.PII, reasons.SECRET, reasons.TOXIC, reasons.HARMFUL, reasons.PROMPT_INJECTION)
DIFFICULTY_BATCH = "difficulty-gate"


@dataclass
class GateEvaluation:
    domain: str
    evaluation: str
    evaluated_at: str
    outcomes: dict[str, list[ExpectationOutcome]]
    frames: dict[str, pl.DataFrame]              # the validated data per gate (logged to MLflow)
    difficulty: pl.DataFrame
    stats: dict[str, Any] = field(default_factory=dict)

    def severity(self, gate: str) -> str | None:
        return gate_severity(self.outcomes.get(gate, []))


def _admitted(lake: Lake, domain: str) -> pl.DataFrame:
    frame = lake.read("ingest", "samples", where={"domain": domain})
    return lake_tables.conform(frame, lake_tables.SAMPLES) if frame.height else lake_tables.empty(lake_tables.SAMPLES)


def _quarantined(lake: Lake, domain: str) -> pl.DataFrame:
    frame = lake.read("ingest", "quarantine", where={"domain": domain})
    if frame.height and "batch" in frame.columns:
        frame = frame.filter(pl.col("batch") != DIFFICULTY_BATCH)
    return lake_tables.conform(frame, lake_tables.QUARANTINE) if frame.height else lake_tables.empty(lake_tables.QUARANTINE)


def last_accepted_difficulty(lake: Lake, domain: str) -> pl.Series | None:
    """Difficulties of the latest evaluation whose difficulty gate had no critical failure."""
    results = lake.read("gate_results", where={"domain": domain})
    if results.is_empty():
        return None
    ok = (results.filter(pl.col("gate") == "difficulty")
          .group_by("evaluation", "evaluated_at")
          .agg(((pl.col("severity") == "critical") & ~pl.col("success")).any().alias("failed"))
          .filter(~pl.col("failed")).sort("evaluated_at"))
    if ok.is_empty():
        return None
    latest = ok["evaluation"][-1]
    frame = lake.read("difficulty", where={"domain": domain, "evaluation": latest})
    return frame["difficulty"] if frame.height else None


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


def evaluate_batch_gates(lake: Lake, domain: Any, evaluation: str | None = None) -> GateEvaluation:
    evaluation = evaluation or f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    admitted, quarantined = _admitted(lake, domain.name), _quarantined(lake, domain.name)
    params = gate_parameters(domain)

    # difficulty of the admitted train rows; out-of-band rows are quarantined (kept, not deleted)
    train = admitted.filter(pl.col("split") == "train")
    band = Band.for_domain(domain)
    diff = estimate_difficulty(domain, train, band)
    diff_table = diff.with_columns(pl.lit(domain.name).alias("domain"), pl.lit(now).alias("evaluated_at"))
    diff_table = lake_tables.conform(diff_table, lake_tables.DIFFICULTY)
    previous = last_accepted_difficulty(lake, domain.name)
    params["quantile_ranges"] = quantile_ranges(previous, params["difficulty_quantile_tolerance"])

    frames = {
        "format": admitted,
        "safety": _safety_frame(admitted, quarantined, domain),
        "difficulty": diff.select("id", "difficulty", pl.col("in_band").cast(pl.Float64).alias("in_band_num"),
                                  ((pl.col("difficulty") <= 1e-9) | (pl.col("difficulty") >= 1 - 1e-9))
                                  .cast(pl.Float64).alias("zero_signal")),
    }
    outcomes = {gate: run_suite(gate, frame.to_pandas(), params) for gate, frame in frames.items()}

    out_of_band = train.join(diff.filter(~pl.col("in_band")).select("id"), on="id", how="semi")
    stats = {
        "admitted": admitted.height, "quarantined": quarantined.height, "train_rows": train.height,
        "in_band": int(diff["in_band"].sum()) if diff.height else 0, "out_of_band": out_of_band.height,
        "zero_signal_fraction": zero_signal_fraction(diff["difficulty"]),
        "difficulty_method": diff["method"][0] if diff.height else None,
        "band": [band.low, band.high], "previous_batch": previous is not None,
    }
    result = GateEvaluation(domain.name, evaluation, now, outcomes, frames, diff_table, stats)
    _write(lake, result, out_of_band, now)
    return result


def _write(lake: Lake, result: GateEvaluation, out_of_band: pl.DataFrame, now: str) -> None:
    rows = [{
        "domain": result.domain, "evaluation": result.evaluation, "gate": o.gate, "expectation": o.expectation,
        "severity": o.severity, "success": o.success, "observed": o.observed, "threshold": o.threshold,
        "rows_checked": o.rows_checked, "rows_failed": o.rows_failed, "evaluated_at": now,
        "mlflow_run_id": result.stats.get("mlflow_run_ids", {}).get(o.gate),
    } for outcomes in result.outcomes.values() for o in outcomes]
    partition = {"domain": result.domain, "evaluation": result.evaluation}
    lake.write_batch("gate_results", partition, {"part": pl.DataFrame(rows, schema=lake_tables.GATE_RESULTS)})
    lake.write_batch("difficulty", partition, {"part": result.difficulty})
    quarantine = pl.DataFrame([{
        "domain": result.domain, "split": r["split"], "id": r["id"], "source": r["source"], "line": r["line"],
        "reasons": [reasons.DIFFICULTY_OUT_OF_BAND], "raw": r["prompt"], "prompt": r["prompt"],
        "answer": r["answer"], "metadata": r["metadata"], "batch": DIFFICULTY_BATCH, "ingested_at": now,
    } for r in out_of_band.iter_rows(named=True)], schema=lake_tables.QUARANTINE)
    lake.write_batch("ingest", {"domain": result.domain, "batch": DIFFICULTY_BATCH}, {"quarantine": quarantine},
                     {"evaluation": result.evaluation, "quarantined": quarantine.height})


def record_mlflow_runs(lake: Lake, result: GateEvaluation, run_ids: dict[str, str]) -> None:
    """Store the MLflow run id of each gate in ``gate_results`` (rewrites this evaluation's file)."""
    partition = {"domain": result.domain, "evaluation": result.evaluation}
    frame = lake.read("gate_results", where=partition)
    if frame.height:
        frame = frame.with_columns(pl.col("gate").replace_strict(run_ids, default=None).alias("mlflow_run_id"))
        lake.write_batch("gate_results", partition, {"part": lake_tables.conform(frame, lake_tables.GATE_RESULTS)})


def train_set_rows(lake: Lake, domain: str, evaluation: str, gated_at: str) -> pl.DataFrame:
    """Admitted, in-band train rows of ``evaluation`` (``lake_tables.TRAIN_SET``)."""
    admitted = _admitted(lake, domain).filter(pl.col("split") == "train")
    diff = lake.read("difficulty", where={"domain": domain, "evaluation": evaluation})
    if admitted.is_empty() or diff.is_empty():
        return lake_tables.empty(lake_tables.TRAIN_SET)
    rows = admitted.join(diff.filter(pl.col("in_band")).select("id", "difficulty"), on="id", how="inner")
    rows = rows.with_columns(pl.lit(evaluation).alias("evaluation"), pl.lit(gated_at).alias("gated_at"))
    return lake_tables.conform(rows, lake_tables.TRAIN_SET)
