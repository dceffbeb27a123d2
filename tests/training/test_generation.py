"""The torch generation engine: interface, sampling params, stop strings, determinism."""

from __future__ import annotations

import pytest

from generation.contract import Generation, GenerationEngine, SamplingParams
from generation.factory import make_engine


def test_sampling_params_key_is_stable_and_validates():
    a = SamplingParams(max_new_tokens=8, temperature=0.7, stop=("\n",), n=2, seed=1)
    assert a.key() == SamplingParams(max_new_tokens=8, temperature=0.7, stop=["\n"], n=2, seed=1).key()
    assert a.key() != SamplingParams(max_new_tokens=9, temperature=0.7, stop=("\n",), n=2, seed=1).key()
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="n must"):
        SamplingParams(n=0)


def test_torch_engine_generates_n_per_prompt(tiny_home):
    engine = make_engine("tiny", dtype="float32")
    assert isinstance(engine, GenerationEngine) and engine.name == "torch"
    prompts = [engine.format_prompt("What is 2 + 3?"), engine.format_prompt("Say hi, a longer prompt here")]
    assert prompts[0].startswith("user: What is 2 + 3?") and prompts[0].endswith("assistant:")
    out = engine.generate(prompts, SamplingParams(max_new_tokens=6, temperature=1.0, n=3, seed=0))
    assert [len(g) for g in out] == [3, 3]
    for per_prompt, prompt in zip(out, prompts):
        for gen in per_prompt:
            assert isinstance(gen, Generation)
            assert 1 <= gen.completion_tokens <= 6
            assert gen.prompt_tokens == len(engine.encode([prompt])[0])
            assert gen.finish_reason in ("stop", "length")
            assert (gen.finish_reason == "length") == (gen.completion_tokens == 6 and
                                                       gen.token_ids[-1] not in (engine.tokenizer.eos_token_id,))
            assert gen.latency_s > 0


def test_greedy_matches_transformers_generate(tiny_home):
    import torch

    engine = make_engine("tiny", dtype="float32")
    # prompts of different lengths (left padding), and one whose greedy continuation is not a
    # single repeated token: it tells a KV cache the model silently ignored from one it used
    prompts = ["What is 12 + 30? The answer", "Hello", "Tell me more more more about 3."]
    out = engine.generate(prompts, SamplingParams(max_new_tokens=10))
    tok = engine.tokenizer
    for prompt, gens in zip(prompts, out):
        enc = tok(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.inference_mode():
            ref = engine.model.generate(**enc, max_new_tokens=10, do_sample=False)
        ref_ids = ref[0, enc.input_ids.shape[1]:].tolist()
        assert len(ref_ids) == 10 and gens[0].token_ids == ref_ids, prompt


def test_seeded_sampling_is_reproducible_and_stop_strings_cut(tiny_home):
    engine = make_engine("tiny", dtype="float32")
    params = SamplingParams(max_new_tokens=12, temperature=1.0, n=4, seed=7)
    first = engine.generate(["abc"], params)
    again = engine.generate(["abc"], params)
    assert [g.token_ids for g in first[0]] == [g.token_ids for g in again[0]]
    # Pick a stop string the unconstrained sample actually produces, then check it is cut.
    text = first[0][0].text
    assert len(text) >= 3
    stop = text[1:3]
    cut = engine.generate(["abc"], SamplingParams(max_new_tokens=12, temperature=1.0, n=4, seed=7, stop=(stop,)))
    assert cut[0][0].finish_reason == "stop"
    assert stop not in cut[0][0].text and text.startswith(cut[0][0].text)


def test_unknown_backend_and_policy_are_clear(tiny_home):
    with pytest.raises(ValueError, match="unknown generation backend"):
        make_engine("tiny", backend="onnx")
    from generation.policy import PolicyError

    with pytest.raises(PolicyError, match="unknown policy 'nope'"):
        make_engine("nope")


def test_a_sample_depends_on_its_seed_not_on_its_batch(tiny_home):
    """Per-sample seeds: the same draw alone, with n > 1 (shared prefill) or among other prompts."""
    engine = make_engine("tiny", dtype="float32", max_batch_size=4)
    prompts = ["abc", "What is 2 + 3? A longer prompt than the others", "Hello there"]
    params = SamplingParams(max_new_tokens=10, temperature=1.0)
    seeds = [[11, 12, 13], [21, 22, 23], [31, 32, 33]]
    together = engine.generate(prompts, SamplingParams(max_new_tokens=10, temperature=1.0, n=3), seeds=seeds)
    for i, prompt in enumerate(prompts):
        for j in range(3):
            alone = engine.generate([prompt], params, seeds=[[seeds[i][j]]])[0][0]
            assert alone.token_ids == together[i][j].token_ids, (i, j)
    reordered = engine.generate(prompts[::-1], SamplingParams(max_new_tokens=10, temperature=1.0, n=2),
                                seeds=[s[1:] for s in seeds[::-1]])
    assert [[g.token_ids for g in per] for per in reordered[::-1]] == [[g.token_ids for g in per[1:]]
                                                                       for per in together]
    distinct = {tuple(g.token_ids) for per in together for g in per}
    assert len(distinct) == 9  # nine seeds, nine different draws


def test_seeds_are_validated(tiny_home):
    engine = make_engine("tiny", dtype="float32")
    params = SamplingParams(max_new_tokens=4, temperature=1.0, n=2)
    with pytest.raises(ValueError, match="2 seed"):
        engine.generate(["a", "b"], params, seeds=[[1, 2], [3]])
    with pytest.raises(ValueError, match="ints in"):
        engine.generate(["a"], params, seeds=[[1, -2]])
    greedy = engine.generate(["a"], SamplingParams(max_new_tokens=4, n=2), seeds=[[1, 2]])  # ignored
    assert greedy[0][0].token_ids == greedy[0][1].token_ids


def test_inverse_cdf_sampler_draws_from_the_filtered_distribution():
    """Many rows of the same logits, one uniform each: the picks follow softmax(logits / T) after
    top-k, and a token outside the top-k is never picked."""
    import torch

    from generation.torch_engine import _filtered_logits, pick_tokens

    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    params = SamplingParams(temperature=0.7, top_k=4)
    rows = 200_000
    uniforms = torch.rand(rows, generator=torch.Generator().manual_seed(0))
    picks = pick_tokens(logits.expand(rows, -1), params, uniforms)
    freq = torch.bincount(picks, minlength=6).double() / rows
    expected = _filtered_logits(logits, params).softmax(-1)[0].double()
    assert float(expected[4:].sum()) == 0.0 and float(freq[4:].sum()) == 0.0
    se = (expected * (1 - expected) / rows).sqrt()
    assert bool(((freq - expected).abs() <= 5 * se + 1e-12).all()), (freq, expected)
    # u * total rounding up to total (here u = 1 exactly) picks the last kept token, not one past it
    assert int(pick_tokens(logits, params, torch.tensor([1.0]))) == 3
    assert int(pick_tokens(logits, params, torch.tensor([0.0]))) == 0


def test_length_batches_group_long_prompts_small_and_short_ones_big():
    from generation.torch_engine import length_batches

    lengths = [100, 16000, 50, 16000, 8000, 120, 8000, 90]
    batches = length_batches(lengths, per_row=1, max_rows=64, max_tokens=32_000)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))  # every prompt once
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert lengths[batch[0]] == longest and (len(batch) == 1 or len(batch) * longest <= 32_000)
    assert [sorted(lengths[i] for i in b) for b in batches] == [[16000, 16000], [8000, 8000], [50, 90, 100, 120]]
    # n samples per prompt count as rows; a prompt longer than the budget still gets its batch
    assert length_batches([10, 10, 10], per_row=4, max_rows=8, max_tokens=10 ** 6) == [[0, 1], [2]]
    assert length_batches([50_000, 10], per_row=1, max_rows=64, max_tokens=32_000) == [[0], [1]]


def test_chunked_prefill_and_token_budgets_change_nothing_but_the_cost(tiny_home):
    from generation.torch_engine import TorchEngine

    engine = make_engine("tiny", dtype="float32")
    prompts = ["word " * 300 + "What next?", "Hello there", "count 1 2 3 4 5 6 7 8 9 " * 20]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, n=2, seed=3)
    whole = engine.generate(prompts, params, with_logprobs=True)
    tight = TorchEngine(engine.model, engine.tokenizer, max_batch_tokens=64, prefill_chunk_tokens=37)
    chunked = tight.generate(prompts, params, with_logprobs=True)
    # chunks over a left-padded batch: the pad positions of the first chunks attend to nothing
    padded = TorchEngine(engine.model, engine.tokenizer, prefill_chunk_tokens=5).generate(
        prompts, params, with_logprobs=True)
    for a, b, c in zip(whole, chunked, padded):
        assert [g.token_ids for g in a] == [g.token_ids for g in b] == [g.token_ids for g in c]
        for ga, gb, gc in zip(a, b, c):
            assert ga.token_logprobs == pytest.approx(gb.token_logprobs, abs=1e-4)
            assert ga.token_logprobs == pytest.approx(gc.token_logprobs, abs=1e-4)
    lengths = [len(ids) for ids in engine.encode(prompts)]
    # the long prompt alone (the others are under half its length), the two short ones together
    assert engine.stats.batches == 2 and tight.stats.batches == 3  # 64 tokens: one prompt per batch
    assert tight.stats.prompt_tokens == tight.stats.padded_tokens == sum(lengths)
    short = sorted(lengths)[:2]
    assert engine.stats.padded_tokens == max(lengths) + 2 * max(short) > engine.stats.prompt_tokens
    assert tight.stats.decode_tokens == sum(g.completion_tokens for a in chunked for g in a)
    with pytest.raises(ValueError, match="prefill_chunk_tokens must be an int >= 0"):
        TorchEngine(engine.model, engine.tokenizer, prefill_chunk_tokens=-1)


def test_the_kv_cache_a_batch_held_is_what_its_shape_predicts(tiny_home):
    engine = make_engine("tiny", dtype="float32")
    ids = engine.encode(["a longer prompt " * 40])[0]
    engine.generate(["a longer prompt " * 40], SamplingParams(max_new_tokens=4, n=3, temperature=1.0, seed=0))
    # keys and values of 4 layers x 2 KV heads x 32 dims, fp32, per position, for each of n=3 rows
    assert engine.kv_cache_bytes(1) == 2 * 4 * 2 * 32 * 4
    assert engine.stats.peak_kv_bytes == 3 * engine.kv_cache_bytes(len(ids))
