"""The nightly environment_report_card asset, materialized for real on plugin domains in a fresh
process (partitions are built from the registry when definitions load): the card lands in the
lake and in the metadata, its blocking check fails a card that fails, and the domain's train set
is refused after it."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO, write_plugin

STRICT = '''
import re
from domains import Domain

def _samples(split, n, seed):
    base = 0 if split == "train" else 5_000
    for i in range(n):
        k = base + 37 * i + 1_003
        yield {{"id": f"{name}-{{split}}-{{k}}", "prompt": f"What is {{k}} + 1? Finish with a line 'Answer: <number>'.",
               "answer": str(k + 1)}}

def _score(completion, sample):
    match = re.search(r"(?:^|Answer:)[ \\t]*(\\S+)\\s*$", completion or "")
    return 1.0 if match and match.group(1) == sample["answer"] else 0.0

DOMAIN = Domain(name="{name}", owner="plugins@example.com", description="exact-string verifier",
                samples=_samples, score=_score, gate_thresholds={thresholds})
'''

SCRIPT = '''
import json, sys
import dagster as dg
from assets.report_card import environment_report_card
from assets.resources import LakeResource
out = {}
for key in sys.argv[2:]:
    with dg.instance_for_test() as instance:
        result = dg.materialize([environment_report_card], partition_key=key, instance=instance,
                                resources={"lake": LakeResource(home=sys.argv[1])},
                                run_config={"ops": {"environment_report_card": {"config": {"mutation": False,
                                                                                           "search_items": 2}}}},
                                raise_on_error=False)
        [event] = result.get_asset_materialization_events()
        [check] = result.get_asset_check_evaluations()
        out[key] = {"meta": {k: v.value for k, v in event.materialization.metadata.items()},
                    "passed": check.passed, "severity": str(check.severity),
                    "check_meta": {k: v.value for k, v in check.metadata.items()}}
print(json.dumps(out, default=str))
'''


def test_the_asset_cards_a_domain_and_its_check_blocks_on_a_failed_card(assay_home, tmp_path):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "toy_strict", STRICT.format(name="toy_strict", thresholds="{}"))
    write_plugin(plugins, "toy_lax", STRICT.format(name="toy_lax", thresholds='{"min_recall": 0.0}'))
    env = {"ASSAY_DOMAINS_PATH": str(plugins), "ASSAY_HOME": str(assay_home), "PYTHONPATH": str(REPO),
           "DAGSTER_HOME": str(assay_home / "dagster")}
    import os

    done = subprocess.run([sys.executable, "-c", SCRIPT, str(assay_home), "toy_strict", "toy_lax"],
                          capture_output=True, text=True, cwd=REPO, timeout=600, env={**os.environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    strict, lax = out["toy_strict"], out["toy_lax"]
    assert strict["meta"]["verdict"] == "FAILED" and strict["passed"] is False and "ERROR" in strict["severity"]
    assert "below the bar" in strict["check_meta"]["failures"] and "assay domains report toy_strict" in \
        strict["check_meta"]["what_to_do"]
    assert strict["meta"]["recall"] < 0.99 and strict["meta"]["oracle_pass"] == 1.0
    assert "| recall |" in strict["meta"]["card"]
    assert lax["meta"]["verdict"] == "passed" and lax["passed"] is True
    assert lax["meta"]["hack_search_paid"] == 0 and lax["meta"]["hack_search_tried"] > 0

    from quality.report_card.card import card_problem, latest_card_rows
    from storage.lake import Lake

    lake = Lake.at(assay_home)
    rows = latest_card_rows(lake)
    assert set(rows["domain"]) == {"toy_strict", "toy_lax"} and set(rows["source"]) == {"dagster"}
    assert card_problem(lake, "toy_strict") and card_problem(lake, "toy_lax") is None
