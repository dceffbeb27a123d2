#!/bin/bash
# pytest from the image's verifier venv; reward.json: the fraction of checks passed, and each check.
cd /app
/opt/verifier/bin/python -m pytest -q -p no:cacheprovider --junitxml=/logs/verifier/junit.xml /tests/test_outputs.py
/opt/verifier/bin/python /tests/reward.py /logs/verifier/junit.xml /logs/verifier/reward.json
