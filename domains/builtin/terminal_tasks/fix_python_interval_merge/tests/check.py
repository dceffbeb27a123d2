"""Hidden test for the terminal task fix_python_interval_merge (instruction: ../task.yaml).

Run by run.sh with cwd = the episode's final working directory; prints PASS or FAIL: why.
"""
import json
import os
import random
import subprocess
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
LIMIT = 2_000_000  # bytes read from an answer file: a huge or endless file fails, it does not hang


def fail(message):
    print("FAIL: " + message[:600])
    sys.exit(1)


def passed():
    print("PASS")
    sys.exit(0)


def read_answer(path):
    """Text of a regular file in the episode's working directory (the cwd); symlinks are refused."""
    if os.path.islink(path) or not os.path.isfile(path):
        fail(f"{path} is missing or not a regular file")
    with open(path, "rb") as handle:
        data = handle.read(LIMIT + 1)
    if len(data) > LIMIT:
        fail(f"{path} is larger than {LIMIT} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        fail(f"{path} is not UTF-8 text")


def answer_lines(path):
    """Lines of an answer file: the final newline is optional, nothing else is forgiven."""
    text = read_answer(path)
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n") if text else []


def pristine(name):
    """The task's input as the agent was given it (a copy kept beside this test)."""
    with open(os.path.join(TESTS, "input", name), encoding="utf-8") as handle:
        return handle.read()


def expect(what, got, want):
    if got != want:
        fail(f"{what}: expected {want!r}, got {got!r}")


# --- running the program under test: in a child process, so nothing it does at import time
# (exiting early, printing "PASS", patching modules) can reach this process's verdict ---

MARKER = "@@CASE-RESULTS@@"
CHILD = r'''
import copy, json, sys
sys.path.append(".")  # appended after the standard library: a planted json.py cannot shadow it
cases = json.loads(sys.stdin.read())
results = []
for module_name, function_name, args in cases:
    before = copy.deepcopy(args)
    try:
        function = getattr(__import__(module_name), function_name)
        value = function(*args)
        results.append({"value": value, "args_changed": args != before})
    except Exception as exc:
        results.append({"raised": type(exc).__name__, "args_changed": args != before})
sys.stdout.write("@@CASE-RESULTS@@" + json.dumps(results, default=repr))
'''


def run_cases(cases, timeout=30):
    """[(module, function, args)] -> one {"value"|"raised", "args_changed"} per case."""
    try:
        proc = subprocess.run([sys.executable, "-I", "-B", "-c", CHILD], input=json.dumps(cases),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        fail(f"the program did not finish {len(cases)} calls within {timeout}s")
    if MARKER not in proc.stdout:
        fail(f"the program crashed (exit {proc.returncode}): {proc.stderr[-400:]}")
    try:
        results = json.loads(proc.stdout.rsplit(MARKER, 1)[1])
    except ValueError:
        fail("could not read the program's results")
    if not isinstance(results, list) or len(results) != len(cases):
        fail("the program returned the wrong number of results")
    return results


def reference_merge(intervals):
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


inputs = [[], [[4, 4]], [[1, 3], [3, 5]], [[1, 10], [2, 3]], [[1, 2], [4, 5]], [[6, 8], [1, 9], [2, 4]],
          [[1, 3], [1, 3]], [[-5, -1], [-2, 0], [3, 3], [0, 0]], [[7, 9], [1, 2], [2, 7]]]
rng = random.Random(7)
for _ in range(150):
    pairs = []
    for _ in range(rng.randint(1, 9)):
        start = rng.randint(-10, 30)
        pairs.append([start, start + rng.randint(0, 6)])
    inputs.append(pairs)
cases = [["intervals", "merge", [pairs]] for pairs in inputs]
for pairs, result in zip(inputs, run_cases(cases)):
    if "raised" in result:
        fail(f"merge({pairs!r}) raised {result['raised']}")
    if result["args_changed"]:
        fail(f"merge({pairs!r}) modified its input")
    expect(f"merge({pairs!r})", result["value"], reference_merge(pairs))
passed()
