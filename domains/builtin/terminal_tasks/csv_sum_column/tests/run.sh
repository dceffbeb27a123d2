#!/usr/bin/env bash
# Hidden test for csv_sum_column: exit 0 = solved. Runs with cwd = the episode's final working directory;
# its own files are found beside this script (never in the cwd, which the agent controlled).
set -u
here="$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)"
exec python3 -I -B "$here/check.py"
