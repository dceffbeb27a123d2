"""The README's walk-through of a domain with no verifier (issue 31), run as written: every command
of the README block that names this file, in order, in one shell, in a fresh ASSAY_HOME. The
example domain (examples/open_domains/customer_reply.py) declares score=None; its reward model is
trained on the tiny policy, must pass its gate, and the demo trains GRPO on that domain alone while
sweeping only the domain that has a verifier."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from storage import tracking
from storage.lake import Lake
from tests.conftest import readme_block, user_shell

REPO = Path(__file__).resolve().parents[2]
MARKER = "tests/pipelines/test_open_domain_readme.py runs this block as written"


def the_block() -> list[str]:
    return readme_block(MARKER)


@pytest.mark.slow  # six commands, three of them import torch; the demo trains and sweeps: ~1.5 min here
def test_the_readme_walk_through_of_a_domain_with_no_verifier_runs_as_written(tmp_path):
    commands = the_block()
    assert any("assay reward check customer_reply" in c for c in commands)
    env = user_shell(tmp_path / "home")
    env["OMP_NUM_THREADS"] = "1"
    pairs = REPO / ".assay" / "customer_reply_pairs.jsonl"
    # one shell, as a reader pastes the block (the export carries over); stop at the first failure
    script = "set -e\n" + "\n".join(f"echo '>>> {c}' >&2\n{c}" for c in commands)
    out = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert pairs.is_file()

    # the gate passed and GRPO trained on the learned reward alone: no verifier, so no accuracy and no gold
    assert "PASSED" in out.stdout, out.stdout[-2000:]
    [events] = (tmp_path / "home" / "logs").glob("demo-*.log")  # the trainer logs into the Dagster run
    assert "no verifier, so no gold signal and no accuracy for: customer_reply" in events.read_text()
    assert "customer_reply                 not swept: no verifier" in out.stdout
    lake = Lake(tmp_path / "home")
    history = lake.read("training_history")
    history = history.filter(history["domain"] == "customer_reply")
    assert history.height == 2
    assert history["learned_mean"].null_count() == 0 and history["score_mean"].null_count() == 2
    assert history["accuracy"].null_count() == 2
    results = lake.read("results")
    assert set(results["domain"]) == {"math_arith_easy"}  # the verifiable domain only, for both checkpoints
    runs = tracking.client(lake.mlflow_uri).search_runs([tracking.experiment_id(lake.mlflow_uri)],
                                                        "tags.`assay.kind` = 'reward_gate'")
    assert [r.data.tags["assay.passed"] for r in runs] == ["true"]
    check = subprocess.run(["bash", "-c", "assay domains check customer_reply --json"], cwd=REPO,
                           env={**env, "ASSAY_DOMAINS_PATH": str(REPO / "examples" / "open_domains")},
                           capture_output=True, text=True, timeout=120)
    assert json.loads(check.stdout)["checks"]["no_verifier"]["passed"]
