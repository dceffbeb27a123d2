"""Where a GRPO run's rollouts are sampled: the torch decode loop, or a colocated vLLM engine.

:func:`make_rollout_engine` resolves the recipe's ``rollout.backend`` (``auto``:
:func:`training.generation.resolve_backend`) and returns one of two objects with the same three
methods, which the trainer calls once per step:

- ``sync(engine) -> seconds``: make the sampler hold the policy's current weights;
- ``generate(prompt_ids, params, seeds, with_logprobs) -> [[DecodedRow]]``: ``params.n`` rows
  per prompt, each with its completion ids and, when asked, each token's log-prob under the
  distribution it was sampled from (what importance sampling compares with the trainer's);
- ``close()``.

:class:`TorchRollouts` decodes with :func:`training.generation.decode_batch` from the policy itself
or from a copy in ``rollout_dtype`` (``sync`` copies the parameters in). :class:`VllmRollouts`
keeps one in-process :class:`training.vllm_engine.VllmEngine` for the whole run (started from the
policy folder, in ``rollout_dtype``), and ``sync`` streams the DeepSpeed engine's parameters into
it (:meth:`training.vllm_engine.VllmEngine.load_weights`: in place, never a reload from disk);
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
from training.generation import DecodedRow, SamplingParams, Seeds, decode_batch, resolve_backend


class RolloutEngineError(RuntimeError):
    """The rollout backend a recipe asks for cannot run here; says what to change."""


class TorchRollouts:
    """Rollouts from the policy module itself, or from a synced copy in ``rollout_dtype``."""

    name = "torch"

    def __init__(self, engine, config: GRPOConfig, tokenizer):
        import torch

        self.tokenizer = tokenizer
        module = engine.module
        current = next(module.parameters()).dtype
        wanted = getattr(torch, config.rollout_dtype)
        if wanted == current or config.deepspeed.zero_stage == 3:  # ZeRO-3 params live sharded: use hooks
            self.model = module
            return
        clone = copy.deepcopy(module).to(wanted)
        clone.eval().requires_grad_(False)
        clone.config.use_cache = True
        if config.deepspeed.gradient_checkpointing:  # the rollout copy only decodes: no recomputation
            getattr(clone, "activation_checkpointing_disable", clone.gradient_checkpointing_disable)()
        self.model = clone

    def sync(self, engine) -> float:
        import torch

        started = time.perf_counter()
        if self.model is not engine.module:
            with torch.no_grad():
                for dst, src in zip(self.model.parameters(), engine.module.parameters()):
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
        from training.vllm_engine import VllmEngine

        self.tokenizer = tokenizer
        self.zero3 = config.deepspeed.zero_stage == 3
        settings = config.rollout.vllm.model_dump()
        # a (left-truncated) prompt plus a whole completion is the longest sequence it will see
        settings["max_model_len"] = settings["max_model_len"] or config.max_prompt_length + config.max_completion_length
        self.engine = VllmEngine(policy_dir, dtype=config.rollout_dtype, seed=config.seed, home=home, **settings)

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
                        log: Callable[[str], None]) -> Any:
    """The rollout engine the recipe's ``rollout.backend`` means here (see the module docstring)."""
    backend = config.rollout.backend
    if world > 1 and backend != "torch":
        if backend == "vllm":
            raise RolloutEngineError(f"rollout.backend vllm runs one engine per process, and this run has {world} "
                                     "ranks: train with one process, or set rollout.backend: torch")
        chosen, why = "torch", f"torch (auto: {world} ranks; vLLM rollouts run in one process)"
    else:
        chosen, why = resolve_backend(backend, policy_dir)
    log(f"rollouts: {why}")
    if chosen == "vllm":
        return VllmRollouts(str(policy_dir), config, tokenizer, home)
    return TorchRollouts(engine, config, tokenizer)
