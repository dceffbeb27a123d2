"""stdout carries the command's result and nothing else.

While an ``assay`` command runs, file descriptor 1 points at stderr: DeepSpeed's ``[WARNING] ...
Setting accelerator to CPU``, transformers/tqdm bars, a library's ``print`` or a logging handler
bound to ``sys.stdout``, and any subprocess that inherits fd 1 all land on stderr, whether they
write through Python or from C. The result (``--json``'s one document, or the text summary for a
person) is written to the real stdout saved before the switch (:func:`result_stream`), so
``assay train --json | jq`` and ``assay sql ... > out.txt`` hold exactly the result.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import contextmanager
from typing import IO, Iterator

_result: IO[str] | None = None


def result_stream() -> IO[str]:
    """Where a command writes its result: the real stdout while :func:`stdout_for_result_only`
    is active, else ``sys.stdout``."""
    return _result if _result is not None else sys.stdout


def _stdout_handlers(stream) -> list[logging.StreamHandler]:
    """Logging handlers (root and named loggers) that write to ``stream``."""
    loggers = [logging.getLogger()] + [logger for logger in logging.Logger.manager.loggerDict.values()
                                       if isinstance(logger, logging.Logger)]
    return [h for logger in loggers for h in logger.handlers
            if isinstance(h, logging.StreamHandler) and getattr(h, "stream", None) is stream]


@contextmanager
def stdout_for_result_only() -> Iterator[IO[str]]:
    """Send everything written to stdout (fd 1 and ``sys.stdout``) to stderr; yield the real stdout.

    When ``sys.stdout`` is not fd 1 (pytest's capsys, an embedding application), only the Python
    level is switched: the result goes to the ``sys.stdout`` object the caller gave us.
    """
    global _result
    original = sys.stdout
    try:
        fd = original.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    original.flush()
    saved_fd = None
    if fd == 1:
        saved_fd = os.dup(1)  # not inherited by subprocesses (PEP 446): children see only stderr
        try:
            stderr_fd = sys.stderr.fileno()
        except (AttributeError, OSError, ValueError):  # sys.stderr replaced by an in-memory stream
            stderr_fd = 2
        os.dup2(stderr_fd, 1)
        result = os.fdopen(saved_fd, "w", encoding=original.encoding or "utf-8",
                           errors=getattr(original, "errors", None) or "strict")
    else:
        result = original
    # handlers created before (e.g. logging.basicConfig(stream=sys.stdout)) follow stderr too
    moved = _stdout_handlers(original)
    for handler in moved:
        handler.setStream(sys.stderr)
    previous, _result = _result, result
    sys.stdout = sys.stderr
    try:
        yield result
    finally:
        sys.stdout = original
        _result = previous
        for handler in moved:
            handler.setStream(original)
        try:
            sys.stderr.flush()
            original.flush()  # anything a library buffered in the original object goes to stderr (fd 1 still points there)
        finally:
            if saved_fd is not None:
                result.flush()
                os.dup2(saved_fd, 1)
                result.close()
