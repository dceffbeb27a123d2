#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
find data -type f -size +1000c | LC_ALL=C sort > big.txt
