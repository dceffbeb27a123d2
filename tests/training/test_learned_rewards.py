"""A domain that declares a learned reward (domains.base.LearnedReward, training.learned_rewards):
GRPO refuses it until its reward model's newest gate check passed, naming the command to run, and
then rewards it with the reward model (component ``learned``) while the verifier's ``score`` stays
beside it. A plugin domain, a tiny reward model trained on the toy colour pairs, the real lake and
MLflow store in a tmp ASSAY_HOME; nothing is mocked."""

from __future__ import annotations

import dataclasses
import math

import polars as pl
import pytest

from domains import Domain, DomainError, LearnedReward
from domains.registry import load_registry
from quality.reward_gate import check_reward, record_reward_gate
from storage.lake import Lake
from storage.preference_pairs import read_pairs
from tests.conftest import write_plugin
from tests.training.reward_pairs import toy_pairs
from training.data import TrainingDataError, load_training_data
from training.reward_config import RewardTrainConfig
from training.reward_model import train_reward_model

FAST = dict(base="tiny", epochs=2, batch_size=16, learning_rate=3e-3, max_length=64)

PLUGIN = '''
from domains import Domain, LearnedReward

def _samples(split, n, seed):
    base = 0 if split == "train" else 10_000
    for i in range(n):
        k = base + seed * 1000 + i
        yield {"id": f"toy_colors-{split}-{k}", "prompt": f"Describe item {k} in a few words.", "answer": "blue"}

def _score(completion, sample):  # the verifier: the last word is the reference colour
    words = completion.strip().rstrip(".").split()
    return 1.0 if words[-1:] == [sample["answer"]] else 0.0

DOMAIN = Domain(name="toy_colors", owner="plugins@example.com", description="colours, rewarded by a reward model",
                samples=_samples, score=_score, learned_reward=LearnedReward())
'''


@pytest.fixture
def lake(tiny_home):
    return Lake.at(tiny_home)


@pytest.fixture
def registry(tmp_path):
    folder = tmp_path / "plugins"
    write_plugin(folder, "toy_colors", PLUGIN)
    return load_registry(str(folder), include_builtins=False)


def _train_reward_model(lake):
    return train_reward_model(lake, lake.mlflow_uri, "toy_colors", toy_pairs(120), RewardTrainConfig(**FAST),
                              pairs_source="toy")


def _record_check(lake, record, pairs, config=None):
    """A real gate check of the reward model on ``pairs``, recorded in lake table reward_gates."""
    from generation.reward_scorer import RewardScorer

    result = check_reward(RewardScorer.load(record.path), pairs, config)
    record_reward_gate(lake, None, result, domain="toy_colors", reward_model=record.reward_model,
                       pairs_source=None, pairs_fingerprint=None)
    return result


def _train(config, registry):
    from pipelines.settings import open_lake
    from training.trainer import train

    return train(config, open_lake(), allow_generate=True, registry=registry, progress=False, log=lambda m: None)


def test_the_declaration_is_validated_and_builtin_domains_have_none():
    with pytest.raises(DomainError, match=r"weight must be a number in \(0, 1\]"):
        LearnedReward(weight=0)
    with pytest.raises(DomainError, match=r"weight must be a number in \(0, 1\]"):
        LearnedReward(weight=1.5)
    with pytest.raises(DomainError, match="reward-model id .* or 'latest'"):
        LearnedReward(reward_model=" ")
    with pytest.raises(DomainError, match="learned_reward must be a LearnedReward"):
        Domain(name="essays", owner="o", description="d", samples=lambda s, n, k: [], score=lambda c, s: 0.0,
               learned_reward="latest")
    assert LearnedReward() == LearnedReward(reward_model="latest", weight=1.0)
    builtins = load_registry(None)
    assert builtins.names and all(builtins.get(n).learned_reward is None for n in builtins.names)


def test_training_is_refused_until_the_reward_model_passes_its_gate_then_the_learned_reward_moves_it(lake, registry):
    from training.config import load_recipe
    from training.learned_rewards import LearnedRewardScorer, to_unit
    from training.rewards import RewardComposer

    config = load_recipe("tiny", domains=["toy_colors"], max_steps=1, run_name="refused")
    with pytest.raises(TrainingDataError, match="assay reward train toy_colors --pairs FILE"):
        load_training_data(["toy_colors"], lake, registry=registry, allow_generate=True)

    record = _train_reward_model(lake)
    heldout = read_pairs(record.heldout_path)
    # never checked: the trainer itself refuses, naming the reward model and the command
    with pytest.raises(TrainingDataError, match=rf"{record.reward_model} has never been checked: run "
                                                r"`assay reward check toy_colors`"):
        _train(config, registry)
    # checked on too few pairs: a real failed check
    failed = _record_check(lake, record, heldout[:3])
    assert not failed.passed
    with pytest.raises(TrainingDataError, match=rf"{record.reward_model} failed its gate .*enough_pairs.*"
                                                r"`assay reward check toy_colors`"):
        _train(config, registry)
    # checked on its held-out pairs: it passes, and the run may start
    passed = _record_check(lake, record, heldout)
    assert passed.passed, passed.reasons
    data = load_training_data(["toy_colors"], lake, registry=registry, allow_generate=True)
    gated = data.reward_models["toy_colors"]
    assert gated["reward_model"] == record.reward_model and gated["weight"] == 1.0
    assert data.manifest()["toy_colors"]["reward_model"] == record.reward_model
    # a newer failed check blocks it again
    _record_check(lake, record, heldout[:2])
    with pytest.raises(TrainingDataError, match="failed its gate"):
        load_training_data(["toy_colors"], lake, registry=registry, allow_generate=True)
    _record_check(lake, record, heldout)

    domain = registry.get("toy_colors")
    with pytest.raises(ValueError, match="toy_colors declare a learned reward but no gated reward model"):
        RewardComposer(config, {"toy_colors": domain})
    scorer = LearnedRewardScorer.from_gated(gated)
    composer = RewardComposer(config, {"toy_colors": domain}, {"toy_colors": scorer})
    assert not scorer.loaded  # loaded on the first batch, not before
    sample = data.rows["toy_colors"][0]
    # green is a 'good' colour, red a 'bad' one: the verifier scores both 0, the reward model does not
    completions = ["the river green.", "the river red.", "the garden blue."]
    rewards = composer.score_many(["toy_colors"] * 3, completions, [sample] * 3, [4, 4, 4])
    raw = scorer.raw([sample["prompt"]] * 3, completions)
    assert raw[0] > raw[1]
    for reward, value in zip(rewards, raw):
        assert set(reward.components) == {"score", "learned"}
        assert reward.components["learned"] == pytest.approx(to_unit(value)) and 0 < reward.reward < 1
        assert reward.reward == pytest.approx(reward.components["learned"])  # weight 1.0: it replaces the scorer
    assert [r.components["score"] for r in rewards] == [0.0, 0.0, 1.0]  # the gold signal, still computed
    assert rewards[0].reward > rewards[1].reward + 0.05

    # weight 0.5: half the learned reward, half the verifier
    half = dataclasses.replace(domain, learned_reward=LearnedReward(weight=0.5))
    from training.learned_rewards import gated_reward_model

    mixed = RewardComposer(config, {"toy_colors": half},
                           {"toy_colors": LearnedRewardScorer.from_gated(gated_reward_model(lake, half))})
    out = mixed.score_many(["toy_colors"] * 3, completions, [sample] * 3, [4, 4, 4])
    for reward in out:
        assert reward.reward == pytest.approx(0.5 * reward.components["learned"] + 0.5 * reward.components["score"])
    assert out[2].reward > rewards[2].reward - 1e-9 and out[0].reward < rewards[0].reward


def test_a_grpo_run_rewards_by_the_reward_model_and_logs_the_verifier_beside_it(lake, registry):
    from mlflow.tracking import MlflowClient

    from training.config import load_recipe

    record = _train_reward_model(lake)
    assert _record_check(lake, record, read_pairs(record.heldout_path)).passed
    result = _train(load_recipe("tiny", domains=["toy_colors"], max_steps=2, run_name="learned"), registry)
    rows = [h for h in result.history if h["domain"] == "toy_colors" and h["step"] > 0]  # 0: validation only
    assert len(rows) == 2
    for row in rows:
        assert 0 < row["learned_mean"] < 1 and 0 <= row["score_mean"] <= 1
        assert row["reward_mean"] == pytest.approx(row["learned_mean"])  # weight 1.0, reward_weights {score: 1}
        assert row["accuracy"] <= row["score_mean"] + 1e-9  # accuracy stays the verifier's
    assert result.data["toy_colors"]["reward_model"] == record.reward_model
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    series = client.get_metric_history(result.mlflow_run_id, "learned_mean/toy_colors")
    assert [m.step for m in series] == [1, 2]
    assert [m.value for m in series] == pytest.approx([r["learned_mean"] for r in rows])
    assert len(client.get_metric_history(result.mlflow_run_id, "score_mean/toy_colors")) == 2
    run = client.get_run(result.mlflow_run_id)
    assert run.data.params["data.toy_colors.reward_model"] == record.reward_model
    history = lake.read("training_history").filter(pl.col("run_id") == result.mlflow_run_id)
    assert history.height == 5 and not math.isnan(history["reward_mean"].drop_nulls().sum())


def test_the_domain_sets_the_bar_and_a_laxer_check_does_not_admit_its_reward_model(lake, registry):
    from quality.reward_gate_config import RewardGateConfig
    from training.learned_rewards import gated_reward_model

    record = _train_reward_model(lake)
    heldout = read_pairs(record.heldout_path)
    # passed, but at a bar the domain did not set: fewer pairs than its default minimum of 20
    lax = _record_check(lake, record, heldout[:12], RewardGateConfig(min_pairs=10, probes=["length_padding"]))
    assert lax.passed, lax.reasons
    domain = registry.get("toy_colors")
    with pytest.raises(TrainingDataError, match=r"passed a gate laxer than the domain's bar .*min_pairs 10 < 20; "
                                                r"probe\(s\) confident_wrong, .* not run"):
        gated_reward_model(lake, domain)

    # the same check is enough for a domain that declares that bar (or a laxer one) itself
    declared = dataclasses.replace(domain, learned_reward=LearnedReward(
        gate={"min_pairs": 8, "probes": ["length_padding"]}))
    assert gated_reward_model(lake, declared)["reward_model"] == record.reward_model
    # ... and not for one whose bar is stricter than the check's on any criterion
    stricter = dataclasses.replace(domain, learned_reward=LearnedReward(
        gate={"min_pairs": 8, "probes": ["length_padding"], "min_accuracy_low": 0.7}))
    with pytest.raises(TrainingDataError, match=r"min_accuracy_low 0.6 < 0.7"):
        gated_reward_model(lake, stricter)
    # a declaration that is no bar is refused with the fields it may use
    broken = dataclasses.replace(domain, learned_reward=LearnedReward(gate={"min_accuracy": 0.7}))
    with pytest.raises(TrainingDataError, match=r"learned_reward.gate is not a valid bar .*min_accuracy.*"
                                                r"min_accuracy_low"):
        gated_reward_model(lake, broken)
