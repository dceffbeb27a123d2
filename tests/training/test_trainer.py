"""GRPO on the tiny policy: it learns a dense toy reward, tracks everything, and resumes exactly."""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains import Domain
from domains.registry import Registry
from pipelines.settings import open_lake
from training.config import load_recipe


def _toy_samples(split, n, seed):
    for i in range(n):
        yield {"id": f"toy-{split}-{seed}-{i}", "prompt": f"Write digits {i}:", "answer": "0"}


def _digit_share(completion: str, sample: dict) -> float:
    """Dense reward: the share of characters that are digits (a random model writes few)."""
    text = completion.strip()
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


@pytest.fixture
def toy_registry() -> Registry:
    registry = Registry()
    registry.add_module(type("M", (), {"DOMAIN": Domain(
        name="toy_digits", owner="tests", description="dense toy reward", samples=_toy_samples,
        score=_digit_share)}), "test")
    return registry


def _train(config, registry, **options):
    from training.trainer import train

    return train(config, open_lake(), allow_generate=True, registry=registry, progress=False,
                 log=lambda m: None, **options)


def test_tiny_recipe_learns_the_toy_domain_and_tracks_it(tiny_home, toy_registry):
    config = load_recipe("tiny", domains=["toy_digits"], max_steps=30, run_name="learn")
    result = _train(config, toy_registry)
    rewards = [h["reward_mean"] for h in result.history if h["domain"] == "toy_digits" and h["step"] > 0]
    assert len(rewards) == 30
    first, last = sum(rewards[:5]) / 5, sum(rewards[-5:]) / 5
    print(f"toy reward: steps 1-5 {first:.3f} -> steps 26-30 {last:.3f}; curve {[round(r, 3) for r in rewards]}")
    assert last > first + 0.15 and last > 2 * first, f"reward did not rise: {first:.3f} -> {last:.3f}"
    overall = [h for h in result.history if h["domain"] == "_all"]
    assert all(h["kl"] is None or h["kl"] >= 0 for h in overall)
    assert max(h["kl"] or 0 for h in overall) > 0  # the policy moved away from the reference

    # MLflow: one run with the resolved config as params and per-domain step metrics.
    from mlflow.tracking import MlflowClient

    lake = open_lake()
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.data.params["beta"] == str(config.beta) and run.data.params["loss_type"] == "grpo"
    assert run.data.params["device"] == "auto" and run.data.params["device.resolved"] == "cpu"  # where it ran
    assert run.info.status == "FINISHED"
    series = client.get_metric_history(result.mlflow_run_id, "reward_mean/toy_digits")
    assert [m.step for m in series] == list(range(1, 31))
    for name in ("kl", "loss", "clip_frac", "entropy", "zero_var_frac", "tokens_per_s", "accuracy", "reward_std"):
        assert client.get_metric_history(result.mlflow_run_id, f"{name}/toy_digits") or name == "kl"

    # Lake: training_history (per step and domain) and the checkpoint row; the HF folder loads.
    history = lake.read("training_history")  # and the step-0 validation's row (training.validation)
    assert set(history["domain"].unique()) == {"toy_digits", "_all"} and history.height == 61
    assert history.filter(pl.col("step") == 0)["domain"].to_list() == ["toy_digits"]
    assert history["run_id"].unique().to_list() == [result.mlflow_run_id]
    ckpt = lake.read("checkpoints")
    assert ckpt["checkpoint"].to_list() == ["learn-step000030"] == [result.checkpoint]
    meta = json.loads((lake.checkpoints_dir / result.checkpoint / "assay_checkpoint.json").read_text())
    assert meta["run_id"] == result.mlflow_run_id and meta["step"] == 30 and meta["domains"] == ["toy_digits"]
    models = client.search_logged_models([run.info.experiment_id])
    assert [m.name for m in models] == [result.checkpoint]
    assert models[0].source_run_id == result.mlflow_run_id and models[0].tags["assay.checkpoint"] == result.checkpoint
    versions = client.search_model_versions("name='assay-policy'")
    assert [v.tags["checkpoint"] for v in versions] == [result.checkpoint]

    from generation.contract import SamplingParams
    from generation.factory import make_engine

    engine = make_engine(result.checkpoint, dtype="float32")
    out = engine.generate(["Write digits 3:"], SamplingParams(max_new_tokens=8, temperature=1.0, n=8, seed=0))
    assert sum(_digit_share(g.text, {}) for g in out[0]) / 8 > first


def _weights(path):
    from safetensors.torch import load_file

    return load_file(str(path / "model.safetensors"))


def test_resume_after_stop_reproduces_the_uninterrupted_run(tiny_home, toy_registry):
    import torch

    base = dict(domains=["toy_digits"], max_steps=4, save_steps=2)
    straight = _train(load_recipe("tiny", run_name="straight", **base), toy_registry)
    assert straight.resumed_from == 0 and straight.steps_done == 4

    interrupted_cfg = load_recipe("tiny", run_name="interrupted", **base)
    cut = _train(interrupted_cfg, toy_registry, stop_after=3)  # dies after step 3; last save: step 2
    assert cut.steps_done == 3
    resumed = _train(interrupted_cfg, toy_registry)
    assert resumed.resumed_from == 2 and resumed.steps_done == 4
    assert [h["step"] for h in resumed.history if h["domain"] == "_all"] == [1, 2, 3, 4]
    a = _weights(open_lake().checkpoints_dir / straight.checkpoint)
    b = _weights(open_lake().checkpoints_dir / resumed.checkpoint)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ: optimizer state was not restored"
    rewards = lambda r: [h["reward_mean"] for h in r.history if h["domain"] == "_all"]  # noqa: E731
    assert rewards(straight) == rewards(resumed)

    again = _train(interrupted_cfg, toy_registry)  # finished: nothing left to do
    assert again.steps_done == 4 and again.checkpoint == resumed.checkpoint and again.resumed_from == 4


def test_zero3_on_one_process_takes_the_same_steps_as_zero0(tiny_home, toy_registry):
    """Under ZeRO-3 rollouts sample from a full copy of the policy, loaded from the shards before
    every step (see test_zero3_ranks.py for why). The rewards of steps 2-3 come from rollouts of
    the updated weights, so a copy that missed a sync shows here (checked: skipping the ZeRO-3 sync
    moves them by ~0.009), and the update must be ZeRO-0's."""
    import torch

    settings = dict(domains=["toy_digits"], max_steps=3, num_iterations=2, prompts_per_step=2,
                    deepspeed={"gradient_accumulation_steps": 2})
    runs = {stage: _train(load_recipe("tiny", run_name=f"zero{stage}", **{**settings, "deepspeed": {
        **settings["deepspeed"], "zero_stage": stage}}), toy_registry) for stage in (0, 3)}
    rewards = {stage: [h["reward_mean"] for h in run.history if h["domain"] == "_all"] for stage, run in runs.items()}
    assert rewards[3] == pytest.approx(rewards[0], abs=1e-6) and len(rewards[3]) == 3
    base = _weights(open_lake().home / "models" / "tiny")
    zero0, zero3 = (_weights(open_lake().checkpoints_dir / runs[stage].checkpoint) for stage in (0, 3))
    update = sum(float(((zero0[k] - base[k]) ** 2).sum()) for k in base) ** 0.5
    gap = sum(float(((zero3[k] - zero0[k]) ** 2).sum()) for k in base) ** 0.5
    assert update > 0.1 and gap < 1e-3 * update, (update, gap)
    assert all(zero3[k].dtype == torch.float32 for k in zero3)


def test_zero_variance_groups_are_counted_and_skipped(tiny_home):
    registry = Registry()
    registry.add_module(type("M", (), {"DOMAIN": Domain(
        name="flat", owner="t", description="constant reward", samples=_toy_samples,
        score=lambda c, s: 0.5)}), "test")
    result = _train(load_recipe("tiny", domains=["flat"], max_steps=2, run_name="flat"), registry)
    for row in result.history[1:]:  # after the step-0 validation's row
        assert row["zero_var_frac"] == 1.0 and row["loss"] is None and row["kl"] is None
    # TRL's definition: they stay in the update with advantage 0; only their KL term remains, and
    # the policy starts at the reference, so loss and KL are exactly 0 (and reported, not None)
    kept = _train(load_recipe("tiny", domains=["flat"], max_steps=2, run_name="flat-kept",
                              skip_zero_variance_groups=False), registry)
    for row in kept.history[1:]:
        assert row["zero_var_frac"] == 1.0 and row["loss"] == 0.0 and row["kl"] == 0.0


def test_a_changed_config_under_the_same_run_name_is_refused(tiny_home, toy_registry):
    _train(load_recipe("tiny", domains=["toy_digits"], max_steps=1, run_name="same"), toy_registry)
    with pytest.raises(ValueError, match="different config"):
        _train(load_recipe("tiny", domains=["toy_digits"], max_steps=1, seed=5, run_name="same"), toy_registry)


def test_time_budget_stops_with_a_checkpoint_and_more_steps_continue(tiny_home, toy_registry):
    config = load_recipe("tiny", domains=["toy_digits"], max_steps=3, run_name="budget")
    stopped = _train(config, toy_registry, time_budget_s=0.0)
    assert stopped.steps_done == 1 and stopped.checkpoint == "budget-step000001"
    more = _train(load_recipe("tiny", domains=["toy_digits"], max_steps=3, run_name="budget"), toy_registry)
    assert more.resumed_from == 1 and more.steps_done == 3 and more.checkpoint == "budget-step000003"


def test_trainer_logprobs_are_those_of_the_sampling_temperature(tiny_home):
    """The trainer's recomputed log-probs (and entropies) of sampled tokens are the sampler's: at
    temperature T the rollouts come from softmax(logits / T), and so must the ratios and the KL."""
    import contextlib

    import torch

    from generation.contract import SamplingParams
    from generation.torch_engine import decode_batch
    from generation.policy import load_policy
    from training.trainer import Rollout, build_batch, completion_logprobs

    model, tok = load_policy("tiny", dtype="float32", home=tiny_home)
    model.eval()
    prompts = [tok(p, add_special_tokens=False).input_ids for p in ("Write digits 1:", "What is 2 + 3? Say it")]
    for temperature in (0.5, 1.7):
        params = SamplingParams(max_new_tokens=12, temperature=temperature, n=3)
        with torch.inference_mode():
            decoded = decode_batch(model, tok, prompts, params, seeds=[[1, 2, 3], [4, 5, 6]], with_logprobs=True)
        rows = [(prompts[i], r) for i, per in enumerate(decoded) for r in per]
        rollouts = [Rollout("d", {}, p, r.completion_ids, r.text, r.finish_reason) for p, r in rows]
        ids, attn, pos, mask, width_c = build_batch(rollouts, tok.pad_token_id, mask_truncated=False)
        with torch.no_grad():
            logp, entropy = completion_logprobs(model, ids, attn, pos, width_c, autocast=contextlib.nullcontext,
                                                temperature=temperature, with_entropy=True)
            raw, _ = completion_logprobs(model, ids, attn, pos, width_c, autocast=contextlib.nullcontext,
                                         temperature=1.0)
        worst_raw = 0.0
        for i, (prompt, row) in enumerate(rows):
            n = len(row.completion_ids)
            sampler = torch.tensor(row.logprobs)
            assert torch.allclose(logp[i, :n], sampler, atol=1e-4), (temperature, i, logp[i, :n], sampler)
            worst_raw = max(worst_raw, float((raw[i, :n] - sampler).abs().max()))
            # entropy of softmax(logits / T), from an unpadded forward of this one sequence
            with torch.no_grad():
                full = model(input_ids=torch.tensor([prompt + row.completion_ids])).logits[0, len(prompt) - 1:-1]
            probs = (full / temperature).softmax(-1)
            expected = -(probs * probs.clamp_min(1e-30).log()).sum(-1)
            assert torch.allclose(entropy[i, :n], expected, atol=1e-4)
        assert worst_raw > 0.05, "the raw logits (temperature 1) should describe another distribution"


def _hand_rollouts(tok, g: int, rewards: list[float]):
    import torch

    from training.trainer import Rollout

    gen = torch.Generator().manual_seed(3)
    prompts = ["Write digits 1:", "What is 2 + 3? Say it in words", "Hi"]
    rollouts = []
    for index, reward in enumerate(rewards):
        group = index // g
        length = int(torch.randint(1, 9, (1,), generator=gen))
        completion = torch.randint(3, len(tok), (length,), generator=gen).tolist()
        r = Rollout("d", {}, tok(prompts[group], add_special_tokens=False).input_ids, completion, "", "stop",
                    reward=reward, group=group)
        rollouts.append(r)
    return rollouts


def exact_update_rig(config, home):
    """What a float64 check of one real update needs: the tiny policy in a DeepSpeed engine, a
    trainer bound to it, a reference that differs from the policy (seeded noise), float64 copies
    of both, and the gradient each parameter accumulates (filled by the update)."""
    import copy

    import torch

    from training.engine import build_engine, setup_distributed
    from generation.policy import load_policy
    from training.trainer import GRPOTrainer

    model, tok = load_policy("tiny", dtype="float32", home=home)
    torch.manual_seed(0)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model64, ref64 = copy.deepcopy(model).double(), copy.deepcopy(ref).double()
    model.config.use_cache = False
    rank, world = setup_distributed()
    engine = build_engine(model, config, world)
    trainer = GRPOTrainer(config, open_lake(), open_lake().mlflow_uri)
    trainer.rank, trainer.world, trainer.tokenizer = rank, world, tok
    grads = {}
    for name, p in engine.module.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, name=name: grads.__setitem__(name, p.grad.detach().clone()))
    return engine, trainer, tok, ref, model64, ref64, grads


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("skip", [False, True])
def test_step_loss_and_gradient_match_trl_formula_in_float64(tiny_home, loss_type, skip):
    """One real update (tiny policy, DeepSpeed engine, 2 micro-batches, temperature 0.7, a reference
    that differs from the policy): the step's loss and gradient equal TRL's formula in float64 over
    the whole batch (skip off: the zero-variance group's KL and its share of the normaliser
    included), or over the kept groups only (skip on)."""
    import contextlib

    import torch

    g, temperature, beta = 4, 0.7, 0.1
    config = load_recipe("tiny", loss_type=loss_type, skip_zero_variance_groups=skip, temperature=temperature,
                         beta=beta, prompts_per_step=3, num_generations=g, max_completion_length=8,
                         max_grad_norm=0.0, deepspeed={"gradient_accumulation_steps": 2}, run_name="exact")
    engine, trainer, tok, ref, model64, ref64, grads = exact_update_rig(config, tiny_home)

    rewards = [1.0, 0.0, 0.5, 0.0, 0.3, 0.3, 0.3, 0.3, 0.2, 0.9, 0.9, 0.1]  # group 1 has no variance
    rollouts = _hand_rollouts(tok, g, rewards)
    zero_var, loss = trainer._learn(rollouts, engine, ref, contextlib.nullcontext)
    assert zero_var == [False, True, False]

    # float64 reference: TRL's _compute_loss, one unpadded sequence at a time
    def reference(rows):
        adv = {}
        for group in range(3):
            r = torch.tensor(rewards[group * g:(group + 1) * g], dtype=torch.float64)
            a = (r - r.mean()) / (r.std() + 1e-4)
            adv.update({group * g + j: a[j] for j in range(g)})
        model64.zero_grad()
        seq_sums, lengths = [], []
        for i in rows:
            x = torch.tensor([rollouts[i].prompt_ids + rollouts[i].completion_ids])
            start, target = len(rollouts[i].prompt_ids) - 1, torch.tensor(rollouts[i].completion_ids)
            logp = (model64(input_ids=x).logits[0, start:-1] / temperature).log_softmax(-1)[range(len(target)), target]
            with torch.no_grad():
                ref_logp = (ref64(input_ids=x).logits[0, start:-1] / temperature).log_softmax(-1)[
                    range(len(target)), target]
            ratio = torch.exp(logp - logp.detach())
            clipped = torch.clamp(ratio, 1 - config.epsilon, 1 + config.epsilon)
            per_token = -torch.min(ratio * adv[i], clipped * adv[i])
            per_token = per_token + beta * (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1)
            seq_sums.append(per_token.sum())
            lengths.append(len(target))
        if loss_type == "grpo":
            total = sum(s / n for s, n in zip(seq_sums, lengths)) / len(rows)
        elif loss_type == "dr_grpo":
            total = sum(seq_sums) / (len(rows) * config.max_completion_length)
        else:
            total = sum(seq_sums) / sum(lengths)
        total.backward()
        return float(total.detach()), {n: p.grad.clone() for n, p in model64.named_parameters()}

    whole = list(range(12))
    kept = [i for i in whole if i // g != 1]
    expected_loss, expected_grads = reference(kept if skip else whole)
    assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-7)
    assert grads.keys() == expected_grads.keys()
    flat = torch.cat([grads[n].flatten().double() for n in sorted(grads)])
    flat_ref = torch.cat([expected_grads[n].flatten() for n in sorted(grads)])
    assert float((flat - flat_ref).norm() / flat_ref.norm()) < 1e-4
    # the other choice gives another loss: the test can tell them apart
    other_loss, _ = reference(whole if skip else kept)
    assert abs(other_loss - expected_loss) > 1e-3 * abs(expected_loss) + 1e-6


def test_an_explicit_run_name_on_other_rows_is_refused_and_the_default_name_follows_the_rows(tiny_home, toy_registry):
    from tests.training.test_data import write_gate_result, write_train_set

    first = _train(load_recipe("tiny", domains=["toy_digits"], max_steps=1, run_name="pinned"), toy_registry)
    assert first.data_sources == {"toy_digits": "generated"}

    lake = open_lake()  # gated rows arrive for the domain
    write_gate_result(lake, "toy_digits", "e1", "2026-01-01T00:00:01.000000+00:00")
    write_train_set(lake, "toy_digits", "e1", [(f"t{i}", f"Write digits {i}:", "0") for i in range(6)])
    with pytest.raises(ValueError, match="trained on other rows"):
        _train(load_recipe("tiny", domains=["toy_digits"], max_steps=1, run_name="pinned"), toy_registry)
    state = json.loads((open_lake().home / "runs" / "pinned" / "state.json").read_text())
    assert state["data_fingerprint"] == first.data_fingerprint and len(first.data_fingerprint) == 16

    unnamed = load_recipe("tiny", domains=["toy_digits"], max_steps=1)
    result = _train(unnamed, toy_registry)
    assert result.run_name == f"{unnamed.resolved_run_name()}-{result.data_fingerprint[:8]}"
    assert result.data_fingerprint != first.data_fingerprint and result.data["toy_digits"]["rows"] == 6
    assert _train(unnamed, toy_registry).checkpoint == result.checkpoint  # same rows: the same, finished run


def test_a_step_scores_each_domains_rollouts_in_one_batch_call_through_the_code_domains_pool(tiny_home, toy_registry):
    """GRPO scores a step's rollouts with one ``safe_score_many`` call per domain: the registered
    code domain's ``score_many`` (its sandbox pool) gets every code rollout of the step at once,
    and a domain without one has ``score`` mapped over its rollouts."""
    import dataclasses
    import shutil

    from domains import get_registry

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (`make install`)")
    code = get_registry().get("code")
    batches, singles = [], []

    def counted_many(completions, samples):
        scores = code.score_many(completions, samples)
        batches.append((len(completions), scores))
        return scores

    def counted_one(completion, sample):
        singles.append(sample["id"])
        return code.score(completion, sample)

    toy_calls = []
    toy = toy_registry.get("toy_digits")
    registry = Registry()
    registry.add_module(type("M", (), {"DOMAINS": [
        dataclasses.replace(code, name="code_counted", score=counted_one, score_many=counted_many),
        dataclasses.replace(toy, score=lambda c, s: toy_calls.append(s["id"]) or _digit_share(c, s))]}), "test")
    config = load_recipe("tiny", domains=["code_counted", "toy_digits"], max_steps=2, run_name="batched",
                         train_samples_per_domain=8, mixture={"strategy": "uniform"},
                         validation={"eval_every": 0})  # only the steps' own scoring calls are counted
    result = _train(config, registry)
    per_step = [{h["domain"] for h in result.history if h["step"] == step} - {"_all"} for step in (1, 2)]
    code_steps = [s for s in per_step if "code_counted" in s]
    assert singles == [] and len(batches) == len(code_steps) >= 1  # one call per step that drew code
    drawn = config.prompts_per_step * config.num_generations
    assert sum(n for n, _ in batches) + len(toy_calls) == 2 * drawn  # every rollout scored exactly once
    assert all(n % config.num_generations == 0 and n > 0 for n, _ in batches)


def test_a_tiny_run_logs_reward_hacking_signals_per_domain(tiny_home, toy_registry):
    """The hedging and prompt-copy signals of every (step, domain) reach training_history and MLflow;
    the copiers' reward is null, not 0, in a step where nothing copied."""
    from mlflow.tracking import MlflowClient

    from training.trainer import HACKING_SIGNALS

    result = _train(load_recipe("tiny", domains=["toy_digits"], max_steps=2, run_name="signals"), toy_registry)
    lake = open_lake()
    history = (lake.read("training_history").filter((pl.col("run_id") == result.mlflow_run_id) & (pl.col("step") > 0))
               .sort("step", "domain"))  # step 0: the starting policy's validation, no rollouts
    assert set(HACKING_SIGNALS) <= set(history.columns) and history.height == 4
    for share in ("multi_answer_share", "prompt_copy_share"):
        assert history[share].is_not_null().all() and history[share].is_between(0.0, 1.0).all()
    copied = history.filter(pl.col("prompt_copy_share") > 0)
    assert copied["prompt_copy_reward"].is_not_null().all()
    assert history.filter(pl.col("prompt_copy_share") == 0)["prompt_copy_reward"].is_null().all()
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    for name in ("multi_answer_share", "prompt_copy_share"):
        series = client.get_metric_history(result.mlflow_run_id, f"{name}/toy_digits")
        logged = history.filter(pl.col("domain") == "toy_digits")[name].to_list()
        assert [m.step for m in series] == [1, 2] and [m.value for m in series] == pytest.approx(logged)
        assert [m.step for m in client.get_metric_history(result.mlflow_run_id, name)] == [1, 2]  # "_all"
