"""The program ``function_calls`` runs inside the sandbox: run untrusted code, call one of its
functions on each recorded argument list, and write the results as plain data.

Inside the sandbox's scratch folder it runs as ``main.py ENTRY_POINT`` next to three files:
``program.py`` (the untrusted code), ``calls.json`` (a JSON list of ``[args, kwargs]``, each
encoded by ``plain_data``) and ``plain_data.py`` (a copy of the codec). It writes exactly one line
to stdout, ``RESULT_MARKER`` + a JSON list with one outcome per call, in order:

- ``["returned", <tagged plain value>]``
- ``["raised", "<exception type name>"]`` (an ``Exception``; a ``BaseException`` such as
  ``SystemExit`` ends the program without results, which the host reads as a failure)
- ``["unserialisable", "<why>"]`` (a value that is not plain data: an object, a subclass, a
  generator, too deep or too big)

Everything the untrusted code prints, from Python or from a child process, goes to stderr (file
descriptor 1 is pointed at stderr before it runs), so a solution's own prints never break the
frame. After the frame, the process leaves with ``os._exit(0)``: no ``atexit`` handler, ``__del__``
or leftover thread of the program runs after the results are written.

None of this is a defence: the untrusted code shares this process and may patch anything here,
forge the frame or write to any descriptor. That is harmless by design: the frame only carries
the program's own answers to the calls; the expected answers and the verdict stay on the host
(see ``function_calls``), so a forged frame is just another set of answers.

Stdlib only; it runs under the sandbox's system Python (3.8 or newer).
"""

from __future__ import annotations

import builtins
import json
import os
import sys

try:
    from sandbox import plain_data
except ImportError:  # inside the sandbox: a copy of plain_data.py sits next to this file
    import plain_data  # type: ignore[no-redef]

RESULT_MARKER = "assay-function-calls-v1 "
PROGRAM_FILE = "program.py"
CALLS_FILE = "calls.json"
CODEC_FILE = "plain_data.py"
SOURCE_NAME = "solution.py"  # the file name tracebacks show for the untrusted code


def decode_calls(text: str) -> list:
    """``[(args, kwargs), ...]`` from the text of ``calls.json``."""
    calls = []
    for item in json.loads(text):
        args, kwargs = plain_data.decode(item[0]), plain_data.decode(item[1])
        if type(args) is not tuple or type(kwargs) is not dict or not all(type(k) is str for k in kwargs):
            raise ValueError("each call must be [tuple args, dict of str -> value kwargs]")
        calls.append((args, kwargs))
    return calls


def run(source: str, entry_point: str, calls: list) -> list:
    """Run ``source`` in a fresh namespace, then call ``entry_point`` on each call's arguments."""
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    exec(compile(source, SOURCE_NAME, "exec"), namespace)
    function = namespace.get(entry_point)
    if not callable(function):
        raise SystemExit(f"the program defines no function {entry_point!r}")
    outcomes = []
    for args, kwargs in calls:
        try:
            value = function(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - an exception is an outcome like any other
            outcomes.append(["raised", plain_data.type_name(type(exc))])
            continue
        try:
            outcomes.append(["returned", plain_data.encode(value)])
        except Exception as exc:  # noqa: BLE001 - NotPlainData, or a container changed while read
            outcomes.append(["unserialisable", str(exc)[:200] if isinstance(exc, plain_data.NotPlainData)
                             else plain_data.type_name(type(exc))])
    return outcomes


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main(argv: list) -> None:
    if len(argv) != 2 or not argv[1].isidentifier():
        raise SystemExit("usage: main.py ENTRY_POINT (a Python identifier)")
    results_fd = os.dup(1)  # the results' only way out (not inherited by children)
    os.dup2(2, 1)  # the program's prints, from Python or a child process, go to stderr
    with open(PROGRAM_FILE, encoding="utf-8") as handle:
        source = handle.read()
    with open(CALLS_FILE, encoding="utf-8") as handle:
        calls = decode_calls(handle.read())
    outcomes = run(source, argv[1], calls)
    frame = RESULT_MARKER + json.dumps(outcomes, ensure_ascii=True, separators=(",", ":")) + "\n"
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - the program may have replaced or closed them
        pass
    _write_all(results_fd, frame.encode("ascii"))
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
