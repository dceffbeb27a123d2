"""Hidden test for the terminal task json_merge_inventory (instruction: ../task.yaml).

Run by run.sh with cwd = the episode's final working directory; prints PASS or FAIL: why.
"""
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


inventory = json.loads(pristine("inventory.json"))
for line in pristine("shipments.jsonl").splitlines():
    s = json.loads(line)
    item = inventory.setdefault(s["sku"], {"name": s.get("name"), "qty": 0})
    item["qty"] += s["delta"]
try:
    got = json.loads(read_answer("inventory_updated.json"))
except ValueError as exc:
    fail(f"inventory_updated.json is not valid JSON: {exc}")
if isinstance(got, dict):
    for sku, item in got.items():
        if not isinstance(item, dict) or type(item.get("qty")) is not int:
            fail(f"{sku}: qty must be a JSON integer, got {item!r}")
expect("inventory_updated.json", got, inventory)
expect("low_stock.txt", answer_lines("low_stock.txt"), sorted(k for k, v in inventory.items() if v["qty"] < 10))
passed()
