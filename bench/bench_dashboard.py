"""Dashboard overview load time at 300 domains x 20 checkpoints of synthetic results (target < 2 s).

Writes a synthetic lake through the real Lake (``ui.synthetic``: results, sweep_summary, regression,
promotions, gates, quarantine, ... about 15k Parquet files), then measures in the same run:

- **page**: the Overview page rendered by Streamlit's AppTest with cold data caches (what a user
  waits for after the cache TTL expires or after *Reload data*), median of ``--repeats``;
- **fast path**: the overview's data work alone (per-page DuckDB views, heatmap cells, gate
  failures, domain table, filter/sort/page, heatmap spec);
- **naive path** (the baseline): ``Lake.connect()`` with a view over every table, then the deltas
  vs the champion computed from per-sample ``results``, as a first version would.

    OMP_NUM_THREADS=2 .venv/bin/python bench/bench_dashboard.py [--domains 300 --checkpoints 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

TARGET_S = 2.0


def fast_overview(home: Path) -> int:
    """The Overview page's data path without Streamlit; returns the number of heatmap cells."""
    from datetime import datetime, timezone


    from domains.registry import load_registry
    from storage.lake import Lake
    from ui import charts
    from ui import queries as Q

    lake = Lake(home)
    since = Q.last_day(datetime.now(timezone.utc))
    con = Q.open_views(lake, ["regression", "promotions", "gate_results"],
                       modified_since={"gate_results": since.timestamp() - 120})
    cells = Q.recent_cells(con, 20)
    Q.last_promotion(con)
    failures = Q.gate_failures_since(con, since)
    con.close()
    import polars as pl

    registry = load_registry(os.environ.get("ASSAY_DOMAINS_PATH"))
    reg = pl.DataFrame([{"domain": d.name, "owner": d.owner, "tags": list(d.tags)} for d in registry],
                       schema={"domain": pl.Utf8, "owner": pl.Utf8, "tags": pl.List(pl.Utf8)})
    latest = cells.filter(pl.col("position") == cells["position"].max())
    table = Q.domain_table(latest, reg, failures, latest["domain"].to_list())
    _, page, _ = Q.filter_sort_page(table, Q.OverviewQuery())
    charts.verdict_heatmap(cells, page["domain"].to_list()).to_dict()
    return cells.height


def naive_overview(home: Path) -> int:
    """Baseline: every view bound up front, deltas vs the champion from the per-sample results."""
    from storage.lake import Lake

    con = Lake(home).connect()
    champion = con.sql("SELECT candidate FROM promotions WHERE promoted ORDER BY created_at DESC LIMIT 1").fetchall()[0][0]
    cells = con.sql(f"""
        WITH per AS (SELECT checkpoint, domain, avg(score) AS mean FROM results GROUP BY 1, 2),
             champ AS (SELECT domain, mean FROM per WHERE checkpoint = '{champion}')
        SELECT p.checkpoint, p.domain, p.mean - c.mean AS delta, r.verdict
        FROM per p JOIN champ c USING (domain)
        LEFT JOIN regression r ON r.candidate = p.checkpoint AND r.domain = p.domain""").pl()
    con.sql("SELECT domain, count(*) FROM gate_results WHERE NOT success GROUP BY 1").fetchall()
    con.close()
    return cells.height


def page_load(repeats: int) -> tuple[float, float, float]:
    """(first render incl. imports, median cold-cache render, median CPU seconds of it) of the
    Overview page via AppTest. CPU time is this process's (all threads: the script thread and
    DuckDB's workers); on a shared machine it shows what the page costs when the cores are free."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    times, cpu = [], []
    for i in range(repeats + 1):
        st.cache_data.clear()
        at = AppTest.from_file(str(REPO / "ui" / "app.py"), default_timeout=120)
        start, start_cpu = time.perf_counter(), time.process_time()
        at.run()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
        if at.exception:
            raise RuntimeError(f"overview raised: {at.exception[0].value}")
        if not at.get("vega_lite_chart"):
            raise RuntimeError("overview rendered no heatmap: is the synthetic lake empty?")
    return times[0], statistics.median(times[1:]), statistics.median(cpu[1:])


def timed(fn, *args, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=300)
    parser.add_argument("--checkpoints", type=int, default=20, help="including the base pseudo-checkpoint")
    parser.add_argument("--items", type=int, default=20, help="eval items per domain (results rows per cell)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--home", help="reuse (or fill) this ASSAY_HOME instead of a temp folder")
    args = parser.parse_args(argv)

    from ui.synthetic import SyntheticSpec, write_registry_plugin, write_synthetic_lake

    spec = SyntheticSpec(domains=args.domains, checkpoints=args.checkpoints - 1, items=args.items,
                         train_items=12, with_mlflow=False, prefix="bench")
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(args.home) if args.home else Path(tmp) / "home"
        plugins = home / "plugins"
        if not (home / "lake" / "regression").exists():
            start = time.perf_counter()
            write_synthetic_lake(home, spec)
            print(f"wrote synthetic lake ({args.domains} domains x {args.checkpoints} checkpoints x "
                  f"{args.items} items) in {time.perf_counter() - start:.1f} s")
        write_registry_plugin(plugins, spec)
        os.environ["ASSAY_HOME"] = str(home)
        os.environ["ASSAY_DOMAINS_PATH"] = str(plugins)
        files = sum(1 for _ in (home / "lake").rglob("*.parquet"))

        naive_s, naive_cells = timed(naive_overview, home, repeats=args.repeats)
        fast_s, fast_cells = timed(fast_overview, home, repeats=args.repeats)
        first_s, page_s, page_cpu_s = page_load(args.repeats)

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine load average (1/5/15 min): {load} on {os.cpu_count()} cores (shared; absolute times drift)")
    print(f"lake: {files} parquet files; heatmap cells: fast {fast_cells}, naive {naive_cells}")
    print(f"data path   naive (Lake.connect + deltas from results): {naive_s:.3f} s")
    print(f"data path   fast  (per-page views + regression table):  {fast_s:.3f} s   "
          f"-> {naive_s / fast_s:.1f}x faster than naive")
    print(f"overview page (AppTest, cold data cache, median of {args.repeats}): {page_s:.3f} s "
          f"(first render incl. imports {first_s:.3f} s; CPU {page_cpu_s:.3f} s); target < {TARGET_S:.1f} s: "
          f"{'MET' if page_s < TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    main()
