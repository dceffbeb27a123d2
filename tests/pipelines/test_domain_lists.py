"""One convention for a list of domains on every command: words, each of which may hold commas
(`--domains a b,c` = `--domains a,b,c` = `--domains a b c`). The test walks the whole parser tree,
so a command added later that takes domains another way fails here."""

from __future__ import annotations

import argparse

import pytest

from pipelines.cli import DOMAIN_LIST_CONVENTION, DOMAIN_LIST_HINT, DomainListAction, build_parser, split_domain_words
from pipelines.demo import DemoOptions
from tests.conftest import run_cli

# Arguments that name domains but are not a list of them, with why.
NOT_A_DOMAIN_LIST = {
    (("ingest",), "more"): "DOMAIN PATH pairs after the first pair",
    (("regress",), "margin"): "margins, each M or DOMAIN=M (repeatable)",
}
FORMS = (["a", "b,c"], ["a,b,c"], ["a", "b", "c"], ["a,", "b", ",c"])


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """(path, parser) of every command and subcommand, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, path + (name,))


def _takes_several(action: argparse.Action) -> bool:
    return (action.nargs in ("+", "*", argparse.REMAINDER) or isinstance(action.nargs, int) and action.nargs > 1
            or isinstance(action, (argparse._AppendAction, argparse._ExtendAction)))


def names_domains(action: argparse.Action) -> bool:
    """A list of domains by its look: its dest or metavar says domain(s) and it takes several values or
    its name is plural, or its help asks for a comma-separated value (the old convention)."""
    words = f"{action.dest} {action.metavar or ''}".lower()
    return ("domain" in words and (_takes_several(action) or "domains" in words)
            or "comma-separated" in (action.help or ""))


def domain_lists() -> list[tuple[tuple[str, ...], argparse.ArgumentParser, argparse.Action]]:
    found = []
    for path, parser in commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                continue
            if isinstance(action, DomainListAction) or names_domains(action):
                found.append((path, parser, action))
    return found


def _filler(parser: argparse.ArgumentParser, skip: argparse.Action) -> tuple[list[str], list[str]]:
    """Values for the other required options and positionals, so the parse reaches ``skip``."""
    options, positionals = [], []
    for action in parser._actions:
        if action is skip or isinstance(action, argparse._SubParsersAction):
            continue
        value = str(action.choices[0]) if action.choices else "1"
        if action.option_strings and action.required:
            options += [action.option_strings[-1], value]
        elif not action.option_strings and action.nargs not in ("*", "?"):
            positionals.append(value)
    return options, positionals


def test_the_walk_finds_every_command_that_takes_domains():
    found = {(path, action.dest) for path, _, action in domain_lists()}
    assert {(("train",), "domains"), (("demo",), "domains"), (("sweep",), "domains"), (("variant",), "domains"),
            (("domains", "attack"), "domain"), (("regress",), "protected")} <= found, sorted(found)


@pytest.mark.parametrize("path, parser, action", [
    pytest.param(*found, id=f"{' '.join(found[0])} {found[2].dest}") for found in domain_lists()])
def test_every_domain_list_takes_words_each_of_which_may_hold_commas(path, parser, action):
    if (path, action.dest) in NOT_A_DOMAIN_LIST:
        return
    where = f"assay {' '.join(path)} {'/'.join(action.option_strings) or action.dest}"
    assert isinstance(action, DomainListAction), (
        f"{where} takes domains its own way: add it with pipelines.cli.add_domains_argument")
    assert DOMAIN_LIST_HINT in action.help, f"{where}: its --help does not state the convention"
    options, positionals = _filler(parser, action)
    parsed = []
    for words in FORMS:
        argv = ([*positionals, *options, action.option_strings[-1], *words] if action.option_strings
                else [*options, *positionals, *words])
        parsed.append(getattr(build_parser().parse_args([*path, *argv]), action.dest))
    assert parsed == [["a", "b", "c"]] * len(FORMS), (where, parsed)


def test_the_convention_is_stated_in_assay_help_and_each_command_help():
    top = " ".join(build_parser().format_help().split())
    assert DOMAIN_LIST_CONVENTION in top
    for path, parser, action in domain_lists():
        if (path, action.dest) not in NOT_A_DOMAIN_LIST:
            assert DOMAIN_LIST_HINT in " ".join(parser.format_help().split()), path


def test_split_domain_words_keeps_order_and_drops_repeats_and_empty_pieces():
    assert split_domain_words(["b,a", "c", "a,,", " d "]) == ["b", "a", "c", "d"]
    assert split_domain_words("a,b") == ["a", "b"]
    assert DemoOptions(domains="x,y").domains == DemoOptions(domains=["x", "y"]).domains == ["x", "y"]


def test_an_empty_list_is_refused_naming_the_option():
    out = run_cli("sweep", "--checkpoint", "base-tiny", "--domains", ",")
    assert out.returncode == 2
    assert out.stderr.strip() == ("assay: error: sweep: --domains: no domain names in ',' "
                                  "(see `assay sweep --help`)"), out.stderr


@pytest.mark.parametrize("words", [["math_arith_easy", "strings"], ["math_arith_easy,strings"]])
def test_the_demo_takes_both_forms_as_the_issue_tried_them(words, assay_home):
    """`assay demo --domains math_arith_easy strings` failed with 'unrecognized arguments: strings'.
    A bad --train-domain is refused before any stage runs, after the domains were read."""
    out = run_cli("demo", "--domains", *words, "--train-domain", "logic")
    assert out.returncode == 2, out.stderr
    assert ("--train-domain 'logic' is not among the demo's domains (--domains math_arith_easy strings)"
            in out.stderr), out.stderr
    assert "Traceback" not in out.stderr
