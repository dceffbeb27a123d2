"""``assay domains import {inspect,lm-eval,verifiers} SOURCE``: an environment of another framework becomes a
registered domain (:mod:`domains.importers.environments`), registered under ``assay domains`` by
:mod:`pipelines.commands.domains`."""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from pipelines.cli import CliError, add_json_flag, emit, with_examples

SOURCE_HELP = {
    "inspect": "an Inspect AI task: FILE.py[@TASK] or MODULE:TASK (the @task function to load)",
    "lm-eval": "an lm-evaluation-harness task: a task YAML, or a folder of them with --task NAME",
    "verifiers": "a verifiers environment: an installed module (or FILE.py) with load_environment(**kwargs)",
}


def register(sub) -> None:
    parser = sub.add_parser(
        "import", help="make an Inspect task, an lm-eval task or a verifiers environment an Assay domain",
        description="Load an environment with its own framework (inspect-ai, lm-eval, verifiers: `make importers` "
                    "installs them) and register it as a domain under $ASSAY_HOME/environments/NAME: its items as "
                    "the source renders them, scored by the source's own scorer. Anything the importer does not "
                    "support (sandboxes, tools, custom solvers, model-graded scorers, log-likelihood tasks, data "
                    "only on a hub, multi-turn environments) is refused before any inference, by name. Then: "
                    "`assay domains check NAME`, `assay domains report NAME`, "
                    "`assay sweep --checkpoint base-smollm2 --domains NAME`.")
    parser.add_argument("kind", choices=sorted(SOURCE_HELP), help="the source's framework")
    parser.add_argument("source", help="; ".join(f"{k}: {v}" for k, v in SOURCE_HELP.items()))
    parser.add_argument("--name", help="the domain's name (lower_snake_case; default: from the source)")
    parser.add_argument("--task", help="lm-eval: the task to load from a folder of YAMLs")
    parser.add_argument("--split-from", choices=("hash", "source"), default="hash",
                        help="hash (default): a stable split by item id that never moves items when the source "
                             "grows; source: the source's own train/eval split")
    parser.add_argument("--eval-share", type=float, default=0.5, metavar="F",
                        help="the hash split's share of eval items (default 0.5)")
    parser.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                        help="an argument of the task / load_environment (repeatable; VALUE read as TOML, else text)")
    parser.add_argument("--args-file", type=Path, metavar="FILE.toml", help="arguments from a TOML file")
    parser.add_argument("--reference", metavar="TEMPLATE",
                        help="verifiers: the completion that answers an item, a template over the task's data fields "
                             "(default '{answer}'), e.g. '<answer>{answer}</answer>': Assay's self-test feeds it as "
                             "a completion that must earn full credit, and verifiers has no parser to format it")
    parser.add_argument("--min-recall", type=float, default=0.0, metavar="F",
                        help="the report card's recall bar (correct answers in other forms that must be paid); "
                             "default 0: measured and shown, not enforced, since the scorer is the source's own")
    parser.add_argument("--replace", action="store_true", help="replace an environment imported under the same name")
    add_json_flag(parser)
    with_examples(parser, "assay domains import inspect examples/environments/inspect/capitals.py",
                  note="SOURCE paths are read from the current folder; examples/environments/ holds one example per "
                       "source.")
    parser.set_defaults(handler=import_domain)


def parse_arguments(pairs: list[str], args_file: Path | None) -> dict:
    """``--args-file`` first, then each ``--arg KEY=VALUE`` over it; a VALUE that parses as a TOML value
    (a number, true, a list, a quoted string) is that value, else the text itself."""
    values: dict = {}
    if args_file is not None:
        try:
            values.update(tomllib.loads(args_file.read_text(encoding="utf-8")))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise CliError(f"--args-file {args_file}: {exc}") from exc
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--arg {pair!r}: expected KEY=VALUE (e.g. --arg num_examples=50)")
        try:
            values[key.strip()] = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            values[key.strip()] = text
    return values


def import_domain(args: argparse.Namespace) -> int:
    from domains.importers.environments import import_environment

    options = {"arguments": parse_arguments(args.arg, args.args_file)}
    if args.task:
        options["task"] = args.task
    if args.reference:
        options["reference"] = args.reference
    result = import_environment(args.kind, args.source, name=args.name, options=options, split_from=args.split_from,
                                eval_share=args.eval_share, replace=args.replace,
                                min_recall=args.min_recall)
    payload = result.to_dict()

    def human(p: dict) -> str:
        lines = [f"imported {p['kind']} {args.source} as domain {p['name']}: {p['counts']['train']} train, "
                 f"{p['counts']['eval']} eval items ({p['folder']})"]
        lines += [f"note: {note}" for note in p["notes"]]
        lines.append(f"next: assay domains check {p['name']}; assay domains report {p['name']}; "
                     f"assay sweep --checkpoint base-smollm2 --domains {p['name']}")
        return "\n".join(lines)

    emit(args, payload, human)
    return 0
