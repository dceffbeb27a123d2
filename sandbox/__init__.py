"""Sandbox for untrusted code: model-written programs for rewards, benchmarks and tool calls.

Stdlib plus pydantic for its two config models, :class:`Limits` and :class:`SandboxConfig` (it must
import fast and run anywhere; what runs *inside* the sandbox is stdlib only)::

    from sandbox import Limits, run_program, SandboxPool

    result = run_program("print(input()[::-1])", stdin="abc", limits=Limits(wall_s=5, memory_mb=256))
    result.status, result.stdout        # ('ok', 'cba\\n')

    with SandboxPool(workers=2) as pool:   # many executions in parallel, one uid each
        results = pool.run_many([ExecutionRequest(source=s) for s in programs])

To judge model-written functions, call them on plain-data arguments and get plain-data results
back (``sandbox.function_calls``; the verdict then stays on the host, out of the code's
reach)::

    from sandbox.function_calls import Call, run_calls

    run_calls(source, "add", [Call((1, 2))]).outcomes   # (Outcome(kind='returned', value=3),)

A coding agent's terminal: commands one after another over a private working folder, then the
task's hidden tests in a fresh sandbox (``sandbox.terminal``)::

    from sandbox.terminal import TerminalEpisode, run_hidden_tests

    with TerminalEpisode(files_dir) as episode:
        episode.run("ls && python3 fix.py")          # CommandResult(output, exit_code, ...)
        verdict = run_hidden_tests(episode.workdir, tests_dir, timeout_s=60)

Isolation: bubblewrap started as an unprivileged numeric uid with rlimits (see ``runner``). Without
it, running is refused (:class:`SandboxUnavailable`) unless ``ASSAY_UNSAFE_LOCAL_EXEC=1``.
"""

from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.isolation import UNSAFE_ENV, SandboxConfig
from sandbox.limits import Limits
from sandbox.pool import ExecutionRequest, SandboxPool
from sandbox.result import STATUSES, ExecutionResult
from sandbox.runner import Sandbox, default_sandbox, run_command, run_program

__all__ = [
    "ExecutionRequest", "ExecutionResult", "Limits", "STATUSES", "Sandbox", "SandboxConfig", "SandboxError",
    "SandboxPool", "SandboxUnavailable", "UNSAFE_ENV", "default_sandbox", "run_command", "run_program",
]
