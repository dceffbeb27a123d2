#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
awk '{ print $1 }' access.log | sort | uniq -c | sort -rn | head -n 3 | awk '{ print $1, $2 }' > top3.txt
