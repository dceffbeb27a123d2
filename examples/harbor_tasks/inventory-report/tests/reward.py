"""junit.xml -> reward.json: {"reward": passed / tests, "<test>": 1 or 0 for each}."""
import json
import sys
import xml.etree.ElementTree as ET

metrics = {}
try:
    for case in ET.parse(sys.argv[1]).getroot().iter("testcase"):
        failed = any(child.tag in ("failure", "error", "skipped") for child in case)
        metrics[case.get("name")] = 0 if failed else 1
except (OSError, ET.ParseError):
    pass
metrics["reward"] = sum(metrics.values()) / len(metrics) if metrics else 0.0
json.dump(metrics, open(sys.argv[2], "w"))
