#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
python3 - <<'EOF'
import json
with open("users.json") as f:
    users = json.load(f)
with open("active.txt", "w") as f:
    for user in users:
        if user["active"] is True:
            f.write(user["name"] + "\n")
EOF
