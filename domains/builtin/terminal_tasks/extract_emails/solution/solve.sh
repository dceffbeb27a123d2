#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
grep -oE '[a-z0-9._%+-]+@[a-z0-9.-]+\.[a-z]+' contacts.txt | LC_ALL=C sort -u > emails.txt
