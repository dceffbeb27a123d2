"""``assay variant``: make a faster variant of a checkpoint, time it, and certify it per domain.

See :mod:`evaluation.variants` (what is measured and decided) and :mod:`generation.variants` (the
methods). Exit codes: 0 the variant is equivalent on every domain (it becomes ``fast`` when also
fast enough), 1 it is not (a domain inferior or underpowered: the output says which and why),
2 bad input or a method this machine cannot run.
"""

from __future__ import annotations

import argparse
import sys

from evaluation.variant_config import METHOD_NAMES, VariantConfig
from pipelines.cli import EXIT_FAILED, EXIT_OK, CliError, add_domains_argument, add_json_flag, emit, with_examples
from pipelines.config_flags import add_model_flags, model_from_args


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "variant", help="make a fast variant of a checkpoint (quantized, GGUF, speculative) and certify it per domain",
        description="Make a variant of a checkpoint with --method (" + ", ".join(METHOD_NAMES) + "), register it "
                    "with its parent in MLflow and the lake, time both in one run (tokens/s at batch 1 and at the "
                    "sweep's batch, time to first token, peak memory), sweep both on the same items with the same "
                    "generation config, and test every domain for non-inferiority at --margin. The variant becomes "
                    "the 'fast' alias only when every domain is shown non-inferior and it is at least --min-speedup "
                    "times faster at batch 1; an underpowered domain is reported as such, never as a pass. "
                    "Exit 0: equivalent; 1: not shown equivalent; 2: bad input or a method this machine cannot run.",
    )
    with_examples(parser, "assay variant --from latest --method gguf-q4_0 --domains math_arith_easy strings --limit 8")
    parser.add_argument("--from", dest="parent", required=True, metavar="CHECKPOINT",
                        help="the parent: a checkpoint id, 'champion', 'latest' or 'base-smollm2' / 'base-tiny'")
    add_domains_argument(parser, "--domains", help="domains of the equivalence sweep (default: every domain a sweep covers)")
    parser.add_argument("--tag", action="append", help="only domains with this tag (repeatable)")
    add_model_flags(parser, VariantConfig, exclude={"progress"}, metavars={"limit": "N", "method": "METHOD"})
    add_json_flag(parser)
    parser.set_defaults(handler=run_variant_command)


def run_variant_command(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError, get_registry
    from evaluation.sweep import SweepError
    from evaluation.variants import VariantRefused, certify_variant
    from pipelines.settings import open_lake
    from generation.checkpoints import CheckpointError
    from generation.variants import MethodUnavailable, VariantError, unavailable_reason

    config = model_from_args(VariantConfig, args, progress=sys.stderr.isatty() or not args.json)
    problem = unavailable_reason(config.method)  # before any sweep: a method that cannot run here says so
    if problem:
        raise CliError(f"method {config.method} cannot run on this machine: {problem}")
    registry = get_registry()
    try:
        domains = registry.sweep_selection(names=args.domains, tags=args.tag)
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None
    if not domains:
        raise CliError("no domains selected: check --domains/--tag (see `assay domains list`)")
    lake = open_lake(write=True)

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        cert = certify_variant(lake, lake.mlflow_uri, args.parent, domains, config, log=log)
    except (CheckpointError, VariantRefused, MethodUnavailable, VariantError) as exc:
        raise CliError(str(exc)) from None
    except SweepError as exc:
        raise CliError(str(exc), code=EXIT_FAILED) from None
    payload = cert.to_json()

    def human(p: dict) -> str:
        s = p["speed"]
        lines = [f"variant {p['variant']} of {p['parent']} ({p['method']})",
                 f"speed (load average {s['load_average']:.1f}): batch 1 {s['variant']['tokens_per_s_batch1']:.1f} vs "
                 f"{s['parent']['tokens_per_s_batch1']:.1f} tokens/s ({p['speedup_batch1']:.2f}x); batch "
                 f"{s['variant']['batch']} {s['variant']['tokens_per_s_batch']:.1f} vs {s['parent']['tokens_per_s_batch']:.1f}"
                 f" ({p['speedup_batch']:.2f}x); first token {s['variant']['ttft_s'] * 1000:.0f} vs "
                 f"{s['parent']['ttft_s'] * 1000:.0f} ms; peak memory {s['variant']['peak_rss_gib']:.2f} vs "
                 f"{s['parent']['peak_rss_gib']:.2f} GiB",
                 f"{'domain':<28} {'n':>5} {'delta':>7} {'95% CI':>17} {'verdict':<14} items needed"]
        for d in p["domains"]:
            ci = (f"[{100 * d['ci_low']:+.1f},{100 * d['ci_high']:+.1f}]" if d["ci_low"] is not None else "n/a")
            delta = f"{100 * d['delta']:+.1f}" if d["delta"] is not None else "n/a"
            lines.append(f"{d['domain'][:28]:<28} {d['n']:>5} {delta:>7} {ci:>17} {d['verdict']:<14} "
                         f"{d['items_for_power'] if d['items_for_power'] is not None else ''}")
        lines.append(("FAST: the 'fast' alias now points at " + p["variant"]) if p["fast_alias"]
                     else "not made fast: " + "; ".join(p["reasons"]))
        return "\n".join(lines)

    emit(args, payload, human)
    return EXIT_OK if cert.equivalent else EXIT_FAILED
