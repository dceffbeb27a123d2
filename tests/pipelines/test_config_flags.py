"""Command-line flags built from configuration models (pipelines.config_flags): one help text,
one default and one validator per knob, shared by the CLI, Dagster and Python callers."""

from __future__ import annotations

import argparse
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evaluation.sweep_config import SweepConfig
from pipelines.cli import CliError, build_parser
from pipelines.config_flags import _shown, add_model_flags, model_from_args, problems
from pipelines.demo import DemoOptions
from sandbox.limits import Limits
from tests.conftest import run_cli


def _command(*path: str) -> argparse.ArgumentParser:
    parser = build_parser()
    for name in path:
        parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    return parser


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {opt: action for action in parser._actions for opt in action.option_strings}


@pytest.mark.parametrize("path, model, left_out", [
    (("sweep",), SweepConfig, {"progress"}),
    (("sandbox", "run"), Limits, {"cpu_s", "wall_s"}),  # both set by --timeout
    (("demo",), DemoOptions, {"log"}),
])
def test_command_flags_are_the_model_fields(path, model, left_out):
    options = _options(_command(*path))
    for name, info in model.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if name in left_out:
            assert flag not in options, flag
            continue
        action = options[flag]
        assert action.help.startswith(info.description), (flag, action.help)
        assert action.default == info.default, flag
        if info.default is not None and not isinstance(info.default, bool):
            assert f"(default: {_shown(info.default)})" in action.help, action.help


def test_existing_flag_names_are_kept():
    sweep = _options(_command("sweep"))
    assert {"--checkpoint", "--domains", "--tag", "--samples", "--limit", "--max-new-tokens", "--temperature",
            "--batch-items", "--backend", "--dtype", "--no-mlflow", "--json"} <= set(sweep)
    sandbox = _options(_command("sandbox", "run"))
    assert {"--timeout", "--memory-mb", "--stdin", "--json"} <= set(sandbox)
    demo = _options(_command("demo"))
    assert {"--domains", "--train-samples", "--recipe", "--train-domain", "--steps", "--sweep-items",
            "--sweep-samples", "--max-new-tokens", "--skip-training", "--difficulty", "--difficulty-samples",
            "--json"} == set(demo) - {"-h", "--help"}


def test_parsed_flags_build_the_model():
    args = build_parser().parse_args(["sweep", "--checkpoint", "x", "--samples", "3", "--top-p", "0.5",
                                      "--max-new-tokens", "7"])
    assert model_from_args(SweepConfig, args, progress=False) == SweepConfig(samples=3, top_p=0.5, max_new_tokens=7,
                                                                             progress=False)
    args = build_parser().parse_args(["sandbox", "run", "f.py", "--timeout", "3", "--nproc", "4"])
    assert model_from_args(Limits, args, cpu_s=args.timeout, wall_s=args.timeout) == Limits(
        cpu_s=3.0, wall_s=3.0, nproc=4)


def test_an_invalid_flag_names_the_flag_and_says_the_model_message():
    args = build_parser().parse_args(["sweep", "--checkpoint", "x", "--batch-items", "0"])
    with pytest.raises(CliError) as caught:
        model_from_args(SweepConfig, args)
    with pytest.raises(ValidationError) as library:
        SweepConfig(batch_items=0)
    assert str(caught.value) == "--batch-items 0: " + library.value.errors()[0]["msg"].removeprefix("Value error, ")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("args, message", [
    (("sweep", "--checkpoint", "base-tiny", "--batch-items", "0"), "--batch-items 0: batch_items must be a positive"),
    (("sweep", "--checkpoint", "base-tiny", "--top-p", "1.5"), "--top-p 1.5: top_p must be in (0, 1]"),
    (("sweep", "--checkpoint", "base-tiny", "--samples", "4", "--temperature", "0"), "copies of the greedy"),
    (("demo", "--steps", "0"), "--steps 0: steps must be >= 1, got 0; to stop after ingest and gates use --skip"),
    (("sandbox", "run", "{file}", "--memory-mb", "8"), "--memory-mb 8: Limits.memory_mb=8 is too small"),
    (("sandbox", "run", "{file}", "--scratch-mb", "0"), "--scratch-mb 0: Limits.scratch_mb must be a positive int"),
])
def test_cli_rejects_bad_values_in_one_line_exit_2(args, message, assay_home, tmp_path):
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    out = run_cli(*[a.format(file=program) for a in args], "--json")
    assert out.returncode == 2, out.stderr
    assert out.stdout == ""
    errors = [line for line in out.stderr.splitlines() if line.startswith("assay: error")]
    assert len(errors) == 1 and message in errors[0], out.stderr


class _Knobs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    size: int = Field(4, description="how big")
    ratio: float | None = Field(None, description="a ratio (unset: automatic)")
    mode: Literal["fast", "slow"] = Field("fast", description="fast or slow")
    names: list[str] = Field(default_factory=list, description="names to use")
    verbose: bool = Field(False, description="say more")
    color: bool = Field(True, description="colour the output")


def test_flag_kinds_follow_the_field_types():
    parser = argparse.ArgumentParser()
    assert add_model_flags(parser, _Knobs) == ["size", "ratio", "mode", "names", "verbose", "color"]
    args = parser.parse_args(["--size", "9", "--mode", "slow", "--names", "a", "b", "--verbose", "--no-color"])
    assert model_from_args(_Knobs, args) == _Knobs(size=9, mode="slow", names=["a", "b"], verbose=True, color=False)
    assert model_from_args(_Knobs, parser.parse_args([])) == _Knobs()
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "medium"])  # choices from the Literal
    helps = {a.dest: a.help for a in parser._actions}
    assert helps["ratio"] == "a ratio (unset: automatic)"  # no "(default: None)"
    assert helps["size"] == "how big (default: 4)" and helps["mode"] == "fast or slow (default: fast)"
    assert helps["color"] == "colour the output (default: on)"


def test_models_without_descriptions_or_cli_types_are_refused():
    class Bare(BaseModel):
        size: int = 4

    class Nested(BaseModel):
        inner: dict[str, int] = Field(default_factory=dict, description="a mapping")

    with pytest.raises(TypeError, match="Bare.size has no Field"):
        add_model_flags(argparse.ArgumentParser(), Bare)
    with pytest.raises(TypeError, match="Nested.inner: no command-line form"):
        add_model_flags(argparse.ArgumentParser(), Nested)


def test_problems_is_one_line_per_error():
    with pytest.raises(ValidationError) as caught:
        Limits(memory_mb=8, nproc=0)
    text = problems(caught.value)
    assert "\n" not in text
    assert text == ("memory_mb 8: Limits.memory_mb=8 is too small to start a program; use >= 32; "
                    "nproc 0: Limits.nproc must be a positive int, got 0")
