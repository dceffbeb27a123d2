#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
awk '$2 == "level=error" { print substr($1, 12, 2) }' service.log | sort | uniq -c | awk '{ print $2, $1 }' > errors_by_hour.txt
