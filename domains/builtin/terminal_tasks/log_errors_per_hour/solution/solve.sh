#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
grep -E '^[^ ]+ level=error ' service.log | cut -c12-13 | sort | uniq -c | sed -E 's/^ *([0-9]+) (.*)$/\2 \1/' > errors_by_hour.txt
