#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
tr 'a-z' 'A-Z' < shout.txt > loud.txt
