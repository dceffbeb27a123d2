"""Learned reward models (training.reward_model, generation.reward_scorer, generation.reward_models)
on the tiny policy: Bradley-Terry learns a separable preference set and the gate passes it, the
label-shuffled control fails the gate, and the model is saved, tracked and registered apart from
policies. Real lake and MLflow store in a tmp ASSAY_HOME."""

from __future__ import annotations

import math

import pytest

from generation.reward_models import list_reward_models, resolve_reward_model, RewardModelNotFound
from quality.reward_gate import check_reward
from storage import tracking
from storage.lake import Lake
from storage.preference_pairs import read_pairs
from tests.training.reward_pairs import toy_pairs
from training.reward_config import RewardTrainConfig
from training.reward_model import RewardTrainingError, bradley_terry_loss, train_reward_model

FAST = dict(base="tiny", epochs=2, batch_size=16, learning_rate=3e-3, max_length=64)


@pytest.fixture
def lake(tiny_home):
    return Lake.at(tiny_home)


def test_bradley_terry_loss_matches_a_float64_reference():
    import torch

    chosen = torch.tensor([2.0, -1.0, 0.5, 3.0])
    rejected = torch.tensor([1.0, 0.0, 0.5, -2.0])
    expected = sum(-math.log(1 / (1 + math.exp(-(c - r)))) for c, r in zip(chosen.tolist(), rejected.tolist())) / 4
    assert float(bradley_terry_loss(chosen, rejected)) == pytest.approx(expected, rel=1e-6)


def test_a_reward_model_learns_separable_pairs_passes_its_gate_and_is_registered_apart(lake):
    from generation.reward_scorer import RewardScorer

    pairs = toy_pairs(120)
    record = train_reward_model(lake, lake.mlflow_uri, "toy_colors", pairs, RewardTrainConfig(**FAST),
                                pairs_source="toy")
    assert record.heldout_pairs >= 20 and record.train_pairs + record.heldout_pairs == len(pairs)
    assert record.heldout_accuracy >= 0.9, record
    assert record.final_loss < 0.3 and record.steps == 2 * math.ceil(record.train_pairs / 16)

    heldout = read_pairs(record.heldout_path)
    assert len(heldout) == record.heldout_pairs
    scorer = RewardScorer.load(record.path)
    gate = check_reward(scorer, heldout)
    assert gate.passed, gate.reasons
    assert gate.criterion("accuracy").observed == pytest.approx(record.heldout_accuracy)

    # the lake row, the MLflow run and the registered version, in the reward-model registry only
    assert [r.reward_model for r in list_reward_models(lake, "toy_colors")] == [record.reward_model]
    assert resolve_reward_model(lake, "toy_colors").reward_model == record.reward_model
    client = tracking.client(lake.mlflow_uri)
    versions = client.search_model_versions(f"name = '{tracking.REWARD_MODEL_REGISTRY}'")
    assert [v.tags["checkpoint"] for v in versions] == [record.reward_model]
    assert versions[0].tags["domain"] == "toy_colors" and versions[0].tags["shuffled_labels"] == "false"
    assert tracking.checkpoint_versions(lake.mlflow_uri) == []  # never a policy
    run = client.get_run(record.mlflow_run_id)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["heldout_accuracy"] == pytest.approx(record.heldout_accuracy)
    assert len(client.get_metric_history(record.mlflow_run_id, "loss")) == record.steps


def test_the_label_shuffled_control_fails_its_gate(lake):
    from generation.reward_scorer import RewardScorer

    record = train_reward_model(lake, lake.mlflow_uri, "toy_colors", toy_pairs(120),
                                RewardTrainConfig(**FAST, shuffle_labels=True))
    assert record.shuffled_labels and "-control-" in record.reward_model
    gate = check_reward(RewardScorer.load(record.path), read_pairs(record.heldout_path))
    assert not gate.passed
    assert not gate.criterion("accuracy").passed, gate.reasons


def test_a_model_trained_in_bf16_autocast_is_scored_so(lake):
    from generation.device import cpu_computes_bf16
    from generation.reward_scorer import RewardScorer, read_metadata

    record = train_reward_model(lake, lake.mlflow_uri, "toy_colors", toy_pairs(120),
                                RewardTrainConfig(**FAST, autocast_bf16=True))
    native = cpu_computes_bf16()  # a CPU that only emulates bf16 trains and scores in fp32
    assert read_metadata(record.path)["autocast_bf16"] is native
    scorer = RewardScorer.load(record.path)
    assert scorer.autocast_bf16 is native
    heldout = read_pairs(record.heldout_path)
    gate = check_reward(scorer, heldout)
    assert gate.criterion("accuracy").passed and gate.criterion("order").passed, gate.reasons
    # bf16 rounds each score by well under the gap between a chosen and a rejected answer
    scorer.metadata["autocast_bf16"] = False
    exact = scorer([p.prompt for p in heldout], [p.chosen for p in heldout])
    scorer.metadata["autocast_bf16"] = native
    assert scorer([p.prompt for p in heldout], [p.chosen for p in heldout]) == pytest.approx(exact, abs=0.1)


def test_scores_do_not_depend_on_the_batch_a_text_is_padded_in(lake, tiny_source):
    from generation.reward_scorer import new_network, score_texts

    network, tokenizer = new_network(tiny_source, seed=1)
    prompts = ["Describe item 1.", "Describe item 2 in many more words than the first one does."]
    answers = ["blue.", "a much longer answer with many words in it, to be padded against."]
    together = score_texts(network, tokenizer, prompts, answers, max_length=64, batch_size=2)
    alone = [score_texts(network, tokenizer, [p], [a], max_length=64, batch_size=1)[0]
             for p, a in zip(prompts, answers)]
    assert together == pytest.approx(alone, abs=1e-5)
    assert together[0] != pytest.approx(together[1], abs=1e-6)


def test_training_refuses_a_bad_domain_name_or_a_split_with_nothing_held_out(lake):
    with pytest.raises(RewardTrainingError, match="lower_snake_case"):
        train_reward_model(lake, lake.mlflow_uri, "Toy-Colors", toy_pairs(10), RewardTrainConfig(**FAST))
    one_prompt = [p.__class__(id=str(i), prompt="same", chosen=p.chosen, rejected=p.rejected)
                  for i, p in enumerate(toy_pairs(6))]
    with pytest.raises(RewardTrainingError, match="distinct prompts"):
        train_reward_model(lake, lake.mlflow_uri, "toy_colors", one_prompt, RewardTrainConfig(**FAST))
    assert list_reward_models(lake) == []


def test_resolving_an_unknown_reward_model_says_what_to_do(lake):
    with pytest.raises(RewardModelNotFound, match="assay reward train toy_colors --pairs FILE"):
        resolve_reward_model(lake, "toy_colors")


def test_config_rejects_bad_values_with_the_fix():
    with pytest.raises(ValueError, match="heldout_fraction must be in \\(0, 1\\)"):
        RewardTrainConfig(heldout_fraction=0)
    with pytest.raises(ValueError, match="learning_rate must be in"):
        RewardTrainConfig(learning_rate=2.0)
    with pytest.raises(ValueError, match="extra"):
        RewardTrainConfig(epoch=3)


def test_reward_models_resolve_by_id_or_latest_within_their_domain(lake, tmp_path):
    from generation.reward_models import RewardModelRecord, register_reward_model

    for name, domain, at in (("rm-a-1", "essays", "2026-01-01T00:00:00.000001+00:00"),
                             ("rm-a-2", "essays", "2026-01-01T00:00:00.000002+00:00"),
                             ("rm-b-1", "reports", "2026-01-02T00:00:00+00:00")):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "config.json").write_text("{}")
        register_reward_model(lake, lake.mlflow_uri, RewardModelRecord(reward_model=name, domain=domain,
                                                                       base_model="tiny", path=str(folder),
                                                                       created_at=at))
    assert resolve_reward_model(lake, "essays").reward_model == "rm-a-2"
    assert resolve_reward_model(lake, "essays", "rm-a-1").reward_model == "rm-a-1"
    with pytest.raises(RewardModelNotFound, match="was trained for domain 'reports', not 'essays'"):
        resolve_reward_model(lake, "essays", "rm-b-1")
    with pytest.raises(RewardModelNotFound, match="unknown reward model 'rm-x'.*rm-a-1, rm-a-2"):
        resolve_reward_model(lake, "essays", "rm-x")
