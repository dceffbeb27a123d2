"""A labelled audit of real completions: the verifier's error rates as a person judges them.

Probes (:mod:`.recall`, :mod:`.hack_search`) measure a verifier on completions Assay writes; an
audit measures it on what the policy actually wrote in a sweep. Two steps:

1. :func:`draw_audit` samples one checkpoint's sweep completions of a domain (lake table
   ``results``) in three disjoint strata and writes a labelling file (JSONL, or CSV when the path
   ends in ``.csv``), one row per completion with the prompt, the reference and an empty
   ``label`` for a person to fill in (``correct`` / ``incorrect``; ``unsure`` or empty rows are
   left out of the rates):

   - ``unpaid_states_reference``: scored below a pass but states the reference answer (the
     likeliest false negatives);
   - ``paid_without_reference``: paid but never states the reference (the likeliest false
     positives);
   - ``random``: a uniform draw from the rest.

2. :func:`read_labels` + :func:`summarize` turn the filled-in file into the two rates, each with a
   Wilson 95% interval: **false-positive rate** = the share of labelled *paid* completions the
   person calls incorrect, **false-negative rate** = the share of labelled *unpaid* ones called
   correct. The targeted strata over-sample suspects, so these rates answer "how often is the
   verifier wrong where it is likeliest to be" (an upper-leaning figure); the ``weighted_*``
   figures weight each stratum by its share of the sweep (its ``stratum_size``) for an estimate of
   the whole sweep. :func:`write_audit` keeps the labelled rows in lake table
   ``verifier_audits``; the report card shows the newest audit.
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

from domains.base import PASS_SCORE

TABLE = "verifier_audits"
STRATA = ("unpaid_states_reference", "paid_without_reference", "random")
CORRECT, INCORRECT, UNSURE = "correct", "incorrect", "unsure"
_LABELS = {"correct": CORRECT, "right": CORRECT, "yes": CORRECT, "y": CORRECT, "true": CORRECT, "1": CORRECT,
           "incorrect": INCORRECT, "wrong": INCORRECT, "no": INCORRECT, "n": INCORRECT, "false": INCORRECT,
           "0": INCORRECT, "unsure": UNSURE, "?": UNSURE, "skip": UNSURE, "": UNSURE}
FIELDS = ("audit", "domain", "checkpoint", "item_id", "sample_idx", "stratum", "stratum_size", "score", "paid",
          "prompt", "reference", "completion", "label", "note")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
_WORDS = re.compile(r"\w+")


class AuditError(ValueError):
    """A labelling file or an audit request a person must fix (the message says how)."""


def _norm(text: str) -> str:
    return " ".join(_WORDS.findall(unicodedata.normalize("NFKC", str(text)).casefold()))


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def states_reference(completion: str, reference: str) -> bool:
    """Whether ``completion`` states ``reference`` anywhere: its number among the completion's
    numbers (``1,795`` states 1795), else its words as a whole-word run (case and punctuation
    ignored). A loose test on purpose: it picks suspects for a person, it judges nothing."""
    ref = str(reference).strip()
    if not ref:
        return False
    value = _number(ref) if _NUMBER.fullmatch(ref) else None
    if value is not None:
        return any(_number(n) == value for n in _NUMBER.findall(str(completion)))
    needle = _norm(ref)
    return bool(needle) and f" {needle} " in f" {_norm(completion)} "


def draw_audit(lake, domain, checkpoint: str, *, per_stratum: int = 20, seed: int = 0) -> list[dict[str, Any]]:
    """Rows of a labelling file for ``domain`` (a registered Domain) swept at ``checkpoint``: up to
    ``per_stratum`` completions from each stratum (each completion in one stratum only), drawn
    with ``seed``. Raises :class:`AuditError` when the checkpoint has no sweep of the domain."""
    if per_stratum < 1:
        raise AuditError(f"per_stratum must be >= 1, got {per_stratum}")
    rows = _results(lake, domain.name, checkpoint)
    if not rows.height:
        raise AuditError(f"checkpoint {checkpoint!r} has no sweep results for domain {domain.name!r}: run "
                         f"`assay sweep --checkpoint {checkpoint} --domains {domain.name}` first")
    items = {s["id"]: s for s in domain.eval_items()}
    strata: dict[str, list[dict]] = {name: [] for name in STRATA}
    for row in rows.iter_rows(named=True):
        sample = items.get(row["item_id"])
        if sample is None or row["score"] is None:
            continue  # an item no longer in the eval set cannot be shown with its reference
        paid = row["score"] >= PASS_SCORE
        said = states_reference(row["completion"] or "", sample["answer"])
        stratum = ("unpaid_states_reference" if not paid and said else
                   "paid_without_reference" if paid and not said else "random")
        strata[stratum].append({**row, "prompt": sample["prompt"], "reference": sample["answer"], "paid": paid})
    audit = f"audit-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    rng = random.Random(f"assay-audit:{domain.name}:{checkpoint}:{seed}")
    out = []
    for name in STRATA:
        pool = strata[name]
        for row in rng.sample(pool, min(per_stratum, len(pool))):
            out.append({"audit": audit, "domain": domain.name, "checkpoint": checkpoint, "item_id": row["item_id"],
                        "sample_idx": int(row["sample_idx"]), "stratum": name, "stratum_size": len(pool),
                        "score": float(row["score"]), "paid": bool(row["paid"]), "prompt": row["prompt"],
                        "reference": row["reference"], "completion": row["completion"] or "", "label": "",
                        "note": ""})
    return out


def write_labelling_file(rows: Sequence[dict], path: Path) -> Path:
    """The rows as JSONL (CSV when ``path`` ends in .csv), ``label`` empty for a person to fill in."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() == ".csv":
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows({k: row.get(k, "") for k in FIELDS} for row in rows)
    else:
        with open(path, "w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps({k: row.get(k, "") for k in FIELDS}, ensure_ascii=False) + "\n")
    return path


def read_labels(path: Path) -> list[dict[str, Any]]:
    """The rows of a filled-in labelling file, each ``label`` normalised to correct / incorrect /
    unsure. A row with another label, or a file that is not one of ours, raises :class:`AuditError`
    naming the line and what to write instead."""
    path = Path(path)
    if not path.is_file():
        raise AuditError(f"no labelling file at {path}: write one with `assay domains audit DOMAIN --checkpoint C "
                         f"--out {path}`")
    if path.suffix.lower() == ".csv":
        with open(path, newline="", encoding="utf-8") as fh:
            raw = [(n, r) for n, r in enumerate(csv.DictReader(fh), start=2)]
    else:
        raw = []
        with open(path, encoding="utf-8") as fh:
            for n, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                try:
                    raw.append((n, json.loads(line)))
                except json.JSONDecodeError as exc:
                    raise AuditError(f"{path}:{n}: not a JSON object ({exc.msg}); each line is one labelled "
                                     "completion") from None
    rows = []
    for n, row in raw:
        missing = [k for k in ("audit", "domain", "checkpoint", "item_id", "stratum", "score", "label")
                   if k not in row]
        if missing:
            raise AuditError(f"{path}:{n}: missing {', '.join(missing)}; label the file `assay domains audit` wrote "
                             "(keep its columns, fill in `label`)")
        label = _LABELS.get(str(row["label"] if row["label"] is not None else "").strip().casefold())
        if label is None:
            raise AuditError(f"{path}:{n}: label {row['label']!r} is not one of correct, incorrect, unsure (or empty)")
        if row["stratum"] not in STRATA:
            raise AuditError(f"{path}:{n}: stratum {row['stratum']!r} is not one of {', '.join(STRATA)}")
        try:
            score = float(row["score"])
            size = int(row.get("stratum_size") or 0)
            sample_idx = int(row.get("sample_idx") or 0)
        except (TypeError, ValueError):
            raise AuditError(f"{path}:{n}: score, stratum_size and sample_idx must be numbers, as written") from None
        rows.append({**{k: row.get(k) for k in FIELDS}, "score": score, "stratum_size": size,
                     "sample_idx": sample_idx, "paid": score >= PASS_SCORE, "label": label, "line": n})
    if not rows:
        raise AuditError(f"{path} holds no rows")
    if len({(r["audit"], r["domain"]) for r in rows}) > 1:
        raise AuditError(f"{path} mixes several audits or domains; label one file per `assay domains audit` run")
    return rows


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float] | None:
    """The Wilson score interval of a proportion (95% by default); None when n is 0."""
    if n <= 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class AuditSummary:
    """The rates one audit's labels give (see the module docstring)."""

    audit: str
    domain: str
    checkpoint: str
    labelled: int             # rows labelled correct or incorrect
    paid_labelled: int
    false_positives: int      # paid, labelled incorrect
    unpaid_labelled: int
    false_negatives: int      # unpaid, labelled correct
    weighted_fp_rate: float | None
    weighted_fn_rate: float | None

    @property
    def fp_rate(self) -> float | None:
        return self.false_positives / self.paid_labelled if self.paid_labelled else None

    @property
    def fn_rate(self) -> float | None:
        return self.false_negatives / self.unpaid_labelled if self.unpaid_labelled else None

    @property
    def fp_interval(self) -> tuple[float, float] | None:
        return wilson(self.false_positives, self.paid_labelled)

    @property
    def fn_interval(self) -> tuple[float, float] | None:
        return wilson(self.false_negatives, self.unpaid_labelled)

    def as_dict(self) -> dict[str, Any]:
        return {"audit": self.audit, "domain": self.domain, "checkpoint": self.checkpoint, "labelled": self.labelled,
                "paid_labelled": self.paid_labelled, "false_positives": self.false_positives,
                "fp_rate": self.fp_rate, "fp_interval": self.fp_interval, "unpaid_labelled": self.unpaid_labelled,
                "false_negatives": self.false_negatives, "fn_rate": self.fn_rate, "fn_interval": self.fn_interval,
                "weighted_fp_rate": self.weighted_fp_rate, "weighted_fn_rate": self.weighted_fn_rate}


def summarize(rows: Iterable[dict]) -> AuditSummary:
    """The two rates of one audit's labelled rows (unsure rows left out)."""
    rows = [r for r in rows if r["label"] in (CORRECT, INCORRECT)]
    if not rows:
        raise AuditError("no row is labelled correct or incorrect yet: fill in the `label` column")
    paid = [r for r in rows if r["paid"]]
    unpaid = [r for r in rows if not r["paid"]]
    first = rows[0]
    return AuditSummary(
        audit=str(first["audit"]), domain=str(first["domain"]), checkpoint=str(first["checkpoint"]),
        labelled=len(rows), paid_labelled=len(paid), false_positives=sum(r["label"] == INCORRECT for r in paid),
        unpaid_labelled=len(unpaid), false_negatives=sum(r["label"] == CORRECT for r in unpaid),
        weighted_fp_rate=_weighted(rows, paid=True), weighted_fn_rate=_weighted(rows, paid=False))


def _weighted(rows: Sequence[dict], *, paid: bool) -> float | None:
    """The error rate over the whole sweep's paid (unpaid) completions: each stratum's labelled
    share of errors, weighted by how many of the sweep's paid (unpaid) completions it holds (its
    size times the share of its labelled rows that are paid (unpaid))."""
    wrong = CORRECT if not paid else INCORRECT
    errors = total = 0.0
    for stratum in STRATA:
        labelled = [r for r in rows if r["stratum"] == stratum]
        side = [r for r in labelled if r["paid"] == paid]
        if not labelled or not side:
            continue
        size = max(int(labelled[0].get("stratum_size") or 0), len(labelled))
        in_side = size * len(side) / len(labelled)
        errors += in_side * sum(r["label"] == wrong for r in side) / len(side)
        total += in_side
    return errors / total if total else None


def write_audit(lake, rows: Sequence[dict]) -> str:
    """Keep one audit's labelled rows in lake table ``verifier_audits`` (replacing that audit's
    earlier labels); returns the audit id."""
    import polars as pl

    from storage.tables import VERIFIER_AUDITS, conform

    at = datetime.now(timezone.utc).isoformat()
    frame = conform(pl.DataFrame([{**r, "labelled_at": at} for r in rows], infer_schema_length=None),
                    VERIFIER_AUDITS)
    audit, domain = str(rows[0]["audit"]), str(rows[0]["domain"])
    lake.write_batch(TABLE, {"domain": domain, "audit": audit}, {"part": frame})
    return audit


def latest_audit(lake, domain: str) -> AuditSummary | None:
    """The summary of the domain's newest labelled audit, or None when nobody labelled one."""
    import polars as pl

    from storage.tables import VERIFIER_AUDITS, conform

    if TABLE not in lake.tables() or not lake.files(TABLE, where={"domain": domain}):
        return None
    frame = conform(lake.read(TABLE, where={"domain": domain}), VERIFIER_AUDITS)
    if not frame.height:
        return None
    newest = frame.sort("labelled_at", descending=True)["audit"][0]
    rows = frame.filter(pl.col("audit") == newest).to_dicts()
    try:
        return summarize(rows)
    except AuditError:
        return None


def _results(lake, domain: str, checkpoint: str):
    """The sweep rows of (checkpoint, domain): each sample's newest row."""
    import polars as pl

    from storage.tables import RESULTS, conform

    if "results" not in lake.tables() or not lake.files("results", where={"checkpoint": checkpoint,
                                                                          "domain": domain}):
        return pl.DataFrame(schema=RESULTS)
    frame = conform(lake.read("results", where={"checkpoint": checkpoint, "domain": domain}), RESULTS)
    return (frame.sort("created_at", descending=True)
            .unique(["item_id", "sample_idx"], keep="first", maintain_order=True)
            .sort(["item_id", "sample_idx"]))
