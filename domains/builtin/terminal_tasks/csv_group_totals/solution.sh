#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
{ echo "region,revenue"
  awk -F, 'NR > 1 { revenue[$1] += $3 * $4 } END { for (r in revenue) printf "%s,%.2f\n", r, revenue[r] }' orders.csv | LC_ALL=C sort
} > region_totals.csv
