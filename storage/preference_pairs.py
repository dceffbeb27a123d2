"""Preference pairs: the labelled data a learned reward is trained and gated on.

A pairs file holds one JSON object per line with ``prompt``, ``chosen`` (the better answer) and
``rejected`` (the worse one), optionally ``id`` and ``metadata``; any other keys are kept out of the
way, not read. Every line is checked and every problem reported with its 1-based line number: a
file with a bad line is refused whole, never trained on with that line silently missing, since a
reward model trained on a different set than the user meant would be judged on it all the same.

The held-out split is by prompt (a hash of seed and prompt), so the two answers to one prompt
never sit on both sides: a reward model must be judged on prompts it never saw.

Plain Python (no torch): the trainer (:mod:`training.reward_model`), the gate
(:mod:`quality.reward_gate`) and the CLI all read pairs through here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

from storage.readers import UnsupportedFormat, read_records
from storage.errors import UserError

FIELDS = ("prompt", "chosen", "rejected")
MAX_PROBLEMS_SHOWN = 10


class PairsFileError(UserError, ValueError):
    """A pairs file that cannot be used, with every problem (line numbers) in ``problems``."""

    def __init__(self, source: str, problems: Sequence[str], duplicates: int = 0):
        self.source = source
        self.problems = list(problems)
        self.duplicates = duplicates
        shown = "; ".join(self.problems[:MAX_PROBLEMS_SHOWN])
        more = len(self.problems) - MAX_PROBLEMS_SHOWN
        hints = []
        if sum(p.startswith("line ") for p in self.problems) > duplicates:  # a bad line, not a missing file
            hints.append(f"each line must be a JSON object with non-empty string fields {', '.join(FIELDS)} and "
                         "chosen != rejected")
        if duplicates:  # raters' exports repeat pairs; say how to go on without editing the file by hand
            hints.append(f"{duplicates} line(s) repeat an earlier pair: remove them, or pass --drop-duplicates to "
                         "keep each pair's first line (the dropped lines are counted in the output)")
        hint = "; ".join(hints)
        super().__init__(f"{source}: {len(self.problems)} problem(s), nothing was used: {shown}"
                         + (f"; and {more} more" if more > 0 else "")
                         + (". " + hint[:1].upper() + hint[1:] if hint else ""))


@dataclass(frozen=True)
class PreferencePair:
    """One labelled comparison: ``chosen`` is preferred to ``rejected`` as an answer to ``prompt``."""

    id: str
    prompt: str
    chosen: str
    rejected: str
    line: int | None = None  # 1-based line in the source file (None: built in code)
    metadata: dict = field(default_factory=dict, compare=False, hash=False)

    def to_json(self) -> dict:
        out = {"id": self.id, "prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}
        if self.metadata:
            out["metadata"] = self.metadata
        return out


def pair_id(prompt: str, chosen: str, rejected: str) -> str:
    """A stable id for a pair without one: a hash of its three texts."""
    return hashlib.sha256(json.dumps([prompt, chosen, rejected]).encode()).hexdigest()[:16]


def _line_problem(value: dict) -> str | None:
    for name in FIELDS:
        if name not in value:
            return f"missing field {name!r}"
        if not isinstance(value[name], str):
            return f"field {name!r} must be a string, got {type(value[name]).__name__}"
        if not value[name].strip():
            return f"field {name!r} is empty"
    if value["chosen"].strip() == value["rejected"].strip():
        return "chosen and rejected are the same text (a pair must say which of two answers is better)"
    if "id" in value and not (isinstance(value["id"], (str, int)) and str(value["id"]).strip()):
        return "field 'id' must be a non-empty string or integer"
    if "metadata" in value and not isinstance(value["metadata"], dict):
        return f"field 'metadata' must be a JSON object, got {type(value['metadata']).__name__}"
    return None


def read_pairs(path: str | Path, *, drop_duplicates: bool = False,
               dropped: list[int] | None = None) -> list[PreferencePair]:
    """Every pair of ``path`` (JSONL; CSV and Parquet with the same columns work too), or
    :class:`PairsFileError` naming each bad line. Blank lines are layout and skipped; duplicate
    pairs and reused ids are problems (a duplicate would count twice in training and agreement).
    With ``drop_duplicates`` a line repeating an earlier pair's three texts is skipped instead and
    its line number appended to ``dropped``, so the caller can say how many went; an id reused for
    different texts is still a problem, since which of them the id means is unknowable."""
    path = Path(path)
    try:
        records = list(read_records(path))
    except (UnsupportedFormat, FileNotFoundError) as exc:
        raise PairsFileError(str(path), [str(exc)]) from None
    problems: list[str] = []
    pairs: list[PreferencePair] = []
    seen_ids: dict[str, int] = {}
    seen_texts: dict[tuple[str, str, str], int] = {}
    duplicates = 0
    for record in records:
        if record.error is not None:
            problems.append(f"line {record.line}: {record.error}")
            continue
        problem = _line_problem(record.value)
        if problem is not None:
            problems.append(f"line {record.line}: {problem}")
            continue
        value = record.value
        texts = (value["prompt"], value["chosen"], value["rejected"])
        ident = str(value["id"]).strip() if "id" in value else pair_id(*texts)
        if texts in seen_texts:
            if drop_duplicates:
                if dropped is not None:
                    dropped.append(record.line)
                continue
            duplicates += 1
            problems.append(f"line {record.line}: the same pair as line {seen_texts[texts]}")
            continue
        if ident in seen_ids:
            problems.append(f"line {record.line}: id {ident!r} is already used on line {seen_ids[ident]}")
            continue
        seen_texts[texts] = seen_ids[ident] = record.line
        pairs.append(PreferencePair(id=ident, prompt=texts[0], chosen=texts[1], rejected=texts[2],
                                    line=record.line, metadata=dict(value.get("metadata") or {})))
    if not pairs and not problems:
        problems.append("no pairs (the file is empty)")
    if problems:
        raise PairsFileError(str(path), problems, duplicates=duplicates)
    return pairs


def write_pairs(pairs: Iterable[PreferencePair], path: str | Path) -> Path:
    """Write ``pairs`` as JSONL (what :func:`read_pairs` reads back, ids included)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for pair in pairs:
            handle.write(json.dumps(pair.to_json(), ensure_ascii=False) + "\n")
    return path


def pairs_fingerprint(pairs: Sequence[PreferencePair]) -> str:
    """A hash of the pairs' content in order: which data a reward model was trained or judged on."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(json.dumps([pair.id, pair.prompt, pair.chosen, pair.rejected]).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def is_heldout(prompt: str, fraction: float, seed: int) -> bool:
    """Whether ``prompt``'s pairs belong to the held-out split (a hash of seed and prompt)."""
    bucket = int(hashlib.sha256(f"{seed}\x00{prompt}".encode()).hexdigest()[:12], 16) / float(16 ** 12)
    return bucket < fraction


def split_pairs(pairs: Sequence[PreferencePair], heldout_fraction: float,
                seed: int = 0) -> tuple[list[PreferencePair], list[PreferencePair]]:
    """(train, held-out), split by prompt so no prompt is on both sides. Raises ValueError when a
    side would be empty (too few distinct prompts for the fraction)."""
    train = [p for p in pairs if not is_heldout(p.prompt, heldout_fraction, seed)]
    heldout = [p for p in pairs if is_heldout(p.prompt, heldout_fraction, seed)]
    if not train or not heldout:
        prompts = len({p.prompt for p in pairs})
        raise ValueError(f"splitting {len(pairs)} pairs over {prompts} distinct prompts with held-out fraction "
                         f"{heldout_fraction} leaves {len(train)} to train on and {len(heldout)} held out: "
                         "add pairs with more distinct prompts or change the held-out fraction")
    return train, heldout
