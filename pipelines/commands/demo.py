"""``assay demo``: the main job end to end on the embedded defaults (what `make demo` runs)."""

from __future__ import annotations

import argparse

from pipelines.cli import CliError, add_json_flag, emit


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the whole pipeline on the embedded defaults (what `make demo` runs)",
        description="Ingest and gate the built-in domains, train the default policy with GRPO for a "
                    "few steps on an easy domain, sweep base and new checkpoint on every domain, "
                    "compare them, promote or refuse, and print a per-domain summary. Defaults fit "
                    "a 2-core CPU in about 15 minutes; every flag scales a stage up.")
    parser.add_argument("--domains", default="core",
                        help="'core' (default: the built-in domains without the 100+ reasoning-gym "
                             "pack domains), 'builtin' (every built-in domain, pack included: about "
                             "an hour here), 'all' (plugins too) or a comma-separated list")
    parser.add_argument("--train-samples", type=int, default=64, help="generated train rows per domain")
    parser.add_argument("--recipe", default="smollm2", help="training recipe: smollm2 (default), tiny or a YAML path")
    parser.add_argument("--train-domain", default="math_arith_easy",
                        help="domain to train on (default math_arith_easy: 2-term single-digit sums)")
    parser.add_argument("--steps", type=int, default=8, help="GRPO steps (default 8)")
    parser.add_argument("--sweep-items", type=int, default=24, help="eval items per domain in the sweeps")
    parser.add_argument("--sweep-samples", type=int, default=1, help="samples per eval item (K)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="completion length in the sweeps")
    parser.add_argument("--skip-training", action="store_true", help="stop after ingest and gates")
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError
    from pipelines.demo import DemoOptions, run_demo

    try:
        options = DemoOptions(domains=args.domains, train_samples=args.train_samples, recipe=args.recipe,
                              train_domain=args.train_domain, steps=args.steps,
                              sweep_items=args.sweep_items, sweep_samples=args.sweep_samples,
                              max_new_tokens=args.max_new_tokens,
                              skip_training=args.skip_training)
        summary = run_demo(options)
    except (ValueError, UnknownDomainError) as exc:
        raise CliError(str(exc)) from None
    emit(args, summary, lambda s: s["text"])
    return 0 if summary["ok"] else 1
