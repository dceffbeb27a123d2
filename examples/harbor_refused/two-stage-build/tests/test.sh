#!/bin/bash
[ "$(cat /app/out.txt)" = hello ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
