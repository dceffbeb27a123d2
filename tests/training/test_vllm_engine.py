"""The vLLM engine against the torch engine and the trainer, on CPU: greedy agreement, log-probs,
weight sync, seeds, the backend choice and its errors. One float32 engine per session
(tests/training/conftest.py); the torch side loads the same checkpoint folder."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from generation.contract import SamplingParams
from generation.factory import make_engine

QUESTIONS = [f"What is {a} + {b}?" for a in (2, 7, 13, 40) for b in (5, 9, 21, 66)] + [
    "Explain the random module.", "Split a path into parts.", "Say hi.", "Write digits 3:",
    "What does json.dumps return?", "List three fractions.", "Why is 7 prime?", "Count to five.",
    "Name a decimal context.", "Tell me about itertools.", "Repeat after me: abc.", "What is 9 * 9?",
    "Format a csv row.", "Give a textwrap example.", "Sort these: 3, 1, 2.", "Is 100 bigger than 99?"]
LONG = "Tell me more about the statistics module and its mean, median and mode functions. " * 12


@pytest.fixture(scope="module")
def torch_engine(tiny_checkpoint):
    return make_engine(str(tiny_checkpoint), "torch", dtype="float32", max_batch_size=64)


def _prompts(engine, questions=QUESTIONS):
    return [engine.format_prompt(q) for q in questions]


def test_greedy_completions_agree_with_the_torch_engine_on_the_same_checkpoint(vllm_engine, torch_engine):
    prompts = _prompts(torch_engine)
    assert vllm_engine.encode(prompts) == torch_engine.encode(prompts)  # the same tokens go in
    params = SamplingParams(max_new_tokens=16)
    ours = vllm_engine.generate(prompts, params, with_logprobs=True)
    theirs = torch_engine.generate(prompts, params, with_logprobs=True)
    same = sum(a[0].token_ids == b[0].token_ids for a, b in zip(ours, theirs))
    distinct = len({tuple(a[0].token_ids) for a in ours})
    gaps = [abs(x - y) for a, b in zip(ours, theirs) if a[0].token_ids == b[0].token_ids
            for x, y in zip(a[0].token_logprobs, b[0].token_logprobs)]
    print(f"greedy exact match vLLM vs torch engine, float32: {same}/{len(prompts)}; "
          f"{distinct} distinct completions; log-prob gap on matching ones max {max(gaps):.2e}")
    assert distinct >= len(prompts) // 2, "the checkpoint should give varied completions"
    assert same >= 0.9 * len(prompts)
    assert max(gaps) < 1e-4
    for a, b in zip(ours, theirs):
        if a[0].token_ids == b[0].token_ids:
            assert a[0].text == b[0].text and a[0].finish_reason == b[0].finish_reason


def test_vllm_logprobs_are_the_trainers_at_the_sampling_temperature(vllm_engine, torch_engine):
    """What vLLM returns with a sample is what the trainer recomputes for it (log_softmax(logits / T),
    training.trainer.completion_logprobs): the gap is reported and bounded, and the importance
    weights it gives are 1. Taken at temperature 1 instead, the same recomputation is far off."""
    import contextlib

    import torch

    from training.losses import rollout_correction
    from training.trainer import Rollout, build_batch, completion_logprobs

    temperature = 0.7
    prompts = _prompts(torch_engine)[:8]
    ids = vllm_engine.encode(prompts)
    out = vllm_engine.generate(prompts, SamplingParams(max_new_tokens=12, temperature=temperature, n=4, seed=3),
                               with_logprobs=True)
    rollouts = [Rollout("d", {}, ids[i], g.token_ids, g.text, g.finish_reason, rollout_logprobs=g.token_logprobs)
                for i, per in enumerate(out) for g in per]
    batch, attn, pos, mask, width = build_batch(rollouts, torch_engine.tokenizer.pad_token_id, mask_truncated=False)
    sampler = torch.zeros_like(mask)
    for i, r in enumerate(rollouts):
        sampler[i, :len(r.rollout_logprobs)] = torch.tensor(r.rollout_logprobs)
    model = torch_engine.model
    with torch.no_grad():
        trainer, _ = completion_logprobs(model, batch, attn, pos, width, autocast=contextlib.nullcontext,
                                         temperature=temperature)
        raw, _ = completion_logprobs(model, batch, attn, pos, width, autocast=contextlib.nullcontext, temperature=1.0)
    correction = rollout_correction(trainer, sampler, mask)
    wrong_temperature = float(((raw - sampler).abs() * mask).max())
    print(f"log-prob gap vLLM (float32) vs trainer recomputation over {int(mask.sum())} sampled tokens: "
          f"mean {correction.logp_gap_mean:.2e}, max {correction.logp_gap_max:.2e}; "
          f"importance ratios {correction.ratio_min:.6f}-{correction.ratio_max:.6f}; "
          f"at temperature 1 instead: max gap {wrong_temperature:.3f}")
    assert correction.logp_gap_max < 1e-4
    assert correction.corrected_frac == 0.0 and abs(correction.ratio_max - 1) < 1e-3
    assert wrong_temperature > 0.1


def test_weight_sync_changes_outputs_matches_the_new_weights_and_restores(vllm_engine, torch_engine):
    """Perturb the policy (a stand-in for an optimizer step; the tied embedding included), push it
    into the running engine: vLLM then samples the new weights exactly as the torch engine does,
    also for a prompt long enough to sit in the prefix cache; pushing the originals back restores
    vLLM's outputs bit for bit."""
    import torch

    prompts = _prompts(torch_engine) + [torch_engine.format_prompt(LONG)]
    assert len(vllm_engine.encode([prompts[-1]])[0]) > 256  # two full 128-token cache blocks
    greedy = SamplingParams(max_new_tokens=12)
    sampled = SamplingParams(max_new_tokens=12, temperature=1.0, n=2, seed=11)
    before = vllm_engine.generate(prompts, greedy, with_logprobs=True)
    before_sampled = vllm_engine.generate(prompts, sampled)
    model = torch_engine.model
    original = {name: p.detach().clone() for name, p in model.named_parameters()}
    generator = torch.Generator().manual_seed(7)
    try:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 2:
                    p.add_(torch.randn(p.shape, generator=generator) * 0.08)
        torch_new = torch_engine.generate(prompts, greedy, with_logprobs=True)
        stale = vllm_engine.generate(prompts, greedy)
        assert sum(a[0].token_ids != b[0].token_ids for a, b in zip(stale, torch_new)) >= len(prompts) // 2

        seconds = vllm_engine.load_weights(model.named_parameters())
        synced = vllm_engine.generate(prompts, greedy, with_logprobs=True)
        same = sum(a[0].token_ids == b[0].token_ids for a, b in zip(synced, torch_new))
        changed = sum(a[0].token_ids != b[0].token_ids for a, b in zip(synced, before))
        gap = max((abs(x - y) for a, b in zip(synced, torch_new) if a[0].token_ids == b[0].token_ids
                   for x, y in zip(a[0].token_logprobs, b[0].token_logprobs)), default=float("inf"))
        print(f"weight sync {seconds:.3f} s; after it vLLM equals the torch engine on the new weights for "
              f"{same}/{len(prompts)} prompts (log-prob gap max {gap:.2e}); {changed} changed by the sync")
        assert same >= 0.9 * len(prompts) and gap < 1e-4
        assert synced[-1][0].token_ids == torch_new[-1][0].token_ids  # the cached long prompt too
        assert changed >= len(prompts) // 2
    finally:
        vllm_engine.load_weights(original.items())
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(original[name])
    after = vllm_engine.generate(prompts, greedy, with_logprobs=True)
    assert [a[0].token_ids for a in after] == [b[0].token_ids for b in before]
    assert [a[0].token_logprobs for a in after] == [b[0].token_logprobs for b in before]
    assert [[g.token_ids for g in a] for a in vllm_engine.generate(prompts, sampled)] == \
        [[g.token_ids for g in b] for b in before_sampled]


def test_a_seeded_sample_is_reproducible_and_independent_of_its_batch(vllm_engine):
    prompts = _prompts(vllm_engine)
    params = SamplingParams(max_new_tokens=10, temperature=1.0, n=3)
    seeds = [[1000 * i + j for j in range(3)] for i in range(len(prompts))]
    full = vllm_engine.generate(prompts, params, seeds)
    again = vllm_engine.generate(prompts, params, seeds)
    assert [[g.token_ids for g in p] for p in full] == [[g.token_ids for g in p] for p in again]
    alone = vllm_engine.generate([prompts[5]], params, [seeds[5]])
    assert [g.token_ids for g in alone[0]] == [g.token_ids for g in full[5]]
    one = vllm_engine.generate([prompts[5]], SamplingParams(max_new_tokens=10, temperature=1.0), [[seeds[5][2]]])
    assert one[0][0].token_ids == full[5][2].token_ids
    assert len({tuple(g.token_ids) for g in full[5]}) == 3  # three seeds, three draws
    other = vllm_engine.generate(prompts, params, [[s + 1 for s in row] for row in seeds])
    assert sum(a.token_ids != b.token_ids for p, q in zip(full, other) for a, b in zip(p, q)) > len(prompts)
    # derived from params.seed exactly as the torch engine derives them
    derived = vllm_engine.generate(prompts[:2], SamplingParams(max_new_tokens=10, temperature=1.0, n=3, seed=4))
    from generation.contract import derive_seed

    explicit = vllm_engine.generate(prompts[:2], params, [[derive_seed(4, i, j) for j in range(3)] for i in range(2)])
    assert [[g.token_ids for g in p] for p in derived] == [[g.token_ids for g in p] for p in explicit]


def test_seeded_samples_of_more_prompt_tokens_than_one_engine_step_takes(vllm_engine):
    """vLLM's CPU build crashed here ("CPU Generator does not use offset"): with chunked prefill a
    prompt split across engine steps has its first sampled token discarded, and vLLM rewinds that
    request's seeded generator by an offset only CUDA generators have. A sweep with temperature > 0
    or a GRPO step on long prompts goes past the 4,096-token step budget."""
    prompts = _prompts(vllm_engine, [f"{i}: {LONG}" for i in range(40)])
    assert sum(len(ids) for ids in vllm_engine.encode(prompts)) > 2 * 4096
    params = SamplingParams(max_new_tokens=4, temperature=1.0, n=2)
    seeds = [[7 * i, 7 * i + 1] for i in range(len(prompts))]
    full = vllm_engine.generate(prompts, params, seeds)
    assert all(g.token_ids and g.finish_reason in ("length", "stop") for p in full for g in p)
    alone = vllm_engine.generate([prompts[-1]], params, [seeds[-1]])  # the same draws, whatever the batch
    assert [g.token_ids for g in alone[0]] == [g.token_ids for g in full[-1]]


def test_a_second_engine_keeps_the_callers_rng_and_threads_and_closes(vllm_engine, tiny_checkpoint):
    import random

    import torch

    random.seed(5)
    torch.manual_seed(5)
    expected = (random.random(), torch.rand(1).item())
    random.seed(5)
    torch.manual_seed(5)
    threads = torch.get_num_threads()
    engine = make_engine(str(tiny_checkpoint), "vllm", dtype="bfloat16", kv_cache_gib=0.0625, max_model_len=256)
    try:
        assert (random.random(), torch.rand(1).item()) == expected  # vLLM re-seeds the globals: put back
        torch.set_num_threads(threads + 1)
        assert torch.get_num_threads() == threads + 1  # vLLM's CPU worker would have made this a no-op
        # bf16 as asked where the CPU computes it, float32 where it would only emulate it (generation.device)
        from generation.device import engine_dtype

        assert engine.identity.startswith("vllm-") and engine.identity.endswith(f"/{engine_dtype('bfloat16')}")
        assert engine.generate(_prompts(engine)[:2], SamplingParams(max_new_tokens=4))[0][0].completion_tokens > 0
    finally:
        torch.set_num_threads(threads)
        engine.close()
    # the session's engine still works after another one closed
    assert vllm_engine.generate(_prompts(vllm_engine)[:1], SamplingParams(max_new_tokens=4))[0][0].token_ids


# -- choosing the backend (no engine needed) ------------------------------------------------------


def _fake_model(folder, *, head_dim: int, parameters: int):
    """A config.json and a safetensors file whose header claims ``parameters`` weights (no data:
    only the header is read)."""
    import struct

    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "hidden_size": 4 * head_dim,
                                                    "num_attention_heads": 4, "max_position_embeddings": 512}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [parameters], "data_offsets": [0, 4 * parameters]}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    return folder


def test_auto_picks_vllm_only_where_it_serves_the_model_and_was_measured_faster(tmp_path, tiny_source, needs_vllm):
    from generation.factory import AUTO_VLLM_MIN_PARAMETERS, resolve_backend, stored_parameters

    assert resolve_backend("torch", tiny_source) == ("torch", "torch (asked for)")
    assert resolve_backend("vllm", tiny_source)[0] == "vllm"
    small = stored_parameters(tiny_source)
    assert 400_000 < small < 600_000
    chosen, why = resolve_backend("auto", tiny_source)
    assert chosen == "torch" and "below the 100M" in why
    big = _fake_model(tmp_path / "big", head_dim=64, parameters=AUTO_VLLM_MIN_PARAMETERS + 1)
    assert resolve_backend("auto", big)[0] == "vllm"
    odd = _fake_model(tmp_path / "odd", head_dim=24, parameters=AUTO_VLLM_MIN_PARAMETERS + 1)
    chosen, why = resolve_backend("auto", odd)
    assert chosen == "torch" and "head sizes 32, 64" in why and "has 24" in why
    from generation.vllm_engine import VllmUnavailable

    with pytest.raises(VllmUnavailable, match="cannot serve .*odd.*has 24"):
        make_engine(str(odd), "vllm")
    with pytest.raises(ValueError, match="unknown generation backend 'onnx'"):
        resolve_backend("onnx", tiny_source)
    with pytest.raises(Exception, match="kv_cache_gib"):
        make_engine(str(tiny_source), "vllm", kv_cache_gib=-1)


def test_without_vllm_the_backend_says_how_to_get_it_and_auto_uses_torch(tiny_source):
    """A Python where ``import vllm`` fails (a finder refuses it): one clear line, and auto -> torch."""
    script = f"""
import sys
class NoVllm:
    def find_spec(self, name, path=None, target=None):
        if name == "vllm" or name.startswith("vllm."):
            raise ModuleNotFoundError("No module named 'vllm'")
sys.meta_path.insert(0, NoVllm())
from generation.factory import make_engine, resolve_backend
print(resolve_backend("auto", {str(tiny_source)!r})[1])
try:
    make_engine({str(tiny_source)!r}, "vllm")
except Exception as exc:
    print(type(exc).__name__, exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    auto, error = out.stdout.strip().splitlines()
    assert auto.startswith("torch (auto: vllm is not installed")
    assert error.startswith("VllmUnavailable") and "make install" in error and "--backend torch" in error


def test_past_the_trained_length_vllm_needs_a_rope_scaling_and_then_agrees_with_the_torch_engine(
        vllm_engine, tiny_checkpoint):
    """The tiny policy is trained to 1,024 positions: vLLM refuses a 2,048-token window without a
    scaling (its rotary tables end at 1,024) and says which; with YaRN x2 both engines run a
    1,500-token prompt and compute the same greedy tokens (one YaRN, two implementations)."""
    from generation.vllm_engine import VllmUnavailable

    with pytest.raises(VllmUnavailable, match=r"past the 1024 positions .* yarn:2"):
        make_engine(str(tiny_checkpoint), "vllm", dtype="float32", kv_cache_gib=0.0625, max_model_len=2048)
    torch_yarn = make_engine(str(tiny_checkpoint), "torch", dtype="float32", rope_scaling="yarn:2")
    prompt = torch_yarn.format_prompt("count 1 2 3 4 5 6 7 8 9 " * 90 + "What comes next?")
    assert 1024 < len(torch_yarn.encode([prompt])[0]) < 2000
    scaled = make_engine(str(tiny_checkpoint), "vllm", dtype="float32", kv_cache_gib=0.0625, max_model_len=2048,
                         rope_scaling="yarn:2")
    try:
        assert scaled.identity.endswith("/rope=yarn:2")
        params = SamplingParams(max_new_tokens=8)
        (ours,), = scaled.generate([prompt], params)
        (theirs,), = torch_yarn.generate([prompt], params)
        assert ours.prompt_tokens == theirs.prompt_tokens and ours.token_ids == theirs.token_ids
        with pytest.raises(ValueError, match="does not fit this vLLM engine's max_model_len 1024"):
            vllm_engine.generate([prompt], params)
    finally:
        scaled.close()
