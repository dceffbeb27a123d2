"""The llama.cpp generation engine: a GGUF variant of a policy (``gguf-q8_0``, ``gguf-q4_0``), served.

A quantized GGUF (:mod:`generation.gguf_export`) is what a deployment would run; sweeping it with
the same prompts, seeds and scoring as the policy it came from measures what the quantization
costs. So this engine keeps everything but the forward pass identical to
:class:`generation.torch_engine.TorchEngine`:

- prompts are formatted and tokenized by the policy's Hugging Face tokenizer
  (:mod:`generation.prompts`) and the ids handed to llama.cpp: both engines read the same token ids,
  and ``prompt_format`` (the sweep cache key) is the same;
- completions are decoded by that tokenizer (:func:`generation.torch_engine.completion_text`), cut at
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

The bindings are ``ik-llama-cpp-python`` (module ``ik_llama_cpp``, ik_llama.cpp, a llama.cpp fork
with the same GGUF format and q8_0/q4_0 blocks): it ships a prebuilt manylinux wheel (libllama,
libggml, ``llama-quantize``), so installing it compiles nothing, where ``llama-cpp-python`` is an
sdist that compiles llama.cpp at install (~13-14 min on 2 cores). Its high-level ``IkLlama`` samples
with llama.cpp's own samplers, so this engine uses its ctypes layer (model, context, batches,
``llama_decode``, ``llama_get_logits_ith``) through :class:`LlamaSession`, and binds the one call
it lacks (``llama_kv_cache_seq_rm``, to drop a sample's positions) from the same library. ONNX
Runtime (also prebuilt) was not chosen: it neither reads nor writes GGUF, so a GGUF variant would
need a second export path and a second quantizer. ``ik_llama_cpp`` is imported in the constructor:
this module imports where it is not installed.
"""

from __future__ import annotations

import json
import os
import secrets
import time
import weakref
from pathlib import Path

# the torch engine's stop check and sampler: shared so both engines turn a seed into the same draws
from generation.contract import SEED_BITS, Generation, SamplingParams, Seeds, resolve_seeds
from generation.torch_engine import pick_tokens, RowNoise, StopChecker, completion_text
from generation.prompts import TokenizerPrompts

INSTALL_HINT = "`pip install ik-llama-cpp-python` (the `variants` extra; `make install` installs it)"
BINDINGS = "ik-llama-cpp-python"
"""The distribution that provides the llama.cpp bindings (a prebuilt wheel)."""


def import_bindings():
    """``ik_llama_cpp`` (the llama.cpp bindings), or a RuntimeError that says how to install them."""
    try:
        import ik_llama_cpp
    except ImportError as exc:
        raise RuntimeError(f"GGUF variants need llama.cpp's Python bindings ({exc}): {INSTALL_HINT}") from exc
    return ik_llama_cpp


class LlamaCppEngine(TokenizerPrompts):
    """A llama.cpp model (a GGUF file) behind the :class:`generation.contract.GenerationEngine`
    interface, with the Hugging Face tokenizer of the policy it was exported from."""

    name = "llama.cpp"

    def __init__(self, gguf_path: str | os.PathLike, tokenizer_dir: str | os.PathLike, *, n_ctx: int = 4096,
                 threads: int | None = None, policy_ref: str | None = None):
        bindings = import_bindings()
        from transformers import AutoTokenizer

        from generation.gguf_export import gguf_quant_of

        gguf_path, tokenizer_dir = Path(gguf_path), Path(tokenizer_dir)
        if not gguf_path.is_file():
            raise FileNotFoundError(f"no GGUF file at {gguf_path}: write one with generation.gguf_export.export_gguf")
        if not isinstance(n_ctx, int) or n_ctx < 16:
            raise ValueError(f"n_ctx must be an int >= 16 (prompt + completion tokens), got {n_ctx!r}")
        threads = threads or len(os.sched_getaffinity(0))
        self.gguf_path = gguf_path
        self.policy_ref = policy_ref
        self.n_ctx = n_ctx
        self.quant = gguf_quant_of(gguf_path)
        self.tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
        self._version = bindings.__version__
        # KV cache: f32 for an f32 file (float32 end to end, as the torch engine's float32; llama.cpp's
        # default f16 cache moved the tiny policy's logits by ~1e-2), else llama.cpp's default f16,
        # what a deployment of a quantized variant runs.
        self.llm = LlamaSession(gguf_path, n_ctx=n_ctx, threads=threads, f32_cache=self.quant == "f32")
        # free the model and context before interpreter shutdown tears the bindings' globals down
        self._release = weakref.finalize(self, self.llm.close)
        self.n_vocab = self.llm.n_vocab()
        if len(self.tokenizer) > self.n_vocab:
            raise ValueError(f"the tokenizer at {tokenizer_dir} has {len(self.tokenizer)} tokens but {gguf_path} only "
                             f"{self.n_vocab}: give the tokenizer folder of the policy the GGUF was exported from")
        self.eos_ids = _eos_ids(self.tokenizer, tokenizer_dir)

    # -- prompts (the same formatting and ids as the torch engine) ---------------------------------


    @property
    def identity(self) -> str:
        """The engine, its bindings' version and the file's quantization, e.g. ``ik_llama.cpp-0.1.5/q4_0``
        (the bindings are named: another llama.cpp build may decode differently)."""
        return f"ik_llama.cpp-{self._version}/{self.quant}"



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
        prompt_logits = self.llm.last_logits()
        prefill_share = (time.perf_counter() - started) / params.n
        stops = StopChecker(self.tokenizer, params.stop)
        out = []
        for j in range(params.n):
            started = time.perf_counter()
            self.llm.truncate(len(prompt))  # drop this prompt's earlier completion from the KV cache
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
                    logits = self.llm.last_logits()
            out.append(Generation(text=completion_text(self.tokenizer, generated, params.stop),
                                  completion_tokens=len(generated), prompt_tokens=len(prompt), finish_reason=reason,
                                  latency_s=prefill_share + time.perf_counter() - started, token_ids=generated))
        return out

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


class LlamaSession:
    """One llama.cpp model and its context (one sequence), over the bindings' ctypes layer: evaluate
    tokens after those already in the KV cache, read the last position's logits, drop positions."""

    def __init__(self, gguf_path: Path, *, n_ctx: int, threads: int, f32_cache: bool):
        import ctypes

        bindings = import_bindings()
        from ik_llama_cpp import _ctypes_api as C
        from ik_llama_cpp._internals import IkModel

        self._C = C
        _quiet_logs(C)
        self._model = IkModel(str(gguf_path))  # mmap, CPU only
        params = C.llama_context_default_params()
        params.n_ctx = params.n_batch = n_ctx
        params.n_threads = params.n_threads_batch = threads
        # no flash attention: ik_llama.cpp's kernels abort on small heads (the tiny policy's 24) and, on
        # CPUs without AVX-VNNI, on long prompts (IkLlama turns it off there too). Without it
        # ik_llama.cpp keeps the V cache in f16 only, so an f32 file gets an f32 K cache.
        params.flash_attn = False
        if f32_cache:
            params.type_k = _GGML_TYPE_F32
        self.ctx = C.llama_init_from_model(self._model.model, params)
        if not self.ctx:
            self._model.close()
            raise RuntimeError(f"llama.cpp could not create a context for {gguf_path} (n_ctx {n_ctx})")
        self._ubatch = C.llama_n_ubatch(self.ctx)
        self._seq_rm = C._lib.llama_kv_cache_seq_rm  # not bound by the package: same library, same C signature
        self._seq_rm.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]
        self._seq_rm.restype = ctypes.c_bool
        self.version = bindings.__version__
        self.n_tokens = 0

    def n_vocab(self) -> int:
        return self._model.n_vocab

    def tokenize(self, text: bytes, *, add_bos: bool, special: bool) -> list[int]:
        """The GGUF vocabulary's own tokenization (tests compare it with the Hugging Face tokenizer's)."""
        return self._model.tokenize(text.decode(), add_bos=add_bos, special=special)

    def reset(self) -> None:
        self._C.llama_kv_cache_clear(self.ctx)
        self.n_tokens = 0

    def truncate(self, n_tokens: int) -> None:
        """Keep the first ``n_tokens`` positions of the KV cache."""
        if n_tokens < self.n_tokens:
            self._seq_rm(self.ctx, 0, n_tokens, -1)
            self.n_tokens = n_tokens

    def eval(self, tokens: list[int]) -> None:
        """Evaluate ``tokens`` after the cached positions (in micro-batches), logits for the last one."""
        from ik_llama_cpp._internals import make_batch_range

        C = self._C
        for start in range(0, len(tokens), self._ubatch):
            chunk = tokens[start:start + self._ubatch]
            batch = make_batch_range(chunk, pos_start=self.n_tokens, logits_last=start + len(chunk) == len(tokens))
            try:
                status = C.llama_decode(self.ctx, batch)
            finally:
                C.llama_batch_free(batch)
            if status != 0:
                raise RuntimeError(f"llama_decode failed (status {status}) at position {self.n_tokens}")
            self.n_tokens += len(chunk)

    def last_logits(self):
        """A copy of the logits llama.cpp computed for the last position it evaluated."""
        import numpy as np

        view = self._C.llama_get_logits_ith(self.ctx, -1)
        return np.ctypeslib.as_array(view, shape=(self._model.n_vocab,)).copy()

    def close(self) -> None:
        if self.ctx:
            self._C.llama_free(self.ctx)
            self.ctx = None
        self._model.close()


_GGML_TYPE_F32 = 0  # enum ggml_type


_LOG_SINK = []  # the C callback must outlive every model: kept here


def _quiet_logs(C) -> None:
    """Send llama.cpp's log lines (a few hundred per model load) nowhere but errors to stderr."""
    import ctypes
    import sys

    if _LOG_SINK:
        return
    callback_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)

    def sink(level, text, _user):
        if level == 4 and text:  # GGML_LOG_LEVEL_ERROR (ik_llama.cpp's ggml.h)
            sys.stderr.write(text.decode(errors="replace"))

    _LOG_SINK.append(callback_type(sink))
    C._lib.llama_log_set.argtypes = [callback_type, ctypes.c_void_p]
    C._lib.llama_log_set.restype = None
    C._lib.llama_log_set(_LOG_SINK[0], None)


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
