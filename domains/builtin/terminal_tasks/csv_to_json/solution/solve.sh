#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
python3 - <<'EOF'
import csv, json
with open("employees.csv", newline="") as f:
    rows = [{"id": int(r["id"]), "name": r["name"], "department": r["department"],
             "salary": int(r["salary"])} for r in csv.DictReader(f)]
with open("employees.json", "w") as f:
    json.dump(rows, f, indent=2)
EOF
