"""`assay reward train|check|list` end to end on the tiny policy (issue 31): a reward model trained on
a separable pairs file passes its gate (exit 0), the label-shuffled control fails it (exit 1, with
the reason), both are recorded in the lake and MLflow, and a bad pairs file is refused with its
line numbers (exit 2)."""

from __future__ import annotations

import json

import pytest

from storage import tracking
from storage.lake import Lake
from storage.preference_pairs import write_pairs
from tests.conftest import run_cli, write_plugin
from tests.training.reward_pairs import toy_pairs

TRAIN = ("--base", "tiny", "--epochs", "2", "--batch-size", "16", "--learning-rate", "3e-3", "--max-length", "64")


@pytest.mark.slow  # five CLI processes, each importing torch and MLflow: about a minute on two loaded cores
def test_reward_train_check_and_list_end_to_end(tiny_home, tmp_path):
    pairs = write_pairs(toy_pairs(120), tmp_path / "pairs.jsonl")
    lines = pairs.read_text().splitlines(keepends=True)
    pairs.write_text("".join(lines + lines[:5]))  # a raters' export repeating five pairs

    out = run_cli("reward", "train", "toy_colors", "--pairs", str(pairs), *TRAIN, "--drop-duplicates", "--json")
    assert out.returncode == 0, out.stderr
    trained = json.loads(out.stdout)
    assert trained["heldout_accuracy"] >= 0.9 and trained["config"]["base"] == "tiny"
    assert "not a registered domain" in out.stderr
    assert trained["duplicates_dropped"] == 5 and "dropped 5 line(s) repeating an earlier pair" in out.stderr
    assert trained["train_pairs"] + trained["heldout_pairs"] == 120

    out = run_cli("reward", "check", "toy_colors", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    gate = json.loads(out.stdout)
    assert gate["passed"] and gate["reasons"] == [] and gate["reward_model"] == trained["reward_model"]
    assert gate["pairs"] == trained["heldout_pairs"]

    out = run_cli("reward", "train", "toy_colors", "--pairs", str(pairs), *TRAIN, "--shuffle-labels",
                  "--drop-duplicates", "--json")
    assert out.returncode == 0, out.stderr
    control = json.loads(out.stdout)
    out = run_cli("reward", "check", "toy_colors", "--pairs", str(control["path"] + "/heldout_pairs.jsonl"))
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED" in out.stdout and "accuracy: chose the labelled answer" in out.stdout

    lake = Lake(tiny_home)
    rows = lake.read("reward_gates")
    assert sorted(set(rows["reward_model"])) == sorted([trained["reward_model"], control["reward_model"]])
    verdicts = {m: all(rows.filter(rows["reward_model"] == m)["passed"]) for m in set(rows["reward_model"])}
    assert verdicts == {trained["reward_model"]: True, control["reward_model"]: False}
    runs = tracking.client(lake.mlflow_uri).search_runs([tracking.experiment_id(lake.mlflow_uri)],
                                                        "tags.`assay.kind` = 'reward_gate'")
    assert sorted(r.data.tags["assay.passed"] for r in runs) == ["false", "true"]

    out = run_cli("reward", "list", "toy_colors", "--json")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert [(r["reward_model"], r["gate"], r["shuffled_labels"]) for r in listed] == [
        (trained["reward_model"], "passed", False), (control["reward_model"], "failed", True)]

    # the domain sets the bar: registered with a declared one, `reward check` runs at it by default ...
    write_plugin(tmp_path / "plugins", "toy_colors", DECLARED_BAR)
    plugins = {"ASSAY_DOMAINS_PATH": str(tmp_path / "plugins")}
    out = run_cli("reward", "check", "toy_colors", "--reward-model", trained["reward_model"], "--json", env=plugins)
    assert out.returncode == 1, out.stdout + out.stderr
    strict = json.loads(out.stdout)
    assert {c["criterion"]: c["threshold"] for c in strict["criteria"]}["enough_pairs"] == 500
    assert strict["laxer_than_domain_bar"] == []
    # ... and a laxer flag still runs, recorded, but is said not to count
    out = run_cli("reward", "check", "toy_colors", "--reward-model", trained["reward_model"], "--min-pairs", "5",
                  env=plugins)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "laxer than toy_colors's declared one (min_pairs 5 < 500)" in out.stderr
    assert "PASSED at a bar laxer than the domain's (not accepted for training or promotion)" in out.stdout
    out = run_cli("reward", "list", "toy_colors", "--json", env=plugins)
    assert json.loads(out.stdout)[0]["gate"] == "passed at a laxer bar than the domain's"


DECLARED_BAR = '''
from domains import Domain, LearnedReward

def _samples(split, n, seed):
    for i in range(n):
        yield {"id": f"toy-{split}-{seed}-{i}", "prompt": f"Describe item {i} in a few words.", "answer": "blue"}

DOMAIN = Domain(name="toy_colors", owner="o@example.com", description="colours", samples=_samples, score=None,
                learned_reward=LearnedReward(gate={"min_pairs": 500}))
'''


def test_a_bad_pairs_file_is_refused_with_its_line_numbers(tiny_home, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\n{"prompt": "q2", "chosen": "a"}\nnope\n')
    out = run_cli("reward", "train", "toy_colors", "--pairs", str(bad), "--base", "tiny")
    assert out.returncode == 2
    assert "line 2: missing field 'rejected'" in out.stderr and "line 3: invalid JSON" in out.stderr
    out = run_cli("reward", "check", "toy_colors")
    assert out.returncode == 2 and "assay reward train toy_colors --pairs FILE" in out.stderr
    repeated = tmp_path / "repeated.jsonl"
    repeated.write_text('{"prompt": "q", "chosen": "a", "rejected": "b"}\n' * 2)
    out = run_cli("reward", "train", "toy_colors", "--pairs", str(repeated), "--base", "tiny")
    assert out.returncode == 2 and "line 2: the same pair as line 1" in out.stderr
    assert "--drop-duplicates" in out.stderr
    out = run_cli("reward", "train", "toy_colors", "--pairs", str(bad), "--heldout-fraction", "1.5")
    assert out.returncode == 2 and "--heldout-fraction" in out.stderr


def test_reward_pairs_writes_a_file_train_reads_and_refuses_an_unknown_domain(assay_home, tmp_path):
    from storage.preference_pairs import read_pairs

    out = run_cli("reward", "pairs", "math_arith_easy", "--out", str(tmp_path / "p.jsonl"), "--items", "10",
                  "--wrong-per-item", "2", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert summary["pairs"] == 20 and summary["skipped"] == {}
    assert len(read_pairs(tmp_path / "p.jsonl")) == 20
    out = run_cli("reward", "pairs", "math_arith_eazy", "--out", str(tmp_path / "q.jsonl"))
    assert out.returncode == 2 and "math_arith_eazy" in out.stderr and not (tmp_path / "q.jsonl").exists()
