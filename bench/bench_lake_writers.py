"""Concurrent writers on the team lake (issue 30, item 3): ``--writers`` processes committing
``--commits`` one-batch commits each (8 rows, a new batch each) into ONE Iceberg table at once,
the workload ``bench/bench_ducklake.py`` runs against DuckLake. Rows lost (must be 0) and
commits/s of the commit loops (process start and catalog connection left out). Starts its own
PostgreSQL and moto S3 server (:class:`storage.team_services.TeamServices`).

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_lake_writers [--writers 3 --commits 50]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _writer(args) -> dict:
    env, home, worker, commits = args
    os.environ.update(env)
    import polars as pl

    from storage.deployment import open_lake

    lake = open_lake(home, write=True)
    lake.read("shared")  # connect to the catalog before the clock starts
    began = time.perf_counter()
    for i in range(commits):
        lake.write_batch("shared", {"writer": f"w{worker}", "batch": f"b{i}"},
                         {"part": pl.DataFrame({"v": list(range(8))})})
    return {"worker": worker, "seconds": time.perf_counter() - began}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--commits", type=int, default=50)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    from storage.deployment import open_lake
    from storage.team_services import TeamServices

    load_before = os.getloadavg()
    services = TeamServices.start(tempfile.mkdtemp(prefix="assay-team-"))
    scratch = Path(tempfile.mkdtemp(prefix="assay-bench-writers-"))
    env = {**services.env(), "ASSAY_LAKE_CATALOG": f"bench-writers-{os.getpid()}"}
    try:
        os.environ.update(env)
        open_lake(scratch, write=True).write_batch("shared", {"writer": "setup", "batch": "b"},
                                                   {"part": __import__("polars").DataFrame({"v": [0]})})
        with ProcessPoolExecutor(args.writers, mp_context=multiprocessing.get_context("spawn")) as pool:
            done = list(pool.map(_writer, [(env, str(scratch), w, args.commits) for w in range(args.writers)]))
        rows = open_lake(scratch).read("shared").filter(__import__("polars").col("writer") != "setup")
        loop = max(d["seconds"] for d in done)
        out = {"writers": args.writers, "commits_each": args.commits, "loop_s": loop,
               "commits_per_s": args.writers * args.commits / loop, "rows": rows.height,
               "expected_rows": args.writers * args.commits * 8,
               "batches": rows.select("writer", "batch").unique().height, "load_before": load_before,
               "load_after": os.getloadavg()}
    finally:
        services.stop()
        shutil.rmtree(services.folder, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{out['writers']} writers x {out['commits_each']} commits into one Iceberg table: {loop:.1f} s of commit "
          f"loops, {out['commits_per_s']:.2f} commits/s, rows {out['rows']}/{out['expected_rows']}, batches "
          f"{out['batches']} (load {load_before} -> {out['load_after']})", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
