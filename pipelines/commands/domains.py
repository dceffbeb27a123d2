"""``assay domains list|check|attack|report|audit|import``: the registry, the environment self-test of each
domain, the red-team run of its reward (:mod:`quality.reward_attacks`), its report card
(:mod:`pipelines.commands._report_card`), and environments of other frameworks made domains
(:mod:`pipelines.commands._import_environments`)."""

from __future__ import annotations

import argparse
import contextlib
import sys

from pipelines.cli import EXIT_FAILED, CliError, add_domains_argument, add_json_flag, emit, with_examples
from pipelines.config_flags import add_model_flags, model_from_args
from quality.attack_config import AttackConfig


def register(subparsers) -> None:
    parser = subparsers.add_parser("domains", help="list and self-test registered domains",
                                   description="List the registered domains or self-test them.")
    sub = parser.add_subparsers(dest="domains_command", metavar="ACTION", required=True)

    lister = sub.add_parser("list", help="list every registered domain (built-ins and plugins)",
                            description="List every registered domain. Plugins load from the "
                                        "folders in $ASSAY_DOMAINS_PATH; broken ones are reported on stderr.")
    lister.add_argument("--tag", action="append", help="only domains with this tag (repeatable)")
    add_json_flag(lister)
    lister.set_defaults(handler=list_domains)

    check = sub.add_parser(
        "check", help="verify each domain's verifier (reference answers, determinism, splits, fuzz)",
        description="Self-test domains: reference answers score 1.0, corrupted answers score less, "
                    "samples are deterministic per seed, train and eval are disjoint, and the scorer "
                    "never raises on arbitrary text. Exit 1 if any domain fails.")
    check.add_argument("domain", nargs="?", help="domain name (or use --all)")
    check.add_argument("--all", action="store_true", help="check every registered domain")
    check.add_argument("--samples", type=int, default=20, help="items per split to check (default 20)")
    add_json_flag(check)
    check.set_defaults(handler=check_domains)

    attack = sub.add_parser(
        "attack", help="try to earn each domain's reward without the work (red-team its scorer)",
        description="Score generic reward hacks built from the prompt alone (answer sprays, two-answer "
                    "hedges, prompt echoes, keyword stuffing, several boxed/Answer lines, odd number formats, "
                    "empty/huge/NUL text, fig-leaf refusals, all options) plus the domain's own "
                    "(Domain.attacks) with the domain's scorer, as the trainer does. A family is paid on an "
                    "item when any candidate scores above 0 while the reference answer scores 1.0. "
                    "Exit 1 if anything is paid or a reference answer does not score 1.0; run it before "
                    "shipping a domain.")
    with_examples(attack, "assay domains attack math_arith logic", "assay domains attack --tag arithmetic --json",
                  note="assay domains attack --all runs every registered domain (a few minutes).")
    add_domains_argument(attack, "domain", nargs="*", default=[], help="domain names (or use --all / --tag)")
    attack.add_argument("--all", action="store_true", help="attack every registered domain")
    attack.add_argument("--tag", action="append", help="attack the domains with this tag (repeatable)")
    add_model_flags(attack, AttackConfig, metavars={"items": "N"})
    add_json_flag(attack)
    attack.set_defaults(handler=attack_domains)

    from pipelines.commands import _report_card

    _report_card.register(sub)  # `assay domains report` and `assay domains audit`

    from pipelines.commands import _import_environments

    _import_environments.register(sub)  # `assay domains import`


def registry_with_warnings():
    """The registry, each broken plugin said on stderr (every `assay domains` command starts here)."""
    from domains import get_registry

    registry = get_registry()
    for error in registry.errors:
        print(f"assay: warning: domain plugin {error}", file=sys.stderr)
    return registry


def list_domains(args: argparse.Namespace) -> int:
    registry = registry_with_warnings()
    rows = [d.describe() for d in registry.select(tags=args.tag)]

    def human(rows):
        width = max((len(r["name"]) for r in rows), default=4)
        lines = [f"{r['name']:<{width}}  {r['owner']:<24}  {','.join(r['tags'])}" for r in rows]
        return "\n".join(lines + [f"{len(rows)} domains"])

    emit(args, rows, human)
    return 0


def check_domains(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError
    from quality.domain_check import check_domain
    from quality.report_card.hack_corpus import read_corpus
    from storage.deployment import open_lake

    registry = registry_with_warnings()
    if args.all == bool(args.domain):
        raise CliError("give one DOMAIN or --all")
    try:
        chosen = list(registry) if args.all else [registry.get(args.domain)]
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None
    from tqdm import tqdm

    lake = open_lake()  # reading only: a lake that does not exist yet holds no corpus
    results = []
    for domain in tqdm(chosen, desc="checking domains", disable=len(chosen) < 2, file=sys.stderr):
        # the hacks a report card's search once found are replayed (check hack_corpus): a hole stays closed
        results.append(check_domain(domain, n=args.samples, corpus_rows=read_corpus(lake, domain.name)))
    payload = results if args.all else results[0]

    def human(_):
        lines = []
        for r in results:
            failed = [f"{k}: {v['detail']}" for k, v in r["checks"].items() if not v["passed"]]
            lines.append(f"{'PASS' if r['passed'] else 'FAIL'}  {r['domain']}" +
                         ("".join(f"\n      {f}" for f in failed)))
        passed = sum(r["passed"] for r in results)
        return "\n".join(lines + [f"{passed}/{len(results)} domains passed"])

    emit(args, payload, human)
    return 0 if all(r["passed"] for r in results) else EXIT_FAILED


def attack_domains(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError

    config = model_from_args(AttackConfig, args)
    registry = registry_with_warnings()
    if sum((bool(args.domain), args.all, bool(args.tag))) != 1:
        raise CliError("give DOMAIN names, --all or --tag (one of them); `assay domains list` shows the names")
    try:
        chosen = (list(registry) if args.all else registry.select(tags=args.tag) if args.tag
                  else [registry.get(name) for name in args.domain])
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None
    if not chosen:
        raise CliError(f"no domain has tag(s) {', '.join(args.tag)}; `assay domains list` shows the tags")
    blind = [d.name for d in chosen if not d.has_verifier]
    if blind and len(blind) == len(chosen):
        raise CliError(f"{', '.join(blind)} {'has' if len(blind) == 1 else 'have'} no verifier to attack: a learned "
                       f"reward is red-teamed by its gate's probes, `assay reward check {blind[0]}`")
    if blind:  # named or selected beside verifiable ones: said, not silently dropped
        print(f"assay: skipping {', '.join(blind)}: no verifier to attack (their learned rewards are probed by "
              "`assay reward check DOMAIN`)", file=sys.stderr)
        chosen = [d for d in chosen if d.has_verifier]
    from tqdm import tqdm

    from quality.reward_attacks import attack_domain, write_attacks

    reports = []
    with contextlib.redirect_stdout(sys.stderr):  # domain code may print; stdout is for the report
        for domain in tqdm(chosen, desc="attacking domains", disable=len(chosen) < 2, file=sys.stderr):
            reports.append(attack_domain(domain, items=config.items))
    run = None
    if config.record:
        from storage.deployment import open_lake

        run = write_attacks(open_lake(write=True), reports, source="cli")
    payload = {"run": run, "passed": all(r.passed for r in reports),
               "domains": [r.as_dict() for r in reports]}

    def human(_):
        width = max(len(r.domain) for r in reports)
        lines = [f"{'PASS' if r.passed else 'FAIL'}  {r.domain:<{width}}  {r.summary()}" for r in reports]
        paid = sum(len(r.paid) for r in reports)
        return "\n".join(lines + [f"{sum(r.passed for r in reports)}/{len(reports)} domains resisted every attack; "
                                   f"{paid} (domain, family) pairs paid" + (f"; recorded as {run}" if run else "")])

    emit(args, payload, human)
    return 0 if payload["passed"] else EXIT_FAILED
