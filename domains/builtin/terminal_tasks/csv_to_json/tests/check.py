"""Hidden test for the terminal task csv_to_json (instruction: ../task.yaml).

Run by run.sh with cwd = the episode's final working directory; prints PASS or FAIL: why.
"""
import csv
import io
import json
import os
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


want = [{"id": int(r["id"]), "name": r["name"], "department": r["department"], "salary": int(r["salary"])}
        for r in csv.DictReader(io.StringIO(pristine("employees.csv")))]
try:
    got = json.loads(read_answer("employees.json"))
except ValueError as exc:
    fail(f"employees.json is not valid JSON: {exc}")
# bool is an int subclass in Python; a JSON true is not the integer 1
if isinstance(got, list):
    for row in got:
        if isinstance(row, dict) and any(type(row.get(k)) is not int for k in ("id", "salary")):
            fail(f"id and salary must be JSON integers: {row!r}")
expect("employees.json", got, want)
passed()
