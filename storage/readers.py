"""Read user files (JSONL, CSV, Parquet) into raw records, keeping every row and its line number.

Nothing is dropped here: a line that cannot be decoded becomes a record with ``error`` set, so the
ingest path can quarantine it as ``malformed`` with its original text.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from storage.errors import UserError

SUPPORTED = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class UnsupportedFormat(UserError, ValueError):
    pass


@dataclass
class RawRecord:
    line: int  # 1-based line (JSONL/CSV) or row (Parquet) number in the source file
    raw: str  # the original content, as text, kept for the quarantine
    value: Any = None  # the decoded value (a dict for a good row)
    error: str | None = None  # why decoding failed


def file_format(path: Path) -> str:
    fmt = SUPPORTED.get(path.suffix.lower())
    if fmt is None:
        raise UnsupportedFormat(
            f"unsupported file format {path.suffix or '(no extension)'!r} for {path}: "
            f"use one of {', '.join(sorted(SUPPORTED))}"
        )
    return fmt


class UnreadableFile(UserError, FileNotFoundError):
    """A path given as an input file that is missing, a folder, or not readable."""


def check_readable(path: str | Path) -> Path:
    """``path`` as a Path if it is a file this process may read, else :class:`UnreadableFile`
    saying which of the three it is."""
    path = Path(path)
    if not path.exists():
        raise UnreadableFile(f"no such file: {path}")
    if not path.is_file():
        raise UnreadableFile(f"{path} is {'a folder' if path.is_dir() else 'not a regular file'}: give the path of "
                             "a file")
    if not os.access(path, os.R_OK):
        raise UnreadableFile(f"cannot read {path}: permission denied (check its owner and mode)")
    return path


def read_records(path: Path) -> Iterator[RawRecord]:
    fmt = file_format(path)
    check_readable(path)
    yield from {"jsonl": _read_jsonl, "csv": _read_csv, "parquet": _read_parquet}[fmt](path)


def _read_jsonl(path: Path) -> Iterator[RawRecord]:
    with open(path, "rb") as fh:
        for number, chunk in enumerate(fh, start=1):
            try:
                text = chunk.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield RawRecord(number, chunk.decode("utf-8", errors="replace").rstrip("\r\n"),
                                error=f"not valid UTF-8: {exc.reason} at byte {exc.start}")
                continue
            text = text.rstrip("\r\n")
            if number == 1:
                text = text.lstrip("\ufeff")
            if not text.strip():
                continue  # blank lines are layout, not rows
            try:
                value = json.loads(text)
            except json.JSONDecodeError as exc:
                yield RawRecord(number, text, error=f"invalid JSON: {exc.msg} at column {exc.colno}")
                continue
            if not isinstance(value, dict):
                yield RawRecord(number, text, error=f"expected a JSON object, got {type(value).__name__}")
                continue
            yield RawRecord(number, text, value=value)


def _read_csv(path: Path) -> Iterator[RawRecord]:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Decode line by line so one bad line does not sink the file.
        text = None
    if text is None:
        lines = data.split(b"\n")
        good = []
        for number, chunk in enumerate(lines, start=1):
            try:
                good.append(chunk.decode("utf-8"))
            except UnicodeDecodeError as exc:
                if number == 1:
                    raise UnsupportedFormat(f"{path}: the CSV header is not valid UTF-8") from exc
                yield RawRecord(number, chunk.decode("utf-8", errors="replace"),
                                error=f"not valid UTF-8: {exc.reason} at byte {exc.start}")
                good.append("")  # keep line numbers aligned
        text = "\n".join(good)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return
    header = [h.strip() for h in header]
    start_line = reader.line_num + 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield RawRecord(start_line, "", error=f"CSV error: {exc}")
            start_line = reader.line_num + 1
            continue
        line = start_line
        start_line = reader.line_num + 1
        if not fields or all(not f.strip() for f in fields):
            continue
        raw = _csv_line(fields)
        if len(fields) != len(header):
            yield RawRecord(line, raw, error=f"expected {len(header)} columns, got {len(fields)}")
            continue
        yield RawRecord(line, raw, value=dict(zip(header, fields)))


def _csv_line(fields: list[str]) -> str:
    out = io.StringIO()
    csv.writer(out).writerow(fields)
    return out.getvalue().rstrip("\r\n")


def _read_parquet(path: Path) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise UnsupportedFormat(f"cannot read {path} as Parquet: {exc}") from exc
    for number, row in enumerate(table.to_pylist(), start=1):
        yield RawRecord(number, json.dumps(row, default=str, ensure_ascii=False), value=row)
