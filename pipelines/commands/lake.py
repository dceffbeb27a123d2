"""``assay ingest``, ``assay quarantine`` and ``assay sql``: user data into the lake, and queries."""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import EXIT_OK, CliError, add_json_flag, emit, with_examples


def register(subparsers) -> None:
    ingest = subparsers.add_parser(
        "ingest", help="gate a JSONL/CSV/Parquet file into a domain's lake partition",
        description="Read rows with `prompt`, `answer` and optional `id`, `metadata`, `split` "
                    "(train|eval, default train) from a .jsonl/.ndjson, .csv or .parquet file, run the "
                    "row gates, and commit admitted and quarantined rows to the lake as one batch. "
                    "Every row is kept: received == admitted + quarantined. Several DOMAIN PATH pairs "
                    "are ingested in one run and committed together after the last is gated (one lake "
                    "commit on the team profile): all of them or, if it fails, none.")
    ingest.add_argument("domain", help="registered domain name (see `assay domains list`)")
    ingest.add_argument("path", help="file to ingest")
    ingest.add_argument("more", nargs="*", metavar="DOMAIN PATH",
                        help="more domain and file pairs, ingested in the same run and committed with the first")
    add_json_flag(ingest)
    ingest.set_defaults(handler=run_ingest)

    quarantine = subparsers.add_parser(
        "quarantine", help="list a domain's quarantined rows with their reasons",
        description="List quarantined rows of a domain: id, line (1-based, in the source file), "
                    "source and every reason code.")
    quarantine.add_argument("domain", help="registered domain name")
    quarantine.add_argument("--limit", type=int, default=0, help="show at most N rows (text mode)")
    add_json_flag(quarantine)
    quarantine.set_defaults(handler=run_quarantine)

    sql = subparsers.add_parser(
        "sql", help="run a DuckDB query over the lake",
        description="Run SQL with DuckDB over the lake's views: samples, quarantine, and every other "
                    "table present (results, sweep_summary, regression, ...). DuckDB's COPY writes a "
                    "query's rows to a file (e.g. for `assay regress`).")
    with_examples(sql, 'assay sql "SELECT domain, count(*) FROM samples GROUP BY 1"',
                  'assay sql --json "SELECT domain, reasons, count(*) AS n FROM quarantine GROUP BY ALL ORDER BY n DESC"',
                  "assay sql \"COPY (SELECT * FROM results WHERE checkpoint = 'base-tiny') TO 'baseline.parquet'\"")
    sql.add_argument("query", help="the SQL statement")
    add_json_flag(sql)
    sql.set_defaults(handler=run_sql)


def _domain(name: str):
    from domains import UnknownDomainError, get_registry

    registry = get_registry()
    for error in registry.errors:
        print(f"assay: warning: domain plugin {error}", file=sys.stderr)
    try:
        return registry.get(name), registry
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None


def run_ingest(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pipelines.settings import open_lake
    from quality.ingest import IngestUnit, ingest_file
    from storage.readers import UnsupportedFormat, check_readable, file_format

    names = [args.domain, args.path, *args.more]
    if len(names) % 2:
        raise CliError(f"expected DOMAIN PATH pairs, got an odd number of arguments ({len(names)}): "
                       f"{names[-1]!r} has no file")
    jobs = []  # every pair checked before anything is read or written
    for name, given in zip(names[::2], names[1::2]):
        domain, registry = _domain(name)
        path = Path(given)
        try:
            file_format(path)
        except UnsupportedFormat as exc:
            raise CliError(str(exc)) from None
        check_readable(path)  # missing, a folder or unreadable: storage.readers.UnreadableFile (a UserError)
        jobs.append((domain, path))
    try:
        lake = open_lake(write=True)
        counter = None
        unit = IngestUnit(lake)
        reports = []
        for domain, path in jobs:
            count_tokens = None
            if domain.context_tokens:  # a long-context domain's prompts are measured in the policy's tokens
                if counter is None:
                    from generation.policy import policy_token_counter

                    counter = policy_token_counter(home=lake.home)
                count_tokens = counter
            reports.append(ingest_file(lake, domain, path, all_domains=list(registry), count_tokens=count_tokens,
                                       unit=unit))
        unit.commit()  # all pairs as one unit (one commit on the team lake)
    except (UnsupportedFormat, FileNotFoundError) as exc:
        raise CliError(str(exc)) from None

    def human(s):
        reasons = ", ".join(f"{k}={v}" for k, v in s["reasons"].items()) or "none"
        return (f"{s['domain']}: received {s['received']}, admitted {s['admitted']}, "
                f"quarantined {s['quarantined']} (reasons: {reasons})")

    summaries = [report.summary() for report in reports]
    if len(summaries) == 1:
        emit(args, summaries[0], human)
    else:  # one summary per pair, in order: a JSON list, or one line each
        emit(args, summaries, lambda rows: "\n".join(human(s) for s in rows))
    return EXIT_OK


def run_quarantine(args: argparse.Namespace) -> int:
    from pipelines.settings import open_lake
    from quality.ingest import quarantine_listing

    domain, _ = _domain(args.domain)
    listing = quarantine_listing(open_lake(), domain.name)
    rows = [{k: r[k] for k in ("id", "line", "source", "reasons")} for r in listing]
    details = [f"  ({r['detail']})" if r.get("detail") else "" for r in listing]

    def human(rows):
        shown = rows[: args.limit] if args.limit else rows
        lines = [f"{r['source']}:{r['line']}  {r['id']}  {','.join(r['reasons'])}{detail}"
                 for r, detail in zip(shown, details)]
        return "\n".join(lines + [f"{len(rows)} quarantined rows in {domain.name}"])

    emit(args, rows, human)
    return EXIT_OK


def run_sql(args: argparse.Namespace) -> int:
    import duckdb

    from pipelines.settings import open_lake

    lake = open_lake()
    try:
        frame = lake.sql(args.query)
    except duckdb.Error as exc:
        views = ", ".join(lake.views()) or "none yet: run `make demo` or `assay ingest`"
        raise CliError(f"{str(exc).splitlines()[0]} (views: {views})") from None
    if args.json:
        emit(args, frame.to_dicts())
    else:
        import polars as pl

        from pipelines.console import result_stream

        with pl.Config(tbl_rows=50, tbl_cols=20, fmt_str_lengths=60):
            print(frame, file=result_stream())
    return EXIT_OK
