"""``assay demo``: the main job end to end on the embedded defaults (what `make demo` runs)."""

from __future__ import annotations

import argparse

from pipelines.cli import add_json_flag, emit, with_examples
from pipelines.config_flags import add_model_flags, model_from_args
from pipelines.demo import DemoOptions


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the whole pipeline on the embedded defaults (what `make demo` runs)",
        description="Ingest and gate the built-in domains, train the default policy with GRPO for a "
                    "few steps on an easy domain, sweep base and new checkpoint on every domain, "
                    "compare them, promote or refuse, and print a per-domain summary. Defaults fit "
                    "a 2-core CPU in about 5 minutes; every flag scales a stage up.")
    with_examples(parser, "assay demo --recipe tiny --domains math_arith_easy --steps 2 --sweep-items 3   # a smoke run",
                  "assay demo --skip-training --domains code logic   # ingest and gates only",
                  note="Every stage scales up with its flag: e.g. --steps 16 --sweep-items 48 --sweep-samples 2 "
                       "trains longer and shrinks the smallest regression the sweep can detect (MDE).")
    # Every flag is a field of DemoOptions (help text from its description).
    add_model_flags(parser, DemoOptions, exclude={"log"}, metavars={"domains": "DOMAIN", "recipe": "RECIPE",
                                                                    "train_domain": "DOMAIN"})
    add_json_flag(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pipelines.demo import run_demo

    # an unknown domain, recipe or --train-domain is a storage.errors.UserError (assay: error:, exit 2)
    summary = run_demo(options=model_from_args(DemoOptions, args))
    emit(args, summary, lambda s: s["text"])
    return 0 if summary["ok"] else 1
