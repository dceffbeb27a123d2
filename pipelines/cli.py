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

Errors. A problem the user can fix is a :class:`storage.errors.UserError` raised where the library
detects it (:class:`CliError` is the one the commands raise themselves); :func:`main` maps it once
to ``assay: error: <message>`` on stderr and exit 2, and so does the parser for a bad flag. Any
other exception is a bug and keeps its traceback.

Lists of domains. Every option or positional that takes several domains is added with
:func:`add_domains_argument`: words, each of which may hold commas, so ``--domains a b,c``,
``--domains a,b,c`` and ``--domains a b c`` are the same list (:data:`DOMAIN_LIST_CONVENTION`,
shown in ``assay --help``; tests/pipelines/test_domain_lists.py walks the parser tree for strays).
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from storage.errors import UserError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class CliError(UserError):
    """A user-facing error a command raises itself: printed as one line, exit code 2 unless given."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = self.exit_code = code


class AssayArgumentParser(argparse.ArgumentParser):
    """argparse's parser, but a bad flag is reported like every other user error: one line,
    ``assay: error: <command>: <problem> (see `<command> --help`)``, exit 2."""

    def error(self, message: str):  # argparse's hook for every parse problem
        where = self.prog.removeprefix("assay").strip()
        self.exit(EXIT_USAGE, f"assay: error: {where + ': ' if where else ''}{message} (see `{self.prog} --help`)\n")


# -- lists of domains: one convention for every command ------------------------------------------

DOMAIN_LIST_CONVENTION = ("A list of domains is one or more words, each of which may hold commas: "
                          "--domains a b,c = --domains a,b,c = --domains a b c.")
DOMAIN_LIST_HINT = "words, each may hold commas: a b,c = a,b,c"


def split_domain_words(words: str | Iterable[str]) -> list[str]:
    """The domain names in ``words`` (a string or words, each of which may hold commas), in order,
    each once: ``["a", "b,c"]`` -> ``["a", "b", "c"]``."""
    words = [words] if isinstance(words, str) else list(words)
    names: list[str] = []
    for word in words:
        for name in str(word).split(","):
            name = name.strip()
            if name and name not in names:
                names.append(name)
    return names


class DomainListAction(argparse.Action):
    """Stores :func:`split_domain_words` of the words given (the last occurrence wins, as for any
    option); an empty list (``--domains ,``) is an error naming the option."""

    def __call__(self, parser, namespace, values, option_string=None):
        words = [] if values is None else [values] if isinstance(values, str) else list(values)
        names = split_domain_words(words)
        if words and not names:
            parser.error(f"{option_string or self.metavar or self.dest}: no domain names in {' '.join(words)!r}")
        setattr(namespace, self.dest, names or self.default)  # a positional given no words keeps its default


def add_domains_argument(parser: argparse.ArgumentParser, *names: str, help: str, nargs: str = "+",
                         metavar: str = "DOMAIN", **kwargs: Any) -> argparse.Action:
    """Add an option (``"--domains"``) or a positional (``"domain"``) taking a list of domains in
    the one convention (:data:`DOMAIN_LIST_CONVENTION`); the parsed value is a list of names (or
    the default). ``help`` says what the list is for; the convention is appended to it."""
    help_text = f"{help} ({DOMAIN_LIST_HINT})".replace("%", "%%")
    return parser.add_argument(*names, action=DomainListAction, nargs=nargs, metavar=metavar, help=help_text,
                               **kwargs)


# -- assay --version -------------------------------------------------------------------------------

def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def version_text() -> str:
    """What ``assay --version`` prints: the version, the commit when running from a git checkout
    (and whether tracked files have uncommitted changes), and where ASSAY_HOME points. Stdlib only."""
    from importlib import metadata

    from storage.home import HOME_ENV, home_from_environment, resolve_home

    try:
        version = metadata.version("assay")
    except metadata.PackageNotFoundError:
        version = "unknown (not installed: run `make install`)"
    lines = [f"assay {version}"]
    root = Path(__file__).resolve().parents[1]
    if (root / ".git").exists():
        commit = _git(root, "rev-parse", "--short=12", "HEAD")
        if commit is None:
            lines.append(f"checkout {root} (commit unknown: git is missing or cannot read it)")
        else:
            changed = _git(root, "status", "--porcelain", "--untracked-files=no")
            state = ("dirty: uncommitted changes to tracked files" if changed
                     else "clean" if changed is not None else "state unknown")
            lines.append(f"commit {commit} ({state}) in checkout {root}")
    else:
        lines.append(f"installed package at {root} (not a git checkout: no commit to show)")
    home = resolve_home()
    source = f"from ${HOME_ENV}" if home_from_environment() else f"${HOME_ENV} unset: .assay in the working directory"
    lines.append(f"ASSAY_HOME {home} ({source}{'' if home.exists() else '; not created yet'})")
    return "\n".join(lines)


class VersionAction(argparse.Action):
    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


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
    parser = AssayArgumentParser(
        prog="assay",
        description=(
            "Assay: per-domain data quality, GRPO training, benchmark sweeps and regression "
            "detection for LLM post-training. Data lives under $ASSAY_HOME (default ./.assay); "
            "extra domains load from the folders in $ASSAY_DOMAINS_PATH."
        ),
        epilog=f"{DOMAIN_LIST_CONVENTION} Errors you can fix print `assay: error: ...` and exit 2. "
               "Run `assay COMMAND --help` for the options of one command.",
    )
    parser.add_argument("--version", action=VersionAction,
                        help="print the version, the commit of this checkout and where ASSAY_HOME points, and exit")
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
    except UserError as exc:  # raised where the library detects it; anything else is a bug (traceback)
        print(f"assay: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("assay: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    # `python -m pipelines.cli`: run the imported module, so command modules and this entry point
    # share one CliError class.
    from pipelines.cli import main as _main

    sys.exit(_main())
