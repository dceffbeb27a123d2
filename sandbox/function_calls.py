"""Call functions of untrusted code on plain-data arguments, in the sandbox, and get plain-data
results back: the building block of every verifier that runs model-written code.

    from sandbox.function_calls import Call, run_calls

    results = run_calls(source, "add", [Call((1, 2)), Call((3,), {"y": 4})], limits=Limits(cpu_s=3))
    results.failure       # None, or one line saying why no results came back
    results.outcomes      # (Outcome("returned", 3), Outcome("returned", 7))

How it works: the sandbox gets the untrusted program, the calls (arguments encoded by
``plain_data``) and a small harness (``call_harness``); the harness runs the program, makes each
call and writes one framed line of results. The host reads that line back with ``plain_data``,
which only ever builds builtin values (None, bool, int, float, str, bytes, list, tuple, dict, set,
frozenset), so nothing the program made (an object whose ``__eq__`` always says True, a ``str``
subclass) crosses over: a value that is not plain data comes back as ``unserialisable``.

Threat model: the program controls everything inside its sandbox, the harness included. It may
read the calls, patch the encoder, forge the frame, exit early or print anything. None of that
reaches a verdict, because the sandbox is never told what the right answers are, holds no secret
that proves success, and never runs the tests: the caller decides on the host, from the plain
results, with trusted code (see ``domains.builtin.code``). Forging the results without knowing
the expected values is the same as answering. What the sandbox itself guarantees (no network, no
host files, rlimits) is in ``runner``. Anything other than a clean exit with exactly one valid
frame holding one outcome per call is a failure (``CallResults.failure``), never partial results.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping, Sequence

from sandbox import plain_data
from sandbox.call_harness import CALLS_FILE, CODEC_FILE, PROGRAM_FILE, RESULT_MARKER

if TYPE_CHECKING:
    from sandbox.limits import Limits
    from sandbox.pool import ExecutionRequest
    from sandbox.result import ExecutionResult
    from sandbox.runner import Sandbox

OutcomeKind = Literal["returned", "raised", "unserialisable"]
MAX_DETAIL_CHARS = 200


@dataclass(frozen=True)
class Call:
    """One call's arguments: plain data only (checked when the call is encoded)."""

    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def encoded(self) -> list:
        """``[args, kwargs]`` as tagged trees; raises ``plain_data.NotPlainData``."""
        return [plain_data.encode(tuple(self.args)), plain_data.encode(dict(self.kwargs))]

    def fingerprint(self) -> str:
        """Exact text of the arguments: equal for equal plain arguments of equal types (nan too)."""
        return json.dumps(self.encoded(), ensure_ascii=True, separators=(",", ":"))


@dataclass(frozen=True)
class Outcome:
    """What one call did: ``returned`` ``value`` (plain data), ``raised`` an exception whose type
    name is ``detail``, or returned something that is not plain data (``unserialisable``, why in
    ``detail``)."""

    kind: OutcomeKind
    value: Any = None
    detail: str = ""


@dataclass(frozen=True)
class CallResults:
    """One outcome per call, in order; or ``outcomes`` None and ``failure`` saying why."""

    outcomes: tuple[Outcome, ...] | None
    failure: str | None
    execution: "ExecutionResult"

    @property
    def ok(self) -> bool:
        return self.failure is None


@lru_cache(maxsize=1)
def _support_files() -> tuple[str, str]:
    """The harness's and the codec's source, shipped into every run."""
    here = Path(__file__).resolve().parent
    return (here / "call_harness.py").read_text(encoding="utf-8"), (here / "plain_data.py").read_text(encoding="utf-8")


def request_for(program: str, entry_point: str, calls: Sequence[Call], limits: "Limits | None" = None) -> "ExecutionRequest":
    """The sandbox request that calls ``entry_point`` of ``program`` once per call."""
    from sandbox.pool import ExecutionRequest

    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise ValueError(f"entry point {entry_point!r} must be a Python identifier, e.g. 'solve'")
    harness, codec = _support_files()
    calls_text = json.dumps([call.encoded() for call in calls], ensure_ascii=True, separators=(",", ":"))
    return ExecutionRequest(source=harness, argv=(entry_point,), limits=limits,
                            files={PROGRAM_FILE: program, CALLS_FILE: calls_text, CODEC_FILE: codec})


def read_results(execution: "ExecutionResult", expected_calls: int) -> CallResults:
    """The outcomes in a finished run's stdout, or why there are none."""
    def failed(why: str) -> CallResults:
        return CallResults(outcomes=None, failure=why, execution=execution)

    if execution.status != "ok":
        return failed(f"the program ended with status {execution.status}"
                      + (f" ({execution.limit} limit)" if execution.limit else f" (exit {execution.returncode})"))
    text = execution.stdout
    if not (text.startswith(RESULT_MARKER) and text.endswith("\n") and text.count("\n") == 1):
        return failed("stdout is not exactly one result frame (the program exited before the harness finished, "
                      "or wrote to its stdout descriptor)")
    try:
        raw = json.loads(text[len(RESULT_MARKER):])
    except (ValueError, RecursionError):
        return failed("the result frame is not JSON")
    if type(raw) is not list or len(raw) != expected_calls:
        return failed(f"the result frame holds {len(raw) if type(raw) is list else 'no list of'} outcomes "
                      f"for {expected_calls} calls")
    outcomes = []
    for index, item in enumerate(raw):
        if type(item) is not list or len(item) != 2 or item[0] not in ("returned", "raised", "unserialisable"):
            return failed(f"outcome {index} is not [kind, payload]")
        kind, payload = item
        if kind == "returned":
            try:
                outcomes.append(Outcome("returned", value=plain_data.decode(payload)))
            except plain_data.InvalidPlainData as exc:
                return failed(f"outcome {index} is not valid plain data: {exc}")
        elif type(payload) is str and len(payload) <= MAX_DETAIL_CHARS:
            outcomes.append(Outcome(kind, detail=payload))
        else:
            return failed(f"outcome {index}: {kind} needs a short text")
    return CallResults(outcomes=tuple(outcomes), failure=None, execution=execution)


def run_calls(program: str, entry_point: str, calls: Sequence[Call], *, limits: "Limits | None" = None,
              sandbox: "Sandbox | None" = None) -> CallResults:
    """Run ``program`` in the sandbox and call ``entry_point`` on each of ``calls``.

    Raises ``SandboxUnavailable`` when there is no isolation (never a silent failure).
    """
    from sandbox.runner import default_sandbox

    request = request_for(program, entry_point, calls, limits)
    execution = (sandbox or default_sandbox()).run_program(
        request.source, files=request.files, limits=request.limits, argv=request.argv)
    return read_results(execution, len(calls))
