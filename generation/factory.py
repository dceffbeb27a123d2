"""Building an engine: ``make_engine(policy_ref, backend="torch"|"vllm"|"vllm-server"|"auto", **options)``.

The one place that picks an engine class for a policy and a backend (``auto``: vLLM where it is
installed, supports the model and the model is large enough to gain, else torch); a variant folder
(:mod:`generation.variants`) is served by the engine its manifest names.
"""

from __future__ import annotations

import json
import struct
import sys
from typing import Any

from generation.contract import BACKENDS, Backend, GenerationEngine  # noqa: F401
from generation.torch_engine import (DEFAULT_MAX_BATCH_TOKENS, DEFAULT_PREFILL_CHUNK_TOKENS,  # noqa: F401
                                     TORCH_OPTIONS, TorchEngine)

AUTO_VLLM_MIN_PARAMETERS = 100_000_000


def stored_parameters(model_dir) -> int | None:
    """Number of weights stored in a model folder's safetensors files, read from their headers
    (nothing is loaded); None when there are none."""
    from pathlib import Path

    total, found = 0, False
    for file in sorted(Path(model_dir).glob("*.safetensors")):
        with open(file, "rb") as handle:
            size = struct.unpack("<Q", handle.read(8))[0]
            header = json.loads(handle.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                count = 1
                for dim in info["shape"]:
                    count *= dim
                total += count
                found = True
    return total if found else None


def resolve_backend(backend: str, model_dir) -> tuple[str, str]:
    """``(engine, why)``: the engine a backend choice means for a model folder. ``torch`` and
    ``vllm`` mean themselves; ``auto`` means vLLM when it is installed, serves the model on this
    device (:func:`generation.vllm_engine.unsupported_reason`, read without importing vLLM) and the
    model is at least :data:`AUTO_VLLM_MIN_PARAMETERS` large (where vLLM was measured faster; see
    the module docstring), else torch."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown generation backend {backend!r} (known: {', '.join(BACKENDS)})")
    if backend != "auto":
        return backend, f"{backend} (asked for)"
    from generation.vllm_engine import unsupported_reason

    problem = unsupported_reason(model_dir)
    if problem:
        return "torch", f"torch (auto: {problem})"
    size = stored_parameters(model_dir)
    if size is not None and size < AUTO_VLLM_MIN_PARAMETERS:
        return "torch", (f"torch (auto: {size / 1e6:.1f}M parameters, below the {AUTO_VLLM_MIN_PARAMETERS / 1e6:.0f}M "
                         "from which vLLM was measured faster)")
    return "vllm", "vllm (auto: installed, serves this model, measured faster at its size)"


_said: set[str] = set()


def _log_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        print(message, file=sys.stderr, flush=True)


def make_engine(policy_ref: str = "smollm2", backend: str = "torch", **options: Any) -> GenerationEngine:
    """A generation engine for a policy reference (see :mod:`generation.policy`).

    torch options: ``dtype`` ("float32" | "bfloat16"; default bfloat16, about 1.6x faster here),
    ``max_batch_size`` (default 64), ``max_batch_tokens`` and ``prefill_chunk_tokens`` (see
    :func:`decode_batch`), ``rope_scaling`` (a :mod:`generation.rope` spec), ``threads`` (torch
    intra-op threads), ``home`` (ASSAY_HOME).
    vllm options: :class:`generation.vllm_engine.VllmOptions` (``dtype``, ``home``, memory settings).
    ``auto`` (:func:`resolve_backend`) passes each engine the options it knows and drops the other
    engine's (e.g. ``max_batch_size`` when vLLM is chosen: vLLM schedules its own batches).
    """
    from generation.policy import policy_path
    from generation.variants import read_manifest, variant_engine

    folder = policy_path(policy_ref, options.get("home"))
    manifest = read_manifest(folder)
    if manifest is not None:  # a variant is served by its method's engine, whatever the backend asked
        from generation.device import engine_dtype

        _log_once(f"generation engine: variant {manifest.variant} ({manifest.method}), backend {backend!r} not used")
        dtype = engine_dtype(options.get("dtype", "bfloat16"), "cpu", log=_log_once)  # its torch parts run on the CPU
        return variant_engine(folder, manifest, **{**options, "dtype": dtype})
    if backend == "auto":
        from generation.vllm_engine import VllmOptions

        backend, _ = resolve_backend("auto", folder)
        known = TORCH_OPTIONS if backend == "torch" else tuple(VllmOptions.model_fields)
        options = {k: v for k, v in options.items() if k in known}
    if backend == "vllm-server":  # a running vLLM server (generation.vllm_server): it runs its own dtype
        from generation.vllm_server import VllmServerEngine

        return VllmServerEngine(policy_ref, **options)
    if backend in ("torch", "vllm"):  # bf16 where the CPU would only emulate it: fp32 (generation.device)
        import torch

        from generation.device import engine_dtype

        # the torch engine computes on the CPU; vLLM on the GPU when its CUDA build sees one
        device = "cuda" if backend == "vllm" and torch.cuda.is_available() else "cpu"
        options = {**options, "dtype": engine_dtype(options.get("dtype", "bfloat16"), device, log=_log_once)}
    if backend == "vllm":
        from generation.vllm_engine import VllmEngine

        return VllmEngine(policy_ref, **options)
    if backend != "torch":
        raise ValueError(f"unknown generation backend {backend!r} (known: {', '.join(BACKENDS)})")
    import torch

    from generation.policy import load_policy

    unknown = set(options) - set(TORCH_OPTIONS)
    if unknown:
        raise ValueError(f"unknown torch engine options {sorted(unknown)} (known: {', '.join(TORCH_OPTIONS)})")
    if options.get("threads"):
        torch.set_num_threads(int(options["threads"]))
    from generation.rope import RopeScaling

    scaling = RopeScaling.parse(options.get("rope_scaling"))
    model, tokenizer = load_policy(policy_ref, dtype=options.get("dtype", "bfloat16"), home=options.get("home"),
                                   rope_scaling=scaling.spec if scaling else None)
    return TorchEngine(model, tokenizer, max_batch_size=int(options.get("max_batch_size", 64)),
                       max_batch_tokens=int(options.get("max_batch_tokens", DEFAULT_MAX_BATCH_TOKENS)),
                       prefill_chunk_tokens=int(options.get("prefill_chunk_tokens", DEFAULT_PREFILL_CHUNK_TOKENS)),
                       policy_ref=policy_ref, rope_scaling=scaling.spec if scaling else None)
