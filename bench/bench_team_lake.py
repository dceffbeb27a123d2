"""Team lake (issue 17): the lake as Apache Iceberg tables on object storage vs the local Parquet lake.

The team profile keeps the lake as Iceberg tables (pyiceberg, SQL catalog on PostgreSQL, data and
metadata on S3; :mod:`storage.iceberg_lake`); the local profile as Parquet folders
(:mod:`storage.lake`). This bench starts its own PostgreSQL and S3 server (moto's, in-process Python,
objects in memory: :class:`storage.team_services.TeamServices`), uses a catalog of its own, stops
both at the end, and measures in one run:

1. **writes**: the same sequence of ``write_batch`` calls into ``Lake.at(tmp)`` and into the
   ``IcebergLake``: ingest batches (``samples`` + ``quarantine`` frames, 24-200 rows, ~15%
   quarantined) then sweep ``results`` batches (one per (checkpoint, domain), 24-200 rows, the
   columns of ``storage.tables.RESULTS``). Batches/s, rows/s, the ratio, and how an Iceberg commit
   slows as the table grows (first 50 vs last 50 results batches: every commit reads the table's
   metadata and manifest list and writes new ones), with a linear fit extrapolated to the
   dashboard's 6,000 results batches (300 domains x 20 checkpoints), written one commit each;
2. **reads at the dashboard's scale** (300 domains x 20 checkpoints, the ``bench_dashboard`` spec of
   ``ui.synthetic``): the synthetic lake is written locally (6,000 batches one commit each would
   take hours on Iceberg here: see 1), then copied table by table into Iceberg in a few large
   appends (same tables, partition spec, ``_frame`` column and ``assay.frame.<name>`` properties as
   ``IcebergLake.write_batch`` makes: its own ``_commit`` and helpers). ``--copy-layout compact``
   (default) leaves FEWER, LARGER files than a real lake (a few per table, the partition spec added
   after the copy); ``partitioned`` one file per partition, as many as a lake written batch by
   batch (~16.5k S3 objects at 300 x 20, ~13 files/s here: over 20 min). Either has far fewer snapshots and manifests than a
   real one. Then, local vs Iceberg cold (empty snapshot
   cache: every read exports from S3) and warm (cache hit; the catalog and table metadata are
   still read on every call):
   - overview: ``ui.queries.open_views`` + ``recent_cells``, ``last_promotion``, ``gate_failures_since``
   - naive SQL: ``lake.sql`` of the deltas vs the champion from per-sample ``results`` (and the
     gate failures), the heaviest query ``bench_dashboard`` times
   - domain page: ``open_views`` of one domain's partitions + ``item_changes`` and ``score_trend``
   - polars: ``lake.read("results")`` and a mean score per (checkpoint, domain)

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_team_lake
        [--results-batches 300 --ingest-batches 60] [--domains 300 --checkpoints 20 --items 20]
        [--repeats 3] [--copy-layout compact|partitioned] [--synthetic-home DIR]
        [--skip-writes | --skip-reads] [--json FILE]

The default run takes ~6-10 minutes on 2 shared cores. The load average is printed before and
during each phase: a ratio taken on a saturated machine says little.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import polars as pl  # noqa: E402

DASHBOARD_BATCHES = 6000  # results batches at 300 domains x 20 checkpoints


# -- load average ------------------------------------------------------------------------------

class LoadSampler:
    """The 1-minute load average every ``every`` seconds, in a daemon thread, per named phase."""

    def __init__(self, every: float = 2.0):
        self.every, self.samples, self.phases = every, [], {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), os.getloadavg()[0]))
            self._stop.wait(self.every)

    def start(self) -> "LoadSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def phase(self, name: str):
        sampler = self

        class _Phase:
            def __enter__(self):
                self.began = time.monotonic()
                return self

            def __exit__(self, *exc):
                ended = time.monotonic()
                inside = [x for t, x in sampler.samples if self.began <= t <= ended] or [os.getloadavg()[0]]
                sampler.phases[name] = {"mean": statistics.fmean(inside), "max": max(inside)}
                return False

        return _Phase()


def _loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


# -- write side --------------------------------------------------------------------------------

def write_sequence(results: int, ingest: int, domains: int, seed: int = 0) -> list[tuple[str, dict, dict, int]]:
    """(table, partition, frames, rows) of ``ingest`` ingest batches then ``results`` results
    batches (one per (checkpoint, domain), checkpoints in order), built before anything is timed."""
    from storage import tables as T

    rng = random.Random(seed)
    now = datetime.now(timezone.utc).isoformat()
    gen_params = json.dumps({"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 256, "prompt_format": "chat"})
    words = "the answer is step so we add then carry one which gives total of".split()
    sequence = []
    for i in range(ingest):
        d, batch = f"bench_{i % domains:03d}", f"b{i // domains}"
        samples, quarantined = [], []
        for j in range(rng.randint(24, 200)):
            prompt = " ".join(rng.choice(words) for _ in range(rng.randint(8, 60))) + f" {j}?"
            if rng.random() < 0.15:
                quarantined.append({"domain": d, "split": "train", "id": f"{batch}-{j}", "source": f"{batch}.jsonl",
                                    "line": j + 1, "reasons": [rng.choice(("duplicate", "pii", "too_long"))],
                                    "raw": json.dumps({"prompt": prompt, "answer": str(j)}), "prompt": prompt,
                                    "answer": str(j), "metadata": "{}", "batch": batch, "ingested_at": now,
                                    "detail": None})
            else:
                samples.append({"domain": d, "split": "train", "id": f"{batch}-{j}", "prompt": prompt,
                                "answer": str(j), "metadata": "{}", "source": f"{batch}.jsonl", "line": j + 1,
                                "batch": batch, "content_hash": uuid.UUID(int=rng.getrandbits(128)).hex,
                                "ingested_at": now})
        frames = {"samples": pl.DataFrame(samples, schema=T.SAMPLES, orient="row"),
                  "quarantine": pl.DataFrame(quarantined, schema=T.QUARANTINE, orient="row")}
        sequence.append(("ingest", {"domain": d, "batch": batch}, frames, len(samples) + len(quarantined)))
    for i in range(results):
        c, d = f"ckpt-{i // domains:02d}", f"bench_{i % domains:03d}"
        rows = []
        for j in range(rng.randint(24, 200)):
            score = float(rng.random() < 0.5)
            rows.append({"checkpoint": c, "domain": d, "item_id": f"eval-{j // 4}", "sample_idx": j % 4,
                         "score": score, "completion": " ".join(rng.choice(words) for _ in range(rng.randint(5, 80))),
                         "latency_s": rng.uniform(0.05, 2.0), "tokens": rng.randint(5, 256),
                         "cluster_id": f"tmpl-{j % 7}", "gen_config": "a1b2c3d4e5f6", "created_at": now,
                         "gen_params": gen_params, "engine": "vllm-0.32.0/bfloat16"})
        sequence.append(("results", {"checkpoint": c, "domain": d, "batch": "b0"},
                         {"part": pl.DataFrame(rows, schema=T.RESULTS, orient="row")}, len(rows)))
    return sequence


def time_writes(lake, sequence) -> list[float]:
    times = []
    for table, partition, frames, _ in sequence:
        began = time.perf_counter()
        lake.write_batch(table, partition, frames)
        times.append(time.perf_counter() - began)
    return times


def write_figures(times: list[float], sequence, table: str) -> dict:
    picked = [(t, s[3]) for t, s in zip(times, sequence) if s[0] == table]
    if not picked:
        return {}
    seconds, rows = sum(t for t, _ in picked), sum(r for _, r in picked)
    return {"batches": len(picked), "rows": rows, "seconds": seconds, "batches_per_s": len(picked) / seconds,
            "rows_per_s": rows / seconds, "median_ms": 1000 * statistics.median(t for t, _ in picked)}


def growth(times: list[float], head: int = 50) -> dict:
    """Mean commit time of the first and last ``head`` batches, a linear fit t(n) = a + b*n, and the
    total it predicts for the dashboard's 6,000 batches written one commit each."""
    import numpy as np

    head = min(head, len(times) // 2) or 1
    n = np.arange(len(times))
    b, a = np.polyfit(n, np.asarray(times), 1) if len(times) > 1 else (0.0, times[0])
    total = float(DASHBOARD_BATCHES * a + b * DASHBOARD_BATCHES * (DASHBOARD_BATCHES - 1) / 2)
    last = statistics.fmean(times[-head:])
    # floor: what was measured, then every further batch at the last batches' pace (no more growth)
    floor = sum(times) + max(0, DASHBOARD_BATCHES - len(times)) * last
    return {"head": head, "first_ms": 1000 * statistics.fmean(times[:head]), "n": len(times),
            "last_ms": 1000 * last, "floor_6000_s": floor, "fit_a_ms": 1000 * float(a),
            "fit_b_ms_per_batch": 1000 * float(b), "predicted_6000_s": total,
            "predicted_6000th_ms": 1000 * float(a + b * (DASHBOARD_BATCHES - 1))}


def s3_requests(log: Path, since: int) -> tuple[int, dict[str, int]]:
    """Lines of moto's request log after byte ``since``, counted by HTTP method."""
    counts: dict[str, int] = {}
    with open(log, "rb") as handle:
        handle.seek(since)
        for line in handle:
            for method in (b'"GET ', b'"PUT ', b'"HEAD ', b'"POST ', b'"DELETE '):
                if method in line:
                    key = method.strip(b'" ').decode()
                    counts[key] = counts.get(key, 0) + 1
    return sum(counts.values()), counts


# -- read side ---------------------------------------------------------------------------------

def copy_to_iceberg(local, ice, tables: list[str], chunk_rows: int, layout: str) -> dict:
    """Copy the local lake's ``tables`` into ``ice`` in appends of up to ``chunk_rows`` rows: the
    table, partition spec (the batch key), union schema, ``_frame`` column and frame properties that
    ``IcebergLake.write_batch`` makes (through its own ``_commit`` and helpers), in far fewer commits.

    ``layout="partitioned"``: the table is partitioned by the batch key before the copy, so the
    appends write one data file per partition, as many as a lake written batch by batch (slow on
    moto: ~4 S3 requests per file). ``"compact"``: the copy goes into the unpartitioned table, a
    few large files per table, and the partition spec is added after it (files written later would
    follow it): far fewer, larger files than a real lake, so a cold read fetches fewer objects and
    a one-domain read cannot skip files by partition."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError

    from storage import iceberg_lake as IL

    summary = {}
    for table in tables:
        base = local.table_dir(table)
        files = sorted(base.rglob("*.parquet"))
        if not files:
            continue
        keys = [part.split("=", 1)[0] for part in files[0].relative_to(base).parent.parts if "=" in part]
        frames = sorted({f.stem for f in files})
        commits = 0
        began = time.perf_counter()
        for name in frames:
            data = local.read(table, name)
            for chunk in _chunks(data, keys, chunk_rows, layout):
                arrow = IL._batch_table({}, {name: chunk})

                def commit(tbl, arrow=arrow, name=name, columns=chunk.columns) -> None:
                    with tbl.transaction() as tx:
                        with tx.update_schema() as update:
                            update.union_by_name(IL._without_nulls(arrow.schema))
                        prop = {f"{IL.FRAME_PROPERTY}{name}":
                                json.dumps(IL._frame_columns(tbl, name, columns, {k: "" for k in keys}))}
                        if any(tbl.properties.get(k) != v for k, v in prop.items()):
                            tx.set_properties(prop)
                        tx.append(IL.conform_arrow(arrow, tx.table_metadata.schema().as_arrow()))

                if layout == "compact" and ice.iceberg_table(table) is None:
                    try:
                        ice.catalog.create_namespace(IL.NAMESPACE)
                    except NamespaceAlreadyExistsError:
                        pass
                    ice.catalog.create_table((IL.NAMESPACE, table), schema=IL._without_nulls(arrow.schema))
                ice._commit(table, arrow.schema, keys, commit)
                commits += 1
        tbl = ice.iceberg_table(table)
        if layout == "compact":
            with tbl.update_spec() as spec:
                for key in keys:
                    spec.add_identity(key)
            tbl = ice.iceberg_table(table)
        snap = tbl.current_snapshot()
        summary[table] = {"local_files": len(files), "iceberg_data_files": int(snap.summary["total-data-files"]),
                          "commits": commits, "rows": int(snap.summary["total-records"]),
                          "seconds": time.perf_counter() - began}
    return summary


def _chunks(data: pl.DataFrame, keys: list[str], rows: int, layout: str, partitions: int = 300):
    """Slices of ``rows`` rows (compact), or of ``partitions`` whole partitions (partitioned: pyiceberg
    splits an append by partition with a pass over the rows per partition, so thousands of
    partitions in one append cost minutes)."""
    if layout != "partitioned" or not keys:
        yield from (data.slice(offset, rows) for offset in range(0, data.height, rows))
        return
    data = data.with_columns(pl.concat_str([pl.col(k).cast(pl.Utf8) for k in keys], separator="\x1f").alias("__part"))
    parts = data["__part"].unique(maintain_order=True).to_list()
    for start in range(0, len(parts), partitions):
        yield data.filter(pl.col("__part").is_in(parts[start:start + partitions])).drop("__part")


def q_overview(lake) -> int:
    from ui import queries as Q

    since = Q.last_day(datetime.now(timezone.utc))
    con = Q.open_views(lake, ["regression", "promotions", "gate_results"],
                       modified_since={"gate_results": since.timestamp() - 120})
    cells = Q.recent_cells(con, 20)
    Q.last_promotion(con)
    Q.gate_failures_since(con, since)
    con.close()
    return cells.height


NAIVE_SQL = """
    WITH champion AS (SELECT candidate FROM promotions WHERE promoted ORDER BY created_at DESC LIMIT 1),
         per AS (SELECT checkpoint, domain, avg(score) AS mean FROM results GROUP BY 1, 2),
         champ AS (SELECT domain, mean FROM per WHERE checkpoint = (SELECT candidate FROM champion))
    SELECT p.checkpoint, p.domain, p.mean - c.mean AS delta, r.verdict
    FROM per p JOIN champ c USING (domain)
    LEFT JOIN regression r ON r.candidate = p.checkpoint AND r.domain = p.domain"""


def q_naive_sql(lake) -> int:
    cells = lake.sql(NAIVE_SQL)
    lake.sql("SELECT domain, count(*) FROM gate_results WHERE NOT success GROUP BY 1")
    return cells.height


def q_domain(lake, domain: str, baseline: str, candidate: str) -> int:
    from ui import queries as Q

    from evaluation.results import compared_rows

    where = [{"domain": domain}]
    cand_rows, base_rows = compared_rows(lake, candidate, baseline, domain)  # as the domain page reads them
    con = Q.open_views(lake, {"sweep_summary": where, "samples": where, "checkpoints": None})
    items = Q.item_changes(con, domain, base_rows, cand_rows)
    Q.score_trend(con, domain)
    con.close()
    return items.height


def q_polars(lake) -> int:
    results = lake.read("results")
    return results.group_by("checkpoint", "domain").agg(pl.col("score").mean()).height


def timed(fn, repeats: int, before=None) -> tuple[list[float], object]:
    times, out = [], None
    for _ in range(repeats):
        if before is not None:
            before()
        began = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - began)
    return times, out


# -- main --------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_team_lake", description=__doc__.splitlines()[0],
                                     epilog=__doc__.split("\n", 2)[2], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results-batches", type=int, default=300,
                        help="results batches written one commit each into both lakes (default 300; the dashboard "
                             "scale is 6000, extrapolated from these)")
    parser.add_argument("--ingest-batches", type=int, default=60, help="ingest batches (samples + quarantine), default 60")
    parser.add_argument("--domains", type=int, default=300, help="read side: domains (default 300)")
    parser.add_argument("--checkpoints", type=int, default=20, help="read side: checkpoints incl. base (default 20)")
    parser.add_argument("--items", type=int, default=20, help="read side: eval items per domain (default 20)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per query and arm (default 3)")
    parser.add_argument("--copy-rows", type=int, default=200_000, help="rows per Iceberg append when copying (default 200000)")
    parser.add_argument("--copy-layout", choices=("compact", "partitioned"), default="compact",
                        help="read side: copy into a few large files per table (default; minutes less) or one file "
                             "per partition as a lake written batch by batch has (~16.5k files at 300 x 20: ~13 files/s on moto here, over 20 min)")
    parser.add_argument("--copy-tables", nargs="+", metavar="TABLE",
                        help="read side: copy only these lake tables into Iceberg (default: all; the queries read "
                             "results sweep_summary regression promotions gate_results ingest checkpoints)")
    parser.add_argument("--synthetic-home", help="reuse (or fill) this ASSAY_HOME for the local synthetic lake")
    parser.add_argument("--skip-writes", action="store_true", help="only the read side")
    parser.add_argument("--unit-writes", action="store_true",
                        help="also write every result of --checkpoints x --domains as sweeps write them (one unit per "
                             "checkpoint: one commit per table on Iceberg), at that full scale")
    parser.add_argument("--skip-reads", action="store_true", help="only the write side")
    parser.add_argument("--history", type=int, default=0,
                        help="also time this many one-batch commits with maintenance (e.g. 2000): is the curve flat?")
    parser.add_argument("--maintain-every", type=int, default=100, help="commits between maintenance runs (default 100)")
    parser.add_argument("--history-baseline", type=int, default=0,
                        help="with --history: this many commits without maintenance first, the same way (e.g. 400)")
    parser.add_argument("--json", help="also write the figures as JSON to this file")
    args = parser.parse_args(argv)

    from storage.deployment import Profile
    from storage.team_services import TeamServices

    figures: dict = {"command": "python -m bench.bench_team_lake " + " ".join(argv if argv is not None else sys.argv[1:]),
                     "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cores": os.cpu_count(),
                     "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_before": _loadavg()}
    print(f"load average before: {figures['load_before']} on {os.cpu_count()} cores", flush=True)
    sampler = LoadSampler().start()
    scratch = Path(tempfile.mkdtemp(prefix="assay-bench-team-lake-"))
    began = time.perf_counter()
    services = TeamServices.start(tempfile.mkdtemp(prefix="assay-team-"))  # under /tmp: the postgres user must reach it
    figures["services_start_s"] = time.perf_counter() - began
    print(f"services: PostgreSQL {services.postgres_url}, S3 (moto) {services.s3_endpoint}, "
          f"started in {figures['services_start_s']:.1f} s", flush=True)
    # IcebergLake takes the S3 keys from the environment, as boto does; the rest comes from the Profile
    for key, value in services.env().items():
        if key.startswith("AWS_"):
            os.environ[key] = value
    run_id = uuid.uuid4().hex[:8]

    def profile(kind: str) -> Profile:
        return Profile(name="team", postgres_url=services.postgres_url, s3_endpoint=services.s3_endpoint,
                       s3_bucket=services.bucket, lake_catalog=f"bench-{kind}-{run_id}")

    s3_log = services.folder / "s3.log"
    try:
        if args.history:
            figures["history"] = run_history(args, scratch, profile("history"), sampler)
        if args.unit_writes:
            figures["unit_writes"] = run_unit_writes(args, scratch, profile("unit"), sampler)
        if not args.skip_writes:
            figures["writes"] = run_writes(args, scratch, profile("write"), sampler, s3_log)
        if not args.skip_reads:
            figures["reads"] = run_reads(args, scratch, profile("read"), sampler)
    finally:
        services.stop()
        sampler.stop()
        shutil.rmtree(services.folder, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    figures["load_phases"] = sampler.phases
    figures["load_after"] = _loadavg()
    report(figures)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    return 0


def run_writes(args, scratch: Path, profile, sampler: LoadSampler, s3_log: Path) -> dict:
    from storage.deployment import open_lake
    from storage.lake import Lake

    sequence = write_sequence(args.results_batches, args.ingest_batches, args.domains)
    local = Lake.at(scratch / "write-local")
    ice = open_lake(scratch / "write-team", write=True, profile=profile)
    out: dict = {"sequence": {"ingest": args.ingest_batches, "results": args.results_batches,
                              "rows": sum(s[3] for s in sequence)}}
    print(f"\n[writes] {len(sequence)} batches ({args.ingest_batches} ingest, {args.results_batches} results, "
          f"{out['sequence']['rows']:,} rows), one write_batch each, into each lake", flush=True)
    with sampler.phase("writes local"):
        local_times = time_writes(local, sequence)
    print(f"  local   {sum(local_times):7.1f} s (load now {_loadavg()})", flush=True)
    log_at = s3_log.stat().st_size
    with sampler.phase("writes iceberg"):
        ice_times = time_writes(ice, sequence)
    requests, by_method = s3_requests(s3_log, log_at)
    print(f"  iceberg {sum(ice_times):7.1f} s (load now {_loadavg()})", flush=True)
    for table in ("ingest", "results"):
        out[table] = {"local": write_figures(local_times, sequence, table),
                      "iceberg": write_figures(ice_times, sequence, table)}
    ice_results = [t for t, s in zip(ice_times, sequence) if s[0] == "results"]
    local_results = [t for t, s in zip(local_times, sequence) if s[0] == "results"]
    if ice_results:
        out["growth_iceberg"] = growth(ice_results)
        out["growth_local"] = growth(local_results)
    tbl = ice.iceberg_table("results")
    out["iceberg_results_snapshots"] = len(tbl.snapshots()) if tbl is not None else 0
    out["s3_requests_per_batch"] = requests / len(sequence) if requests else None
    out["s3_requests_by_method"] = by_method
    return out


def unit_sequence(checkpoints: int, domains: int, seed: int = 1) -> list[list[tuple[str, dict, dict, int]]]:
    """Per checkpoint, what one sweep of it writes: a ``results`` batch and a ``sweep_summary``
    row per domain (the same rows :func:`write_sequence` makes), built before anything is timed."""
    from storage import tables as T

    flat = write_sequence(checkpoints * domains, 0, domains, seed=seed)
    units = []
    for c in range(checkpoints):
        unit = flat[c * domains:(c + 1) * domains]
        summaries = []
        for _, partition, frames, _ in unit:
            part = frames["part"]
            row = {"checkpoint": partition["checkpoint"], "domain": partition["domain"], "n": part["item_id"].n_unique(),
                   "k": 4, "mean": float(part["score"].mean()), "gen_config": "a1b2c3d4e5f6",
                   "created_at": part["created_at"][0]}
            summaries.append(("sweep_summary", {"checkpoint": partition["checkpoint"], "domain": partition["domain"]},
                              {"part": T.conform(pl.DataFrame([{k: row.get(k) for k in T.SWEEP_SUMMARY}],
                                                              schema=T.SWEEP_SUMMARY), T.SWEEP_SUMMARY)}, 1))
        units.append(unit + summaries)
    return units


def time_units(lake, units) -> list[float]:
    """One ``write_batches`` per table per unit (a checkpoint's sweep); seconds per unit."""
    times = []
    for unit in units:
        began = time.perf_counter()
        for table in dict.fromkeys(t for t, *_ in unit):
            lake.write_batches(table, [(p, f) for t, p, f, _ in unit if t == table])
        times.append(time.perf_counter() - began)
    return times


def run_unit_writes(args, scratch: Path, profile, sampler: LoadSampler) -> dict:
    """Every result of ``--checkpoints`` x ``--domains`` written as a sweep writes it: one unit
    (one commit per table on Iceberg) per checkpoint, measured at full scale, into both lakes."""
    from storage.deployment import open_lake
    from storage.lake import Lake

    units = unit_sequence(args.checkpoints, args.domains)
    rows = sum(r for unit in units for *_, r in unit)
    out: dict = {"checkpoints": args.checkpoints, "domains": args.domains, "batches": sum(map(len, units)), "rows": rows}
    print(f"\n[unit writes] {args.checkpoints} checkpoints x {args.domains} domains: {out['batches']:,} batches, "
          f"{rows:,} rows; one write_batches per table per checkpoint", flush=True)
    local = Lake.at(scratch / "unit-local")
    ice = open_lake(scratch / "unit-team", write=True, profile=profile)
    for name, lake in (("local", local), ("iceberg", ice)):
        with sampler.phase(f"unit writes {name}"):
            times = time_units(lake, units)
        out[name] = {"seconds": sum(times), "rows_per_s": rows / sum(times), "first_unit_s": times[0],
                     "last_unit_s": times[-1], "unit_s": times}
        print(f"  {name:8s}{sum(times):7.1f} s, first unit {times[0]:.2f} s, last {times[-1]:.2f} s "
              f"(load now {_loadavg()})", flush=True)
    check = ice.sql("SELECT count(*) AS n FROM results").item()
    assert check == sum(r for unit in units for t, *_, r in unit if t == "results"), check
    out["iceberg_over_local"] = out["iceberg"]["seconds"] / out["local"]["seconds"]
    return out


def time_history(lake, table: str, commits: int, maintain_every: int) -> tuple[list[float], list[float]]:
    """``commits`` one-batch commits of 8 rows (a new batch each, the case that grows history);
    every ``maintain_every`` commits (0: never) the table is maintained (keep 5 snapshots, no
    grace: nothing else runs). Seconds per commit, and per maintenance."""
    from storage import tables as T
    from storage.lake_maintenance import MaintenanceSettings, maintain

    rng = random.Random(3)
    commit_s, maintain_s = [], []
    for i in range(commits):
        frame = pl.DataFrame([{"checkpoint": "c", "domain": f"d{i % 300:03d}", "item_id": f"i{j}", "sample_idx": 0,
                               "score": float(rng.random() < 0.5), "gen_config": "g"} for j in range(8)])
        began = time.perf_counter()
        lake.write_batch(table, {"checkpoint": "c", "domain": f"d{i % 300:03d}", "batch": f"b{i}"},
                         {"part": T.conform(frame, T.RESULTS)})
        commit_s.append(time.perf_counter() - began)
        if maintain_every and (i + 1) % maintain_every == 0:
            began = time.perf_counter()
            maintain(lake, MaintenanceSettings(keep_snapshots=5, grace_s=0), [table])
            maintain_s.append(time.perf_counter() - began)
    return commit_s, maintain_s


def run_history(args, scratch: Path, profile, sampler: LoadSampler) -> dict:
    """Does a commit's cost grow with the commits before it? ``--history`` commits with maintenance
    every ``--maintain-every``, beside ``--history-baseline`` commits without (the same run)."""
    import numpy as np

    from storage.deployment import open_lake

    ice = open_lake(scratch / "history-team", write=True, profile=profile)
    out: dict = {}
    for name, commits, every in (("without maintenance", args.history_baseline, 0),
                                 ("with maintenance", args.history, args.maintain_every)):
        if not commits:
            continue
        print(f"\n[history] {commits} commits {name}" + (f" (every {every})" if every else ""), flush=True)
        with sampler.phase(f"history {name}"):
            commit_s, maintain_s = time_history(ice, f"history_{every}", commits, every)
        head = min(100, commits // 2)
        slope = float(np.polyfit(np.arange(commits), np.asarray(commit_s), 1)[0])
        out[name] = {"commits": commits, "maintain_every": every, "first_ms": 1000 * statistics.fmean(commit_s[:head]),
                     "last_ms": 1000 * statistics.fmean(commit_s[-head:]), "head": head,
                     "slope_ms_per_1000_commits": 1000 * 1000 * slope, "commits_per_s": commits / sum(commit_s),
                     "maintain_mean_s": statistics.fmean(maintain_s) if maintain_s else None,
                     "deciles_ms": [1000 * statistics.fmean(c) for c in np.array_split(np.asarray(commit_s), 10)]}
        o = out[name]
        print(f"  first {head}: {o['first_ms']:.0f} ms/commit, last {head}: {o['last_ms']:.0f} ms; slope "
              f"{o['slope_ms_per_1000_commits']:+.1f} ms per 1000 commits; maintenance "
              f"{o['maintain_mean_s'] or 0:.2f} s each (load now {_loadavg()})", flush=True)
    return out


def run_reads(args, scratch: Path, profile, sampler: LoadSampler) -> dict:
    from storage.deployment import open_lake
    from storage.lake import Lake
    from ui.synthetic import SyntheticSpec, write_synthetic_lake

    out: dict = {"scale": {"domains": args.domains, "checkpoints": args.checkpoints, "items": args.items}}
    spec = SyntheticSpec(domains=args.domains, checkpoints=args.checkpoints - 1, items=args.items,
                         train_items=12, with_mlflow=False, prefix="bench")
    home = Path(args.synthetic_home) if args.synthetic_home else scratch / "read-local"
    print(f"\n[reads] {args.domains} domains x {args.checkpoints} checkpoints x {args.items} items", flush=True)
    if not (home / "lake" / "regression").exists():
        with sampler.phase("synthetic lake (local writes)"):
            began = time.perf_counter()
            write_synthetic_lake(home, spec)
            out["synthetic_write_s"] = time.perf_counter() - began
        print(f"  wrote the local synthetic lake in {out['synthetic_write_s']:.1f} s", flush=True)
    local = Lake(home)
    out["local_files"] = sum(1 for _ in local.root.rglob("*.parquet"))
    ice = open_lake(scratch / "read-team", write=True, profile=profile)
    with sampler.phase("copy into iceberg"):
        began = time.perf_counter()
        out["copy"] = copy_to_iceberg(local, ice, args.copy_tables or local.tables(), args.copy_rows,
                                      args.copy_layout)
        out["copy_layout"] = args.copy_layout
        out["copy_s"] = time.perf_counter() - began
    copied = out["copy"]
    print(f"  copied {len(copied)} tables into Iceberg in {out['copy_s']:.1f} s: "
          f"{sum(c['commits'] for c in copied.values())} commits, "
          f"{sum(c['iceberg_data_files'] for c in copied.values()):,} data files "
          f"(local lake: {sum(c['local_files'] for c in copied.values()):,} Parquet files); "
          f"layout {args.copy_layout}: " + ("one file per partition as batch by batch, but far fewer snapshots and "
                                            "manifests" if args.copy_layout == "partitioned" else
                                            "FEWER, LARGER files than a lake written batch by batch (and far fewer "
                                            "snapshots and manifests)"), flush=True)

    domain, baseline, candidate = "bench_007", "base-tiny", f"synth-step{(args.checkpoints - 1) * 100:06d}"
    queries = {
        "overview (open_views + regression/promotions/gates)": lambda lake: q_overview(lake),
        "naive SQL (lake.sql: deltas from results + gate failures)": lambda lake: q_naive_sql(lake),
        "domain page (open_views of one domain + item_changes)": lambda lake: q_domain(lake, domain, baseline, candidate),
        "polars (lake.read results + group_by mean)": lambda lake: q_polars(lake),
    }

    def clear_cache() -> None:
        shutil.rmtree(ice.cache_dir, ignore_errors=True)

    out["queries"] = {}
    with sampler.phase("queries"):
        for name, query in queries.items():
            local_times, local_out = timed(lambda: query(local), args.repeats + 1)
            cold_times, cold_out = timed(lambda: query(ice), args.repeats, before=clear_cache)
            warm_times, warm_out = timed(lambda: query(ice), args.repeats)
            assert local_out == cold_out == warm_out, f"{name}: local {local_out} vs iceberg {cold_out}/{warm_out} rows"
            row = {"rows": local_out, "local_first_s": local_times[0], "local_s": statistics.median(local_times[1:]),
                   "iceberg_cold_s": statistics.median(cold_times), "iceberg_warm_s": statistics.median(warm_times)}
            row["cold_ratio"] = row["iceberg_cold_s"] / row["local_s"]
            row["warm_ratio"] = row["iceberg_warm_s"] / row["local_s"]
            out["queries"][name] = row
            print(f"  {name}: local {row['local_s']:.3f} s, iceberg cold {row['iceberg_cold_s']:.3f} s "
                  f"({row['cold_ratio']:.1f}x), warm {row['iceberg_warm_s']:.3f} s ({row['warm_ratio']:.1f}x) "
                  f"[{local_out} rows; load {_loadavg()}]", flush=True)
    return out


def report(f: dict) -> None:
    print("\n" + "=" * 100)
    print(f"command: {f['command']}  (started {f['started']}, {f['cores']} cores, OMP_NUM_THREADS={f['omp_num_threads']})")
    print(f"load average (1/5/15 min): before {f['load_before']}, after {f['load_after']}; 1-min load during each phase:")
    for phase, load in f["load_phases"].items():
        print(f"  {phase:32s} mean {load['mean']:.2f}, max {load['max']:.2f}")
    w = f.get("writes")
    if w:
        print("\nWrites, one write_batch (one Iceberg commit) per batch:")
        print("| table | batches | rows | local batches/s | local rows/s | Iceberg batches/s | Iceberg rows/s | local / Iceberg |")
        print("|---|---|---|---|---|---|---|---|")
        for table in ("ingest", "results"):
            lo, ic = w[table]["local"], w[table]["iceberg"]
            if lo:
                print(f"| {table} | {lo['batches']} | {lo['rows']:,} | {lo['batches_per_s']:.1f} | {lo['rows_per_s']:,.0f} | "
                      f"{ic['batches_per_s']:.2f} | {ic['rows_per_s']:,.0f} | **{lo['batches_per_s'] / ic['batches_per_s']:.0f}x** |")
        g = w.get("growth_iceberg")
        if g:
            gl = w["growth_local"]
            print(f"Iceberg results commit: first {g['head']} batches {g['first_ms']:.0f} ms each, last {g['head']} "
                  f"{g['last_ms']:.0f} ms (local {gl['first_ms']:.1f} -> {gl['last_ms']:.1f} ms); "
                  f"linear fit {g['fit_a_ms']:.0f} ms + {g['fit_b_ms_per_batch']:.2f} ms per earlier batch")
            print(f"Extrapolated from {g['n']} batches (not measured): {DASHBOARD_BATCHES} results batches one commit "
                  f"each on Iceberg: at least {g['floor_6000_s'] / 60:.0f} min (no growth past the last batches), "
                  f"~{g['predicted_6000_s'] / 60:.0f} min on the linear fit (the 6000th commit "
                  f"~{g['predicted_6000th_ms'] / 1000:.1f} s); local at its mean pace "
                  f"~{DASHBOARD_BATCHES * w['results']['local']['seconds'] / w['results']['local']['batches']:.0f} s")
        if w.get("s3_requests_per_batch"):
            print(f"S3 requests per Iceberg batch (moto's log): {w['s3_requests_per_batch']:.1f} "
                  f"({', '.join(f'{k} {v}' for k, v in sorted(w['s3_requests_by_method'].items()))})")
    r = f.get("reads")
    if r:
        s = r["scale"]
        print(f"\nReads at {s['domains']} domains x {s['checkpoints']} checkpoints x {s['items']} items "
              f"(local lake {r['local_files']:,} Parquet files; copied into Iceberg in {r['copy_s']:.0f} s with "
              f"{sum(c['commits'] for c in r['copy'].values())} commits, layout {r['copy_layout']}: "
              f"{sum(c['iceberg_data_files'] for c in r['copy'].values()):,} data files; far fewer snapshots and "
              "manifests than a lake written batch by batch); median seconds:")
        print("| query | rows | local | Iceberg cold (export from S3) | Iceberg warm (snapshot cache) | cold / local | warm / local |")
        print("|---|---|---|---|---|---|---|")
        for name, q in r["queries"].items():
            print(f"| {name} | {q['rows']:,} | {q['local_s']:.3f} | {q['iceberg_cold_s']:.3f} | {q['iceberg_warm_s']:.3f} | "
                  f"{q['cold_ratio']:.1f}x | {q['warm_ratio']:.1f}x |")
        print("copy per table (local files -> Iceberg data files, commits, s): " + ", ".join(
            f"{t} {c['local_files']}->{c['iceberg_data_files']} ({c['commits']}, {c['seconds']:.0f})"
            for t, c in r["copy"].items()))


if __name__ == "__main__":
    sys.exit(main())
