"""Child processes for the lake concurrency test: a writer that replaces one batch over and over,
and a reader that counts it in a tight loop. Both run until a stop file appears, then print one
JSON line with what they did.

``python -m tests.pipelines.lake_load replace HOME DOMAIN ROWS STOP_FILE [aside]``
    replaces ``ingest/domain=DOMAIN/batch=fixed`` (ROWS samples, ROWS // 10 quarantined) again and
    again; ``aside`` forces the commit used where the file system cannot swap folders atomically.
``python -m tests.pipelines.lake_load read HOME STOP_FILE``
    runs ``select domain, count(*) from samples`` through ``Lake.sql`` (what ``assay sql`` runs)
    as fast as it can and records every answer it got, per domain.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path

import polars as pl

from storage import lake as lake_module
from storage.tables import QUARANTINE, SAMPLES, conform


def replace(home: str, domain: str, rows: str, stop_file: str, *mode: str) -> None:
    if "aside" in mode:
        lake_module._renameat2 = None
    lake = lake_module.Lake.at(home)
    n, rounds = int(rows), 0
    stop = Path(stop_file)
    while not stop.exists():
        batch = {"domain": [domain] * n, "batch": ["fixed"] * n, "id": [f"{domain}-{rounds}-{i}" for i in range(n)],
                 "prompt": [f"round {rounds} item {i}" for i in range(n)], "answer": ["x"] * n,
                 "ingested_at": ["2026-01-01T00:00:00+00:00"] * n, "reasons": [["malformed"]] * n}
        frame = pl.DataFrame(batch)
        lake.write_batch("ingest", {"domain": domain, "batch": "fixed"},
                         {"samples": conform(frame, SAMPLES), "quarantine": conform(frame.head(n // 10), QUARANTINE)})
        rounds += 1
        time.sleep(0.01)  # leave the CPUs to the other processes of the test
    print(json.dumps({"rounds": rounds, "swap": "aside" if "aside" in mode else "exchange"}), flush=True)


def read(home: str, stop_file: str) -> None:
    lake = lake_module.Lake(Path(home))
    seen: dict[str, Counter] = {}
    reads = 0
    stop = Path(stop_file)
    while not stop.exists():
        frame = lake.sql("select domain, count(*) as n from samples group by 1")
        for domain, n in frame.iter_rows():
            seen.setdefault(domain, Counter())[str(n)] += 1
        reads += 1
    print(json.dumps({"reads": reads, "seen": seen}), flush=True)


if __name__ == "__main__":
    {"replace": replace, "read": read}[sys.argv[1]](*sys.argv[2:])
