#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
head -n 1 poem.txt > first.txt
