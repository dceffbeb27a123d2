#!/bin/bash
set -e
cd /app
jq -r '.[] | select(.qty < 5) | .sku' data/inventory.json | sort > low_stock.txt
jq -r '[.[] | .qty * .price] | add' data/inventory.json | xargs printf '%.2f\n' > total_value.txt
