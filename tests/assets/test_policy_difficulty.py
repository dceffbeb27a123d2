"""Difficulty measured on the policy in the pipeline: real Dagster materializations and sensor
evaluations, the real lake, the real tiny policy generating through torch, a real MLflow SQLite
store. The scorers are real verifiers (they pass the domain self-test); what decides an item's
pass rate is what the tiny policy generates."""

from __future__ import annotations

import importlib
import json
import shutil
import sys

import dagster as dg
import polars as pl
import pytest

from tests.conftest import write_plugin

# Items: "[<name>] What is k plus k+7 minus 3?" with answer 2k+4, and metadata difficulty 0.5 (the
# metadata estimate puts every item in the band; so does the text heuristic). Scorers: an exact
# answer always passes and a corrupted answer (<= 5 characters here) never does; beyond that
# EASY passes any completion of 7+ characters (every tiny-policy sample of 8 tokens), HARD
# nothing (the tiny policy never writes the sum), MIXED half of them (by a hash of the text).
PLUGIN = '''
import zlib
from domains import Domain

def _samples(split, n, seed):
    base = 0 if split == "train" else 50_000
    for i in range(n):
        k = base + seed * 1000 + i
        yield {{"id": f"{name}-{{split}}-{{k}}", "prompt": f"[{name}] What is {{k}} plus {{k + 7}} minus 3?",
               "answer": str(2 * k + 4), "metadata": {{"difficulty": 0.5}}}}

def _score(completion, sample):
    if completion.strip() == sample["answer"]:
        return 1.0
    return {rule}

DOMAIN = Domain(name="{name}", owner="t@example.com", description="difficulty test domain", tags=("test",),
                samples=_samples, score=_score, eval_size=8,
                # the scorer stands in for a policy that solves (or fails) everything, so any text can
                # pay: the self-test's reward attack would rightly block it, which is not what is tested
                gate_thresholds={{"reward_attack_items": 0}})
'''
RULES = {"diff_easy": "float(len(completion) >= 7)",
         "diff_hard": "0.0",
         "diff_mixed": "float(len(completion) >= 7 and zlib.crc32(completion.encode()) % 2 == 0)"}
POLICY = {"estimate": "policy", "samples": 4, "max_new_tokens": 8, "backend": "torch"}
TRAIN_ROWS = 12


def _reload():
    out = {}
    # everything that holds a job object is reloaded with the jobs, or a later Definitions meets two
    # different 'checkpoint_sweep_job's (schedules kept the old one)
    for name in ("assets.partitions", "assets.ingest", "assets.difficulty", "assets.quality", "pipelines.jobs",
                 "pipelines.sensors", "pipelines.schedules"):
        out[name] = importlib.reload(sys.modules[name]) if name in sys.modules else importlib.import_module(name)
    if "pipelines.definitions" in sys.modules:
        out["pipelines.definitions"] = importlib.reload(sys.modules["pipelines.definitions"])
    return out


@pytest.fixture
def env(tiny_home, tmp_path, monkeypatch):
    from domains import get_registry
    from domains.registry import Registry

    plugins = tmp_path / "plugins"
    for name, rule in RULES.items():
        write_plugin(plugins, name, PLUGIN.format(name=name, rule=rule))
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    registry = get_registry(reload=True)
    modules = _reload()
    subset = Registry()  # contamination is checked against these domains only: keeps ingest fast
    for name in RULES:
        subset.domains[name], subset.sources[name] = registry.get(name), registry.sources[name]
    monkeypatch.setattr("assets.ingest.get_registry", lambda: subset)
    yield modules
    get_registry(reload=True)
    _reload()


def _resources(home):
    from assets.resources import PolicyResource, default_resources

    return {**default_resources(str(home)), "policy": PolicyResource(dtype="float32")}


def _run(modules, home, domain: str, difficulty: dict, *, ingest: bool = True, run_config: dict | None = None):
    assets = ([modules["assets.ingest"].domain_samples] if ingest else []) + [
        modules["assets.difficulty"].policy_pass_rates, modules["assets.quality"].gated_samples,
        modules["assets.quality"].domain_train_set]
    config = run_config or {"ops": {"policy_pass_rates": {"config": difficulty}}}
    config["ops"]["gated_samples"] = {"config": {"selftest_samples": 4, "log_to_mlflow": False}}
    if ingest:
        config["ops"]["domain_samples"] = {"config": {"train_samples": TRAIN_ROWS}}
    with dg.instance_for_test() as instance:
        result = dg.materialize(assets, partition_key=domain, resources=_resources(home), run_config=config,
                                raise_on_error=False, instance=instance)
    materialized = {e.asset_key.to_user_string(): e.materialization.metadata
                    for e in result.get_asset_materialization_events()}
    checks = {e.event_specific_data.check_name: e.event_specific_data
              for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    return materialized, checks


@pytest.mark.slow
def test_policy_gate_blocks_batches_the_policy_all_solves_or_all_fails(env, tiny_home):
    """Under the policy estimate, a batch the tiny policy always solves and one it never solves
    fail the blocking difficulty check with what to do, and get no train set; the metadata
    difficulty and a registered estimator, which call every item in band, change nothing. The
    same items under the heuristic estimate pass: the gate's verdict is the policy's."""
    from quality import difficulty
    from storage.lake import Lake

    lake = Lake.at(tiny_home)
    difficulty.register_pass_rate_estimator(lambda domain, rows, k: [0.5] * len(rows), k=4)
    try:
        outcome = {name: _run(env, tiny_home, name, POLICY) for name in RULES}
    finally:
        difficulty.register_pass_rate_estimator(None)

    for name, advice in (("diff_easy", "add harder items"), ("diff_hard", "add easier items")):
        materialized, checks = outcome[name]
        rates = materialized["policy_pass_rates"]
        assert rates["estimate"].value == "policy" and rates["policy"].value == "base-tiny"
        assert (rates["items"].value, rates["computed"].value) == (TRAIN_ROWS, TRAIN_ROWS)
        gate = materialized["gated_samples"]
        assert gate["difficulty_method"].value == "policy_pass_rate"
        assert "policy pass rate of base-tiny over K=4" in gate["difficulty_estimate"].value
        check = checks["difficulty_gate"]
        assert not check.passed and check.severity == dg.AssetCheckSeverity.ERROR, name
        assert advice in check.metadata["what_to_do"].value, check.metadata["what_to_do"].value
        assert checks["format_gate"].passed and checks["selftest_gate"].passed, name  # only difficulty fails
        assert "domain_train_set" not in materialized, name
        mean = gate["mean_pass_rate"].value
        assert (mean > 0.9) if name == "diff_easy" else (mean == 0.0), (name, mean)

    hard_message = outcome["diff_hard"][1]["difficulty_gate"].metadata["what_to_do"].value
    assert "mean pass rate 0.00 < 0.10" in hard_message and "--policy" in hard_message
    stored = lake.read("gate_results", where={"domain": "diff_hard"}).filter(~pl.col("success"))
    assert any("mean pass rate 0.00 < 0.10" in (m or "") for m in stored["message"].to_list())
    # every out-of-band row is kept in the lake, quarantined with its reason
    quarantined = lake.read("ingest", "quarantine", where={"domain": "diff_hard"})
    assert quarantined.filter(pl.col("reasons").list.contains("difficulty_out_of_band")).height == TRAIN_ROWS

    materialized, checks = outcome["diff_mixed"]
    assert not _blocked(checks["difficulty_gate"]), checks["difficulty_gate"].metadata
    measured = lake.read("policy_difficulty", where={"domain": "diff_mixed"})
    in_band = sorted(measured.filter(pl.col("verdict") == "in_band")["id"].to_list())
    assert in_band and measured["samples"].to_list() == [4] * TRAIN_ROWS
    train_set = lake.read("train_set", where={"domain": "diff_mixed"})
    assert sorted(train_set["id"].to_list()) == in_band  # the policy's in-band items, nothing else

    # the same easy items under the heuristic estimate: the gate passes, so the policy failed them
    materialized, checks = _run(env, tiny_home, "diff_easy", {"estimate": "heuristic"}, ingest=False)
    assert checks["difficulty_gate"].passed and "domain_train_set" in materialized
    assert materialized["gated_samples"]["difficulty_estimate"].value.startswith("heuristic")


def _blocked(check) -> bool:
    return not check.passed and check.severity == dg.AssetCheckSeverity.ERROR


def _champion_copy(tiny_home, lake, name: str) -> None:
    """A trained-looking checkpoint: the tiny policy with perturbed weights, registered in MLflow."""
    import torch
    from safetensors.torch import load_file, save_file

    from generation.checkpoints import register_checkpoint

    folder = tiny_home / "checkpoints" / name
    shutil.copytree(tiny_home / "models" / "tiny", folder)
    weights = load_file(folder / "model.safetensors")
    generator = torch.Generator().manual_seed(7)
    weights = {k: (v + 0.5 * v.std() * torch.randn(v.shape, generator=generator).to(v.dtype)) if v.ndim == 2 else v
               for k, v in weights.items()}
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    register_checkpoint(lake, lake.mlflow_uri, checkpoint=name, path=folder, run_id=None, step=1, recipe="tiny",
                        base_model="tiny", domains=[])


@pytest.mark.slow
def test_champion_change_re_measures_pass_rates_and_rejudges_the_train_set(env, tiny_home):
    from evaluation.promotion import PromotionDecision, apply_promotion
    from storage.lake import Lake

    lake = Lake.at(tiny_home)
    sensor = env["pipelines.sensors"].champion_change_sensor
    follows = {k: v for k, v in POLICY.items()}  # no `policy`: the champion, else base-<recipe>
    materialized, checks = _run(env, tiny_home, "diff_mixed", follows)
    assert materialized["policy_pass_rates"]["policy"].value == "base-tiny" and checks["difficulty_gate"].passed
    _run(env, tiny_home, "diff_easy", {"estimate": "heuristic"})  # does not follow the champion
    first_evaluation = materialized["gated_samples"]["evaluation"].value

    with dg.instance_for_test() as instance:
        resources = _resources(tiny_home)
        idle = sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert not idle.run_requests and "unchanged (none)" in idle.skip_reason.skip_message

        _champion_copy(tiny_home, lake, "champ-step000001")
        apply_promotion(lake, lake.mlflow_uri, PromotionDecision("champ-step000001", None, True, "test champion"))
        changed = sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert changed.cursor == "champ-step000001"
        [observation] = changed.asset_events
        assert observation.asset_key == dg.AssetKey("champion")
        assert observation.tags["dagster/data_version"] == "champ-step000001"
        [request] = changed.run_requests  # diff_easy (heuristic) does not depend on the champion
        assert request.partition_key == "diff_mixed" and request.run_key == "difficulty-champ-step000001-diff_mixed"
        assert request.run_config["ops"]["policy_pass_rates"]["config"]["policy"] == ""
        again = sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=changed.cursor))
        assert not again.run_requests
        # observing the source asset itself (the UI's "Observe") gives the same data version
        from dagster._core.definitions.observe import observe

        observed = observe([env["assets.difficulty"].champion], resources=resources, instance=instance)
        assert [e.event_specific_data.asset_observation.tags["dagster/data_version"] for e in observed.all_events
                if e.event_type_value == "ASSET_OBSERVATION"] == ["champ-step000001"]

    # the requested run (difficulty_refresh_job's assets) with the request's config
    materialized, checks = _run(env, tiny_home, "diff_mixed", {}, ingest=False,
                                run_config=json.loads(json.dumps(request.run_config)))
    rates = materialized["policy_pass_rates"]
    assert rates["policy"].value == "champ-step000001" and rates["computed"].value == TRAIN_ROWS
    measured = lake.read("policy_difficulty", where={"domain": "diff_mixed"})
    assert set(measured["checkpoint"]) == {"champ-step000001"} and set(measured["champion"]) == {"champ-step000001"}
    cached = lake.read("pass_rates", where={"domain": "diff_mixed"})
    assert set(cached["checkpoint"]) == {"base-tiny", "champ-step000001"}  # the base's rates stay cached

    # the gate re-judged the batch on the champion's rates, and the train set follows them
    evaluation = materialized["gated_samples"]["evaluation"].value
    assert evaluation != first_evaluation
    judged = lake.read("difficulty", where={"domain": "diff_mixed", "evaluation": evaluation}).sort("id")
    champion_rates = measured.sort("id")
    assert judged["pass_rate"].to_list() == champion_rates["pass_rate"].to_list()
    assert set(judged["policy"]) == {"champ-step000001"}
    if not _blocked(checks["difficulty_gate"]):  # a warning (drift against the base's rates) does not block
        train_set = lake.read("train_set", where={"domain": "diff_mixed"})
        assert sorted(train_set["id"]) == sorted(champion_rates.filter(pl.col("verdict") == "in_band")["id"])
        assert set(train_set["evaluation"]) == {evaluation}
    else:
        assert "domain_train_set" not in materialized
