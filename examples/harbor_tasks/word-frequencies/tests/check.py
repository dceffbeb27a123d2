import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from tabulate import tabulate

HOME = Path("/home/agent")


def reference(text):
    counts = Counter(re.findall(r"[a-z]+", text.lower()))
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    return tabulate(top, headers=["word", "count"], tablefmt="plain").strip()


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


program = HOME / "wordfreq.py"
if not program.is_file():
    fail("~/wordfreq.py is missing")
corpus = (Path(__file__).parent / "corpus.txt").read_text()
if not (HOME / "top5.txt").is_file() or (HOME / "top5.txt").read_text().strip() != reference(corpus):
    fail("~/top5.txt is not the table of corpus.txt")
unseen = Path("/tmp/unseen.txt")
unseen.write_text("b a c-c D d! e, f f f; g g g g z z z z z y y y y x-x-x\n")
done = subprocess.run([sys.executable, str(program), str(unseen)], capture_output=True, text=True, timeout=30)
if done.stdout.strip() != reference(unseen.read_text()):
    fail(f"on another text the program printed {done.stdout[-300:]!r}")
print("PASS")
