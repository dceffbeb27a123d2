#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
cut -d' ' -f1 access.log | sort | uniq -c | sort -rn | head -n 3 | sed -E 's/^ *([0-9]+) /\1 /' > top3.txt
