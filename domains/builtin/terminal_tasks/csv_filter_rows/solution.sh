#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
awk -F, 'NR == 1 || $3 >= 30' people.csv > older.csv
