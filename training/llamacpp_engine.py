"""The llama.cpp generation engine: a GGUF variant of a policy (``gguf-q8_0``, ``gguf-q4_0``), served.

A quantized GGUF (:mod:`training.gguf_export`) is what a deployment would run; sweeping it with
the same prompts, seeds and scoring as the policy it came from measures what the quantization
costs. So this engine keeps everything but the forward pass identical to
:class:`training.generation.TorchEngine`:

- prompts are formatted and tokenized by the policy's Hugging Face tokenizer
  (:mod:`training.prompts`) and the ids handed to llama.cpp: both engines read the same token ids,
  and ``prompt_format`` (the sweep cache key) is the same;
- completions are decoded by that tokenizer (:func:`training.generation.completion_text`), cut at
  stop strings the same way; decoding stops at any EOS id of the tokenizer, ``config.json`` or
  ``generation_config.json``, at a stop string, or at ``max_new_tokens``;
- sampling is the torch engine's own (``pick_tokens`` on llama.cpp's logits, temperature /
  top-k / top-p as given), with each sample's uniforms drawn from a ``torch.Generator`` seeded with
  ``seeds[i][j]`` (``RowNoise``). A seed therefore gives the same draws in both engines: a variant
  and its source sampled with the same seeds differ only where their logits do (common random
  numbers, so a quality comparison is not swamped by sampling noise), and a sample depends on its
  seed and prompt alone. llama.cpp's own samplers are not used: their seed is 32-bit (the project's
  are 63-bit) and their draws would share nothing with the torch engine's.

The KV cache is f32 for an f32 file (so that file decodes token for token as the torch engine's
float32, sampled completions included) and llama.cpp's default f16 otherwise (what a deployment
of a quantized variant runs).

Decoding is one sequence at a time (the CPU engine a deployment runs single-stream): each prompt is
prefilled once, and each of its ``n`` samples decodes from that KV cache (the positions past the
prompt are dropped between samples). No log-probs: this engine serves sweeps, not GRPO rollouts.

``llama_cpp`` is imported in the constructor: this module imports where it is not installed.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import weakref
from pathlib import Path

# the torch engine's stop check and sampler: shared so both engines turn a seed into the same draws
from training.generation import (SEED_BITS, Generation, SamplingParams, Seeds, pick_tokens, RowNoise, StopChecker,
                                 completion_text, resolve_seeds)
from training.prompts import TokenizerPrompts

INSTALL_HINT = "`pip install llama-cpp-python` (or `make install`)"


class LlamaCppEngine(TokenizerPrompts):
    """A llama.cpp model (a GGUF file) behind the :class:`training.generation.GenerationEngine`
    interface, with the Hugging Face tokenizer of the policy it was exported from."""

    name = "llama.cpp"

    def __init__(self, gguf_path: str | os.PathLike, tokenizer_dir: str | os.PathLike, *, n_ctx: int = 4096,
                 threads: int | None = None, policy_ref: str | None = None):
        try:
            import llama_cpp
        except ImportError as exc:
            raise RuntimeError(f"the llama.cpp engine needs llama.cpp's Python bindings ({exc}): "
                               f"{INSTALL_HINT}") from exc
        from transformers import AutoTokenizer

        from training.gguf_export import gguf_quant_of

        gguf_path, tokenizer_dir = Path(gguf_path), Path(tokenizer_dir)
        if not gguf_path.is_file():
            raise FileNotFoundError(f"no GGUF file at {gguf_path}: write one with training.gguf_export.export_gguf")
        if not isinstance(n_ctx, int) or n_ctx < 16:
            raise ValueError(f"n_ctx must be an int >= 16 (prompt + completion tokens), got {n_ctx!r}")
        threads = threads or len(os.sched_getaffinity(0))
        self.gguf_path = gguf_path
        self.policy_ref = policy_ref
        self.n_ctx = n_ctx
        self.quant = gguf_quant_of(gguf_path)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self._version = llama_cpp.__version__
        self._llama_cpp = llama_cpp
        # KV cache: f32 for an f32 file (float32 end to end, as the torch engine's float32; llama.cpp's
        # default f16 cache moved the tiny policy's logits by ~1e-2), else llama.cpp's default f16,
        # what a deployment of a quantized variant runs. verbose=False: no load report on stderr,
        # and the bindings' logger at ERROR from here on.
        kv = {"type_k": llama_cpp.GGML_TYPE_F32, "type_v": llama_cpp.GGML_TYPE_F32} if self.quant == "f32" else {}
        self.llm = llama_cpp.Llama(str(gguf_path), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                                   verbose=False, **kv)
        # an engine never closed would be freed by Llama.__del__ during interpreter shutdown, after
        # the bindings' globals are gone (a TypeError traceback per engine): free it before that
        self._release = weakref.finalize(self, self.llm.close)
        self.n_vocab = self.llm.n_vocab()
        if len(self.tokenizer) > self.n_vocab:
            raise ValueError(f"the tokenizer at {tokenizer_dir} has {len(self.tokenizer)} tokens but {gguf_path} only "
                             f"{self.n_vocab}: give the tokenizer folder of the policy the GGUF was exported from")
        self.eos_ids = _eos_ids(self.tokenizer, tokenizer_dir)

    # -- prompts (the same formatting and ids as the torch engine) ---------------------------------


    @property
    def identity(self) -> str:
        """The engine, its version and the file's quantization, e.g. ``llama.cpp-0.3.36/q4_0``."""
        return f"llama.cpp-{self._version}/{self.quant}"



    # -- generation ----------------------------------------------------------------------------------

    def generate(self, prompts: list[str], params: SamplingParams, seeds: Seeds | None = None, *,
                 with_logprobs: bool = False) -> list[list[Generation]]:
        """``params.n`` completions per prompt; ``seeds[i][j]`` seeds sample j of prompt i (else
        derived from ``params.seed``, else fresh)."""
        if with_logprobs:
            raise ValueError("the llama.cpp engine serves sweeps, not GRPO rollouts: it returns no log-probs "
                             "(use the torch or vllm backend for rollouts)")
        if not prompts:
            return []
        if self.llm is None:
            raise RuntimeError("this llama.cpp engine is closed: build a new one")
        prompt_ids = self.encode(prompts)
        if any(not ids for ids in prompt_ids):
            raise ValueError("an empty prompt cannot be generated from: give every prompt some text")
        room = self.n_ctx - params.max_new_tokens
        longest = max(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
        if len(prompt_ids[longest]) > room:
            raise ValueError(
                f"prompt {longest} has {len(prompt_ids[longest])} tokens; with max_new_tokens "
                f"{params.max_new_tokens} it does not fit the engine's n_ctx {self.n_ctx} (room for {room} prompt "
                "tokens): build LlamaCppEngine with a larger n_ctx, or lower max_new_tokens")
        seeds = resolve_seeds(seeds, params, len(prompt_ids))
        if seeds is None and params.temperature > 0:  # unseeded: fresh seeds, as the torch engine draws
            seeds = [[secrets.randbits(SEED_BITS) for _ in range(params.n)] for _ in prompt_ids]
        return [self._complete(ids, params, None if seeds is None else seeds[i]) for i, ids in enumerate(prompt_ids)]

    def _complete(self, prompt: list[int], params: SamplingParams, seeds: list[int] | None) -> list[Generation]:
        """``params.n`` completions of one tokenized prompt, prefilled once."""
        started = time.perf_counter()
        self.llm.reset()
        self.llm.eval(prompt)
        prompt_logits = self._last_logits()
        prefill_share = (time.perf_counter() - started) / params.n
        stops = StopChecker(self.tokenizer, params.stop)
        out = []
        for j in range(params.n):
            started = time.perf_counter()
            self.llm.n_tokens = len(prompt)  # the next eval drops this prompt's earlier completion from the KV cache
            noise = RowNoise([seeds[j]], params.max_new_tokens, "cpu") if params.temperature > 0 else None
            logits, generated, reason = prompt_logits, [], None
            while reason is None:
                token = self._pick(logits, params, noise, len(generated))
                generated.append(token)
                if token in self.eos_ids or stops.hit(generated):
                    reason = "stop"
                elif len(generated) >= params.max_new_tokens:
                    reason = "length"
                else:
                    self.llm.eval([token])
                    logits = self._last_logits()
            out.append(Generation(text=completion_text(self.tokenizer, generated, params.stop),
                                  completion_tokens=len(generated), prompt_tokens=len(prompt), finish_reason=reason,
                                  latency_s=prefill_share + time.perf_counter() - started, token_ids=generated))
        return out

    def _last_logits(self):
        """A copy of the logits llama.cpp computed for the last position it evaluated."""
        import numpy as np

        view = self._llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(view, shape=(self.n_vocab,)).copy()

    @staticmethod
    def _pick(logits, params: SamplingParams, noise, step: int) -> int:
        if noise is None:  # greedy: the first maximum, as torch's argmax picks it
            return int(logits.argmax())
        import torch

        return int(pick_tokens(torch.from_numpy(logits)[None], params, noise.at(step))[0])

    def close(self) -> None:
        """Free the model and its KV cache (the engine cannot generate afterwards)."""
        if getattr(self, "llm", None) is not None:
            self._release()
            self.llm = None


def _eos_ids(tokenizer, folder: Path) -> set[int]:
    """Every end-of-sequence id the torch engine stops at: the tokenizer's, ``config.json``'s and
    ``generation_config.json``'s (a list in some models)."""
    ids: set[int] = set()
    sources: list[object] = [tokenizer.eos_token_id]
    for name in ("config.json", "generation_config.json"):
        file = folder / name
        if file.is_file():
            sources.append(json.loads(file.read_text()).get("eos_token_id"))
    for value in sources:
        if value is not None:
            ids.update(value if isinstance(value, list) else [value])
    return ids
