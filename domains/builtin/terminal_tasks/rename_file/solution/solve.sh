#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
mv draft.txt final.txt
