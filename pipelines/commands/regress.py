"""``assay regress``: per-domain paired regression report between two result files.

Each file has one row per scored sample with columns ``domain``, ``item_id``, ``sample_idx``,
``score`` (in [0, 1]) and optionally ``cluster_id``, ``gen_config`` and ``gen_params`` (Parquet,
CSV or JSONL): the lake's ``results`` table, or another harness's output. Statistics:
:mod:`evaluation.regression`. The protected domains, margins, alpha and q come from the promotion
policy (:mod:`evaluation.promotion_policy`: ``--policy``, else ``$ASSAY_HOME/promotion.yaml``, else
the shipped default); the flags override them.
Exit 1 when the policy blocks (a protected domain regressed, ...), 2 on bad input, including
files whose recorded generation configs differ for a domain (not comparable).
"""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import EXIT_FAILED, CliError, add_domains_argument, add_json_flag, emit, with_examples


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "regress", help="paired per-domain regression test of a candidate against a baseline",
        description="Compare a candidate's per-sample results with a baseline's on the same items, "
                    "domain by domain: per-item means over K samples, paired (cluster-robust when "
                    "cluster_id is given) one-sided tests of 'worse by more than the margin', "
                    "Benjamini-Hochberg across domains (warn) and Holm over protected domains "
                    "(regression); 'underpowered' when a domain's test cannot reject at alpha. What "
                    "blocks comes from the promotion policy file. Exit 1 when the policy blocks, 2 on "
                    "bad input or when a domain's generation configs differ between the files.",
    )
    with_examples(parser,
                  "assay sql \"COPY (SELECT * FROM results WHERE checkpoint = 'base-tiny') TO 'baseline.parquet'\"",
                  "assay sql \"COPY (SELECT * FROM results WHERE checkpoint <> 'base-tiny') TO 'candidate.parquet'\"",
                  "assay regress --baseline baseline.parquet --candidate candidate.parquet --margin 0.01 "
                  "--margin math_arith_easy=0.02 --protected math_arith_easy --json",
                  note="The files hold per-sample results: the lake's results table, or any file with columns "
                       "domain, item_id, sample_idx, score (optional: cluster_id, gen_config).")
    parser.add_argument("--baseline", required=True, help="baseline results file (.parquet, .csv, .jsonl)")
    parser.add_argument("--candidate", required=True, help="candidate results file (.parquet, .csv, .jsonl)")
    parser.add_argument("--margin", action="append", default=[], metavar="M|DOMAIN=M",
                        help="non-inferiority margin in score units (0.01 = one point; default: the policy's); "
                             "DOMAIN=M sets one domain's margin (repeatable)")
    add_domains_argument(parser, "--protected", default=None,
                         help="domains whose regressions are errors (Holm-corrected), or 'all' for every domain; "
                              "default: the policy's (registered domains marked protected)")
    parser.add_argument("--alpha", type=float, default=None,
                        help="one-sided level per test and Holm FWER (default: the policy's, 0.05)")
    parser.add_argument("--q", type=float, default=None,
                        help="Benjamini-Hochberg FDR level for warnings (default: the policy's, 0.05)")
    parser.add_argument("--policy", default=None, metavar="FILE",
                        help="promotion policy YAML (default: $ASSAY_HOME/promotion.yaml, else the shipped one)")
    add_json_flag(parser)
    parser.set_defaults(handler=run_regress)


def parse_margins(values: list[str], default: float = 0.01) -> tuple[float, dict[str, float]]:
    per_domain = {}
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


def _registry():
    from domains import get_registry

    return get_registry()


def run_regress(args: argparse.Namespace) -> int:
    from evaluation.comparability import incomparable_domains
    from storage.lake import resolve_home
    from evaluation.promotion_policy import PolicyError, blocking_reasons, load_policy
    from evaluation.regression import RegressionInputError, compare_results, read_results_file

    try:
        active = load_policy(resolve_home(), args.policy)
    except PolicyError as exc:
        raise CliError(str(exc)) from None
    policy = active.policy
    default_margin, per_domain = parse_margins(args.margin, policy.default_margin)
    alpha = policy.alpha if args.alpha is None else args.alpha
    q_level = policy.q if args.q is None else args.q
    for name, value in (("--alpha", alpha), ("--q", q_level)):
        if not 0 < value < 1:
            raise CliError(f"{name} {value}: use a level in (0, 1), e.g. 0.05")
    try:
        baseline = read_results_file(args.baseline)
        candidate = read_results_file(args.candidate)
        domains = set(baseline["domain"].cast(str).unique().to_list()) if "domain" in baseline.columns else set()
        domains |= set(candidate["domain"].cast(str).unique().to_list()) if "domain" in candidate.columns else set()
        differ = incomparable_domains(baseline, candidate)
        if differ:  # comparing different generation configs would measure the configs, not the models
            raise CliError("not comparable: " + "; ".join(f"domain {d!r}: {why}" for d, why in differ.items())
                           + " (baseline vs candidate); compare results generated with the same config")
        registry = _registry()
        try:
            policy.check_domains(set(registry.names) | domains, active.source)
        except PolicyError as exc:
            raise CliError(str(exc)) from None
        if args.protected is None:
            protected = policy.protected_domains({d.name for d in registry if d.protected}, domains) & domains
        elif "all" in args.protected:
            if args.protected != ["all"]:
                raise CliError(f"--protected {' '.join(args.protected)}: 'all' stands alone (every domain); "
                               "give 'all' or domain names")
            protected = domains
        else:
            protected = set(args.protected)
            unknown = protected - domains
            if unknown:
                raise CliError(f"--protected names domain(s) in neither file: {', '.join(sorted(unknown))} "
                               f"(domains: {', '.join(sorted(domains))})")
        unknown = set(per_domain) - domains
        if unknown:
            raise CliError(f"--margin names domain(s) in neither file: {', '.join(sorted(unknown))}")
        margin = {d: per_domain.get(d, policy.margins.get(d, default_margin)) for d in domains}
        report = compare_results(baseline, candidate, margin=margin, protected=protected, alpha=alpha,
                                 q_level=q_level, baseline_name=args.baseline, candidate_name=args.candidate)
    except RegressionInputError as exc:
        raise CliError(str(exc)) from None
    report.margin = default_margin
    blocking = [reason for _, reason in blocking_reasons(report, policy, "baseline")]
    payload = {**report.to_json(), "blocking": blocking, "policy": active.to_json()}
    emit(args, payload, lambda _: render_report(report, blocking))
    if report.missing["count"] and not args.json:
        print(f"assay: note: {report.missing['count']} missing or mismatched entries (see --json 'missing')",
              file=sys.stderr)
    return EXIT_FAILED if blocking else 0


def render_report(report, blocking: list[str] = ()) -> str:
    """A table for a person: one line per domain, worst first."""
    def pts(x):
        return "   n/a" if x is None or x != x else f"{100 * x:+6.1f}"

    order = ("regression", "warn", "underpowered", "ok")
    head = f"{'domain':<28} {'n':>5} {'K':>3} {'delta':>6} {'95% CI (points)':>17} {'p':>8} {'q':>8} {'MDE':>5}  verdict"
    lines = [head, "-" * len(head)]
    for d in sorted(report.domains, key=lambda d: (order.index(d.verdict), d.p)):
        mark = "*" if d.protected else " "
        mde = "  inf" if d.underpowered else f"{100 * d.mde:>5.1f}"
        verdict = d.verdict.upper() if d.verdict != "ok" else "ok"
        if d.underpowered:
            verdict += f" (smallest attainable p {d.p_min:.2g} > alpha {report.alpha:g})"
        lines.append(f"{d.domain[:27]:<27}{mark} {d.n:>5} {d.k:>3} {pts(d.delta)} [{pts(d.ci_low)},{pts(d.ci_high)}] "
                     f"{d.p:>8.2g} {d.q:>8.2g} {mde}  {verdict}"
                     + (f"  (lost {d.items_lost}, gained {d.items_gained})" if d.items_lost or d.items_gained else ""))
    s = report.to_json()["summary"]
    m = report.missing
    lines.append(f"{s['domains']} domains: {s['regression']} regression, {s['warn']} warn, "
                 f"{s['underpowered']} underpowered, {s['ok']} ok (* protected; margin {100 * report.margin:g} "
                 "point(s); MDE = drop detected with 80% power, inf when the test cannot reject)")
    if m["count"]:
        lines.append(f"missing: {len(m['baseline_only_items'])} items only in baseline, "
                     f"{len(m['candidate_only_items'])} only in candidate, {len(m['mismatched_items'])} mismatched, "
                     f"domains only in baseline: {', '.join(m['baseline_only_domains']) or 'none'}, "
                     f"only in candidate: {', '.join(m['candidate_only_domains']) or 'none'}")
    if blocking:
        lines += ["blocks promotion (policy):"] + [f"  - {reason}" for reason in blocking]
    return "\n".join(lines)
