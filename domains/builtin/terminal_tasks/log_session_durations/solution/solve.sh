#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
python3 - <<'EOF'
from datetime import datetime
opened, total = {}, {}
for line in open("events.log"):
    stamp, user, action = line.split()
    when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S")
    if action == "login":
        opened[user] = when
    elif action == "logout":
        total[user] = total.get(user, 0) + int((when - opened.pop(user)).total_seconds())
with open("durations.txt", "w") as f:
    for user in sorted(total):
        f.write(f"{user} {total[user]}\n")
EOF
