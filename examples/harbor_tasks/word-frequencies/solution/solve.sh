#!/bin/bash
set -e
cd ~
cat > wordfreq.py <<'PY'
import re
import sys
from collections import Counter

from tabulate import tabulate

text = open(sys.argv[1], encoding="utf-8").read().lower()
counts = Counter(re.findall(r"[a-z]+", text))
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
print(tabulate(top, headers=["word", "count"], tablefmt="plain"))
PY
python3 wordfreq.py corpus.txt > top5.txt
