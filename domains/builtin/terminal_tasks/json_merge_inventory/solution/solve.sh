#!/usr/bin/env bash
# Oracle: solves the task from the episode's working directory.
set -euo pipefail
python3 - <<'EOF'
import json
with open("inventory.json") as f:
    inventory = json.load(f)
with open("shipments.jsonl") as f:
    for line in f:
        if line.strip():
            s = json.loads(line)
            item = inventory.setdefault(s["sku"], {"name": s.get("name"), "qty": 0})
            item["qty"] += s["delta"]
with open("inventory_updated.json", "w") as f:
    json.dump(inventory, f, indent=2)
with open("low_stock.txt", "w") as f:
    for sku in sorted(k for k, v in inventory.items() if v["qty"] < 10):
        f.write(sku + "\n")
EOF
