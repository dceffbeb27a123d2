"""evaluation.domain_catalog: the registry as the dashboard reads it (facts, bands, plugin errors)
and the gate's pass-rate verdicts, without the dashboard importing the registry or the gates."""

from __future__ import annotations

from tests.conftest import PLUGIN_TEMPLATE, write_plugin


def test_catalog_carries_each_domains_band_and_the_plugin_errors(tmp_path, assay_home):
    from evaluation.domain_catalog import DEFAULT_BAND, catalog

    plugins = tmp_path / "plugins"
    body = PLUGIN_TEMPLATE.format(name="banded").replace(
        'tags=("test",),', 'tags=("test",), gate_thresholds={"difficulty_min": 0.2, "difficulty_max": 0.7},')
    write_plugin(plugins, "banded", body)
    write_plugin(plugins, "broken", "raise RuntimeError('no such thing')\n")
    found = catalog(str(plugins))
    assert found.band("banded") == (0.2, 0.7)
    assert found.band("math_arith_easy") == DEFAULT_BAND and found.band("no_such_domain") == DEFAULT_BAND
    row = found.domains.filter(found.domains["domain"] == "banded").row(0, named=True)
    assert row["owner"] == "plugins@example.com" and row["tags"] == ["test"]
    assert any("broken" in e for e in found.errors)
    assert "banded" not in catalog(None).domains["domain"].to_list()  # built-ins only


def test_verdicts_are_the_gates():
    from evaluation.domain_catalog import pass_rate_verdicts

    # all pass / all fail are out of band whatever the band; otherwise the band decides
    assert pass_rate_verdicts([4, 0, 2, 1], [4, 4, 4, 4], (0.3, 0.6)) == ["too_easy", "too_hard", "in_band", "too_hard"]


def test_the_catalog_tells_a_check_at_the_domains_bar_from_a_laxer_one(tmp_path):
    from evaluation.domain_catalog import catalog, reward_bar_shortfall
    from quality.reward_gate import Criterion, RewardGateResult, gate_rows
    from quality.reward_gate_config import RewardGateConfig

    plugins = tmp_path / "plugins"
    body = PLUGIN_TEMPLATE.format(name="barred").replace("from domains import Domain",
                                                         "from domains import Domain, LearnedReward").replace(
        'tags=("test",),', 'tags=("test",), learned_reward=LearnedReward(gate={"min_accuracy_low": 0.8}),')
    write_plugin(plugins, "barred", body)
    write_plugin(plugins, "plain", PLUGIN_TEMPLATE.replace("from domains import Domain",
                                                           "from domains import Domain, LearnedReward").replace(
        'tags=("test",),', 'tags=("test",), learned_reward=LearnedReward(),').format(name="plain"))
    found = catalog(str(plugins))

    def rows(config):  # a passed check's rows, as the lake holds them
        result = RewardGateResult(pairs=30, config=config, criteria=[Criterion("accuracy", True, 0.9, 0.85, 0.95)])
        return gate_rows(result, check="c", domain="barred", reward_model="rm", pairs_source=None,
                         pairs_fingerprint=None, mlflow_run_id=None, checked_at="t")

    default, strict = rows(RewardGateConfig()), rows(RewardGateConfig(min_accuracy_low=0.85))
    assert reward_bar_shortfall(found, "barred", default) == ["min_accuracy_low 0.6 < 0.8"]
    assert reward_bar_shortfall(found, "barred", strict) == []
    assert reward_bar_shortfall(found, "plain", default) == []  # no bar declared: the gate's defaults
    assert reward_bar_shortfall(found, "not_registered", default) == []
