"""Where a GRPO run's rollouts are sampled: the torch decode loop, or a colocated vLLM engine.

:func:`make_rollout_engine` resolves the recipe's ``rollout.backend`` (``auto``:
:func:`generation.factory.resolve_backend`) and returns one of two objects with the same three
methods, which the trainer calls once per step:

- ``sync(engine) -> seconds``: make the sampler hold the policy's current weights;
- ``generate(prompt_ids, params, seeds, with_logprobs) -> [[DecodedRow]]``: ``params.n`` rows
  per prompt, each with its completion ids and, when asked, each token's log-prob under the
  distribution it was sampled from (what importance sampling compares with the trainer's);
- ``close()``.

:class:`TorchRollouts` decodes with :func:`generation.torch_engine.decode_batch` from the policy itself
or from a copy in ``rollout_dtype`` on the engine's device (``sync`` copies the parameters in);
under ZeRO-3 always from a full copy, so that ranks whose decode loops stop at different steps
make no collectives. :class:`VllmRollouts`
keeps one in-process :class:`generation.vllm_engine.VllmEngine` for the whole run (started from the
policy folder, in ``rollout_dtype``), and ``sync`` streams the DeepSpeed engine's parameters into
it (:meth:`generation.vllm_engine.VllmEngine.load_weights`: in place, never a reload from disk);
under ZeRO-3 each parameter is gathered in turn. The sync runs before every step's rollouts, so
step 1 samples from exactly the trainer's weights (also after a resume) and every later step from
the weights the previous optimizer step left.

vLLM runs one engine per process; with several ranks (torchrun) the vLLM backend is refused and
``auto`` falls back to torch (each rank would need its own engine on an external launcher, as
TRL's colocate mode does; not built yet).
"""

from __future__ import annotations

import copy
import time
from typing import Any, Callable

from training.config import GRPOConfig
from generation.torch_engine import DecodedRow, decode_batch
from generation.contract import SamplingParams, Seeds
from generation.factory import resolve_backend


# Elements gathered at once when syncing the rollout copy under ZeRO-3: bounds the extra memory of a
# sync to ~1 GB in fp32 however large the model, in a few collectives for a small one.
ZERO3_GATHER_ELEMENTS = 2 ** 28
# Hugging Face's rotary embeddings keep their frequencies here; a model loaded in bf16 keeps them float32
ROPE_FREQUENCY_BUFFERS = ("inv_freq", "original_inv_freq")


class RolloutEngineError(RuntimeError):
    """The rollout backend a recipe asks for cannot run here; says what to change."""


class TorchRollouts:
    """Rollouts from the policy module itself, or from a synced copy in ``rollout_dtype``."""

    name = "torch"

    def __init__(self, engine, config: GRPOConfig, tokenizer, device=None):
        import torch

        self.tokenizer = tokenizer
        self.zero3 = config.deepspeed.zero_stage == 3
        module = engine.module
        wanted = getattr(torch, config.rollout_dtype)
        if self.zero3:
            # always a full copy under ZeRO-3: decoding through the sharded policy gathers its
            # parameters by collectives in every decode step, and ranks stop decoding at different
            # steps, so their gathers would not pair up (and parameters gathered under
            # inference_mode became inference tensors that the next backward refused)
            self.model = zero3_rollout_copy(module, wanted, device or next(module.parameters()).device)
            return
        if wanted == next(module.parameters()).dtype:
            self.model = module
            return
        clone = cast_model(copy.deepcopy(module), wanted)
        clone.eval().requires_grad_(False)
        clone.config.use_cache = True
        if config.deepspeed.gradient_checkpointing:  # the rollout copy only decodes: no recomputation
            getattr(clone, "activation_checkpointing_disable", clone.gradient_checkpointing_disable)()
        self.model = clone

    def sync(self, engine) -> float:
        """The policy's current weights into the rollout copy. Under ZeRO-3 each rank gathers the
        shards, a group of parameters at a time: the same collectives, in the same order, on every
        rank (the parameter list is the model's, not the data's)."""
        import torch

        started = time.perf_counter()
        if self.model is engine.module:
            return time.perf_counter() - started
        pairs = list(zip(self.model.named_parameters(), engine.module.named_parameters()))
        if any(dst_name != src_name for (dst_name, _), (src_name, _) in pairs):
            raise RuntimeError("the rollout copy's parameters do not line up with the policy's")
        pairs = [(dst, src) for (_, dst), (_, src) in pairs]
        if not self.zero3:
            with torch.no_grad():
                for dst, src in pairs:
                    dst.copy_(src)
            return time.perf_counter() - started
        import deepspeed

        for group in _groups_by_size(pairs, ZERO3_GATHER_ELEMENTS):
            with deepspeed.zero.GatheredParameters([src for _, src in group], modifier_rank=None):
                with torch.no_grad():
                    for dst, src in group:
                        dst.copy_(src)
        return time.perf_counter() - started

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams, seeds: Seeds,
                 with_logprobs: bool) -> list[list[DecodedRow]]:
        import torch

        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                return decode_batch(self.model, self.tokenizer, prompt_ids, params, max_batch_size=10 ** 6,
                                    seeds=seeds, with_logprobs=with_logprobs)
        finally:
            self.model.train(was_training)

    def close(self) -> None:
        pass


class VllmRollouts:
    """Rollouts from one in-process vLLM engine, synced from the trainer before every step."""

    name = "vllm"

    def __init__(self, policy_dir: str, config: GRPOConfig, tokenizer, home: str | None):
        from generation.vllm_engine import VllmEngine

        self.tokenizer = tokenizer
        self.zero3 = config.deepspeed.zero_stage == 3
        settings = config.rollout.vllm.model_dump()
        # a (left-truncated) prompt plus a whole completion is the longest sequence it will see
        settings["max_model_len"] = settings["max_model_len"] or config.max_prompt_length + config.max_completion_length
        self.engine = VllmEngine(policy_dir, dtype=config.rollout_dtype, seed=config.seed, home=home,
                                 rope_scaling=config.rope_scaling, **settings)

    def sync(self, engine) -> float:
        """Push the DeepSpeed engine's parameters into vLLM (gathered one by one under ZeRO-3)."""
        return self.engine.load_weights(policy_weights(engine.module, self.zero3))

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams, seeds: Seeds,
                 with_logprobs: bool) -> list[list[DecodedRow]]:
        generations = self.engine.generate_ids(prompt_ids, params, seeds, with_logprobs=with_logprobs)
        return [[DecodedRow(i, g.token_ids, g.text, g.finish_reason, g.latency_s, g.token_logprobs)
                 for g in per_prompt] for i, per_prompt in enumerate(generations)]

    def close(self) -> None:
        self.engine.close()


def _groups_by_size(pairs: list[tuple], budget: int) -> list[list[tuple]]:
    """Consecutive ``(copy, policy parameter)`` pairs in groups of at most ``budget`` elements (a
    parameter larger than that is a group of its own); ZeRO-3 parameters count their full size."""
    groups: list[list[tuple]] = []
    size = 0
    for pair in pairs:
        numel = getattr(pair[1], "ds_numel", None) or pair[1].numel()
        if not groups or size + numel > budget:
            groups.append([])
            size = 0
        groups[-1].append(pair)
        size += numel
    return groups


def zero3_rollout_copy(module, dtype, device):
    """A plain copy of a ZeRO-3 policy, unsharded and free of DeepSpeed's hooks, in ``dtype`` on
    ``device``: built from the config on the meta device (nothing initialised twice), then
    allocated there. The buffers (not sharded: e.g. rotary frequencies) are copied now; the
    parameters, which are shards here, are filled by the trainer's sync before each step."""
    import copy

    import torch

    config = copy.deepcopy(module.config)
    config.use_cache = True
    with torch.device("meta"):
        clone = type(module)(config)
    clone = clone.to(dtype).to_empty(device=device)
    if getattr(config, "tie_word_embeddings", False):
        clone.tie_weights()  # to_empty gives each module its own tensor: tie them again
    with torch.no_grad():
        for (name, dst), (src_name, src) in zip(list(clone.named_buffers()), list(module.named_buffers()), strict=True):
            if name != src_name:
                raise RuntimeError(f"the rollout copy's buffer {name} does not line up with the policy's {src_name}")
            if _is_rope_frequency(name, src):  # float32, as a model loaded in ``dtype`` keeps it (cast_model)
                _set_buffer(clone, name, src.detach().to(device=device, dtype=torch.float32).clone())
            else:
                dst.copy_(src)
    if getattr(module, "generation_config", None) is not None:  # its EOS ids end the rollouts
        clone.generation_config = copy.deepcopy(module.generation_config)
    return clone.eval().requires_grad_(False)


def _is_rope_frequency(name: str, buffer) -> bool:
    return name.rsplit(".", 1)[-1] in ROPE_FREQUENCY_BUFFERS and buffer.is_floating_point()


def _set_buffer(module, name: str, value) -> None:
    owner_name, _, attr = name.rpartition(".")
    owner = module.get_submodule(owner_name) if owner_name else module
    owner._buffers[attr] = value  # keeps the buffer's persistence


def cast_model(module, dtype):
    """``module`` in ``dtype`` as ``from_pretrained(dtype=...)`` loads a model, which is what sweeps and
    every generation engine run: parameters and buffers cast, except the rotary embeddings' frequencies
    (``inv_freq``, :data:`ROPE_FREQUENCY_BUFFERS`), which stay float32. ``module.to(bfloat16)`` casts
    those too, and a bf16 ``inv_freq`` turns every position by a slightly other angle (relative error
    ~1e-3), so a bf16 rollout copy made that way was another model than a bf16 sweep of the same weights
    (greedy completions of the wide tiny policy differed on 7 of 12 items)."""
    import torch

    keep = {name: buffer.detach().to(torch.float32).clone() for name, buffer in module.named_buffers()
            if _is_rope_frequency(name, buffer)}
    module = module.to(dtype)
    for name, value in keep.items():
        _set_buffer(module, name, value.to(next(module.buffers()).device))
    return module


def policy_weights(module, zero3: bool):
    """``(name, tensor)`` for each parameter of ``module`` under its Hugging Face name. Under
    ZeRO-3 a parameter is a shard until gathered: each is gathered in turn and copied out, so at
    most one full parameter is materialised beyond the engine's own weights."""
    if not zero3:
        for name, param in module.named_parameters():
            yield name, param.detach()
        return
    import deepspeed

    for name, param in module.named_parameters():
        with deepspeed.zero.GatheredParameters([param], modifier_rank=None):
            yield name, param.detach().clone()


def make_rollout_engine(config: GRPOConfig, engine, tokenizer, *, policy_dir, world: int, home: str | None,
                        log: Callable[[str], None], device=None) -> Any:
    """The rollout engine the recipe's ``rollout.backend`` means here (see the module docstring)."""
    backend = config.rollout.backend
    if world > 1 and backend != "torch":
        if backend == "vllm":
            raise RolloutEngineError(f"rollout.backend vllm runs one engine per process, and this run has {world} "
                                     "ranks: train with one process, or set rollout.backend: torch")
        if backend == "vllm-server":  # every rank would push the weights: not built
            raise RolloutEngineError(f"rollout.backend vllm-server takes one training process (its weight pushes), "
                                     f"and this run has {world} ranks: train with one process, or use torch")
        chosen, why = "torch", f"torch (auto: {world} ranks; vLLM rollouts run in one process)"
    else:
        chosen, why = resolve_backend(backend, policy_dir)
    log(f"rollouts: {why}")
    if chosen == "vllm":
        return VllmRollouts(str(policy_dir), config, tokenizer, home)
    if chosen == "vllm-server":  # a running vLLM server (generation.vllm_server)
        return VllmServerRollouts(str(policy_dir), config, tokenizer, home)
    return TorchRollouts(engine, config, tokenizer, device)


class VllmServerRollouts:
    """Rollouts from a running vLLM server, which the trainer's ``sync`` pushes the policy's current
    weights into before every step (:meth:`VllmServerEngine.load_weights`); the same three methods
    as :class:`training.rollout_engine.VllmRollouts`. The server may start on any checkpoint of the
    policy's shapes served under the policy folder's name: step 1 pushes the trainer's weights."""

    name = "vllm-server"

    def __init__(self, policy_dir: str, config, tokenizer, home: str | None):
        rollout = config.rollout
        self.tokenizer = tokenizer
        self.zero3 = config.deepspeed.zero_stage == 3
        from generation.vllm_server import VllmServerEngine, VllmServerError, WORKER_EXTENSION

        self.engine = VllmServerEngine(policy_dir, server_url=rollout.server_url, sync_dir=rollout.sync_dir,
                                       home=home, dtype=config.rollout_dtype,
                                       max_model_len=config.max_prompt_length + config.max_completion_length)
        if not self.engine.info:
            self.engine.close()
            raise VllmServerError(f"the vLLM server at {self.engine.url} cannot take the trainer's weights: start it "
                                  f"with VLLM_SERVER_DEV_MODE=1 and --worker-extension-cls {WORKER_EXTENSION}")

    def sync(self, engine) -> float:
        """Push the DeepSpeed engine's parameters to the server (gathered one by one under ZeRO-3)."""
        return self.engine.load_weights(policy_weights(engine.module, self.zero3))

    def generate(self, prompt_ids: list[list[int]], params: SamplingParams, seeds: Seeds,
                 with_logprobs: bool) -> list:
        generations = self.engine.generate_ids(prompt_ids, params, seeds, with_logprobs=with_logprobs)
        return [[DecodedRow(i, g.token_ids, g.text, g.finish_reason, g.latency_s, g.token_logprobs)
                 for g in per_prompt] for i, per_prompt in enumerate(generations)]

    def close(self) -> None:
        self.engine.close()
