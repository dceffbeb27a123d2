#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
find photos -type f -name '*.jpeg' -exec sh -c 'for f; do mv -- "$f" "${f%.jpeg}.jpg"; done' sh {} +
