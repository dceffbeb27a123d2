"""The gate record of a domain: which ingest batches each gate evaluation judged, what it decided.

An evaluation of the batch gates (:func:`quality.batch_gates.evaluate_batch_gates`) judges the
domain's **incoming** batches: the ingest batches that no evaluation has judged yet (a batch is
identified by its name and ``ingested_at``, so a batch replaced in place is new again), or, when
nothing new arrived, the batches of the latest evaluation once more (re-running the gates after
fixing a domain's thresholds or code re-judges the same data). It stores which batches it judged
(``gate_batches``) and one row per expectation (``gate_results``). An evaluation **passes** when
no critical expectation failed, in any gate.

The rules that follow, in one place:

- a batch is ``accepted`` when the latest evaluation that judged it passed, ``rejected`` when it
  failed, ``pending`` while no evaluation has judged it;
- a domain's train set holds the in-band train rows of its accepted batches and is built only
  after an evaluation that passed; training may use it only while that evaluation is still the
  domain's latest (:func:`train_set_problem`). So when the latest evaluation failed, the domain
  has no train set until a later evaluation passes: never the previous one, silently;
- a domain whose newest environment report card failed (``assay domains report``) may not be
  trained on either, whatever its gates said, until a card passes;
- rows of rejected batches do not count as already held by the lake (dedup, reused ids): a
  corrected file with the same ids can be ingested again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import polars as pl

from storage import tables
from storage.lake import Lake

TABLE = "gate_batches"
GATE_RESULTS = "gate_results"
DIFFICULTY_BATCH = "difficulty-gate"  # prefix of the batches holding difficulty_out_of_band rows
BATCH_KEY = ["batch", "ingested_at"]


def gate_batch_expr(column: str = "batch") -> pl.Expr:
    """True for a quarantine batch written by the difficulty gate, not by ingest."""
    return (pl.col(column) == DIFFICULTY_BATCH) | pl.col(column).str.starts_with(DIFFICULTY_BATCH + "-")


def difficulty_batch(source_batch: str) -> str:
    """The quarantine batch holding the out-of-band rows of ``source_batch``."""
    return f"{DIFFICULTY_BATCH}-{source_batch}"


@dataclass(frozen=True)
class Verdict:
    """What one evaluation decided: the critical expectations that failed (none: it passed)."""

    domain: str
    evaluation: str
    evaluated_at: str
    failures: tuple[tuple[str, str], ...] = ()  # (gate, expectation)
    advice: tuple[str, ...] = ()  # what to do about the failures (gate_results.message), when said

    @property
    def passed(self) -> bool:
        return not self.failures

    def failed_gates(self) -> list[str]:
        return sorted({gate for gate, _ in self.failures})

    def describe(self) -> str:
        """``format_gate (critical: expect_...), selftest_gate (critical: ...)``"""
        parts = []
        for gate in self.failed_gates():
            names = sorted({e for g, e in self.failures if g == gate})
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{gate}_gate (critical: {shown})")
        return ", ".join(parts) + (f" [{'; '.join(self.advice)}]" if self.advice else "")


def _scan(lake: Lake, table: str, columns: list[str], where: dict | None = None, name: str = "part",
          schema: dict | None = None) -> pl.DataFrame:
    """Only ``columns`` of a table's committed files, in one multi-file scan (a column a file
    lacks, e.g. one added later, reads as null; with ``schema``, the table's contract, even when
    no file has it yet)."""
    files = lake.files(table, name, where)
    if not files:
        return pl.DataFrame()
    given = {"schema": {c: schema[c] for c in columns}} if schema else {}
    return (pl.scan_parquet(files, hive_partitioning=False, missing_columns="insert", extra_columns="ignore", **given)
            .select(columns).collect())


def verdicts(lake: Lake, domain: str | None = None) -> list[Verdict]:
    """Every evaluation (of ``domain``, or of all domains), oldest first."""
    frame = _verdict_frame(lake, domain)
    return [Verdict(r["domain"], r["evaluation"], r["evaluated_at"], tuple(tuple(f) for f in r["failures"]),
                    tuple(r["advice"])) for r in frame.iter_rows(named=True)]


def _verdict_frame(lake: Lake, domain: str | None) -> pl.DataFrame:
    """domain, evaluation, evaluated_at, passed, failures [(gate, expectation)], rank (0 = oldest)."""
    frame = _scan(lake, GATE_RESULTS, ["domain", "evaluation", "gate", "expectation", "severity", "success",
                                       "evaluated_at", "message"], {"domain": domain} if domain else None,
                  schema=tables.GATE_RESULTS)  # message: absent from results written before it existed
    schema = {"domain": pl.Utf8, "evaluation": pl.Utf8, "evaluated_at": pl.Utf8, "passed": pl.Boolean,
              "failures": pl.List(pl.List(pl.Utf8)), "rank": pl.Int64, "advice": pl.List(pl.Utf8)}
    if frame.is_empty():
        return pl.DataFrame(schema=schema)
    critical = (pl.col("severity") == "critical") & ~pl.col("success")
    out = (frame.group_by("domain", "evaluation")
           .agg(pl.col("evaluated_at").max(),
                pl.concat_list("gate", "expectation").filter(critical).unique().sort().alias("failures"),
                pl.col("message").filter(critical & pl.col("message").is_not_null()).unique().sort().alias("advice"))
           .with_columns((pl.col("failures").list.len() == 0).alias("passed"))
           .sort("evaluated_at", "evaluation"))
    return out.with_row_index("rank").with_columns(pl.col("rank").cast(pl.Int64)).select(list(schema))


def latest_verdict(lake: Lake, domain: str) -> Verdict | None:
    found = verdicts(lake, domain)
    return found[-1] if found else None


def versions_of(samples: pl.DataFrame, quarantine: pl.DataFrame) -> pl.DataFrame:
    """The ingest batches present in ``samples``/``quarantine`` rows: batch, ingested_at,
    admitted, train_rows, quarantined (the difficulty gate's own batches left out)."""
    parts = []
    if samples.height:
        parts.append(samples.select(*BATCH_KEY, pl.lit(1).alias("admitted"),
                                    (pl.col("split") == "train").cast(pl.Int64).alias("train_rows"),
                                    pl.lit(0).alias("quarantined")))
    if quarantine.height:
        parts.append(quarantine.select(*BATCH_KEY, pl.lit(0).alias("admitted"), pl.lit(0, pl.Int64).alias("train_rows"),
                                       pl.lit(1).alias("quarantined")))
    schema = {"batch": pl.Utf8, "ingested_at": pl.Utf8, "admitted": pl.Int64, "train_rows": pl.Int64,
              "quarantined": pl.Int64}
    if not parts:
        return pl.DataFrame(schema=schema)
    rows = pl.concat([p.cast(schema) for p in parts])
    rows = rows.filter(~gate_batch_expr())
    return rows.group_by(BATCH_KEY).agg(pl.col("admitted", "train_rows", "quarantined").sum()).sort(["ingested_at", "batch"])


def batch_versions(lake: Lake, domain: str) -> pl.DataFrame:
    """The domain's ingest batches now in the lake (see :func:`versions_of`)."""
    samples = _scan(lake, "ingest", ["batch", "ingested_at", "split"], {"domain": domain}, "samples")
    quarantine = _scan(lake, "ingest", ["batch", "ingested_at"], {"domain": domain}, "quarantine")
    return versions_of(samples, quarantine)


def judged_batches(lake: Lake, domain: str | None = None) -> pl.DataFrame:
    """``gate_batches`` rows: which batch versions each evaluation judged."""
    frame = _scan(lake, TABLE, list(tables.GATE_BATCHES), {"domain": domain} if domain else None)
    return tables.conform(frame, tables.GATE_BATCHES) if frame.height else tables.empty(tables.GATE_BATCHES)


def incoming_batches(lake: Lake, domain: str, versions: pl.DataFrame) -> pl.DataFrame:
    """The batch versions the next evaluation judges: those no evaluation judged yet, else the
    latest evaluation's (a re-evaluation), else (a lake from before ``gate_batches``) all."""
    judged = judged_batches(lake, domain)
    new = versions.join(judged.select(BATCH_KEY).unique(), on=BATCH_KEY, how="anti")
    if new.height or judged.is_empty():
        return new if new.height else versions
    latest = latest_verdict(lake, domain)
    again = judged.filter(pl.col("evaluation") == (latest.evaluation if latest else None)).select(BATCH_KEY)
    return versions.join(again, on=BATCH_KEY, how="semi")


def batch_status(lake: Lake, domain: str, versions: pl.DataFrame | None = None) -> pl.DataFrame:
    """Each batch version now in the lake with ``status`` (accepted | rejected | pending) and the
    ``evaluation`` that last judged it (null while pending)."""
    versions = batch_versions(lake, domain) if versions is None else versions
    decided = _decisions(lake, domain)
    out = versions.join(decided, on=BATCH_KEY, how="left")
    return out.with_columns(pl.when(pl.col("evaluation").is_null()).then(pl.lit("pending"))
                            .when(pl.col("passed")).then(pl.lit("accepted")).otherwise(pl.lit("rejected"))
                            .alias("status")).drop("passed")


def _decisions(lake: Lake, domain: str | None) -> pl.DataFrame:
    """(domain,) batch, ingested_at -> the latest evaluation that judged it and whether it passed."""
    judged = judged_batches(lake, domain).select("domain", "evaluation", *BATCH_KEY)
    decided = judged.join(_verdict_frame(lake, domain).select("domain", "evaluation", "passed", "rank"),
                          on=["domain", "evaluation"], how="inner")  # a record whose verdict is not written yet: none
    latest = (decided.sort("rank").group_by(["domain", *BATCH_KEY], maintain_order=True).last()
              .select("domain", *BATCH_KEY, "evaluation", "passed"))
    return latest.drop("domain") if domain is not None else latest


def rejected_batches(lake: Lake) -> pl.DataFrame:
    """domain, batch, ingested_at of every batch whose latest judging evaluation failed."""
    decided = _decisions(lake, None)
    return decided.filter(~pl.col("passed")).select("domain", *BATCH_KEY)


def record_judged(lake: Lake, domain: str, evaluation: str, evaluated_at: str, judged: pl.DataFrame) -> Path:
    """Store which batch versions ``evaluation`` judged (``tables.GATE_BATCHES``)."""
    frame = judged.select(*BATCH_KEY, "admitted", "quarantined").with_columns(
        pl.lit(domain).alias("domain"), pl.lit(evaluation).alias("evaluation"), pl.lit(evaluated_at).alias("evaluated_at"))
    return lake.write_batch(TABLE, {"domain": domain, "evaluation": evaluation},
                            {"part": tables.conform(frame, tables.GATE_BATCHES)})


def train_set_problem(lake: Lake, domain: str, train_set_evaluations: list[str] | None) -> str | None:
    """Why the domain's stored train set may not be trained on, or None when it may.

    ``train_set_evaluations``: the distinct ``evaluation`` values of its train_set rows (None or
    empty when it has none). The rule: the latest evaluation passed and the train set was built
    after it, and the domain's newest environment report card, if it has one, did not fail
    (:func:`quality.report_card.card.card_problem`: a verifier that refuses right answers or pays a
    hack must not train a policy).
    """
    from quality.report_card.card import card_problem

    card = card_problem(lake, domain)
    if card is not None:
        return card
    latest = latest_verdict(lake, domain)
    if latest is None:
        if train_set_evaluations:
            return (f"domain {domain!r} has a train_set but no gate results: it was not built by the gates; "
                    f"materialize gated_samples and domain_train_set for {domain!r}")
        return None
    if not latest.passed:
        return (f"domain {domain}: latest batch failed gate {latest.describe()} (evaluation {latest.evaluation}); "
                f"fix the data and re-run the gates (ingest a corrected batch, materialize gated_samples for {domain!r})")
    if not train_set_evaluations:
        return (f"domain {domain!r} passed its gates (evaluation {latest.evaluation}) but has no train_set rows: "
                f"materialize domain_train_set for {domain!r} (if it stays empty, no train row is in the "
                "difficulty band: see its gate results)")
    if set(train_set_evaluations) != {latest.evaluation}:
        return (f"domain {domain!r}: its train_set was built after gate evaluation "
                f"{', '.join(sorted(set(train_set_evaluations)))}, not the latest ({latest.evaluation}): "
                f"materialize domain_train_set for {domain!r}")
    return None
