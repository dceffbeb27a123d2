"""The ``assay`` command line.

Each command group lives in one module under ``pipelines/commands/`` exposing
``register(subparsers)``; this file only discovers them, parses, and maps errors to exit codes.
Heavy libraries (torch, dagster, great_expectations, transformers) are imported inside the
command handlers, never here, so ``assay --help`` stays instant.

Exit codes: 0 success, 1 the command ran and found a problem (a failed check, a regression),
2 bad input (unknown domain, missing file, unsupported format, invalid option).

stdout holds the command's result only (one JSON document with ``--json``, else the text for a
person); progress, notes, warnings and every third-party library's output go to stderr
(:mod:`pipelines.console`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from typing import Any, Callable, Sequence

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CliError(Exception):
    """A user-facing error: printed as one line, exit code 2 unless given."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


def emit(args: argparse.Namespace, payload: Any, human: Callable[[Any], str] | None = None) -> None:
    """Print ``payload`` on the real stdout: one JSON document with ``--json``, else text for a person."""
    from pipelines.console import result_stream

    out = result_stream()
    if getattr(args, "json", False):
        json.dump(payload, out, indent=2, default=str)
        out.write("\n")
    else:
        print(human(payload) if human else json.dumps(payload, indent=2, default=str), file=out)
    out.flush()


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")


class ExampleFormatter(argparse.HelpFormatter):
    """argparse's wrapping for prose paragraphs (split on blank lines), but an indented line (an
    example command) stays one line as written, so it can be copied and run."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks = []
        for block in text.split("\n\n"):
            lines = block.splitlines()
            if any(line.startswith("  ") for line in lines):
                blocks.append("\n".join(indent + line for line in lines))
            else:
                blocks.append(super()._fill_text(" ".join(lines), width, indent))
        return "\n\n".join(blocks)


def with_examples(parser: argparse.ArgumentParser, *commands: str, note: str = "") -> None:
    """Show ``commands`` under 'examples:' at the end of ``parser``'s ``--help`` (``note`` after
    them) and keep them on ``parser.examples``: tests/pipelines/test_help_examples.py runs every
    one as written, so an example that stops working fails the suite."""
    parser.formatter_class = ExampleFormatter
    parser.examples = tuple(commands)
    text = "examples:\n" + "\n".join(f"  {command}" for command in commands)
    parser.epilog = f"{text}\n\n{note}" if note else text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="assay",
        description=(
            "Assay: per-domain data quality, GRPO training, benchmark sweeps and regression "
            "detection for LLM post-training. Data lives under $ASSAY_HOME (default ./.assay); "
            "extra domains load from the folders in $ASSAY_DOMAINS_PATH."
        ),
        epilog="Run `assay COMMAND --help` for the options of one command.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    import pipelines.commands as commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"pipelines.commands.{info.name}").register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return EXIT_USAGE if argv is None or list(argv) else EXIT_OK
    from pipelines.console import stdout_for_result_only

    try:
        with stdout_for_result_only():
            return int(handler(args) or EXIT_OK)
    except CliError as exc:
        print(f"assay: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("assay: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # `python -m pipelines.cli`: run the imported module, so command modules and this entry point
    # share one CliError class.
    from pipelines.cli import main as _main

    sys.exit(_main())
