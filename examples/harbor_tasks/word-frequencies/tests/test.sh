#!/bin/bash
# The agent's program is run on a corpus it never saw (and on its own), its table compared with the reference.
python3 /tests/check.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
