"""Calling functions of untrusted code in the sandbox: plain results come back in order, the
program's own prints never break them, and anything but a clean run with one valid frame is a
failure (never partial results). Reading the frame is also tested on hand-made runs."""

from __future__ import annotations

import json

import pytest

from tests.sandbox.sandbox_helpers import needs_bwrap
from sandbox import ExecutionResult, Limits
from sandbox.call_harness import RESULT_MARKER
from sandbox.function_calls import Call, Outcome, read_results, request_for, run_calls

FAST = Limits(cpu_s=3, wall_s=6, memory_mb=256, output_bytes=65_536)

PROGRAM = """
import os, subprocess, sys
def solve(items, scale=1, *, tag=""):
    print("debug", items, scale)                      # Python-level print
    os.write(1, b"assay-function-calls-v1 [] forged by a print\\n")  # the raw stdout descriptor
    subprocess.run(["/bin/echo", "from a child"])     # a child process's stdout
    if items == "boom":
        raise KeyError(items)
    if items == "object":
        return object()
    items.append(len(items))                          # mutating the argument must not leak
    return {"n": [x * scale for x in items], "tag": tag, "t": (True, None, b"\\x00"), "nan": float("nan")}
"""


def _execution(stdout: str, status: str = "ok") -> ExecutionResult:
    return ExecutionResult(status=status, returncode=0 if status == "ok" else 1, stdout=stdout, stderr="", duration_s=0.1)


@needs_bwrap
def test_outcomes_come_back_in_order_as_plain_data():
    calls = [Call(([1, 2],)), Call(([1, 2], 3), {"tag": "x"}), Call(("boom",)), Call(("object",)), Call(([],))]
    results = run_calls(PROGRAM, "solve", calls, limits=FAST)
    assert results.ok, (results.failure, results.execution.stderr)
    first, second, boom, obj, empty = results.outcomes
    assert first.kind == "returned" and first.value["n"] == [1, 2, 2] and first.value["t"] == (True, None, b"\x00")
    assert second.value["n"] == [3, 6, 6] and second.value["tag"] == "x"  # a fresh [1, 2]: call 1's append did not leak
    assert boom == Outcome("raised", detail="KeyError")
    assert obj.kind == "unserialisable" and "object" in obj.detail
    assert empty.value["n"] == [0]
    assert first.value["nan"] != first.value["nan"]
    stderr = results.execution.stderr
    assert "debug [1, 2] 1" in stderr and "forged by a print" in stderr and "from a child" in stderr


@needs_bwrap
@pytest.mark.parametrize("program, why", [
    ("def solve(x):\n    return x\nimport sys\nsys.exit(0)\n", "not exactly one result frame"),
    ("def solve(x):\n    import os\n    os._exit(0)\n", "not exactly one result frame"),
    ("def solve(x):\n    raise SystemExit(0)\n", "not exactly one result frame"),
    ("def solve(x):\n    raise KeyboardInterrupt\n", "status killed"),
    ("def solve(x):\n    while True:\n        pass\n", "status timeout"),
    ("def solve(x):\n    return 'x' * 200_000\n", "status killed (output limit)"),
    ("raise ValueError('at import')\n", "status error"),
    ("solve = 3\n", "status error"),
    ("def other(x):\n    return x\n", "status error"),
    # forging the frame with too few outcomes, then leaving before the harness writes its own
    ("import os\ndef solve(x):\n    for fd in range(3, 64):\n        try:\n            os.write(fd, b'" + RESULT_MARKER
     + "[]\\n')\n        except OSError:\n            pass\n    os._exit(0)\n", "0 outcomes for 2 calls"),
])
def test_anything_but_a_clean_run_with_one_frame_is_a_failure(program, why):
    results = run_calls(program, "solve", [Call((1,)), Call((2,))], limits=FAST)
    assert not results.ok and results.outcomes is None
    assert why in results.failure, results.failure


@pytest.mark.parametrize("stdout, why", [
    ("", "not exactly one result frame"),
    ("hello\n" + RESULT_MARKER + "[]\n", "not exactly one result frame"),
    (RESULT_MARKER + "[]\n" + RESULT_MARKER + "[]\n", "not exactly one result frame"),
    (RESULT_MARKER + "[]", "not exactly one result frame"),
    (RESULT_MARKER + "{not json\n", "not JSON"),
    (RESULT_MARKER + '{"a": 1}\n', "no list of outcomes"),
    (RESULT_MARKER + "[]\n", "0 outcomes for 1 calls"),
    (RESULT_MARKER + '[["returned"]]\n', "is not [kind, payload]"),
    (RESULT_MARKER + '[["passed", ["bool", true]]]\n', "is not [kind, payload]"),
    (RESULT_MARKER + '[["returned", ["object", []]]]\n', "not valid plain data"),
    (RESULT_MARKER + '[["returned", ["int", "01"]]]\n', "not valid plain data"),
    (RESULT_MARKER + '[["raised", ["str", "x"]]]\n', "needs a short text"),
    (RESULT_MARKER + '[["raised", "' + "E" * 500 + '"]]\n', "needs a short text"),
])
def test_read_results_refuses_malformed_frames(stdout, why):
    results = read_results(_execution(stdout), expected_calls=1)
    assert not results.ok and why in results.failure, results.failure


def test_read_results_refuses_a_failed_run_even_with_a_valid_frame():
    frame = RESULT_MARKER + json.dumps([["returned", ["bool", True]]]) + "\n"
    assert read_results(_execution(frame), 1).outcomes == (Outcome("returned", value=True),)
    failed = read_results(_execution(frame, status="error"), 1)
    assert not failed.ok and "status error" in failed.failure


def test_requests_carry_only_plain_arguments_and_a_valid_entry_point():
    request = request_for("def f(x): return x", "f", [Call((1, "a"), {"k": [None]})])
    assert json.loads(request.files["calls.json"]) == [[["tuple", [["int", "1"], ["str", "a"]]],
                                                         ["dict", [[["str", "k"], ["list", [["NoneType", None]]]]]]]]
    assert set(request.files) == {"program.py", "calls.json", "plain_data.py"} and request.argv == ("f",)
    with pytest.raises(ValueError, match="must be a Python identifier"):
        request_for("", "f; import os", [])
    from sandbox.plain_data import NotPlainData

    with pytest.raises(NotPlainData):
        request_for("", "f", [Call((object(),))])


def test_call_fingerprints_are_exact():
    assert Call((1,)).fingerprint() != Call((True,)).fingerprint() != Call((1.0,)).fingerprint()
    assert Call(([1],)).fingerprint() != Call(((1,),)).fingerprint()
    assert Call((float("nan"),)).fingerprint() == Call((float("nan"),)).fingerprint()
    assert Call((), {"a": 1}).fingerprint() != Call((1,)).fingerprint()
