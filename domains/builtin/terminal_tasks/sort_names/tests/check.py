"""Hidden test for the terminal task sort_names (instruction: ../task.yaml).

Run by run.sh with cwd = the episode's final working directory; prints PASS or FAIL: why.
"""
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


want = sorted(pristine("names.txt").splitlines())
expect("sorted.txt", answer_lines("sorted.txt"), want)
passed()
