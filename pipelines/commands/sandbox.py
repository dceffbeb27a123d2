"""``assay sandbox run FILE``: run an untrusted Python program in the sandbox and report how it ended."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pipelines.cli import EXIT_FAILED, CliError, add_json_flag, emit
from pipelines.config_flags import add_model_flags, model_from_args
from sandbox.limits import Limits


def _positive(kind):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be > 0")
        return value
    return parse


def register(subparsers) -> None:
    parser = subparsers.add_parser("sandbox", help="run untrusted code in the sandbox",
                                   description="Run untrusted programs isolated: bubblewrap as an unprivileged "
                                               "uid, no network, a private scratch folder, rlimits.")
    sub = parser.add_subparsers(dest="sandbox_command", metavar="ACTION", required=True)
    run = sub.add_parser(
        "run", help="run a Python file in the sandbox",
        description="Run a Python FILE in the sandbox and print its outcome: status (ok|error|timeout|memory|"
                    "killed), returncode, stdout, stderr, duration_s. Exit 0 whenever the program ran, "
                    "whatever its status; 2 for a missing file; 1 when no isolation is available "
                    "(bubblewrap missing; ASSAY_UNSAFE_LOCAL_EXEC=1 runs it unisolated, with a warning).")
    run.add_argument("file", help="Python source file to run")
    run.add_argument("--timeout", type=_positive(float), default=10.0, metavar="S",
                     help="wall-clock and CPU limit in seconds (Limits.wall_s and Limits.cpu_s; default 10)")
    # The other limits: fields of sandbox.Limits, help text from their descriptions.
    add_model_flags(run, Limits, exclude={"cpu_s", "wall_s"},
                    metavars={"memory_mb": "M", "file_size_mb": "M", "scratch_mb": "M", "nproc": "N",
                              "output_bytes": "BYTES"})
    run.add_argument("--stdin", metavar="PATH", help="file to feed on the program's stdin ('-' for this stdin)")
    add_json_flag(run)
    run.set_defaults(handler=run_file)


def run_file(args: argparse.Namespace) -> int:
    from sandbox import SandboxUnavailable, run_program

    path = Path(args.file)
    if not path.is_file():
        raise CliError(f"no such file: {args.file!r} (give the path of a Python program to run)")
    stdin = None
    if args.stdin == "-":
        stdin = sys.stdin.buffer.read()
    elif args.stdin:
        if not Path(args.stdin).is_file():
            raise CliError(f"no such file for --stdin: {args.stdin!r}")
        stdin = Path(args.stdin).read_bytes()
    limits = model_from_args(Limits, args, cpu_s=args.timeout, wall_s=args.timeout)
    try:
        result = run_program(path.read_bytes(), stdin=stdin, limits=limits)
    except SandboxUnavailable as exc:
        raise CliError(str(exc), code=EXIT_FAILED) from None

    def human(payload: dict) -> str:
        lines = [f"status: {payload['status']}  returncode: {payload['returncode']}  "
                 f"duration: {payload['duration_s']:.3f}s" + (f"  (limit hit: {result.limit})" if result.limit else "")]
        for stream in ("stdout", "stderr"):
            if payload[stream]:
                lines.append(f"--- {stream} ---\n{payload[stream].rstrip()}")
        return "\n".join(lines)

    emit(args, result.to_dict(), human)
    return 0
