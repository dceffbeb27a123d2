#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
awk '$3 == "ERROR"' app.log | wc -l > errors.txt
