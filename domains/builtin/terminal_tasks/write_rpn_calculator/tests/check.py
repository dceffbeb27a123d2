"""Hidden test for the terminal task write_rpn_calculator (instruction: ../task.yaml).

Run by run.sh with cwd = the episode's final working directory; prints PASS or FAIL: why.
"""
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


rng = random.Random(99)


def expression(depth):
    """(postfix tokens, value) of a random expression tree."""
    if depth == 0 or rng.random() < 0.25:
        n = rng.randint(-20, 20)
        return [str(n)], n
    left, a = expression(depth - 1)
    right, b = expression(depth - 1)
    op = rng.choice("+-*")
    return left + right + [op], (a + b if op == "+" else a - b if op == "-" else a * b)


good = [("7", 7), ("-3", -3), ("2 3 -", -1), ("3 -4 *", -12), ("3 4 + 2 *", 14), ("0 0 *", 0)]
for _ in range(30):
    tokens, value = expression(4)
    good.append((" ".join(tokens), value))
bad = ["", "+", "1 +", "1 2", "1 2 3 +", "2 x *", "3 4 ^", "1.5 2 +", "4 2 /", "- 1 2",
       # an unknown token that leaves a valid expression when skipped (a program that skips it passed before)
       "3 4 + x", "7 #", "12 1e3"]
if not os.path.isfile("rpn.py") or os.path.islink("rpn.py"):
    fail("rpn.py is missing or not a regular file")


def run(expr):
    try:
        proc = subprocess.run([sys.executable, "rpn.py", expr], capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        fail(f"rpn.py {expr!r} did not finish within 10s")
    return proc.stdout, proc.returncode


for expr, value in good:
    out, code = run(expr)
    if out not in (f"{value}\n", f"{value}"):
        fail(f"rpn.py {expr!r}: expected output {value}, got {out[:200]!r}")
    expect(f"exit status of rpn.py {expr!r}", code, 0)
for expr in bad:
    out, code = run(expr)
    if out.strip() != "error" or code != 1:
        fail(f"rpn.py {expr!r} is malformed: expected output error and status 1, got {out[:200]!r} and {code}")
passed()
