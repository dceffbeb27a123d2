#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
python3 -c 'print("\n".join(dict.fromkeys(open("items.txt").read().splitlines())))' > unique.txt
