#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
echo $(( $(tail -n +2 sales.csv | cut -d, -f3 | paste -sd+) )) > total.txt
