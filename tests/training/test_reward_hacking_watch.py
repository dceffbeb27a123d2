"""The reward-hacking watch in a real GRPO run (training.trainer + training.overoptimisation): a tiny
policy, a tiny reward model trained on the toy colour pairs and gated, the real lake and MLflow store
in a tmp ASSAY_HOME; nothing is mocked.

The domain's verifier punishes exactly what its reward model pays for (gold = 1 - the reward model's
unit reward on the same completion), so when GRPO drives the learned reward up the gold signal falls
with it: proxy over-optimisation by construction. At learning rate 1e-2 the tiny policy raises the
learned reward from about 0.74 to 0.99 between steps 4 and 10, and the watch (window 6) fires from
step 7. ``stop`` ends the run there with that step's checkpoint and the reason; ``warn`` trains on to
``max_steps``; both leave the flag in MLflow and in ``training_history``."""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains.registry import load_registry
from storage.lake import Lake
from storage.preference_pairs import read_pairs
from tests.conftest import write_plugin
from tests.training.test_learned_rewards import _record_check, _train_reward_model

PLUGIN = '''
import os
from domains import Domain, LearnedReward

_SCORER = []

def _samples(split, n, seed):
    base = 0 if split == "train" else 10_000
    for i in range(n):
        k = base + seed * 1000 + i
        yield {"id": f"toy_colors-{split}-{k}", "prompt": f"Describe item {k} in a few words.", "answer": "blue"}

def _score(completion, sample):  # the verifier punishes what the reward model (TOY_REWARD_MODEL) pays for
    from generation.reward_scorer import RewardScorer
    from training.learned_rewards import to_unit

    if not _SCORER:
        _SCORER.append(RewardScorer.load(os.environ["TOY_REWARD_MODEL"]))
    return 1.0 - to_unit(_SCORER[0]([sample["prompt"]], [completion])[0])

DOMAIN = Domain(name="toy_colors", owner="plugins@example.com", description="colours, a verifier against the reward",
                samples=_samples, score=_score, learned_reward=LearnedReward())
'''
STEPS, WINDOW = 10, 6


@pytest.fixture
def gated(tiny_home, tmp_path, monkeypatch):
    """(lake, registry): the plugin domain and its reward model, trained and passed by its gate."""
    lake = Lake.at(tiny_home)
    folder = tmp_path / "plugins"
    write_plugin(folder, "toy_colors", PLUGIN)
    record = _train_reward_model(lake)
    assert _record_check(lake, record, read_pairs(record.heldout_path)).passed
    monkeypatch.setenv("TOY_REWARD_MODEL", str(record.path))
    return lake, load_registry(str(folder), include_builtins=False)


def _config(mode: str, run_name: str):
    from training.config import load_recipe

    # without in-loop validation the gold signal is the verifier on the same rollouts (the held-out one:
    # test_the_watch_judges_against_the_held_out_validation_when_the_run_validates)
    return load_recipe("tiny", domains=["toy_colors"], max_steps=STEPS, run_name=run_name, learning_rate=1e-2,
                       reward_hacking=mode, reward_hacking_window=WINDOW, reward_hacking_min_change=0.05,
                       validation={"eval_every": 0})


def _train(config, registry, notes: list[str]):
    from pipelines.settings import open_lake
    from training.trainer import train

    return train(config, open_lake(), allow_generate=True, registry=registry, progress=False, log=notes.append)


def _curve(result) -> str:
    return "; ".join(f"{h['step']}: learned {h['learned_mean']:.3f} gold {h['score_mean']:.3f} "
                     f"flag {h['reward_hacking']}" for h in result.history if h["domain"] == "toy_colors")


def _flags(lake, run_id) -> dict[int, float | None]:
    history = lake.read("training_history").filter((pl.col("run_id") == run_id) & (pl.col("domain") == "toy_colors"))
    return dict(zip(history["step"].to_list(), history["reward_hacking"].to_list()))


def test_stop_ends_the_run_with_the_checkpoint_of_the_step_that_fired_and_says_why(gated):
    from mlflow.tracking import MlflowClient

    lake, registry = gated
    notes: list[str] = []
    result = _train(_config("stop", "hacked"), registry, notes)
    assert result.stopped is not None, f"the watch never fired: {_curve(result)}"
    stopped_at = result.stopped["step"]
    print("stop run:", _curve(result))
    assert WINDOW <= stopped_at < STEPS and result.steps_done == stopped_at, _curve(result)
    assert result.stopped["reason"] == "reward_hacking" and result.stopped["domains"] == ["toy_colors"]
    evidence = result.stopped["evidence"]["toy_colors"]
    assert evidence["fired"] and evidence["learned"]["change"] >= 0.05 and evidence["gold"]["change"] <= -0.05
    assert evidence["learned"]["slope"] > 0 > evidence["gold"]["slope"]
    assert (evidence["first_step"], evidence["last_step"], evidence["steps"]) == (stopped_at - WINDOW + 1, stopped_at,
                                                                                 WINDOW)
    assert result.checkpoint.endswith(f"step{stopped_at:06d}")  # the step it fired on, saved
    assert any(n.startswith(f"WARNING: reward hacking suspected at step {stopped_at}: toy_colors: proxy "
                            "over-optimisation") for n in notes), notes
    assert any(n.startswith(f"stopped after step {stopped_at} (reward_hacking: stop)") for n in notes)

    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "KILLED"  # not a normal finish
    assert run.data.tags["assay.stopped"] == "reward_hacking"
    assert run.data.tags["assay.stopped_step"] == str(stopped_at)
    assert "toy_colors: proxy over-optimisation" in run.data.tags["assay.stop_reason"]
    assert run.data.tags["assay.reward_hacking"] == "toy_colors"
    assert json.loads(run.data.tags["assay.reward_hacking.toy_colors"]) == evidence
    series = {m.step: m.value for m in client.get_metric_history(result.mlflow_run_id, "reward_hacking/toy_colors")}
    assert series[stopped_at] == 1.0 and set(series) <= set(range(WINDOW, stopped_at + 1))
    assert all(v == 0.0 for s, v in series.items() if s < stopped_at)  # judged, not fired, until then
    flags = _flags(lake, result.mlflow_run_id)  # what the training page reads
    assert flags[stopped_at] == 1.0 and all(flags[s] is None for s in range(1, WINDOW))
    assert max(flags) == stopped_at

    # the same command again: nothing to do, and it says how to train on
    again: list[str] = []
    rerun = _train(_config("stop", "hacked"), registry, again)
    assert rerun.steps_done == stopped_at and rerun.stopped == result.stopped
    assert any("stopped after step" in n and "`reward_hacking: warn`" in n for n in again), again
    # under warn the same run (watching is not part of its identity) trains on to max_steps
    resumed = _train(_config("warn", "hacked"), registry, again)
    assert resumed.mlflow_run_id == result.mlflow_run_id and resumed.steps_done == STEPS and resumed.stopped is None
    assert client.get_run(result.mlflow_run_id).info.status == "FINISHED"


def test_warn_flags_the_run_and_trains_on_to_max_steps(gated):
    from mlflow.tracking import MlflowClient

    lake, registry = gated
    notes: list[str] = []
    result = _train(_config("warn", "warned"), registry, notes)
    assert result.steps_done == STEPS and result.stopped is None
    fired = [h["step"] for h in result.history if h["domain"] == "toy_colors" and h["reward_hacking"] == 1.0]
    assert fired, f"the watch never fired: {_curve(result)}"
    print("warn run:", _curve(result))
    assert any(n.startswith(f"WARNING: reward hacking suspected at step {fired[0]}") and
               n.endswith("training on (reward_hacking: warn)") for n in notes), notes
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED" and "assay.stopped" not in run.data.tags
    assert run.data.tags["assay.reward_hacking"] == "toy_colors"
    assert json.loads(run.data.tags["assay.reward_hacking.toy_colors"])["fired"]
    series = {m.step: m.value for m in client.get_metric_history(result.mlflow_run_id, "reward_hacking/toy_colors")}
    assert [s for s, v in series.items() if v == 1.0] == fired and max(series) == STEPS
    assert {s for s, v in _flags(lake, result.mlflow_run_id).items() if v == 1.0} == set(fired)


def test_the_watch_judges_against_the_held_out_validation_once_the_run_has_enough_validations(gated):
    """With in-loop validation every 2 steps the gold signal becomes the verifier on held-out items answered
    greedily (training_history val_score) once a window of validations exists, and the run says when it
    switched; before that, and without validation, the verifier on the same rollouts (whether each
    verdict fires on this toy is test_overoptimisation's business: here its greedy held-out answers
    score ~0 from the start, so the held-out gold cannot fall)."""
    from training.config import load_recipe
    from training.overoptimisation import MIN_WINDOW, heldout_window

    lake, registry = gated
    notes: list[str] = []
    config = load_recipe("tiny", domains=["toy_colors"], max_steps=STEPS, run_name="heldout", learning_rate=1e-2,
                         reward_hacking="warn", reward_hacking_window=WINDOW, reward_hacking_min_change=0.05,
                         validation={"eval_every": 2, "items": 8, "watch": [], "max_share": 1.0})
    result = _train(config, registry, notes)
    switches = [n for n in notes if n.startswith("reward-hacking watch of toy_colors: judged against")]
    held = heldout_window(WINDOW, 2)  # validations at steps 2, 4, 6, 8: the 4th is at step 8
    assert held == MIN_WINDOW == 4
    assert switches == ["reward-hacking watch of toy_colors: judged against the verifier on the same rollouts "
                        f"from step {WINDOW} on (its gold signal)",
                        "reward-hacking watch of toy_colors: judged against the held-out validation "
                        f"from step {2 * held} on (its gold signal)"], switches
    judged = [h["step"] for h in result.history if h["domain"] == "toy_colors" and h["reward_hacking"] is not None]
    assert judged == list(range(WINDOW, STEPS + 1))
    state = json.loads((lake.home / "runs" / "heldout" / "state.json").read_text())
    assert state["reward_hacking_gold"] == {"toy_colors": "held-out validation"}
