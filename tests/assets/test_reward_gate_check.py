"""The learned reward's gate, where a domain owner sees it (issue 31 item 2): the blocking Dagster
check ``reward_gate`` of ``domain_train_set`` and the dashboard's domain page. Real gate checks
(quality.reward_gate.check_reward on held-out pairs of the README's example domain, one rule-based
reward that prefers a remedy and one that prefers length, the hack the padding probe tries),
recorded in a real lake; a real reward-model record; the page rendered by Streamlit's AppTest."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from domains.registry import load_registry
from quality.reward_gate import check_reward, record_reward_gate
from storage.lake import Lake
from storage.preference_pairs import PreferencePair, pair_id

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "open_domains"
REMEDY = ("replacement", "refund", "repair", "missing part", "replace", "send a new")


def _example_pairs(n: int = 60) -> list[PreferencePair]:
    spec = importlib.util.spec_from_file_location("customer_reply_example", EXAMPLES / "customer_reply.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return [PreferencePair(id=pair_id(p["prompt"], p["chosen"], p["rejected"]), prompt=p["prompt"],
                           chosen=p["chosen"], rejected=p["rejected"]) for p in module.preference_pairs(n, seed=1)]


def remedy_reward(prompts, answers):  # pays a remedy, once (the probes' sprays and echoes carry none)
    return [float(any(word in a.lower() for word in REMEDY)) - 0.001 * len(a) / 100 for a in answers]


def length_reward(prompts, answers):  # longer is better: what the padding probe exists to catch
    return [len(a) / 100 for a in answers]


@pytest.fixture
def domain():
    return load_registry(str(EXAMPLES), include_builtins=False).get("customer_reply")


def _record(lake, score, reward_model: str):
    result = check_reward(score, _example_pairs())
    record_reward_gate(lake, None, result, domain="customer_reply", reward_model=reward_model, pairs_source="test",
                       pairs_fingerprint=None)
    return result


def _register(lake, reward_model: str) -> None:
    from storage.tables import REWARD_MODELS, conform
    import polars as pl

    row = {"reward_model": reward_model, "domain": "customer_reply", "base_model": "rule", "path": "/nowhere",
           "shuffled_labels": False, "created_at": "2026-12-03T00:00:00+00:00"}
    lake.write_batch("reward_models", {"domain": "customer_reply", "reward_model": reward_model},
                     {"part": conform(pl.DataFrame([row]), REWARD_MODELS)})


def test_the_dagster_check_blocks_until_the_reward_model_passes_its_gate(domain, tmp_path):
    from assets.quality import _reward_gate_check

    lake = Lake.at(tmp_path / "home")
    check = _reward_gate_check(lake, domain)
    assert not check.passed and check.severity.value == "ERROR"
    assert "no reward model trained for domain 'customer_reply'" in check.metadata["what_to_do"].value

    _register(lake, "rm-customer_reply-length")
    assert not _record(lake, length_reward, "rm-customer_reply-length").passed
    check = _reward_gate_check(lake, domain)
    assert not check.passed and "failed its gate" in check.metadata["what_to_do"].value
    assert "probe:length_padding" in check.metadata["what_to_do"].value

    _register(lake, "rm-customer_reply-remedy")
    assert _record(lake, remedy_reward, "rm-customer_reply-remedy").passed
    check = _reward_gate_check(lake, domain)
    assert check.passed and check.metadata["reward_model"].value == "rm-customer_reply-remedy"
    assert "probe:length_padding" in check.metadata["criteria"].value

    builtin = load_registry(None).get("math_arith_easy")
    assert _reward_gate_check(lake, builtin).passed


def test_the_domain_page_says_the_learned_reward_failed_its_gate_and_that_training_is_blocked(
        domain, tmp_path, monkeypatch):
    from tests.ui.test_app import _open

    home = tmp_path / "home"
    lake = Lake.at(home)
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(EXAMPLES))
    at = _open("domain", domain="customer_reply")
    assert any("never been checked" in w.value for w in at.warning), [w.value for w in at.warning]
    assert any("no verifier" in c.value for c in at.caption)

    _record(lake, length_reward, "rm-customer_reply-length")
    at = _open("domain", domain="customer_reply")
    [error] = [e.value for e in at.error if "FAILED its gate" in e.value]
    assert "training on customer_reply is blocked" in error and "probe:length_padding" in error
    table = next(d.value for d in at.dataframe if "criterion" in d.value.columns)
    assert not table["passed"].iloc[0]  # failed criteria first

    _record(lake, remedy_reward, "rm-customer_reply-remedy")
    at = _open("domain", domain="customer_reply")
    assert any("passed its gate" in s.value and "rm-customer_reply-remedy" in s.value for s in at.success)
    assert not any("FAILED its gate" in e.value for e in at.error)
