"""``assay domains list|check``: the registry, and the environment self-test of each domain."""

from __future__ import annotations

import argparse
import sys

from pipelines.cli import EXIT_FAILED, CliError, add_json_flag, emit


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


def _registry():
    from domains import get_registry

    registry = get_registry()
    for error in registry.errors:
        print(f"assay: warning: domain plugin {error}", file=sys.stderr)
    return registry


def list_domains(args: argparse.Namespace) -> int:
    registry = _registry()
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

    registry = _registry()
    if args.all == bool(args.domain):
        raise CliError("give one DOMAIN or --all")
    try:
        chosen = list(registry) if args.all else [registry.get(args.domain)]
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None
    from tqdm import tqdm

    results = []
    for domain in tqdm(chosen, desc="checking domains", disable=len(chosen) < 2, file=sys.stderr):
        results.append(check_domain(domain, n=args.samples))
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
