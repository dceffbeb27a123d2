"""The hack corpus: every hack the search (:mod:`.hack_search`) found, kept per domain in the lake
and replayed from then on, so a hole once found stays closed.

A row keeps the sample itself (as JSON, metadata included), so a hack is re-scored exactly as it
was found, without regenerating the domain's data (which may have changed since). Replaying scores
every kept completion through ``Domain.safe_score_many``, as the trainer does: any that still scores
above 0 is a failure, named with its item and shape. The environment self-test runs it as its check
``hack_corpus`` (:func:`quality.domain_check.check_domain`, given the rows the caller read with
:func:`read_corpus`).

Lake table ``hack_corpus`` (``storage.tables.HACK_CORPUS``), one batch per (domain, run); a hack
already kept (same item, same completion) is not written again.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # pragma: no cover - types only
    from domains import Domain
    from quality.report_card.hack_search import HackSearchReport

TABLE = "hack_corpus"


def corpus_rows(report: "HackSearchReport", *, run: str, source: str, found_at: str) -> list[dict]:
    """Rows of lake table ``hack_corpus`` for the hacks one search found."""
    return [{"run": run, "source": source, "domain": report.domain, "item_id": hack.item_id,
             "sample": json.dumps(hack.sample, sort_keys=True, default=str, ensure_ascii=False),
             "completion": hack.completion, "shape": hack.shape, "score": float(hack.score), "found_at": found_at}
            for hack in report.paid]


def write_corpus(lake, reports: Sequence["HackSearchReport"], *, source: str) -> str:
    """Keep the new hacks of ``reports`` (one batch per domain that found any not kept yet); returns
    the run id (its batches may be none, when nothing new was found)."""
    import polars as pl

    from storage.tables import HACK_CORPUS, conform

    run = f"hacks-{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    at = datetime.now(timezone.utc).isoformat()
    for report in reports:
        kept = {(row["item_id"], row["completion"]) for row in read_corpus(lake, report.domain)}
        rows = [row for row in corpus_rows(report, run=run, source=source, found_at=at)
                if (row["item_id"], row["completion"]) not in kept]
        if rows:
            frame = conform(pl.DataFrame(rows, schema=HACK_CORPUS), HACK_CORPUS)
            lake.write_batch(TABLE, {"domain": report.domain, "run": run}, {"part": frame})
    return run


def read_corpus(lake, domain: str) -> list[dict]:
    """The hacks kept for ``domain``, oldest first, each once (a row per item and completion)."""
    frame = lake.read(TABLE, where={"domain": domain})
    if not frame.height:
        return []
    rows, seen = [], set()
    for row in frame.sort("found_at").to_dicts():
        key = (row["item_id"], row["completion"])
        if key not in seen:
            seen.add(key)
            rows.append(row)
    return rows


@dataclass
class CorpusReplay:
    """Kept hacks of one domain scored again: ``still_paid`` rows (with their new ``score``) fail it."""

    domain: str
    replayed: int = 0
    still_paid: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def passed(self) -> bool:
        return self.error is None and not self.still_paid

    def summary(self) -> str:
        if self.error:
            return f"replaying the kept hacks failed: {self.error}"
        if not self.replayed:
            return "the corpus is empty: no hack found by the search is kept for this domain"
        if not self.still_paid:
            return f"{self.replayed} kept hacks replayed, none paid: every hole found so far stays closed"
        shown = "; ".join(f"{row['shape']} on {row['item_id']} scored {row['score']:.3f} ({_short(row['completion'])})"
                          for row in self.still_paid[:3])
        return f"{len(self.still_paid)} of {self.replayed} kept hacks are paid again: {shown}"

    def as_dict(self) -> dict[str, Any]:
        return {"domain": self.domain, "passed": self.passed, "replayed": self.replayed, "error": self.error,
                "still_paid": [{k: row[k] for k in ("item_id", "shape", "score", "completion")}
                               for row in self.still_paid[:10]]}


def replay_corpus(domain: "Domain", rows: Sequence[dict]) -> CorpusReplay:
    """Score every kept hack of ``domain`` again, on the sample it was found on. Never raises: a row
    that cannot be read or a scorer that raises becomes the replay's ``error``."""
    replay = CorpusReplay(domain.name, replayed=len(rows))
    if not rows:
        return replay
    try:
        samples = [json.loads(row["sample"]) for row in rows]
    except (KeyError, TypeError, ValueError) as exc:
        replay.error = f"a kept hack's sample is not readable JSON ({type(exc).__name__}: {exc}); " \
                       "the hack_corpus rows were written by another tool or edited"
        return replay
    try:
        scores = domain.safe_score_many([str(row["completion"]) for row in rows], samples)
    except Exception as exc:  # noqa: BLE001 - a scorer that raises on a kept hack fails the check, named
        replay.error = f"{type(exc).__name__}: {exc}"[:500]
        return replay
    replay.still_paid = [{**row, "score": score} for row, score in zip(rows, scores) if score > 0]
    return replay


def _short(text: str, limit: int = 60) -> str:
    flat = " ".join(str(text).split())
    return repr(flat[:limit] + ("..." if len(flat) > limit else ""))


__all__ = ["TABLE", "CorpusReplay", "corpus_rows", "read_corpus", "replay_corpus", "write_corpus"]
