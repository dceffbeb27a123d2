#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
cut -d' ' -f3 app.log | grep -cx ERROR > errors.txt
