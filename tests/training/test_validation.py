"""In-loop validation on real GRPO runs of the tiny policy (training.validation, training.forgetting):
a validation score equals a sweep of that step's checkpoint item by item; a scripted forgetting fires
the flag and the recipe's warn / stop / reweight is obeyed; solved items leave the pool and a plateau
re-measures pass rates. Real lake, MLflow and trainer; the domains are test domains whose scorers say
what the truth is (one changes it at a chosen validation, as a policy update that wrecks a domain would)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains import Domain
from domains.registry import Registry
from pipelines.settings import open_lake
from training.config import load_recipe


def _train(config, registry, notes: list[str] | None = None, **options):
    from training.trainer import train

    return train(config, open_lake(), allow_generate=True, registry=registry, progress=False,
                 log=(notes.append if notes is not None else lambda m: None), **options)


def _registry(*domains: Domain) -> Registry:
    registry = Registry()
    registry.add_module(type("M", (), {"DOMAINS": list(domains)}), "test")
    return registry


def _samples(name: str):
    def samples(split, n, seed):
        for i in range(n):
            yield {"id": f"{name}-{split}-{seed}-{i}", "prompt": f"Write something about {i}:", "answer": "x"}
    return samples


def _digit_share(completion: str, sample: dict) -> float:
    text = completion.strip()
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def _text_hash(completion: str, sample: dict) -> float:
    """A score that moves with every character of the completion: equal scores mean equal text."""
    return (sum(ord(c) * (i + 1) for i, c in enumerate(completion)) % 97) / 96


# -- an in-loop score is a sweep of that checkpoint --------------------------------------------------


def test_an_in_loop_validation_equals_a_sweep_of_that_steps_checkpoint_item_by_item(tiny_home, tiny_checkpoint):
    """Step 3's in-loop scores (bf16 rollout copy, synced after the update) and step 0's equal a sweep
    of the step-3 checkpoint and of the starting policy on the same items, same sampling, per item.
    The policy is the wide tiny checkpoint: its greedy completions differ from prompt to prompt."""
    from evaluation.sweep import SweepConfig, engine_factory_for, run_sweep
    from generation.prompts import prompt_format_of_folder

    registry = _registry(Domain(name="texty", owner="t", description="text-sensitive", samples=_samples("texty"),
                                score=_text_hash))
    items, tokens = 12, 12
    config = load_recipe("tiny", policy=str(tiny_checkpoint), domains=["texty"], max_steps=3, run_name="equal",
                         rollout_dtype="bfloat16",
                         validation={"eval_every": 3, "items": items, "max_new_tokens": tokens, "watch": []})
    result = _train(config, registry)
    lake = open_lake()
    state = json.loads((lake.home / "runs" / "equal" / "state.json").read_text())
    in_loop = {0: state["validation"]["start"]["texty"], 3: state["validation"]["latest"]["scores"]["texty"]}
    assert state["validation"]["latest"]["step"] == 3 and len(in_loop[3]) == items

    swept = {}
    for step, name, folder in ((0, "wide-start", tiny_checkpoint),
                               (3, result.checkpoint, lake.checkpoints_dir / result.checkpoint)):
        factory = engine_factory_for(str(folder), lake, backend="torch", dtype="bfloat16")
        sweep = run_sweep(lake, name, [registry.get("texty")], factory,
                          SweepConfig(samples=1, limit=items, max_new_tokens=tokens, progress=False),
                          prompt_format=prompt_format_of_folder(folder))
        rows = sweep.domains[0].items
        swept[step] = dict(zip(rows["item_id"].to_list(), rows["score"].to_list()))
    assert in_loop[0] == swept[0]
    assert in_loop[3] == swept[3]
    assert in_loop[3] != in_loop[0]  # the policy moved: equal to the right checkpoint, not to any
    history = {h["step"]: h["val_score"] for h in result.history if h["domain"] == "texty" and h["val_score"] is not None}
    assert history == pytest.approx({s: sum(v.values()) / items for s, v in swept.items()})


# -- forgetting: a validated domain whose truth changes at a chosen validation -----------------------


def _fading(forget_at: int, recover_at: int | None = None, name: str = "fading") -> Domain:
    """A domain trained on a dense toy reward (the share of digits) whose held-out items score 1 at its
    first validations and 0 from validation ``forget_at`` (1 = step 0) until ``recover_at``: what a
    policy update that wrecks the domain, then a repair, look like to the validation."""
    calls = {"eval": 0}

    def score_many(completions, samples):
        if samples and "-eval-" in samples[0]["id"]:  # one validation: one batch of the domain's held-out items
            calls["eval"] += 1
            lost = calls["eval"] >= forget_at and (recover_at is None or calls["eval"] < recover_at)
            return [0.0 if lost else 1.0 for _ in samples]
        return [_digit_share(c, s) for c, s in zip(completions, samples)]

    return Domain(name=name, owner="t", description="scripted truth on its held-out items", samples=_samples(name),
                  score=_digit_share, score_many=score_many)


def _forgetting_config(mode: str, run_name: str, domains=("fading",), **extra):
    extra.setdefault("max_steps", 8)
    return load_recipe("tiny", domains=list(domains), run_name=run_name,
                       validation={"eval_every": 2, "items": 12, "max_new_tokens": 8, "watch": [], "forgetting": mode,
                                   "max_share": 1.0,  # every scheduled validation, whatever it costs
                                   **extra.pop("validation", {})}, **extra)


def _series(client, run_id: str, metric: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, metric)}


def test_forgetting_warn_flags_the_domain_everywhere_and_trains_on(tiny_home):
    from mlflow.tracking import MlflowClient

    notes: list[str] = []
    result = _train(_forgetting_config("warn", "forget-warn"), _registry(_fading(forget_at=3)), notes)
    assert result.steps_done == 8 and result.stopped is None
    assert set(result.validation["flagged"]) == {"fading"} and result.validation["flagged_ever"] == ["fading"]
    evidence = result.validation["flagged"]["fading"]
    assert (evidence["start"], evidence["score"], evidence["lost"], evidence["gained"], evidence["n"]) == (1.0, 0.0, 12,
                                                                                                          0, 12)
    assert evidence["test"] == "exact McNemar" and evidence["p"] == pytest.approx(0.5 ** 12, rel=1e-5)
    warned = [n for n in notes if n.startswith("WARNING: forgetting")]
    assert warned[0].startswith("WARNING: forgetting at step 4: fading 1.000 -> 0.000 (-1.000")
    assert warned[0].endswith("training on (validation.forgetting: warn)")
    assert [n.split(":")[1] for n in warned] == [" forgetting at step 4", " forgetting (still) at step 6",
                                                 " forgetting (still) at step 8"]

    lake = open_lake()
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "FINISHED" and run.data.tags["assay.forgetting"] == "fading"
    assert json.loads(run.data.tags["assay.forgetting.fading"])["lost"] == 12
    assert _series(client, result.mlflow_run_id, "val/fading") == {0: 1.0, 2: 1.0, 4: 0.0, 6: 0.0, 8: 0.0}
    assert _series(client, result.mlflow_run_id, "forgetting/fading") == {2: 0.0, 4: 1.0, 6: 1.0, 8: 1.0}
    history = (lake.read("training_history").filter(pl.col("run_id") == result.mlflow_run_id)
               .filter(pl.col("val_score").is_not_null()).sort("step"))
    assert history.select("step", "val_score", "forgetting").rows() == [
        (0, 1.0, None), (2, 1.0, 0.0), (4, 0.0, 1.0), (6, 0.0, 1.0), (8, 0.0, 1.0)]
    assert history.filter(pl.col("step") == 4)["val_q"].item() == pytest.approx(0.5 ** 12)
    overall = lake.read("training_history").filter((pl.col("run_id") == result.mlflow_run_id) & (pl.col("domain") == "_all"))
    assert overall.filter(pl.col("step").is_in([1, 2, 4]))["validation_s"].is_not_null().all()  # 1: step 0's
    assert overall.filter(pl.col("step").is_in([3, 5]))["validation_s"].is_null().all()
    saved = json.loads((lake.checkpoints_dir / result.checkpoint / "assay_validation.json").read_text())
    assert saved["checkpoint_step"] == 8 and saved["step"] == 8 and set(saved["flagged"]) == {"fading"}


def test_forgetting_stop_ends_the_run_with_that_steps_checkpoint_and_a_rerun_under_warn_trains_on(tiny_home):
    from mlflow.tracking import MlflowClient

    registry = _registry(_fading(forget_at=3))
    notes: list[str] = []
    result = _train(_forgetting_config("stop", "forget-stop"), registry, notes)
    assert result.steps_done == 4 and result.checkpoint.endswith("step000004")
    assert result.stopped["reason"] == "forgetting" and result.stopped["domains"] == ["fading"]
    assert result.stopped["evidence"]["fading"]["delta"] == -1.0
    assert any(n.startswith("stopped after step 4 (validation.forgetting: stop)") for n in notes), notes
    client = MlflowClient(tracking_uri=open_lake().mlflow_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.info.status == "KILLED" and run.data.tags["assay.stopped"] == "forgetting"
    assert "forgetting: fading 1.000 -> 0.000" in run.data.tags["assay.stop_reason"]

    again: list[str] = []
    rerun = _train(_forgetting_config("stop", "forget-stop"), registry, again)
    assert rerun.steps_done == 4 and rerun.stopped == result.stopped
    assert any("stopped after step 4 for forgetting" in n and "`validation.forgetting: warn`" in n for n in again)
    resumed = _train(_forgetting_config("warn", "forget-stop"), registry, again)  # same run: watching is no identity
    assert resumed.mlflow_run_id == result.mlflow_run_id and resumed.steps_done == 8 and resumed.stopped is None
    assert client.get_run(result.mlflow_run_id).info.status == "FINISHED"


def test_forgetting_reweight_raises_the_domains_share_bounded_until_it_recovers(tiny_home):
    from training.mixture import DomainMixture

    steady = Domain(name="steady", owner="t", description="dense toy", samples=_samples("steady"), score=_digit_share)
    notes: list[str] = []
    config = _forgetting_config("reweight", "forget-reweight", domains=("fading", "steady"), max_steps=10,
                                mixture={"strategy": "uniform"},
                                validation={"reweight_factor": 2.0, "reweight_max": 3.0})
    result = _train(config, _registry(_fading(forget_at=3, recover_at=5), steady), notes)
    assert result.steps_done == 10 and result.validation["flagged"] == {}  # recovered at step 8
    assert result.validation["flagged_ever"] == ["fading"]
    assert any(n.startswith("WARNING: forgetting at step 4") and "its mixture weight x2 until it recovers" in n
               for n in notes), notes
    assert any(n.startswith("WARNING: forgetting (still) at step 6") and "x3 until" in n for n in notes)  # bounded
    assert any(n.startswith("validation: fading recovered at step 8") for n in notes)
    state = json.loads((open_lake().home / "runs" / "forget-reweight" / "state.json").read_text())
    assert state["sampler"]["boosts"] == [[4, {"fading": 2.0}], [6, {"fading": 3.0}], [8, {}]]
    mixture = DomainMixture({"fading": [{}] * 4, "steady": [{}] * 4}, config.mixture, config.seed)
    mixture.load_state_dict(state["sampler"])
    shares = [mixture.probabilities_at(step)["fading"] for step in (3, 4, 5, 6, 7, 8, 9)]
    assert shares == pytest.approx([0.5, 2 / 3, 2 / 3, 0.75, 0.75, 0.5, 0.5])
    assert config.fingerprint() != _forgetting_config("warn", "x", domains=("fading", "steady"), max_steps=10,
                                                      mixture={"strategy": "uniform"}).fingerprint()


# -- curriculum: solved items leave the pool, a plateau re-measures ----------------------------------


def _curriculum_domain(flip_at: int, batches: list[list[str]]) -> Domain:
    """Train items of known difficulty (kind by index: always, never, coin: passes on an even-length
    completion); held-out items score 0.5 at every validation (a plateau). From validation ``flip_at``
    (1 = step 0) the 'always' items fail: the policy has lost what it solved. ``batches`` records the
    train item ids of every scoring call."""
    calls = {"eval": 0}
    kinds = ("always", "never", "coin")

    def samples(split, n, seed):
        for i in range(n):
            yield {"id": f"curric-{split}-{i:03d}", "prompt": f"Say something {i}:", "answer": "x",
                   "metadata": {"kind": kinds[i % 3]}}

    def score(completion, sample):
        kind = sample["metadata"]["kind"]
        if kind == "always":
            return 0.0 if calls["eval"] >= flip_at else 1.0
        return 1.0 if kind == "coin" and len(completion) % 2 == 0 else 0.0

    def score_many(completions, samples_):
        if samples_ and "-eval-" in samples_[0]["id"]:
            calls["eval"] += 1
            return [0.5] * len(samples_)
        batches.append([s["id"] for s in samples_])
        return [score(c, s) for c, s in zip(completions, samples_)]

    return Domain(name="curric", owner="t", description="items of known difficulty", samples=samples, score=score,
                  score_many=score_many)


def test_solved_items_leave_the_pool_and_a_plateau_re_measures_pass_rates(tiny_home):
    from mlflow.tracking import MlflowClient

    from assets.learnability_rates import measure_for_training

    batches: list[list[str]] = []
    registry = _registry(_curriculum_domain(flip_at=3, batches=batches))
    config = load_recipe("tiny", domains=["curric"], max_steps=4, run_name="curriculum", train_samples_per_domain=30,
                         num_generations=8, prompts_per_step=3, max_completion_length=8,
                         mixture={"items": "learnability", "retire_solved": True},
                         validation={"eval_every": 1, "items": 6, "watch": [], "replateau_steps": 2})
    lake = open_lake(write=True)
    measure_for_training(lake, lake.mlflow_uri, config, registry=registry, allow_generate=True, backend="torch",
                         progress=False)
    batches.clear()  # what training scores from here on: rollouts, then the re-measure
    notes: list[str] = []
    result = _train(config, registry, notes)

    always = {f"curric-train-{i:03d}" for i in range(0, 30, 3)}
    remeasure_at = next(i for i, batch in enumerate(batches) if len(batch) == 30 * 8)
    assert sorted(set(batches[remeasure_at])) == sorted(f"curric-train-{i:03d}" for i in range(30))
    drawn_before = {item for batch in batches[:remeasure_at] for item in batch}
    assert drawn_before and not drawn_before & always  # retired as solved: never drawn while retired

    first = result.validation["remeasures"][0]
    assert (first["step"], first["items"], first["solved_before"], first["solved_after"]) == (2, 30, 10, 0)
    assert first["mean_after"] < first["mean_before"] and first["moved"] >= 10  # the 'always' items fell to 0
    line = next(n for n in notes if n.startswith("curriculum: curric's validation set no new best for 2 steps"))
    assert "re-measured its 30 train items' pass rates on the policy at step 2 (K=8)" in line
    assert "solved (out of the pool) 10 -> 0" in line
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    solved = _series(client, result.mlflow_run_id, "solved/curric")
    assert solved[1] == 10.0 and solved[2] == 0.0
    overall = {h["step"]: h for h in result.history if h["domain"] == "_all"}
    assert overall[2]["remeasure_s"] > 0 and overall[1]["remeasure_s"] is None
    state = json.loads((lake.home / "runs" / "curriculum" / "state.json").read_text())
    passes = state["sampler"]["estimates"]["passes"]["curric"]
    assert all(passes[i] < 0.5 for i in range(0, 30, 3))  # the re-measure replaced their evidence


# -- the pure pieces ----------------------------------------------------------------------------------


def test_judge_flags_only_significant_drops_after_bh_and_never_gains():
    from training.forgetting import judge

    start = {"a": {str(i): 1.0 for i in range(12)}, "b": {str(i): 0.0 for i in range(12)},
             "c": {str(i): 1.0 for i in range(12)}}
    now = {"a": {str(i): 0.0 for i in range(12)},              # 12 lost: p = 2^-12
           "b": {str(i): 1.0 for i in range(12)},              # 12 gained: never a flag
           "c": {str(i): 0.0 if i < 3 else 1.0 for i in range(12)}}  # 3 lost: p = 1/8, q over 3 domains
    results = {r.domain: r for r in judge(4, start, now, {"a", "b"}, q_level=0.05)}
    assert results["a"].flagged and results["a"].p == pytest.approx(0.5 ** 12) and results["a"].trained
    assert results["a"].q == pytest.approx(3 * 0.5 ** 12)  # BH: the smallest of 3 p-values times 3
    assert not results["b"].flagged and results["b"].delta == 1.0 and results["b"].p == 1.0
    assert not results["c"].flagged and results["c"].p == pytest.approx(0.125) and not results["c"].trained
    assert "FORGETTING" in results["a"].describe() and "12 items lost" in results["a"].describe()
    assert json.loads(json.dumps(results["a"].evidence())) == results["a"].evidence()
    [baseline] = judge(0, start, {"a": start["a"]}, {"a"}, q_level=0.05)  # step 0: a score, no test
    assert baseline.q is None and not baseline.flagged and "step-0 baseline" in baseline.describe()


def test_boosts_grow_while_flagged_stay_bounded_and_skip_watched_domains():
    from training.forgetting import DomainValidation, next_boosts

    def flagged(domain, trained=True):
        return DomainValidation(domain, 4, 0.1, 12, trained, start=0.9, delta=-0.8, q=0.001, flagged=True)

    results = [flagged("a"), flagged("watched", trained=False), DomainValidation("b", 4, 0.5, 12, True)]
    assert next_boosts({}, results, factor=2, cap=3) == {"a": 2.0}
    assert next_boosts({"a": 2.0, "b": 2.0}, results, factor=2, cap=3) == {"a": 3.0}  # capped; b recovered
    with pytest.raises(ValueError):
        next_boosts({}, results, factor=1, cap=3)


def test_a_plateau_counts_from_the_last_best_or_re_measure():
    from training.forgetting import plateaued

    record = {"best": 0.5, "since": 0}
    assert not plateaued(record, 2, 0.5, 4) and not plateaued(record, 3, 0.4, 4)
    assert plateaued(record, 4, 0.5, 4)
    record["since"] = 4  # re-measured
    assert not plateaued(record, 6, 0.5, 4) and not plateaued(record, 7, 0.6, 4) and record["since"] == 7
    assert not plateaued({"best": 0.5, "since": 0}, 100, 0.5, 0)  # 0: never


def test_mixture_boosts_change_only_later_draws_and_replay_after_a_resume():
    from training.config import MixtureConfig
    from training.mixture import DomainMixture

    rows = {d: [{"id": f"{d}{i}"} for i in range(5)] for d in ("a", "b", "c")}
    config = MixtureConfig(strategy="uniform")

    def draws(mixture, steps):
        return [[p.row["id"] for p in mixture.draw(s, 4)] for s in steps]

    plain = DomainMixture(rows, config, seed=7)
    boosted = DomainMixture(rows, config, seed=7)
    before = draws(boosted, range(10))
    boosted.boost(10, {"b": 4.0})
    after = draws(boosted, range(10, 60))
    assert before == draws(plain, range(10))  # earlier steps are what they were
    assert sum(i.startswith("b") for step in after for i in step) > 0.5 * 4 * 50  # p(b) = 4/6 from step 10
    boosted.boost(60, {})
    assert boosted.probabilities_at(60) == plain.probabilities and boosted.probabilities_at(30)["b"] == pytest.approx(4 / 6)

    tail = draws(boosted, range(60, 80))
    resumed = DomainMixture(rows, config, seed=7)  # a resumed run: the saved schedule, replayed from step 0
    resumed.load_state_dict(boosted.state_dict())
    assert draws(resumed, range(40, 80)) == after[30:] + tail


def test_retired_items_are_never_drawn_until_a_re_measure_brings_them_back():
    from training.config import MixtureConfig
    from training.learnability import PassRateTracker
    from training.mixture import DomainMixture

    rows = {"a": [{"id": f"a{i}"} for i in range(6)]}
    tracker = PassRateTracker({"a": [1.0, 1.0, 0.5, 0.5, 0.0, 0.3]}, 8, floor=0.01, solved_at=0.95)
    mixture = DomainMixture(rows, MixtureConfig(items="learnability", retire_solved=True), seed=0, pass_rates=tracker)
    drawn = {p.row["id"] for s in range(400) for p in mixture.draw(s, 1)}
    assert drawn.isdisjoint({"a0", "a1"}) and {"a2", "a3", "a5"} <= drawn
    assert tracker.summary()["a"]["solved"] == 2.0 and tracker.weight("a", 0) == 0.0
    tracker.reset("a", 0, 2, 8)  # measured again: it fails now
    assert not tracker.solved("a", 0) and tracker.learnable("a", 0)
    assert "a0" in {p.row["id"] for s in range(400, 800) for p in mixture.draw(s, 1)}


def test_the_recipe_refuses_validation_settings_that_cannot_work_and_says_how_to_fix_them():
    from training.config import RecipeError

    with pytest.raises(RecipeError, match="replateau_steps re-measures per-item pass rates.*mixture.items: learnability"):
        load_recipe("tiny", validation={"replateau_steps": 5})
    with pytest.raises(RecipeError, match="retire_solved needs per-item pass rates"):
        load_recipe("tiny", mixture={"retire_solved": True})
    with pytest.raises(RecipeError, match="eval_every is 0.*forgetting 'stop'"):
        load_recipe("tiny", validation={"eval_every": 0, "forgetting": "stop"})
    with pytest.raises(RecipeError, match="reweight_max .* must be >= validation.reweight_factor"):
        load_recipe("tiny", validation={"reweight_factor": 3, "reweight_max": 2})
    with pytest.raises(RecipeError, match="forgetting"):
        load_recipe("tiny", validation={"forgetting": "panic"})
    assert load_recipe("tiny", max_steps=45).validation.every(45) == 5  # unset: a tenth of the run, rounded up
    assert load_recipe("tiny", validation={"eval_every": 0}).validation.every(20) == 0
    # watching is not the run's identity; feeding back into training is
    tiny = load_recipe("tiny")
    assert load_recipe("tiny", validation={"eval_every": 3, "forgetting": "stop"}).fingerprint() == tiny.fingerprint()
    assert load_recipe("tiny", validation={"forgetting": "reweight"}).fingerprint() != tiny.fingerprint()


def test_an_unknown_watched_domain_is_refused_before_training(tiny_home):
    from domains import UnknownDomainError

    registry = _registry(Domain(name="steady", owner="t", description="d", samples=_samples("steady"),
                                score=_digit_share))
    with pytest.raises(UnknownDomainError, match="unknown domain 'nope'"):
        _train(load_recipe("tiny", domains=["steady"], max_steps=1, run_name="w", validation={"watch": ["nope"]}),
               registry)


def test_validations_are_skipped_while_they_cost_more_than_their_share_and_the_last_one_runs(tiny_home):
    """A slow verifier (0.4 s per validation of its held-out items, as a sandboxed one can be): scheduled
    every step, the validations would take most of the run; with validation.max_share 0.15 the trainer
    skips the ones over budget, says so, and still validates the last step."""
    import time

    def score_many(completions, samples):
        if samples and "-eval-" in samples[0]["id"]:
            time.sleep(0.4)
        return [_digit_share(c, s) for c, s in zip(completions, samples)]

    slow = Domain(name="slow", owner="t", description="a slow verifier", samples=_samples("slow"), score=_digit_share,
                  score_many=score_many)
    notes: list[str] = []
    steps = 12
    result = _train(load_recipe("tiny", domains=["slow"], max_steps=steps, run_name="budget",
                                validation={"eval_every": 1, "items": 8, "watch": [], "max_share": 0.15}),
                    _registry(slow), notes)
    validated = [h["step"] for h in result.history if h["domain"] == "slow" and h["val_score"] is not None]
    assert validated[0] == 0 and validated[-1] == steps and len(validated) < steps + 1, validated
    skipped = [n for n in notes if n.startswith("validation at step") and " skipped: " in n]
    assert skipped and "validation.max_share 0.15" in skipped[0], notes
    overall = [h for h in result.history if h["domain"] == "_all"]
    spent = [h["validation_s"] or 0.0 for h in overall]
    stepped = [h["step_s"] for h in overall]
    total = sum(spent) + sum(stepped)
    # within budget, up to the validation that crossed it and the last one, which always runs
    assert sum(spent) / total <= 0.15 + 2 * max(spent) / total, (spent, stepped)
    assert result.validation["step"] == steps
