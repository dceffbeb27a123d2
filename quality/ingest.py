"""Ingest: rows in, admitted rows and quarantined rows out, committed to the lake as one batch.

An ingest run of several batches (a domain's generated eval and train splits, several domains'
at once: :func:`ingest_generated_many`) holds them in an :class:`IngestUnit` and commits them as
one ``write_batches`` unit: on the team lake one Iceberg commit for all of them (readers see all
or none; a lost race redoes the whole unit), on the local lake one atomic folder rename each, all
after the last batch was gated. A run killed before that commit leaves none of the unit's batches;
running it again ingests all of them. Batches held in a unit count as already admitted for the
gates of the batches after them (``GateContext.pending``), so a unit gates exactly like the same
batches written one after another.

The path is the same for user files (``assay ingest``) and for a domain's generated samples (the
Dagster ingest asset): structural checks on each raw record, then the row gates
(:mod:`quality.row_gates`) on the structurally valid rows, then one atomic batch write. The
invariant ``received == admitted + quarantined`` holds by construction: every record ends in
exactly one of the two tables, and a quarantined row keeps its original text, source, line and
every reason that applies.

Ids are unique within a domain: a row whose explicit ``id`` the domain already holds (an admitted
row of another batch, or an earlier row of this batch) is quarantined as ``duplicate``, whatever
its content, with a ``detail`` that names the earlier batch and says whether the content
differs. Re-ingesting the same file therefore quarantines every row of the second copy. Rows of a
batch the batch gates rejected do not count as held (:mod:`quality.detectors.admitted`), so a
corrected file with the same ids can be ingested again.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field, field_validator

from domains.base import SPLITS, Domain
from quality import reasons
from storage import tables
from quality.detectors.admitted import admitted_rows as lake_admitted_rows
from storage.lake import Lake
from quality.normalize import content_hash, stable_id
from storage.readers import RawRecord, read_records
from quality.row_gates import GateContext, RowGate, default_row_gates

TEXT_FIELDS = ("prompt", "answer")

SAMPLES_SCHEMA = tables.SAMPLES
QUARANTINE_SCHEMA = tables.QUARANTINE


@dataclass
class IngestReport:
    domain: str
    received: int
    admitted: int
    quarantined: int
    reasons: dict[str, int]
    batch: str
    source: str
    path: str | None = None
    preview: list[dict] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The CLI contract: ``{"domain","received","admitted","quarantined","reasons"}``."""
        return {"domain": self.domain, "received": self.received, "admitted": self.admitted,
                "quarantined": self.quarantined, "reasons": dict(sorted(self.reasons.items()))}


@dataclass
class _Candidate:
    record: RawRecord
    reasons: list[str]
    id: str
    split: str
    prompt: str | None
    answer: str | None
    metadata: dict | None


def _structural(record: RawRecord, domain: str, source: str, default_split: str) -> _Candidate:
    """Structural reasons for one record: malformed, missing_field, empty_field."""
    fallback_id = stable_id(domain, source, str(record.line), record.raw)
    if record.error is not None or not isinstance(record.value, dict):
        return _Candidate(record, [reasons.MALFORMED], fallback_id, default_split, None, None, None)
    row = record.value
    found: list[str] = []
    fields: dict[str, str | None] = {}
    for name in TEXT_FIELDS:
        value = row.get(name)
        if name not in row or value is None:
            found.append(reasons.MISSING_FIELD)
            fields[name] = None
        elif not isinstance(value, str):
            found.append(reasons.MALFORMED)
            fields[name] = None
        elif not value.strip():
            found.append(reasons.EMPTY_FIELD)
            fields[name] = value
        else:
            fields[name] = value
    row_id = row.get("id")
    if row_id is None or (isinstance(row_id, str) and not row_id.strip()):
        row_id = None
    elif isinstance(row_id, bool) or not isinstance(row_id, (str, int)):
        found.append(reasons.MALFORMED)
        row_id = None
    metadata = row.get("metadata")
    if isinstance(metadata, str) and metadata.strip():
        try:  # CSV carries metadata as JSON text
            metadata = json.loads(metadata)
        except json.JSONDecodeError:
            metadata = None
            found.append(reasons.MALFORMED)
    elif isinstance(metadata, str):
        metadata = None
    if metadata is not None and not isinstance(metadata, dict):
        found.append(reasons.MALFORMED)
        metadata = None
    split = row.get("split") or default_split
    if split not in SPLITS:
        found.append(reasons.MALFORMED)
        split = default_split
    prompt, answer = fields["prompt"], fields["answer"]
    if row_id is None:
        row_id = stable_id(domain, prompt or "", answer or "") if prompt and answer else fallback_id
    return _Candidate(record, sorted(set(found), key=found.index), str(row_id), split, prompt, answer, metadata)


@dataclass
class IngestUnit:
    """Ingest batches held to be committed together (:meth:`commit`, one ``write_batches`` unit of
    table ``ingest``). Each report's ``path`` is set when its batch is committed."""

    lake: Lake
    batches: list[tuple[dict[str, str], dict[str, pl.DataFrame], dict[str, Any]]] = field(default_factory=list)
    reports: list[IngestReport] = field(default_factory=list)

    def add(self, report: IngestReport, frames: dict[str, pl.DataFrame], manifest: dict[str, Any]) -> None:
        partition = {"domain": report.domain, "batch": report.batch}
        if any(held == partition for held, _, _ in self.batches):
            raise ValueError(f"batch {report.batch!r} of domain {report.domain!r} is already in this ingest unit")
        self.batches.append((partition, frames, manifest))
        self.reports.append(report)

    def pending(self) -> pl.DataFrame | None:
        """The admitted rows held so far (the gates of the next batch count them as already there)."""
        held = [frames["samples"] for _, frames, _ in self.batches if frames["samples"].height]
        return pl.concat(held, how="vertical_relaxed") if held else None

    def commit(self) -> list[IngestReport]:
        """Write every held batch as one unit; returns their reports, paths set."""
        if not self.batches:
            return []
        paths = self.lake.write_batches("ingest", self.batches)
        for report, path in zip(self.reports, paths):
            report.path = str(path)
        reports, self.batches, self.reports = self.reports, [], []
        return reports


def ingest_records(
    lake: Lake,
    domain: Domain,
    records: Iterable[RawRecord],
    *,
    source: str,
    batch: str | None = None,
    default_split: str = "train",
    gates: Sequence[RowGate] | None = None,
    all_domains: Sequence[Domain] = (),
    write: bool = True,
    count_tokens: Callable[[Sequence[str]], Sequence[int]] | None = None,
    unit: IngestUnit | None = None,
) -> IngestReport:
    """Gate ``records`` for ``domain`` and commit them to the lake as one batch.

    ``batch`` names the batch; an existing batch with that name is replaced atomically (the
    generated samples of a domain use a fixed name so re-materializing is idempotent).
    ``count_tokens`` is the policy's tokenizer (prompts -> token counts), which the ``too_long``
    gate uses for a long-context domain (``Domain.context_tokens``). With ``unit`` the batch is
    held there instead, to be committed with the unit's other batches (``report.path`` is set then).
    """
    batch = batch or f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds")  # with the name, a batch's version
    candidates = [_structural(r, domain.name, source, default_split) for r in records]

    ctx = GateContext(domain=domain, lake=lake, replacing_batch=batch, all_domains=all_domains,
                      count_tokens=count_tokens, pending=unit.pending() if unit is not None and write else None)
    valid = [c for c in candidates if not c.reasons]
    if valid:
        frame = pl.DataFrame({
            "row": list(range(len(valid))),
            "id": [c.id for c in valid],
            "split": [c.split for c in valid],
            "prompt": [c.prompt for c in valid],
            "answer": [c.answer for c in valid],
            "metadata": [c.metadata for c in valid],
            "content_hash": [content_hash(c.prompt, c.answer) for c in valid],
        }, schema_overrides={"metadata": pl.Object})
        for gate in default_row_gates() if gates is None else gates:
            verdicts = gate.check(frame, ctx)
            if len(verdicts) != len(valid):
                raise RuntimeError(f"row gate {gate.name!r} returned {len(verdicts)} verdicts for {len(valid)} rows")
            for candidate, found in zip(valid, verdicts):
                candidate.reasons.extend(code for code in found if code not in candidate.reasons)
        hashes = frame["content_hash"].to_list()
    else:
        hashes = []
    hash_of = {id(c): h for c, h in zip(valid, hashes)}
    detail_of = _reused_ids(valid, hash_of, ctx) if valid else {}  # id(candidate) -> why

    admitted_rows, quarantined_rows = [], []
    first_line: dict[str, int] = {}  # id -> line of its admitted row in this batch
    for c in candidates:
        if id(c) in detail_of and reasons.DUPLICATE not in c.reasons:
            c.reasons.append(reasons.DUPLICATE)
        if not c.reasons and c.id in first_line:
            # Ids must be unique inside the domain: a repeated explicit id is a duplicate row.
            c.reasons.append(reasons.DUPLICATE)
            detail_of[id(c)] = f"id {c.id!r} repeats line {first_line[c.id]} of this batch"
        meta_text = json.dumps(c.metadata, sort_keys=True, default=str) if c.metadata is not None else None
        if c.reasons:
            quarantined_rows.append({
                "domain": domain.name, "split": c.split, "id": c.id, "source": source,
                "line": c.record.line, "reasons": list(c.reasons), "raw": c.record.raw,
                "prompt": c.prompt, "answer": c.answer, "metadata": meta_text, "batch": batch,
                "ingested_at": now, "detail": detail_of.get(id(c)),
            })
        else:
            first_line[c.id] = c.record.line
            admitted_rows.append({
                "domain": domain.name, "split": c.split, "id": c.id, "prompt": c.prompt,
                "answer": c.answer, "metadata": meta_text, "source": source, "line": c.record.line,
                "batch": batch, "content_hash": hash_of[id(c)], "ingested_at": now,
            })

    counts = Counter(code for row in quarantined_rows for code in row["reasons"])
    report = IngestReport(
        domain=domain.name, received=len(candidates), admitted=len(admitted_rows),
        quarantined=len(quarantined_rows), reasons=dict(counts), batch=batch, source=source,
        preview=[{k: r[k] for k in ("id", "split", "prompt", "answer")} for r in admitted_rows[:5]],
    )
    assert report.received == report.admitted + report.quarantined
    if write:
        samples = pl.DataFrame(admitted_rows, schema=SAMPLES_SCHEMA)
        quarantine = pl.DataFrame(quarantined_rows, schema=QUARANTINE_SCHEMA)
        manifest = report.summary() | {"batch": batch, "source": source, "ingested_at": now}
        if unit is not None:
            unit.add(report, {"samples": samples, "quarantine": quarantine}, manifest)
        else:
            path = lake.write_batch("ingest", {"domain": domain.name, "batch": batch},
                                    {"samples": samples, "quarantine": quarantine}, manifest)
            report.path = str(path)
    return report


def _reused_ids(valid: list[_Candidate], hash_of: dict[int, str], ctx: GateContext) -> dict[int, str]:
    """Rows of ``valid`` whose id the domain already holds in an admitted row of another batch:
    ``id(candidate) -> why``.

    The id is the contract's stable key of an item: a reused id is a ``duplicate`` whatever its
    content (the detail says whether the content differs), so the domain's ids stay unique
    across batches and the format gate's unique-id expectation never sees a repeat.
    """
    held = lake_admitted_rows(ctx)
    held = held.filter(pl.col("domain") == ctx.domain.name) if held.height else held
    if held.is_empty():
        return {}
    wanted = {c.id for c in valid}
    earlier = {r["id"]: r for r in held.filter(pl.col("id").is_in(list(wanted))).iter_rows(named=True)}
    out = {}
    for c in valid:
        if c.id in earlier:
            row = earlier[c.id]
            same = row["content_hash"] == hash_of[id(c)]
            out[id(c)] = (f"id {c.id!r} is already admitted in batch {row['batch']!r} "
                         + ("with the same content" if same else
                            "with different content (the id is the item's stable key: give a new item a new id)"))
    return out


def ingest_file(lake: Lake, domain: Domain, path: str | Path, **kwargs: Any) -> IngestReport:
    """Ingest a JSONL, CSV or Parquet file. Errors (missing file, unsupported format) raise
    before anything is written."""
    path = Path(path)
    records = list(read_records(path))  # fully read first: a bad file writes nothing
    return ingest_records(lake, domain, records, source=str(path.resolve()), **kwargs)


def generated_records(domain: Domain, split: str, n: int, seed: int) -> list[RawRecord]:
    """A domain's generated samples as raw records (line = position in the generator's output)."""
    return [RawRecord(i, json.dumps(row, default=str, ensure_ascii=False), value=row)
            for i, row in enumerate(domain.generate(split, n, seed), start=1)]


class IngestSettings(BaseModel):
    """How much generated data the ingest stage draws for a domain (``domain_samples``'s config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train_samples: int = Field(256, description="train samples to generate for the domain (eval uses the "
                                                "domain's eval_size)")
    seed: int = Field(0, description="seed of the train split (eval always uses seed 0, so sweeps compare "
                                     "like with like)")

    @field_validator("train_samples")
    @classmethod
    def _some_rows(cls, value):
        if value < 1:
            raise ValueError(f"train_samples must be >= 1, got {value}; a domain needs train rows to be gated")
        return value


def ingest_generated(lake: Lake, domain: Domain, *, train_n: int, seed: int = 0,
                     gates: Sequence[RowGate] | None = None,
                     all_domains: Sequence[Domain] = (),
                     count_tokens: Callable[[Sequence[str]], Sequence[int]] | None = None) -> dict[str, IngestReport]:
    """Materialize a domain's train and eval samples as the batches ``generated-train`` and
    ``generated-eval`` (replacing earlier ones), committed as one unit. Eval uses seed 0 and the
    domain's ``eval_size``."""
    return ingest_generated_many(lake, [domain], train_n=train_n, seed=seed, gates=gates, all_domains=all_domains,
                                 count_tokens=count_tokens)[domain.name]


def ingest_generated_many(lake: Lake, domains: Sequence[Domain], *, train_n: int, seed: int = 0,
                          gates: Sequence[RowGate] | None = None,
                          all_domains: Sequence[Domain] = (),
                          count_tokens: Callable[[Sequence[str]], Sequence[int]] | None = None,
                          on_domain: Callable[[Domain, dict[str, IngestReport]], None] | None = None,
                          ) -> dict[str, dict[str, IngestReport]]:
    """:func:`ingest_generated` for several domains in one run: every domain's batches gated in
    turn (``on_domain(domain, reports)`` after each, e.g. for progress; nothing is committed yet),
    then all of them committed as ONE unit (:class:`IngestUnit`): one commit of table ``ingest``
    on the team lake, whatever the number of domains. ``count_tokens`` is used for long-context
    domains only (``Domain.context_tokens``). Returns domain -> split -> report."""
    unit = IngestUnit(lake)
    out: dict[str, dict[str, IngestReport]] = {}
    for domain in domains:
        reports = out[domain.name] = {}
        for split, n, split_seed in (("eval", domain.eval_size, 0), ("train", train_n, seed)):
            records = generated_records(domain, split, n, split_seed)
            reports[split] = ingest_records(
                lake, domain, records, source=f"generated:{domain.name}:{split}:seed={split_seed}",
                batch=f"generated-{split}", default_split=split, gates=gates, all_domains=all_domains,
                count_tokens=count_tokens, unit=unit,
            )
        if on_domain is not None:
            on_domain(domain, reports)
    unit.commit()
    return out


def quarantine_listing(lake: Lake, domain: str) -> list[dict[str, Any]]:
    """``assay quarantine`` rows: ``[{"id","line","source","reasons":[...]}, ...]`` plus the
    ``batch`` and the ``detail`` (null when the codes say it all)."""
    frame = lake.read("ingest", "quarantine", where={"domain": domain})
    if frame.is_empty():
        return []
    frame = frame.sort(["ingested_at", "source", "line"])
    return [{"id": r["id"], "line": r["line"], "source": r["source"], "reasons": list(r["reasons"]),
             "batch": r["batch"], "detail": r.get("detail")} for r in frame.iter_rows(named=True)]
