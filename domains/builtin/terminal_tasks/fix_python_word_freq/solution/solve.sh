#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
sed -i 's/re.findall(r"\[a-z\]+", text)/re.findall(r"[a-z]+", text.lower())/' wordfreq.py
sed -i 's/key=lambda pair: pair\[1\], reverse=True)/key=lambda pair: (-pair[1], pair[0]))/' wordfreq.py
python3 test_wordfreq.py
