#!/bin/bash
# The task's hidden tests (tests/run.sh, exit 0 = solved), run on a fresh copy of the image holding only
# the agent's final /app (task.toml: environment_mode = "separate", artifacts = ["/app"]).
cd /app
bash /tests/run.sh
status=$?
if [ "$status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit "$status"
