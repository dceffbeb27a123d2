#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
head -n 1 people.csv > older.csv
tail -n +2 people.csv | while IFS=, read -r name city age; do
    if [ "$age" -ge 30 ]; then echo "$name,$city,$age"; fi
done >> older.csv
