#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
cat > rpn.py <<'EOF'
import re
import sys


def evaluate(expression):
    stack = []
    for token in expression.split():
        if token in ("+", "-", "*"):
            if len(stack) < 2:
                raise ValueError("missing operand")
            right, left = stack.pop(), stack.pop()
            stack.append(left + right if token == "+" else left - right if token == "-" else left * right)
        elif re.fullmatch(r"-?[0-9]+", token):
            stack.append(int(token))
        else:
            raise ValueError(f"unknown token {token}")
    if len(stack) != 1:
        raise ValueError("malformed")
    return stack[0]


try:
    print(evaluate(sys.argv[1] if len(sys.argv) > 1 else ""))
except ValueError:
    print("error")
    sys.exit(1)
EOF
