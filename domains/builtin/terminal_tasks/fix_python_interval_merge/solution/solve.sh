#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
cat > intervals.py <<'EOF'
def merge(intervals):
    result = []
    for start, end in sorted(intervals):
        if result and start <= result[-1][1]:
            result[-1][1] = max(result[-1][1], end)
        else:
            result.append([start, end])
    return result
EOF
python3 test_intervals.py
