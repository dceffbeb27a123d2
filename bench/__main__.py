"""`python -m bench [NAME ...]`: run the side-by-side benchmarks (all by default).

Each benchmark measures its own baseline in the same run and prints the ratio; figures and the
exact commands are recorded in bench/RESULTS.md. Run one with `python -m bench.bench_<name> --help`
for its options. They are CPU-heavy: run them on an otherwise idle machine.
"""

from __future__ import annotations

import os
import pkgutil
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).parent


def available() -> list[str]:
    return sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_"))


def main(argv: list[str]) -> int:
    names = available()
    if any(a in ("-h", "--help") for a in argv):
        print(__doc__.strip() + "\n\navailable: " + ", ".join(names))
        return 0
    chosen = argv or names
    unknown = [n for n in chosen if n not in names]
    if unknown:
        print(f"unknown benchmark(s) {', '.join(unknown)} (available: {', '.join(names)})", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    for name in chosen:
        print(f"\n=== bench_{name} ===", flush=True)
        sys.argv = [f"bench_{name}"]
        runpy.run_module(f"bench.bench_{name}", run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
