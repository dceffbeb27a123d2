"""Many sandboxed executions in parallel (rewards over a batch, benchmark sweeps).

Threads are enough: each execution is a child process, and the parent only waits on pipes. Every
concurrent execution runs as its own uid (see ``uids``), so RLIMIT_NPROC is per execution.
"""

from __future__ import annotations

import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from sandbox.limits import Limits
from sandbox.result import ExecutionResult
from sandbox.runner import Sandbox, default_sandbox


@dataclass(frozen=True)
class ExecutionRequest:
    """One program to run: Python ``source`` (or a ``command`` argv), its stdin, files and limits."""

    source: "str | bytes | None" = None
    command: Sequence[str] | None = None
    stdin: "str | bytes | None" = None
    files: Mapping[str, "str | bytes"] = field(default_factory=dict)
    limits: Limits | None = None
    argv: Sequence[str] = ()

    def __post_init__(self) -> None:
        if (self.source is None) == (self.command is None):
            raise ValueError("ExecutionRequest needs exactly one of source= (Python code) or command= (argv list)")


class SandboxPool:
    """A fixed number of workers running :class:`ExecutionRequest` s; use as a context manager.

    ``workers`` defaults to the number of CPUs. ``limits`` applies to requests that bring none.
    """

    def __init__(self, workers: int | None = None, *, limits: Limits | None = None, sandbox: Sandbox | None = None):
        workers = workers if workers is not None else (os.cpu_count() or 1)
        if not isinstance(workers, int) or workers < 1:
            raise ValueError(f"SandboxPool workers must be a positive int, got {workers!r}")
        self.workers = workers
        self.limits = limits or Limits()
        self.sandbox = sandbox or default_sandbox()
        self.sandbox.isolation  # refuse now, not in every worker, when there is no isolation
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sandbox")

    def submit(self, request: ExecutionRequest) -> "Future[ExecutionResult]":
        return self._executor.submit(self._run, request)

    def run(self, source: "str | bytes", **kwargs) -> ExecutionResult:
        return self.submit(ExecutionRequest(source=source, **kwargs)).result()

    def run_many(self, requests: Iterable[ExecutionRequest]) -> list[ExecutionResult]:
        """Results in the order of ``requests``. A sandbox failure (not a program failure) raises."""
        futures = [self.submit(r) for r in requests]
        return [f.result() for f in futures]

    def _run(self, request: ExecutionRequest) -> ExecutionResult:
        limits = request.limits or self.limits
        if request.source is not None:
            return self.sandbox.run_program(request.source, stdin=request.stdin, files=request.files,
                                            limits=limits, argv=request.argv)
        return self.sandbox.run_command(request.command, stdin=request.stdin, files=request.files, limits=limits)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> "SandboxPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
