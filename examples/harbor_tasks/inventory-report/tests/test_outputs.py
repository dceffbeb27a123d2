"""Hidden tests of inventory-report: expected values recomputed from a pristine copy of the input."""
import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

PRISTINE = json.loads((Path(__file__).parent / "inventory.json").read_text())


def test_low_stock():
    want = sorted(item["sku"] for item in PRISTINE if item["qty"] < 5)
    assert Path("/app/low_stock.txt").read_text().split("\n") in (want, want + [""])


def test_total_value():
    total = sum(Decimal(str(item["qty"])) * Decimal(str(item["price"])) for item in PRISTINE)
    want = str(total.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
    assert Path("/app/total_value.txt").read_text().strip() == want
