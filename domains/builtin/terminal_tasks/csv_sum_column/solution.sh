#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
awk -F, 'NR > 1 { total += $3 } END { print total }' sales.csv > total.txt
