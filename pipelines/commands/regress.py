"""``assay regress``: per-domain paired regression report between two result files.

Each file has one row per scored sample with columns ``domain``, ``item_id``, ``sample_idx``,
``score`` (in [0, 1]) and optionally ``cluster_id`` (Parquet, CSV or JSONL): the lake's ``results``
table, or another harness's output. Statistics: :mod:`quality.regression`.
Exit 1 when any domain's verdict is ``regression``, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import EXIT_FAILED, CliError, add_json_flag, emit


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "regress", help="paired per-domain regression test of a candidate against a baseline",
        description="Compare a candidate's per-sample results with a baseline's on the same items, "
                    "domain by domain: per-item means over K samples, paired (cluster-robust when "
                    "cluster_id is given) one-sided tests of 'worse by more than the margin', "
                    "Benjamini-Hochberg across domains (warn) and Holm over protected domains "
                    "(regression). Exit 1 on any regression, 2 on bad input.",
        epilog="Example: assay regress --baseline champion.parquet --candidate new.parquet "
               "--margin 0.01 --margin gsm_symbolic=0.02 --protected gsm_symbolic,chain_sum --json")
    parser.add_argument("--baseline", required=True, help="baseline results file (.parquet, .csv, .jsonl)")
    parser.add_argument("--candidate", required=True, help="candidate results file (.parquet, .csv, .jsonl)")
    parser.add_argument("--margin", action="append", default=[], metavar="M|DOMAIN=M",
                        help="non-inferiority margin in score units (0.01 = one point; default 0.01); "
                             "DOMAIN=M sets one domain's margin (repeatable)")
    parser.add_argument("--protected", default=None, metavar="A,B|all",
                        help="comma-separated domains whose regressions are errors (Holm-corrected); "
                             "'all' for every domain; default: registered domains marked protected")
    parser.add_argument("--alpha", type=float, default=0.05, help="one-sided level per test and Holm FWER (default 0.05)")
    parser.add_argument("--q", type=float, default=0.05, help="Benjamini-Hochberg FDR level for warnings (default 0.05)")
    add_json_flag(parser)
    parser.set_defaults(handler=run_regress)


def parse_margins(values: list[str]) -> tuple[float, dict[str, float]]:
    default, per_domain = 0.01, {}
    for value in values:
        name, sep, number = value.rpartition("=")
        try:
            margin = float(number)
        except ValueError:
            raise CliError(f"--margin {value!r}: expected a number like 0.01 or DOMAIN=0.02") from None
        if not 0 <= margin < 1:
            raise CliError(f"--margin {value!r}: use a value in [0, 1) in score units (0.01 = one point)")
        if sep:
            per_domain[name] = margin
        else:
            default = margin
    return default, per_domain


def _default_protected() -> set[str]:
    from domains import get_registry

    registry = get_registry()
    return {d.name for d in registry if d.protected}


def run_regress(args: argparse.Namespace) -> int:
    from quality.regression import RegressionInputError, compare_results, read_results_file

    default_margin, per_domain = parse_margins(args.margin)
    for name, value in (("--alpha", args.alpha), ("--q", args.q)):
        if not 0 < value < 1:
            raise CliError(f"{name} {value}: use a level in (0, 1), e.g. 0.05")
    try:
        baseline = read_results_file(args.baseline)
        candidate = read_results_file(args.candidate)
        domains = set(baseline["domain"].cast(str).unique().to_list()) if "domain" in baseline.columns else set()
        domains |= set(candidate["domain"].cast(str).unique().to_list()) if "domain" in candidate.columns else set()
        if args.protected is None:
            protected = _default_protected() & domains
        elif args.protected.strip() == "all":
            protected = domains
        else:
            protected = {p.strip() for p in args.protected.split(",") if p.strip()}
            unknown = protected - domains
            if unknown:
                raise CliError(f"--protected names domain(s) in neither file: {', '.join(sorted(unknown))} "
                               f"(domains: {', '.join(sorted(domains))})")
        margin = {d: per_domain.get(d, default_margin) for d in domains}
        unknown = set(per_domain) - domains
        if unknown:
            raise CliError(f"--margin names domain(s) in neither file: {', '.join(sorted(unknown))}")
        report = compare_results(baseline, candidate, margin=margin, protected=protected, alpha=args.alpha,
                                 q_level=args.q, baseline_name=args.baseline, candidate_name=args.candidate)
    except RegressionInputError as exc:
        raise CliError(str(exc)) from None
    report.margin = default_margin
    payload = report.to_json()
    emit(args, payload, lambda _: render_report(report))
    if report.missing["count"] and not args.json:
        print(f"assay: note: {report.missing['count']} missing or mismatched entries (see --json 'missing')",
              file=sys.stderr)
    return EXIT_FAILED if report.regressions else 0


def render_report(report) -> str:
    """A table for a person: one line per domain, worst first."""
    def pts(x):
        return "   n/a" if x is None or x != x else f"{100 * x:+6.1f}"

    head = f"{'domain':<28} {'n':>5} {'K':>3} {'delta':>6} {'95% CI (points)':>17} {'p':>8} {'q':>8} {'MDE':>5}  verdict"
    lines = [head, "-" * len(head)]
    for d in sorted(report.domains, key=lambda d: (("regression", "warn", "ok").index(d.verdict), d.p)):
        mark = "*" if d.protected else " "
        lines.append(f"{d.domain[:27]:<27}{mark} {d.n:>5} {d.k:>3} {pts(d.delta)} [{pts(d.ci_low)},{pts(d.ci_high)}] "
                     f"{d.p:>8.2g} {d.q:>8.2g} {100 * d.mde:>5.1f}  {d.verdict.upper() if d.verdict != 'ok' else 'ok'}"
                     + (f"  (lost {d.items_lost}, gained {d.items_gained})" if d.items_lost or d.items_gained else ""))
    s = report.to_json()["summary"]
    m = report.missing
    lines.append(f"{s['domains']} domains: {s['regression']} regression, {s['warn']} warn, {s['ok']} ok "
                 f"(* protected; margin {100 * report.margin:g} point(s); MDE = drop detected with 80% power)")
    if m["count"]:
        lines.append(f"missing: {len(m['baseline_only_items'])} items only in baseline, "
                     f"{len(m['candidate_only_items'])} only in candidate, {len(m['mismatched_items'])} mismatched, "
                     f"domains only in baseline: {', '.join(m['baseline_only_domains']) or 'none'}, "
                     f"only in candidate: {', '.join(m['candidate_only_domains']) or 'none'}")
    return "\n".join(lines)
