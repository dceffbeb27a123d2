"""The vLLM generation backend (GPU machines, optional ``vllm`` extra).

Same interface as :class:`training.generation.TorchEngine`, and the same prompts to the token
(:mod:`training.prompts`). Imported only when ``make_engine(..., backend="vllm")`` is asked for:
the vLLM wheel is CUDA-only and pins its own
torch, so nothing else in Assay may import it. The policy folder is resolved
by :mod:`training.policy` (the SmolLM2 GGUF is converted to safetensors first, which vLLM loads
natively).

Seeds: vLLM seeds per request, so each sample is its own request with ``n=1`` and its own seed
(``seeds[i][j]``, or derived from ``params.seed`` as in the torch engine). The n requests of one
prompt share its prefill through vLLM's prefix cache, so this costs little over ``n=n``, and a
sample depends only on its seed, not on the batch it was sent with.
"""

from __future__ import annotations

import time
from typing import Any

from training.generation import Generation, SamplingParams, Seeds, resolve_seeds
from training.prompts import chat_prompt, encode_prompt, prompt_format_of_tokenizer


class VllmEngine:
    name = "vllm"

    def __init__(self, policy_ref: str, *, dtype: str = "bfloat16", home: str | None = None,
                 gpu_memory_utilization: float = 0.5, **llm_options: Any):
        try:
            import vllm
        except ImportError as exc:
            raise RuntimeError(
                "the vllm backend needs the optional extra on a GPU machine: pip install '.[vllm]' "
                "(its wheel is CUDA-only); use backend='torch' on CPU"
            ) from exc
        from training.policy import load_tokenizer, policy_path

        self.policy_ref = policy_ref
        path = str(policy_path(policy_ref, home))
        self.tokenizer = load_tokenizer(path, home)
        self._vllm = vllm
        self.llm = vllm.LLM(model=path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                            **llm_options)

    @property
    def prompt_format(self) -> str:
        """What :meth:`format_prompt` does, as a sweep cache key (see :mod:`training.prompts`)."""
        return prompt_format_of_tokenizer(self.tokenizer)

    def format_prompt(self, user_text: str) -> str:
        return chat_prompt(self.tokenizer, user_text)

    def encode(self, prompts: list[str]) -> list[list[int]]:
        """Token ids of prompts already formatted by :meth:`format_prompt`."""
        return [encode_prompt(self.tokenizer, p) for p in prompts]

    def generate(self, prompts: list[str], params: SamplingParams,
                 seeds: Seeds | None = None) -> list[list[Generation]]:
        if not prompts:
            return []
        seeds = resolve_seeds(seeds, params, len(prompts))  # None: greedy, or vLLM's own randomness
        requests, sampling = [], []
        for i, ids in enumerate(self.encode(prompts)):
            for j in range(params.n):  # one request per sample: vLLM seeds per request
                requests.append({"prompt_token_ids": ids})
                sampling.append(self._vllm.SamplingParams(
                    n=1, temperature=params.temperature, top_p=params.top_p,
                    top_k=params.top_k if params.top_k > 0 else -1, max_tokens=params.max_new_tokens,
                    stop=list(params.stop) or None, seed=None if seeds is None else seeds[i][j]))
        started = time.perf_counter()
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        share = (time.perf_counter() - started) / max(1, len(requests))
        result: list[list[Generation]] = [[] for _ in prompts]
        for index, out in enumerate(outputs):  # vLLM returns outputs in request order
            (c,) = out.outputs
            result[index // params.n].append(
                Generation(text=c.text, completion_tokens=len(c.token_ids),
                           prompt_tokens=len(out.prompt_token_ids), latency_s=share,
                           finish_reason="length" if c.finish_reason == "length" else "stop",
                           token_ids=list(c.token_ids)))
        return result
