"""GRPO with rollouts from a colocated vLLM engine: the importance correction inside a real update
(against float64), a short run on the tiny policy whose every step samples the trainer's current
weights, and `assay train --backend vllm` as a user runs it."""

from __future__ import annotations

import json

import polars as pl
import pytest

from pipelines.settings import open_lake
from tests.conftest import run_cli, write_plugin
from tests.training.test_trainer import _hand_rollouts, _train, exact_update_rig, toy_registry  # noqa: F401 (a fixture)
from training.config import load_recipe
from training.launch import INHERITED_DIST_ENV


@pytest.mark.parametrize("mode", ["token_truncate", "sequence_mask"])
def test_the_importance_correction_in_a_real_update_matches_the_float64_formula(tiny_home, mode):
    """One real update (tiny policy, DeepSpeed engine, 2 micro-batches, temperature 0.7, beta 0.1)
    on rollouts that carry a sampler's log-probs (the policy's own plus seeded noise, as another
    engine's would be): the step's loss and gradient equal TRL's formula in float64 with each
    token's policy-gradient term weighted by Yao et al.'s truncated ratio (or TRL's sequence mask)
    of pi_train before the update over pi_rollout; the KL term is not weighted."""
    import contextlib

    import torch

    g, temperature, beta, cap = 4, 0.7, 0.1, 1.15
    config = load_recipe("tiny", temperature=temperature, beta=beta, prompts_per_step=3, num_generations=g,
                         max_completion_length=8, max_grad_norm=0.0, deepspeed={"gradient_accumulation_steps": 2},
                         run_name="is", skip_zero_variance_groups=True,
                         rollout={"importance_sampling": mode, "importance_sampling_cap": cap})
    engine, trainer, tok, ref, model64, ref64, grads = exact_update_rig(config, tiny_home)

    rewards = [1.0, 0.0, 0.5, 0.0, 0.3, 0.3, 0.3, 0.3, 0.2, 0.9, 0.9, 0.1]  # group 1 has no variance
    rollouts = _hand_rollouts(tok, g, rewards)

    def logp64(model_, r):
        x = torch.tensor([r.prompt_ids + r.completion_ids])
        start, target = len(r.prompt_ids) - 1, torch.tensor(r.completion_ids)
        return (model_(input_ids=x).logits[0, start:-1] / temperature).log_softmax(-1)[range(len(target)), target]

    noise = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for r in rollouts:  # the sampler's log-probs: the policy's, off by an engine's noise
            exact = logp64(model64, r)
            r.rollout_logprobs = (exact + 0.15 * torch.randn(exact.shape, generator=noise, dtype=torch.float64)).tolist()
    trainer._timings, trainer._corrections = {"sync_s": 0.0, "ref_s": 0.0, "update_s": 0.0}, []
    zero_var, loss = trainer._learn(rollouts, engine, ref, contextlib.nullcontext)
    assert zero_var == [False, True, False]

    def reference(weighted: bool):
        adv = {}
        for group in range(3):
            rw = torch.tensor(rewards[group * g:(group + 1) * g], dtype=torch.float64)
            a = (rw - rw.mean()) / (rw.std() + 1e-4)
            adv.update({group * g + j: a[j] for j in range(g)})
        model64.zero_grad()
        total, capped, count = 0.0, 0, 0
        kept = [i for i in range(12) if i // g != 1]
        for i in kept:
            r = rollouts[i]
            logp = logp64(model64, r)
            with torch.no_grad():
                ref_logp = logp64(ref64, r)
            log_ratio = logp.detach() - torch.tensor(r.rollout_logprobs, dtype=torch.float64)
            if mode == "token_truncate":
                w = torch.clamp(torch.exp(log_ratio), max=cap)
                capped, count = capped + int((torch.exp(log_ratio) > cap).sum()), count + len(log_ratio)
            else:
                seq = torch.exp(log_ratio.sum())
                w = (seq if seq <= cap else torch.zeros((), dtype=torch.float64)).expand(len(log_ratio))
                capped, count = capped + int(seq > cap), count + 1
            ratio = torch.exp(logp - logp.detach())
            clipped = torch.clamp(ratio, 1 - config.epsilon, 1 + config.epsilon)
            per_token = -torch.min(ratio * adv[i], clipped * adv[i]) * (w if weighted else 1.0)
            per_token = per_token + beta * (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1)
            total = total + per_token.sum() / len(per_token)
        total = total / len(kept)
        total.backward()
        return float(total.detach()), {n: p.grad.clone() for n, p in model64.named_parameters()}, capped / count

    expected_loss, expected_grads, expected_capped = reference(weighted=True)
    assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-7)
    flat = torch.cat([grads[n].flatten().double() for n in sorted(grads)])
    flat_ref = torch.cat([expected_grads[n].flatten() for n in sorted(grads)])
    assert float((flat - flat_ref).norm() / flat_ref.norm()) < 1e-4
    (first, second) = trainer._corrections  # one per micro-batch, reported per step
    figures = trainer._step_extras()
    assert 0 < expected_capped < 1 and figures["is_corrected_frac"] == pytest.approx(expected_capped)
    assert figures["logp_gap_max"] == pytest.approx(max(first.logp_gap_max, second.logp_gap_max))
    unweighted_loss, _, _ = reference(weighted=False)
    assert abs(unweighted_loss - expected_loss) > 1e-3 * abs(expected_loss)  # the weights mattered


def _digit_run(name: str, steps: int, registry, **rollout):
    config = load_recipe("tiny", domains=["toy_digits"], max_steps=steps, run_name=name,
                         rollout={"backend": "vllm", "vllm": {"kv_cache_gib": 0.0625}, **rollout})
    return _train(config, registry)


@pytest.mark.slow
def test_grpo_with_vllm_rollouts_trains_on_weights_synced_every_step(tiny_home, toy_registry, needs_vllm,
                                                                     monkeypatch):
    """tiny recipe (float32 rollouts), rollout.backend vllm: it trains, every step's rollouts come
    from the weights the previous optimizer step left (the sampler's log-probs equal the trainer's
    recomputation to float32 rounding), the importance correction is on, the sync is timed and
    logged, and the engine is closed at the end. Control: the same run without the sync samples
    stale weights from step 2 on, and the same figures show it."""
    from mlflow.tracking import MlflowClient

    import generation.vllm_engine as vllm_engine
    from training.rollout_engine import VllmRollouts

    live = vllm_engine._live_engines
    steps = 12
    result = _digit_run("vllm-rollouts", steps, toy_registry)
    assert vllm_engine._live_engines == live  # closed when training ended
    rows = [h for h in result.history if h["domain"] == "_all"]
    assert [h["step"] for h in rows] == list(range(1, steps + 1))
    rewards = [h["reward_mean"] for h in rows]
    gaps = [h["logp_gap_max"] for h in rows]
    print(f"vLLM rollouts: reward {[round(r, 3) for r in rewards]}; kl {[round(h['kl'] or 0, 4) for h in rows]}; "
          f"max |logp gap| per step {[f'{x:.1e}' for x in gaps]}; sync s {[round(h['sync_s'], 4) for h in rows]}")
    assert all(h["sync_s"] > 0 and h["generation_s"] > 0 for h in rows)
    assert max(h["kl"] or 0 for h in rows) > 1e-3  # the policy moved away from the reference...
    assert sum(rewards[-3:]) / 3 > sum(rewards[:3]) / 3  # ...towards more digits
    assert all(x is not None and x < 1e-3 for x in gaps)  # ...and vLLM sampled it, step after step
    assert all(0.999 < h["is_ratio_min"] <= h["is_ratio_max"] < 1.001 and h["is_corrected_frac"] == 0 for h in rows)

    lake = open_lake()
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    run = client.get_run(result.mlflow_run_id)
    assert run.data.params["rollout.engine"] == "vllm" and run.data.params["rollout.backend"] == "vllm"
    assert [m.step for m in client.get_metric_history(result.mlflow_run_id, "sync_s")] == list(range(1, steps + 1))
    assert client.get_metric_history(result.mlflow_run_id, "logp_gap_max")
    history = lake.read("training_history").filter(pl.col("domain") == "_all")
    assert history["sync_s"].null_count() == 0 and history.height == steps

    # control: no sync -> stale weights from step 2 on, and the gap shows it
    monkeypatch.setattr(VllmRollouts, "sync", lambda self, engine: 0.0)
    stale = [h for h in _digit_run("vllm-no-sync", 3, toy_registry).history if h["domain"] == "_all"]
    stale_gaps = [f"{h['logp_gap_max']:.1e}" for h in stale]
    print(f"without the sync: max |logp gap| per step {stale_gaps}")
    assert stale[0]["logp_gap_max"] < 1e-3 and all(h["logp_gap_max"] > 1e-2 for h in stale[1:])


@pytest.mark.slow
def test_assay_train_backend_vllm(tiny_home, tmp_path, needs_vllm):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    env = {"ASSAY_HOME": str(tiny_home), "ASSAY_DOMAINS_PATH": str(plugins), "OMP_NUM_THREADS": "1"}
    unset = INHERITED_DIST_ENV  # set by trainers that ran in this test process
    out = run_cli("train", "--recipe", "tiny", "--domains", "plugged", "--steps", "2", "--backend", "vllm", "--json",
                  env=env, unset=unset)
    assert out.returncode == 0, out.stderr[-3000:]
    payload = json.loads(out.stdout)
    assert payload["checkpoint"].endswith("-step000002")
    assert "rollouts: vllm (asked for)" in payload["notes"]
    auto = run_cli("train", "--recipe", "tiny", "--domains", "plugged", "--steps", "1", "--json", env=env, unset=unset)
    assert auto.returncode == 0, auto.stderr[-3000:]
    notes = json.loads(auto.stdout)["notes"]
    assert any(n.startswith("rollouts: torch (auto: ") and "below the 100M" in n for n in notes)
    # the backend is part of the run: the vllm run and the auto (torch) run are different runs
    assert json.loads(auto.stdout)["run_name"] != payload["run_name"]


def test_the_rollout_section_leaves_existing_run_names_alone():
    """Recipes written before the rollout section keep their fingerprint, so their runs resume
    (smollm2's is in bench/RESULTS.md: smollm2-b714112b-step000089); choosing an engine or a
    correction makes another run; memory settings do not."""
    smollm2 = load_recipe("smollm2")
    assert smollm2.fingerprint() == "b714112b" and smollm2.rollout.backend == "auto"
    assert load_recipe("smollm2", rollout={"backend": "vllm"}).fingerprint() != "b714112b"
    assert load_recipe("smollm2", rollout={"importance_sampling": "none"}).fingerprint() != "b714112b"
    assert load_recipe("smollm2", rollout={"vllm": {"kv_cache_gib": 4}}).fingerprint() == "b714112b"
    kept = load_recipe("smollm2", rollout={"backend": "vllm"})
    assert kept.rollout.importance_sampling_cap == 2.0  # a section override keeps the recipe's other keys
    assert kept.rollout.correction("vllm") == "token_truncate" and kept.rollout.correction("torch") == "none"
    from training.config import RecipeError

    with pytest.raises(RecipeError, match="rollout.backend"):
        load_recipe("tiny", rollout={"backend": "onnx"})
    with pytest.raises(RecipeError, match="rollout.importance_sampling_cap"):
        load_recipe("tiny", rollout={"importance_sampling_cap": 0.5})
