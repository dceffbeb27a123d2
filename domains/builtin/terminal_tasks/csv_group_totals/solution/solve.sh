#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
python3 - <<'EOF'
import csv
from decimal import Decimal
revenue = {}
with open("orders.csv", newline="") as f:
    for row in csv.DictReader(f):
        revenue[row["region"]] = revenue.get(row["region"], 0) + int(row["units"]) * Decimal(row["unit_price"])
with open("region_totals.csv", "w") as f:
    f.write("region,revenue\n")
    for region in sorted(revenue):
        f.write(f"{region},{revenue[region]:.2f}\n")
EOF
