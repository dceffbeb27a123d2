"""DuckLake beside the team lake's Iceberg (issue 30, item 3): the same write workload, measured.

DuckLake is DuckDB's lakehouse format: table metadata as rows in a SQL catalog (here the same
kind of PostgreSQL the team profile runs), data as Parquet on object storage. NOT a project
dependency: run this in a throwaway virtual environment (DuckDB 1.4.4 and its extensions from
PyPI), against services the project's own venv starts (:class:`storage.team_services.TeamServices`:
PostgreSQL and moto's S3 server):

    python3 -m venv /tmp/dl && /tmp/dl/bin/pip install duckdb==1.4.4 duckdb-ext-ducklake==1.4.4.20260205 \\
        duckdb-ext-postgres==1.4.4.20260205 duckdb-ext-httpfs==1.4.4.20260205 polars pyarrow psycopg2-binary
    OMP_NUM_THREADS=2 /tmp/dl/bin/python bench/bench_ducklake.py [--checkpoints 20 --domains 300]
        [--history 2000] [--writers 3 --writer-commits 50] [--json FILE]

Measured, in one run:

1. **unit writes**: every result of ``--checkpoints`` x ``--domains`` as sweeps write them
   (``bench.bench_team_lake.unit_sequence``: the same rows, seed and batches as the Iceberg bench's
   ``--unit-writes``), one DuckLake transaction per checkpoint holding both tables (a replace-aware
   writer: the unit's old rows deleted, the new ones inserted);
2. **history**: ``--history`` one-batch commits of 8 rows (a new batch each), no maintenance: does
   a commit's cost grow with the commits before it?
3. **reads**: mean score per (checkpoint, domain) over all of ``results``, cold (a new connection
   and ATTACH) and warm (the same connection again), beside DuckDB over the same rows as a local
   hive folder of one Parquet file per batch (the local lake's layout);
4. **concurrent writers**: ``--writers`` processes committing ``--writer-commits`` batches each into
   one table at once: rows lost (must be 0), conflicts retried, throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

PROJECT_PYTHON = REPO / ".venv" / "bin" / "python"
START_SERVICES = """
import json, sys, tempfile
from storage.team_services import TeamServices
s = TeamServices.start(tempfile.mkdtemp(prefix="assay-team-"))
print(json.dumps({"postgres_url": s.postgres_url, "s3_endpoint": s.s3_endpoint, "bucket": s.bucket, "env": s.env()}),
      flush=True)
sys.stdin.readline()
s.stop()
"""


def _extensions() -> Path:
    import duckdb_ext  # the duckdb-ext-* wheels unpack into this package

    return Path(duckdb_ext.__path__[0]) / "extensions" / "v1.4.4" / "linux_amd64"


def connect(services: dict, database: str, data_path: str):
    """A DuckDB connection with the lake attached as ``lake`` (catalog in PostgreSQL ``database``)."""
    import duckdb
    from urllib.parse import urlsplit

    con = duckdb.connect()
    for ext in ("httpfs", "postgres_scanner", "ducklake"):
        con.execute(f"LOAD '{_extensions() / (ext + '.duckdb_extension')}'")
    env = services["env"]
    endpoint = urlsplit(services["s3_endpoint"])
    con.execute(f"""CREATE SECRET s3 (TYPE s3, KEY_ID '{env["AWS_ACCESS_KEY_ID"]}', SECRET '{env["AWS_SECRET_ACCESS_KEY"]}',
                    ENDPOINT '{endpoint.netloc}', URL_STYLE 'path', USE_SSL false, REGION 'us-east-1')""")
    pg = urlsplit(services["postgres_url"])
    con.execute(f"ATTACH 'ducklake:postgres:dbname={database} host={pg.hostname} port={pg.port} user={pg.username}' "
                f"AS lake (DATA_PATH '{data_path}')")
    return con


def create_database(services: dict, name: str) -> None:
    import psycopg2

    conn = psycopg2.connect(services["postgres_url"])
    conn.autocommit = True
    conn.cursor().execute(f'CREATE DATABASE "{name}"')
    conn.close()


def run_units(con, units) -> dict:
    import polars as pl

    times = []
    created = set()
    for unit in units:
        began = time.perf_counter()
        con.execute("BEGIN")
        for table in dict.fromkeys(t for t, *_ in unit):
            frame = pl.concat([f["part"] for t, _, f, _ in unit if t == table])  # noqa: F841 (read by DuckDB)
            if table not in created:
                con.execute(f"CREATE TABLE IF NOT EXISTS lake.{table} AS SELECT * FROM frame LIMIT 0")
                con.execute(f"ALTER TABLE lake.{table} SET PARTITIONED BY (checkpoint)")
                created.add(table)
            checkpoints = sorted({p["checkpoint"] for t, p, _, _ in unit if t == table})
            con.execute(f"DELETE FROM lake.{table} WHERE checkpoint IN ({', '.join('?' * len(checkpoints))})",
                        checkpoints)
            con.execute(f"INSERT INTO lake.{table} SELECT * FROM frame")
        con.execute("COMMIT")
        times.append(time.perf_counter() - began)
    return {"seconds": sum(times), "first_unit_s": times[0], "last_unit_s": times[-1], "unit_s": times}


def run_history(con, commits: int) -> dict:
    import numpy as np
    import polars as pl

    con.execute("CREATE TABLE lake.history (checkpoint VARCHAR, domain VARCHAR, batch VARCHAR, item_id VARCHAR, "
                "sample_idx BIGINT, score DOUBLE)")
    times = []
    for i in range(commits):
        frame = pl.DataFrame({"checkpoint": ["c"] * 8, "domain": [f"d{i % 300:03d}"] * 8, "batch": [f"b{i}"] * 8,  # noqa: F841
                              "item_id": [f"i{j}" for j in range(8)], "sample_idx": [0] * 8,
                              "score": [float(j % 2) for j in range(8)]})
        began = time.perf_counter()
        con.execute("INSERT INTO lake.history SELECT * FROM frame")  # autocommit: one snapshot each
        times.append(time.perf_counter() - began)
    head = min(100, commits // 2)
    slope = float(np.polyfit(np.arange(commits), np.asarray(times), 1)[0])
    return {"commits": commits, "first_ms": 1000 * statistics.fmean(times[:head]),
            "last_ms": 1000 * statistics.fmean(times[-head:]), "head": head,
            "slope_ms_per_1000_commits": 1e6 * slope, "commits_per_s": commits / sum(times),
            "deciles_ms": [1000 * statistics.fmean(c) for c in np.array_split(np.asarray(times), 10)]}


READ = "SELECT checkpoint, domain, avg(score) AS mean FROM {source} GROUP BY ALL"


def run_reads(services, database, data_path, units, scratch: Path, repeats: int = 3) -> dict:
    import duckdb

    folder = scratch / "local-results"
    for unit in units:
        for table, partition, frames, _ in unit:
            if table != "results":
                continue
            target = folder.joinpath(*(f"{k}={v}" for k, v in partition.items()))
            target.mkdir(parents=True, exist_ok=True)
            frames["part"].drop(list(partition), strict=False).write_parquet(target / "part.parquet")
    local_source = f"read_parquet('{folder}/**/part.parquet', hive_partitioning = true)"
    local = []
    for _ in range(repeats + 1):
        con = duckdb.connect()
        began = time.perf_counter()
        n = len(con.execute(READ.format(source=local_source)).fetchall())
        local.append(time.perf_counter() - began)
        con.close()
    cold, warm = [], []
    for _ in range(repeats):
        began = time.perf_counter()
        con = connect(services, database, data_path)
        n_cold = len(con.execute(READ.format(source="lake.results")).fetchall())
        cold.append(time.perf_counter() - began)
        began = time.perf_counter()
        n_warm = len(con.execute(READ.format(source="lake.results")).fetchall())
        warm.append(time.perf_counter() - began)
        con.close()
    assert n == n_cold == n_warm, (n, n_cold, n_warm)
    out = {"rows": n, "local_files": sum(1 for _ in folder.rglob("*.parquet")), "local_first_s": local[0],
           "local_s": statistics.median(local[1:]), "cold_s": statistics.median(cold),
           "warm_s": statistics.median(warm)}
    out["cold_ratio"], out["warm_ratio"] = out["cold_s"] / out["local_s"], out["warm_s"] / out["local_s"]
    return out


def _writer(args) -> dict:
    services, database, data_path, worker, commits = args
    import polars as pl

    con = connect(services, database, data_path)
    con.execute("SET ducklake_max_retry_count = 100")
    errors = 0
    began = time.perf_counter()
    for i in range(commits):
        frame = pl.DataFrame({"writer": [f"w{worker}"] * 8, "batch": [f"b{i}"] * 8, "v": list(range(8))})  # noqa: F841
        while True:
            try:
                con.execute("INSERT INTO lake.shared SELECT * FROM frame")
                break
            except Exception:  # a conflict DuckLake's own retries did not resolve: the writer redoes it
                errors += 1
                if errors > 1000:
                    raise
    return {"worker": worker, "seconds": time.perf_counter() - began, "errors_redone": errors}


def run_writers(services, database, data_path, writers: int, commits: int) -> dict:
    import multiprocessing

    con = connect(services, database, data_path)
    con.execute("CREATE TABLE lake.shared (writer VARCHAR, batch VARCHAR, v BIGINT)")
    con.close()
    began = time.perf_counter()
    with ProcessPoolExecutor(writers, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = list(pool.map(_writer, [(services, database, data_path, w, commits) for w in range(writers)]))
    seconds = time.perf_counter() - began
    con = connect(services, database, data_path)
    rows = con.execute("SELECT count(*), count(DISTINCT writer || '/' || batch) FROM lake.shared").fetchone()
    con.close()
    loop = max(d["seconds"] for d in done)  # the commit loops, without process start and ATTACH
    return {"writers": writers, "commits_each": commits, "seconds": seconds, "loop_s": loop, "rows": rows[0],
            "batches": rows[1], "expected_rows": writers * commits * 8, "commits_per_s": writers * commits / loop,
            "errors_redone": sum(d["errors_redone"] for d in done), "per_writer": done}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", type=int, default=20)
    parser.add_argument("--domains", type=int, default=300)
    parser.add_argument("--history", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=3)
    parser.add_argument("--writer-commits", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    import duckdb

    from bench.bench_team_lake import unit_sequence

    figures = {"command": "bench/bench_ducklake.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "duckdb": duckdb.__version__, "load_before": os.getloadavg(), "cores": os.cpu_count()}
    print(f"duckdb {duckdb.__version__}; load before {figures['load_before']}", flush=True)
    starter = subprocess.Popen([str(PROJECT_PYTHON), "-c", START_SERVICES], cwd=REPO, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    services = json.loads(starter.stdout.readline())
    run = uuid.uuid4().hex[:8]
    database = f"ducklake_{run}"
    data_path = f"s3://{services['bucket']}/ducklake-{run}/"
    scratch = Path(tempfile.mkdtemp(prefix="assay-bench-ducklake-"))
    try:
        create_database(services, database)
        units = unit_sequence(args.checkpoints, args.domains)
        rows = sum(r for unit in units for *_, r in unit)
        con = connect(services, database, data_path)
        print(f"[unit writes] {args.checkpoints} x {args.domains}: {sum(map(len, units)):,} batches, {rows:,} rows, "
              "one transaction per checkpoint", flush=True)
        figures["unit_writes"] = {"rows": rows, **run_units(con, units)}
        u = figures["unit_writes"]
        print(f"  {u['seconds']:.1f} s, first unit {u['first_unit_s']:.2f} s, last {u['last_unit_s']:.2f} s "
              f"(load {os.getloadavg()})", flush=True)
        figures["reads"] = run_reads(services, database, data_path, units, scratch, args.repeats)
        r = figures["reads"]
        print(f"[reads] mean per (checkpoint, domain): local hive {r['local_s']:.3f} s ({r['local_files']} files), "
              f"DuckLake cold {r['cold_s']:.3f} s ({r['cold_ratio']:.2f}x), warm {r['warm_s']:.3f} s "
              f"({r['warm_ratio']:.2f}x) (load {os.getloadavg()})", flush=True)
        if args.history:
            figures["history"] = run_history(con, args.history)
            h = figures["history"]
            print(f"[history] {h['commits']} commits: first {h['head']} {h['first_ms']:.1f} ms, last {h['last_ms']:.1f} ms, "
                  f"slope {h['slope_ms_per_1000_commits']:+.1f} ms per 1000; deciles "
                  f"{[round(d, 1) for d in h['deciles_ms']]} (load {os.getloadavg()})", flush=True)
        con.close()
        if args.writers:
            figures["writers"] = run_writers(services, database, data_path, args.writers, args.writer_commits)
            w = figures["writers"]
            print(f"[writers] {w['writers']} x {w['commits_each']} commits at once: {w['loop_s']:.1f} s of commit loops, "
                  f"{w['commits_per_s']:.1f} commits/s, rows {w['rows']}/{w['expected_rows']}, batches {w['batches']}, "
                  f"conflicts redone by the writers {w['errors_redone']} (load {os.getloadavg()})", flush=True)
    finally:
        starter.stdin.write("\n")
        starter.stdin.close()
        starter.wait(timeout=60)
    figures["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
