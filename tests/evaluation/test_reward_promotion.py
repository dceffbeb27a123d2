"""Reward models regression-tested and promoted like policies (issue 31 item 4): real gate checks
(quality.reward_gate.check_reward) of rule-based rewards on the README example's labelled pairs,
their per-pair results in a real lake, the policy's paired test between them, and the promotion
rule: a failed gate or a real drop in agreement is refused, a sound one becomes the champion that
LearnedReward(reward_model="champion") resolves to. The CLI is the real `assay`."""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import polars as pl
import pytest

from evaluation.reward_promotion import (RewardPromotionError, compare_reward_models, promote_reward_model,
                                         reward_champion, reward_sweep)
from generation.reward_models import RewardModelNotFound, resolve_reward_model
from quality.reward_gate import check_reward, record_reward_gate
from storage import tables
from storage.lake import Lake
from storage.preference_pairs import PreferencePair, pair_id
from tests.conftest import run_cli

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "open_domains"
REMEDY = ("replacement", "refund", "repair", "missing part", "replace", "send a new")
DOMAIN = "customer_reply"


def _pairs(n: int = 120) -> list[PreferencePair]:
    spec = importlib.util.spec_from_file_location("customer_reply_example", EXAMPLES / "customer_reply.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [PreferencePair(id=pair_id(p["prompt"], p["chosen"], p["rejected"]), prompt=p["prompt"],
                           chosen=p["chosen"], rejected=p["rejected"]) for p in module.preference_pairs(n, seed=2)]


def remedy(prompts, answers):  # prefers a reply that offers a remedy (passes its gate on these pairs)
    return [float(any(w in a.lower() for w in REMEDY)) - 0.001 * len(a) / 100 for a in answers]


def flipped(share: float):
    """``remedy`` with its verdict inverted on a fixed share of the prompts: a worse reward model."""
    def score(prompts, answers):
        return [1.0 - v if random.Random(p).random() < share else v for p, v in zip(prompts, remedy(prompts, answers))]
    return score


def _check(lake, score, reward_model, pairs=None):
    result = check_reward(score, pairs or _pairs())
    record_reward_gate(lake, None, result, domain=DOMAIN, reward_model=reward_model, pairs_source="test",
                       pairs_fingerprint="fp")
    return result


def _register(lake, reward_model: str) -> None:
    row = {"reward_model": reward_model, "domain": DOMAIN, "base_model": "rule", "path": "/nowhere",
           "shuffled_labels": False, "created_at": f"2026-12-03T00:00:0{len(reward_model) % 10}+00:00"}
    lake.write_batch("reward_models", {"reward_model": reward_model},
                     {"part": tables.conform(pl.DataFrame([row]), tables.REWARD_MODELS)})


def test_each_check_keeps_its_per_pair_verdicts(tmp_path):
    lake = Lake.at(tmp_path / "home")
    result = _check(lake, flipped(0.3), "rm-b")
    sweep = reward_sweep(lake, DOMAIN, "rm-b")
    assert sweep.height == result.pairs == 120
    accuracy = next(c for c in result.criteria if c.name == "accuracy").observed
    assert sweep["correct"].mean() == pytest.approx(accuracy)
    assert set(sweep["correct"]) <= {0.0, 1.0}
    _check(lake, remedy, "rm-b")  # a newer check replaces what the comparison reads
    assert reward_sweep(lake, DOMAIN, "rm-b")["correct"].mean() == 1.0


def test_a_worse_reward_model_regresses_and_an_equal_one_does_not(tmp_path):
    lake = Lake.at(tmp_path / "home")
    _check(lake, remedy, "rm-good")
    _check(lake, flipped(0.3), "rm-worse")
    _check(lake, flipped(0.0), "rm-same")
    worse = compare_reward_models(lake, DOMAIN, "rm-worse", "rm-good").domains[0]
    assert worse.verdict == "regression" and worse.delta < -0.15 and worse.n == 120
    same = compare_reward_models(lake, DOMAIN, "rm-same", "rm-good").domains[0]
    assert same.verdict == "ok" and same.delta == 0
    better = compare_reward_models(lake, DOMAIN, "rm-good", "rm-worse").domains[0]
    assert better.verdict == "ok" and better.delta > 0.15
    # pairs not judged by both cannot be compared
    _check(lake, remedy, "rm-elsewhere", pairs=_pairs(150)[130:])
    with pytest.raises(RewardPromotionError, match="share 0 labelled pairs"):
        compare_reward_models(lake, DOMAIN, "rm-elsewhere", "rm-good")
    with pytest.raises(RewardPromotionError, match="no per-pair results.*assay reward check customer_reply"):
        compare_reward_models(lake, DOMAIN, "rm-never", "rm-good")


def test_promotion_refuses_a_failed_gate_and_a_regression_and_records_every_decision(tmp_path):
    lake = Lake.at(tmp_path / "home")
    for name in ("rm-first", "rm-worse", "rm-failing", "rm-equal"):
        _register(lake, name)
    with pytest.raises(RewardModelNotFound, match="no champion reward model yet.*assay reward promote"):
        resolve_reward_model(lake, DOMAIN, "champion")

    assert _check(lake, remedy, "rm-first").passed
    first = promote_reward_model(lake, DOMAIN, "rm-first")
    assert first.promoted and "first champion" in first.reason
    assert reward_champion(lake, DOMAIN) == "rm-first"
    assert resolve_reward_model(lake, DOMAIN, "champion").reward_model == "rm-first"

    never = promote_reward_model(lake, DOMAIN, "rm-failing")
    assert not never.promoted and "never been checked" in never.reason
    length = lambda prompts, answers: [len(a) / 100 for a in answers]  # noqa: E731 - pays padding
    assert not _check(lake, length, "rm-failing").passed
    failing = promote_reward_model(lake, DOMAIN, "rm-failing")
    assert not failing.promoted and "failed its gate" in failing.reason

    worse = flipped(0.12)  # still passes its own gate, but agrees less than the champion
    assert _check(lake, worse, "rm-worse").passed
    refused = promote_reward_model(lake, DOMAIN, "rm-worse")
    assert not refused.promoted and refused.reason.startswith("regressed against champion rm-first")
    assert reward_champion(lake, DOMAIN) == "rm-first"

    assert _check(lake, flipped(0.0), "rm-equal").passed
    equal = promote_reward_model(lake, DOMAIN, "rm-equal")
    assert equal.promoted and "no regression against champion rm-first" in equal.reason
    assert resolve_reward_model(lake, DOMAIN, "champion").reward_model == "rm-equal"

    decisions = tables.conform(lake.read("reward_promotions"), tables.REWARD_PROMOTIONS).sort("decided_at")
    assert decisions["candidate"].to_list() == ["rm-first", "rm-failing", "rm-failing", "rm-worse", "rm-equal"]
    assert decisions["promoted"].to_list() == [True, False, False, False, True]
    assert decisions.filter(pl.col("candidate") == "rm-worse")["p"][0] < 0.05


def test_the_cli_compares_and_promotes(tmp_path):
    home = tmp_path / "home"
    lake = Lake.at(home)
    for name in ("rm-a", "rm-b"):
        _register(lake, name)
    _check(lake, remedy, "rm-a")
    _check(lake, flipped(0.3), "rm-b")
    env = {"ASSAY_HOME": str(home)}
    out = run_cli("reward", "compare", DOMAIN, "rm-b", "rm-a", "--json", env=env)
    assert out.returncode == 1, out.stderr
    assert json.loads(out.stdout)["verdict"] == "regression"
    out = run_cli("reward", "promote", DOMAIN, "rm-a", env=env)
    assert out.returncode == 0 and out.stdout.startswith("promoted: first champion"), out.stdout + out.stderr
    out = run_cli("reward", "promote", DOMAIN, "rm-b", "--json", env=env)
    assert out.returncode == 1 and json.loads(out.stdout)["reason"].startswith("regressed against champion rm-a")
    out = run_cli("reward", "promote", DOMAIN, "rm-nope", env=env)
    assert out.returncode == 2 and "unknown reward model 'rm-nope'" in out.stderr


def test_a_check_at_a_laxer_bar_than_the_domain_declares_cannot_promote(tmp_path, monkeypatch):
    from domains.registry import get_registry

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    declared = (EXAMPLES / "customer_reply.py").read_text().replace(
        "learned_reward=LearnedReward()", "learned_reward=LearnedReward(gate={'min_pairs': 200})")
    assert "min_pairs" in declared
    (plugins / "customer_reply.py").write_text(declared)
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    get_registry(reload=True)
    try:
        lake = Lake.at(tmp_path / "home")
        _register(lake, "rm-a")
        assert _check(lake, remedy, "rm-a").passed  # at the gate's default bar: 120 pairs >= 20
        refused = promote_reward_model(lake, DOMAIN, "rm-a")
        assert not refused.promoted and "laxer than customer_reply's declared bar" in refused.reason
        assert "min_pairs 20 < 200" in refused.reason
    finally:
        monkeypatch.delenv("ASSAY_DOMAINS_PATH")
        get_registry(reload=True)
