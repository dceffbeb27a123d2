"""Environments from other frameworks as Assay domains: Inspect AI tasks, lm-evaluation-harness tasks and
verifiers environments, loaded and scored by their own packages (``assay domains import KIND SOURCE``).

An import runs once. The source is loaded with its framework (``domains.importers.<kind>``), anything the
importer does not support is refused before any inference (:class:`ImportRefused`, naming the feature),
and the result is persisted under ``$ASSAY_HOME/environments/<name>/``::

    import.json   the record: kind, source as given, options, the framework's version, the digest of
                  source/, item counts, notes, when
    items.jsonl   the items as the source renders them (id, split, prompt, answer, metadata): prompts are
                  rendered once by the source's own machinery (doc_to_text, the task's template), so the
                  domain loads in a new process without the framework
    source/       a copy of what the scorer needs (task file, YAML, data, hook modules)

The registry (:mod:`domains.registry`) registers each folder as a domain. Scoring imports the framework
lazily and rebuilds the source's own scorer from ``source/`` (never re-implemented here), so a score means
what it means in the source. A folder whose ``source/`` changed after the import is refused until it is
imported again, as an edited Harbor task is.

Ids and splits: an item keeps the source's own id when it has one, else the sha256 of its prompt and answer;
the source's own split when it has one (``--split-from source``), else a stable hash split
(:func:`hash_split`, the rule of task suites): an item's side depends on its id alone, so items never move
when the source grows.

Each importer module exposes ``IMPORTER``, an object with ``kind``, ``package`` (the distribution whose
version is recorded), ``load(source, options) -> LoadedSource`` and ``scorer(folder, settings) ->
score_many``; :data:`IMPORTERS` names them, imported only when used.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import os
import random
import re
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from domains.base import DEFAULT_EVAL_SIZE, NAME_PATTERN, Domain, DomainError
from storage.errors import UserError

RECORD = "import.json"
ITEMS = "items.jsonl"
SOURCE = "source"
FORMAT = 1
SPLIT_FROM = ("source", "hash")
EVAL_SHARE = 0.5  # the hash split's eval share, as task suites (domains.task_folder.EVAL_SHARE)
# The report card's recall bar of an imported domain: measured and shown, not enforced. Its scorer is the
# source's, kept as it is (an exact_match refuses '7.0' for '7' there too); blocking training on the
# source's own strictness would make every import fail its first card. `--min-recall 0.99` enforces it.
DEFAULT_MIN_RECALL = 0.0

# kind -> "module:attribute"; the modules import their framework inside their functions only
IMPORTERS: dict[str, str] = {
    "inspect": "domains.importers.inspect_task:IMPORTER",
    "lm-eval": "domains.importers.lm_eval_task:IMPORTER",
    "verifiers": "domains.importers.verifiers_env:IMPORTER",
}

ScoreManyFn = Callable[[Sequence[str], Sequence[dict]], list[float]]


class ImportRefused(UserError):
    """The source uses something the importer does not support (said with the feature's name and what to
    do instead), or cannot be read. Raised before any inference and before anything is written."""


@dataclass(frozen=True)
class ImportedItem:
    """One item as the source renders it. ``split`` is the source's own ("train" / "eval"), None when it
    has none; ``metadata`` must be JSON and holds what the scorer needs (the source's target, choices...)."""

    id: str
    prompt: str
    answer: str
    split: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoadedSource:
    """What an importer's ``load`` returns: the items, the files to copy under ``source/`` (absolute path,
    path under source/), the JSON settings its ``scorer`` rebuilds itself from, and notes for the user."""

    description: str
    items: list[ImportedItem]
    files: list[tuple[Path, str]]
    settings: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    tags: tuple[str, ...] = ()


class Importer(Protocol):
    kind: str
    package: str

    def load(self, source: str, options: dict[str, Any]) -> LoadedSource: ...

    def scorer(self, folder: Path, settings: dict[str, Any]) -> ScoreManyFn: ...


def importer(kind: str) -> Importer:
    if kind not in IMPORTERS:
        raise ImportRefused(f"unknown source kind {kind!r}: one of {', '.join(IMPORTERS)}")
    module_name, _, attribute = IMPORTERS[kind].partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def package_version(distribution: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def require_package(distribution: str, module: str, kind: str) -> None:
    """Refuse with the install command when the framework is not installed."""
    if importlib.util.find_spec(module) is None:
        raise ImportRefused(f"importing a {kind} source needs the {distribution} package, which is not installed: "
                            "run `make importers` (or `.venv/bin/pip install -e '.[importers]'`)")


def content_id(prompt: str, answer: str) -> str:
    return hashlib.sha256(json.dumps([prompt, answer]).encode()).hexdigest()[:16]


def hash_split(item_id: str, eval_share: float = EVAL_SHARE) -> str:
    """"eval" when sha256 of the id falls in the lower ``eval_share`` of the hash range, else "train"."""
    u = int.from_bytes(hashlib.sha256(item_id.encode()).digest()[:8], "big") / 2**64
    return "eval" if u < eval_share else "train"


def assign_splits(items: Sequence[ImportedItem], split_from: str, eval_share: float) -> list[dict]:
    """Rows with ids made unique and each item's split decided (see the module docstring)."""
    if split_from not in SPLIT_FROM:
        raise ImportRefused(f"--split-from must be one of {', '.join(SPLIT_FROM)}, got {split_from!r}")
    if not 0 < eval_share < 1:
        raise ImportRefused(f"--eval-share must be in (0, 1), got {eval_share}")
    if split_from == "source" and not any(item.split for item in items):
        raise ImportRefused("--split-from source: the source has no train/eval split of its own; use "
                            "--split-from hash (the default)")
    seen: dict[str, int] = {}
    rows = []
    for item in items:
        if not isinstance(item.prompt, str) or not item.prompt.strip():
            raise ImportRefused(f"item {item.id!r} renders an empty prompt: check the source's prompt template")
        if item.id in seen:
            raise ImportRefused(f"two items share the id {item.id!r}: ids must be unique in the source")
        seen[item.id] = 1
        split = item.split if split_from == "source" else hash_split(item.id, eval_share)
        if split not in ("train", "eval"):
            raise ImportRefused(f"item {item.id!r} has split {item.split!r}: --split-from source needs train or eval "
                                "for every item (or use --split-from hash)")
        rows.append({"id": item.id, "split": split, "prompt": item.prompt, "answer": item.answer,
                     "metadata": item.metadata})
    splits = {row["split"] for row in rows}
    if len(rows) >= 2 and splits != {"train", "eval"}:
        raise ImportRefused(f"all {len(rows)} items fell in {splits.pop()}: a domain needs train and eval items "
                            "(use another --split-from or --eval-share)")
    return rows


def environments_root(home: Path | None = None) -> Path:
    """Where imports are kept: ``$ASSAY_HOME/environments``."""
    from storage.home import resolve_home

    return (Path(home) if home else resolve_home()) / "environments"


def source_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


@dataclass(frozen=True)
class ImportResult:
    name: str
    kind: str
    folder: Path
    counts: dict[str, int]
    notes: list[str]

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "folder": str(self.folder), "counts": self.counts,
                "notes": self.notes}


def import_environment(kind: str, source: str, *, name: str | None = None, options: dict[str, Any] | None = None,
                       split_from: str = "hash", eval_share: float = EVAL_SHARE, home: Path | None = None,
                       replace: bool = False, min_recall: float = DEFAULT_MIN_RECALL) -> ImportResult:
    """Load ``source`` with its framework and persist it as the domain ``name`` (see the module docstring).
    Nothing is written when the source is refused. ``min_recall``: the report card's recall bar for the
    domain (see :data:`DEFAULT_MIN_RECALL`)."""
    if not 0 <= min_recall <= 1:
        raise ImportRefused(f"--min-recall must be in [0, 1], got {min_recall}")
    plugin = importer(kind)
    options = dict(options or {})
    loaded = plugin.load(source, options)
    name = name or default_name(str(options.get("task") or source))  # a folder's task is named after the task
    if not NAME_PATTERN.match(name):
        raise ImportRefused(f"--name {name!r} must be lower_snake_case (letters, digits, '_', starting with a letter): "
                            "it is the domain's name")
    rows = assign_splits(loaded.items, split_from, eval_share)
    if not rows:
        raise ImportRefused(f"{source}: the source has no items")
    root = environments_root(home)
    target = root / name
    if target.exists() and not replace:
        raise ImportRefused(f"an environment named {name!r} was already imported ({target}): pass --replace to "
                            "import it again, or --name to import under another name")
    staging = root / f".import-{name}-{os.getpid()}"
    if staging.exists():
        shutil.rmtree(staging)
    (staging / SOURCE).mkdir(parents=True)
    for path, relative in loaded.files:
        destination = staging / SOURCE / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, destination)
    with open(staging / ITEMS, "w", encoding="utf-8") as out:
        for row in rows:
            out.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    counts = {split: sum(r["split"] == split for r in rows) for split in ("train", "eval")}
    record = {"format": FORMAT, "kind": kind, "name": name, "source": source, "options": options,
              "split_from": split_from, "eval_share": eval_share, "min_recall": min_recall, "package": plugin.package,
              "version": package_version(plugin.package), "description": loaded.description,
              "tags": list(loaded.tags), "settings": loaded.settings, "notes": loaded.notes, "counts": counts,
              "digest": source_digest(staging / SOURCE),
              "imported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (staging / RECORD).write_text(json.dumps(record, indent=1, sort_keys=True, ensure_ascii=False))
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    return ImportResult(name, kind, target, counts, list(loaded.notes))


_VERSION = re.compile(r"v?\d+(\.\d+)*")


def default_name(source: str) -> str:
    """A domain name from a source: a file's stem (``lm_eval:gsm8k/gsm8k.yaml`` -> gsm8k), a module's last
    part, a task's name after ':' or '@' (Inspect's FILE.py@TASK), a hub id's name without its version
    (``owner/reverse-text@0.1.2`` -> reverse_text)."""
    if "@" in source and not Path(source).exists():
        before, after = source.rsplit("@", 1)
        source = before if _VERSION.fullmatch(after) else after
    if ":" in source and not Path(source).exists():
        prefix, rest = source.split(":", 1)
        # a packaged file (lm_eval:FAMILY/FILE.yaml) is named after the file; MODULE:TASK after the task
        source = rest if ("/" in rest or Path(rest).suffix) else rest.rsplit(".", 1)[-1]
    base = Path(source.rstrip("/")).stem if ("/" in source or Path(source).suffix in (".py", ".yaml", ".yml")) \
        else source.rsplit(".", 1)[-1]
    name = "".join(c if c.isalnum() else "_" for c in base.lower()).strip("_")
    if not name or not name[0].isalpha():
        name = f"imported_{name}".rstrip("_")
    return name


def imported_environment_folders(root: Path | None) -> list[Path]:
    if root is None or not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and (p / RECORD).is_file())


def read_record(folder: Path) -> dict:
    try:
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DomainError(f"{folder / RECORD} is unreadable ({exc}): import the environment again") from exc
    if record.get("format") != FORMAT:
        raise DomainError(f"{folder / RECORD} has format {record.get('format')!r}, this Assay reads {FORMAT}: "
                          "import the environment again")
    return record


def environment_domain(folder: Path) -> Domain:
    """The imported environment in ``folder`` as a :class:`~domains.Domain`; its scorer is rebuilt by the
    framework on first use, once per process."""
    folder = Path(folder)
    record = read_record(folder)
    if source_digest(folder / SOURCE) != record["digest"]:
        raise DomainError(f"{folder / SOURCE} changed after it was imported: import it again "
                          f"(`assay domains import {record['kind']} {record['source']} --name {record['name']} "
                          "--replace`)")
    rows: dict[str, list[dict]] = {"train": [], "eval": []}
    with open(folder / ITEMS, encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            rows[row["split"]].append({k: row[k] for k in ("id", "prompt", "answer", "metadata")})
    kind = record["kind"]
    lock = threading.Lock()
    built: list[ScoreManyFn] = []

    def scorer() -> ScoreManyFn:
        with lock:
            if not built:
                built.append(importer(kind).scorer(folder / SOURCE, record["settings"]))
            return built[0]

    def samples(split: str, n: int, seed: int):
        chosen = list(rows[split])
        if split == "train":  # training draws vary with the seed; eval is in the source's order
            random.Random(seed).shuffle(chosen)
        return [dict(row, metadata=dict(row["metadata"])) for row in chosen[:n]]

    def score_many(completions: Sequence[str], batch: Sequence[dict]) -> list[float]:
        return [float(v) for v in scorer()(list(completions), list(batch))]

    def score(completion: str, sample: dict) -> float:
        return score_many([completion], [sample])[0]

    version = record.get("version") or "?"
    return Domain(
        name=record["name"], owner=f"imported:{kind}",
        description=f"{record['description']} (imported from {kind} {record['source']!r} with {record['package']} "
                    f"{version}; {len(rows['train'])} train, {len(rows['eval'])} eval; scored by {record['package']})",
        tags=tuple(dict.fromkeys(["imported", kind, *record.get("tags", [])])), samples=samples, score=score,
        gate_thresholds={"min_recall": float(record.get("min_recall", DEFAULT_MIN_RECALL))},
        score_many=score_many, eval_size=max(1, min(DEFAULT_EVAL_SIZE, len(rows["eval"]))))


__all__ = ["DEFAULT_MIN_RECALL", "EVAL_SHARE", "IMPORTERS", "ImportRefused", "ImportResult", "ImportedItem", "Importer", "LoadedSource",
           "SPLIT_FROM", "assign_splits", "content_id", "default_name", "environment_domain", "environments_root",
           "hash_split", "import_environment", "imported_environment_folders", "importer", "package_version",
           "read_record", "require_package", "source_digest"]
