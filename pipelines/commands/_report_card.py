"""``assay domains report`` and ``assay domains audit``: the environment report card of each domain
(:mod:`quality.report_card`), registered under ``assay domains`` by :mod:`pipelines.commands.domains`."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from pipelines.cli import EXIT_FAILED, CliError, add_domains_argument, add_json_flag, emit, with_examples
from pipelines.config_flags import add_model_flags, model_from_args
from quality.report_card.card_config import CardConfig


def register(sub) -> None:
    report = sub.add_parser(
        "report", help="the environment report card: both error rates of each domain's verifier",
        description="Score each domain's verifier both ways, as the trainer scores: the reference answer must be "
                    "paid (oracle) and a completion doing no work must not (nop: empty, 'I don't know', the prompt "
                    "echoed); correct answers in other forms the prompt allows must be paid (recall, with a "
                    "Wilson interval, against the domain's bar, default 99%); no fixed hack family "
                    "(`assay domains attack`) and nothing a budgeted hack search finds may be paid; where a "
                    "domain has hidden tests (code, terminal), the share of mutants of the reference solution "
                    "they kill. Also shows a person's audit of real completions (`assay domains audit`) and what "
                    "the gates know (difficulty band, quarantine, contamination). Worst first. A failed card "
                    "blocks the domain's train set until a card passes. Exit 1 if any card fails.")
    with_examples(report, "assay domains report math_arith_easy strings",
                  "assay domains report math_arith_easy --markdown --no-hack-search",
                  note="assay domains report --all cards every registered domain (under 10 minutes on 2 cores).")
    add_domains_argument(report, "domain", nargs="*", default=[], help="domain names (or use --all / --tag)")
    report.add_argument("--all", action="store_true", help="card every registered domain")
    report.add_argument("--tag", action="append", help="card the domains with this tag (repeatable)")
    add_model_flags(report, CardConfig, metavars={"items": "N", "search_items": "N", "mutation_items": "N",
                                                  "workers": "N"})
    shape = report.add_mutually_exclusive_group()
    shape.add_argument("--markdown", action="store_true", help="print the cards as a markdown table")
    add_json_flag(shape)
    report.set_defaults(handler=report_domains)

    audit = sub.add_parser(
        "audit", help="label real sweep completions to measure the verifier's false positives and negatives",
        description="Without --labels: sample a checkpoint's sweep completions of DOMAIN in three strata (scored "
                    "below a pass but stating the reference; paid but never stating it; a random draw of the "
                    "rest) and write a labelling file (JSONL, or CSV for a path ending in .csv) with an empty "
                    "`label` column. Fill it in with correct / incorrect (unsure or empty rows are left out). "
                    "With --labels FILE: report the false-positive rate (paid completions labelled incorrect) and "
                    "the false-negative rate (unpaid ones labelled correct), each with a Wilson 95% interval, "
                    "record them in the lake (lake table verifier_audits) and show them on the report card.")
    with_examples(audit, "assay domains audit math_arith_easy --checkpoint champion --out audit.jsonl",
                  note="Then fill in the `label` column and run: assay domains audit math_arith_easy --labels "
                       "audit.jsonl")
    audit.add_argument("domain", help="domain name")
    audit.add_argument("--checkpoint", help="the checkpoint whose sweep completions to sample: an id, 'latest', "
                                            "'champion' or 'base-<recipe>' (needed without --labels; `assay sweep` "
                                            "makes them)")
    audit.add_argument("--per-stratum", type=int, default=20, metavar="N",
                       help="completions drawn from each stratum (default: 20)")
    audit.add_argument("--seed", type=int, default=0, help="seed of the draw (default: 0)")
    audit.add_argument("--out", type=Path, help="where to write the labelling file (default: "
                                                "audit-DOMAIN-CHECKPOINT.jsonl in the current folder)")
    audit.add_argument("--labels", type=Path, metavar="FILE", help="a filled-in labelling file: report its rates")
    add_json_flag(audit)
    audit.set_defaults(handler=audit_domain)


def _chosen(args: argparse.Namespace):
    from domains import UnknownDomainError
    from pipelines.commands.domains import registry_with_warnings

    registry = registry_with_warnings()
    if sum((bool(args.domain), args.all, bool(args.tag))) != 1:
        raise CliError("give DOMAIN names, --all or --tag (one of them); `assay domains list` shows the names")
    try:
        chosen = (list(registry) if args.all else registry.select(tags=args.tag) if args.tag
                  else [registry.get(name) for name in args.domain])
    except UnknownDomainError as exc:
        raise CliError(f"{exc}; `assay domains list` shows the names") from None
    if not chosen:
        raise CliError(f"no domain has tag(s) {', '.join(args.tag)}; `assay domains list` shows the tags")
    return chosen


def _fmt(value, pattern: str = "{:.3f}") -> str:
    return "-" if value is None else pattern.format(value)


def _line(row: dict) -> dict:
    """The columns a person reads, as text."""
    verdict = "skip" if row["passed"] is None else "PASS" if row["passed"] else "FAIL"
    recall = _fmt(row["recall"])
    if row["recall_low"] is not None:
        recall += f" [{row['recall_low']:.3f}, {row['recall_high']:.3f}]"
    kill = "-" if row["kill_rate"] is None else f"{row['kill_rate']:.1%} ({row['weak_items']} weak)"
    audited = "-" if not row["audited_labels"] else f"FP {_fmt(row['audited_fp'], '{:.1%}')} / FN " \
                                                   f"{_fmt(row['audited_fn'], '{:.1%}')}"
    return {"verdict": verdict, "domain": row["domain"], "oracle": _fmt(row["oracle_pass"], "{:.0%}"),
            "nop": _fmt(row["nop_paid"], "{:.0%}"), "recall": recall, "worst family": row["worst_family"] or "-",
            "fixed paid": _fmt(row["fixed_families_paid"], "{}"), "search paid": _fmt(row["hack_search_paid"], "{}"),
            "kill rate": kill, "audit": audited}


def report_domains(args: argparse.Namespace) -> int:
    config = model_from_args(CardConfig, args)
    chosen = _chosen(args)
    from quality.report_card.card import card_domains, worst_first, write_cards
    from storage.deployment import open_lake

    lake = open_lake(write=config.record)
    with contextlib.redirect_stdout(sys.stderr):  # domain code may print; stdout is for the report
        cards = card_domains([d.name for d in chosen], config, lake=lake, progress=True)
    run = write_cards(lake, cards, source="cli") if config.record else None
    cards = worst_first(cards)
    rows = [c.row(run=run or "", source="cli", created_at="") for c in cards]
    carded = [c for c in cards if c.passed is not None]
    payload = {"run": run, "passed": all(c.passed for c in carded), "totals": _totals(cards),
               "cards": [{**c.as_dict(), "passed": c.passed} for c in cards]}
    if args.markdown:
        from storage.markdown import markdown_table

        lines = [_line(r) for r in rows]
        text = markdown_table(lines, list(lines[0])) + "\n\n" + _totals_text(payload["totals"], run)
        emit(args, payload, lambda _: text)
    else:
        emit(args, payload, lambda _: _human(cards, rows, payload["totals"], run))
    return 0 if payload["passed"] else EXIT_FAILED


def _totals(cards) -> dict:
    carded = [c for c in cards if c.passed is not None]
    broken = [c.domain for c in carded if c.recall is not None and c.recall.recall is not None
              and c.recall.recall < c.min_recall]
    hackable = [c.domain for c in carded if (c.attacks is not None and c.attacks.paid)
                or (c.hack_search is not None and c.hack_search.paid)
                or (c.oracle is not None and c.oracle.nop_paid_items)]
    candidates = sum(c.recall.candidates for c in carded if c.recall is not None)
    paid = sum(c.recall.paid for c in carded if c.recall is not None)
    return {"domains": len(cards), "carded": len(carded), "passed": sum(bool(c.passed) for c in carded),
            "skipped": [c.domain for c in cards if c.passed is None],
            "recall": paid / candidates if candidates else None, "recall_candidates": candidates,
            "below_recall_bar": broken, "hackable": hackable,
            "broken_share": len(broken) / len(carded) if carded else None,
            "hackable_share": len(hackable) / len(carded) if carded else None,
            "seconds": round(sum(c.seconds for c in cards), 1)}


def _totals_text(totals: dict, run: str | None) -> str:
    recall = "-" if totals["recall"] is None else f"{totals['recall']:.4f} over {totals['recall_candidates']} answers"
    return (f"{totals['passed']}/{totals['carded']} cards passed; recall {recall}; "
            f"{len(totals['below_recall_bar'])} domains below their recall bar, {len(totals['hackable'])} hackable"
            + (f"; {len(totals['skipped'])} without a verifier" if totals["skipped"] else "")
            + (f"; recorded as {run}" if run else ""))


def _human(cards, rows, totals: dict, run: str | None) -> str:
    lines = []
    for card, row in zip(cards, rows):
        shown = _line(row)
        lines.append(f"{shown['verdict']:<4}  {card.domain}  oracle {shown['oracle']}  nop {shown['nop']}  "
                     f"recall {shown['recall']} (worst {shown['worst family']})  fixed paid {shown['fixed paid']}  "
                     f"search paid {shown['search paid']}" + (f"  kill {shown['kill rate']}" if row["mutants"] else "")
                     + (f"  audit {shown['audit']}" if row["audited_labels"] else ""))
        if card.skipped:
            lines.append(f"      {card.skipped}")
        lines += [f"      {f}" for f in card.failures] + [f"      warning: {w}" for w in card.warnings]
    return "\n".join(lines + [_totals_text(totals, run)])


def audit_domain(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError
    from pipelines.commands.domains import registry_with_warnings
    from quality.report_card.audit import AuditError, draw_audit, read_labels, summarize, write_audit, \
        write_labelling_file
    from storage.deployment import open_lake

    try:
        domain = registry_with_warnings().get(args.domain)
    except UnknownDomainError as exc:
        raise CliError(f"{exc}; `assay domains list` shows the names") from None
    if args.labels is None and not args.checkpoint:
        raise CliError("give --checkpoint C to draw completions to label, or --labels FILE to report a labelled file")
    try:
        if args.labels is not None:
            rows = read_labels(args.labels)
            if rows[0]["domain"] != domain.name:
                raise CliError(f"{args.labels} labels domain {rows[0]['domain']!r}, not {domain.name!r}")
            summary = summarize(rows)
            write_audit(open_lake(write=True), rows)
            emit(args, summary.as_dict(), lambda _: _audit_text(summary))
            return 0
        if args.per_stratum < 1:
            raise CliError(f"--per-stratum must be >= 1, got {args.per_stratum}")
        lake = open_lake()
        checkpoint = _resolved(lake, args.checkpoint)
        drawn = draw_audit(lake, domain, checkpoint, per_stratum=args.per_stratum, seed=args.seed)
    except AuditError as exc:
        raise CliError(str(exc)) from None
    out = args.out or Path(f"audit-{domain.name}-{checkpoint}.jsonl")
    write_labelling_file(drawn, out)
    counts = {}
    for row in drawn:
        counts[row["stratum"]] = counts.get(row["stratum"], 0) + 1
    payload = {"file": str(out), "rows": len(drawn), "strata": counts, "audit": drawn[0]["audit"] if drawn else None}
    emit(args, payload, lambda p: (f"wrote {p['rows']} completions to label to {p['file']} "
                                   f"({json.dumps(p['strata'])}); fill in `label` (correct / incorrect), then run "
                                   f"`assay domains audit {domain.name} --labels {p['file']}`"))
    return 0


def _resolved(lake, ref: str) -> str:
    """The checkpoint id ``ref`` names ('champion', 'latest', an id); only reads."""
    from generation.checkpoints import CheckpointError, resolve_checkpoint

    try:
        return resolve_checkpoint(ref, lake, lake.mlflow_uri).checkpoint
    except CheckpointError as exc:
        raise CliError(str(exc)) from None


def _audit_text(summary) -> str:
    def rate(value, interval, errors, n, what):
        if value is None:
            return f"{what}: nothing labelled"
        return f"{what}: {value:.1%} [{interval[0]:.1%}, {interval[1]:.1%}] ({errors} of {n})"

    weighted = ", ".join(f"{k} {v:.1%}" for k, v in (("FP", summary.weighted_fp_rate), ("FN", summary.weighted_fn_rate))
                         if v is not None)
    return "\n".join([
        f"audit {summary.audit} of {summary.domain} at {summary.checkpoint}: {summary.labelled} labelled completions",
        rate(summary.fp_rate, summary.fp_interval, summary.false_positives, summary.paid_labelled,
             "false positives (paid, labelled incorrect)"),
        rate(summary.fn_rate, summary.fn_interval, summary.false_negatives, summary.unpaid_labelled,
             "false negatives (unpaid, labelled correct)"),
        f"weighted by stratum size (the whole sweep): {weighted or '-'}",
        "recorded in lake table verifier_audits; `assay domains report` shows it"])
