"""Generation engines: one interface for GRPO rollouts and benchmark sweeps.

``make_engine(policy_ref, backend="torch"|"vllm"|"auto", **options)`` returns a
:class:`GenerationEngine` whose ``generate(prompts, params, seeds=None, with_logprobs=False)`` gives
``params.n`` :class:`Generation` per prompt (with each token's log-prob when asked).

Backends: ``torch`` (below), ``vllm`` (:mod:`generation.vllm_engine`, CPU and CUDA) and ``auto``
(:func:`resolve_backend`): vLLM where it is installed, serves the model, and was measured faster,
else torch. "Measured faster" means: on this project's CPU machine, SmolLM2-135M, greedy, 32 new
tokens, same dtype, one process, quiet machine (bench/RESULTS.md, "Sweep throughput"), vLLM
generated 1.60x / 1.82x (bf16) and 2.53x / 2.58x (fp32) the tokens/s of transformers ``generate`` at
batch 8 / 32, where the torch engine gives 0.87x / 0.96x; on the 0.5M-parameter tiny test policy
vLLM is the slower one (its per-call scheduling outweighs the decoding), hence the size threshold
:data:`AUTO_VLLM_MIN_PARAMETERS`. On CUDA, vLLM (paged attention, CUDA graphs) is the reference
serving engine; the same rule applies. The torch engine stays the choice where vLLM cannot run:
not installed, or a model vLLM's CPU kernels refuse (head sizes other than 32, 64, 80, ...).

Seeds: every sampled completion draws from its own random stream. ``seeds[i][j]`` seeds sample j of
prompt i; without ``seeds``, ``params.seed`` derives them (:func:`derive_seed` of the seed, the
prompt's position and the sample index), and without either they come from torch's global RNG.
A completion therefore depends only on its own seed and its prompt, never on which other prompts
or samples shared its batch: a caller that derives seeds from what a sample *is* (a sweep: the
domain, item, sample index and generation config) gets the same completion however the work was
batched, ordered, resumed or extended. That holds exactly in float32; in bfloat16 the logits of a
row move by a rounding step with the batch's padding and size, which now and then crosses a token
boundary (1 of 30 completions differed between batches of 1 and 16 items on the tiny policy).
Greedy decoding (``temperature=0``) ignores seeds.

The torch backend (CPU default) is a hand-written decode loop rather than ``model.generate``:

- prompts are tokenized once, sorted by length and left-padded into batches (less padding), a
  batch holding at most ``max_batch_tokens`` prompt tokens (a few 16k prompts, or many short ones);
- with ``prefill_chunk_tokens`` set, longer prompts are prefilled chunk by chunk into the KV cache,
  so the activations of one forward stay bounded by the chunk (off by default: see
  :data:`DEFAULT_PREFILL_CHUNK_TOKENS`);
- with ``n > 1`` each distinct prompt is prefilled once and its KV cache repeated ``n`` times;
- decoding reuses a KV cache and feeds one token per row per step under ``torch.inference_mode``;
- rows that finish (EOS, a stop string, or the length limit) leave the batch at once, so the
  longest completion does not keep every other row computing;
- stop strings are checked on the decoded tail of each row only, and excluded from ``text``;
- sampling is vectorised across rows by inverse-CDF: each row draws its uniforms for the whole
  completion up front from its own ``torch.Generator`` (made on the logits' device), and one
  ``cumsum`` + ``searchsorted`` picks every row's token per step (cheaper than ``torch.multinomial``).

:func:`decode_batch` is the token-level core, shared with the GRPO trainer (which needs the token
ids, not only the text). Prompts are formatted and tokenized by :mod:`generation.prompts`, as the
trainer's are. The vLLM backend lives in :mod:`generation.vllm_engine` and is imported only
when chosen.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

from generation.contract import (BACKENDS, SEED_BITS, Backend, Generation, GenerationEngine,  # noqa: F401
                                 SamplingParams, Seeds, derive_seed, resolve_seeds)
from generation.prompts import TokenizerPrompts

TORCH_OPTIONS = ("dtype", "max_batch_size", "max_batch_tokens", "prefill_chunk_tokens", "rope_scaling", "threads", "home")
DEFAULT_MAX_BATCH_TOKENS = 32_768
"""Prompt tokens (padding included) one torch-engine batch may hold: a batch of 16k-token prompts
would otherwise hold 64 KV caches of ~0.75 GB each (SmolLM2, fp32)."""
DEFAULT_PREFILL_CHUNK_TOKENS = 0
"""Prompt tokens per prefill forward in the torch engine; 0: the whole prompt in one forward.
Measured on CPU (bench/RESULTS.md "Long context"): chunks of 4,096 made SmolLM2's 16k prefill 26%
slower and saved 2% of peak memory (torch's CPU sdpa holds no full attention matrix, and a chunk
after the first needs an explicit mask), so chunking is an option (for models or batches whose
activations, not the KV cache, fill memory), not the default."""


# -- the token-level decode loop ----------------------------------------------------------------


@dataclass
class DecodedRow:
    prompt_index: int
    completion_ids: list[int]
    text: str
    finish_reason: str
    latency_s: float
    logprobs: list[float] | None = None  # per completion token, see decode_batch(with_logprobs=True)


@dataclass
class DecodeStats:
    """What the torch engine's decoding cost, accumulated over calls (``TorchEngine.stats``)."""

    prompts: int = 0
    prompt_tokens: int = 0        # real prompt tokens prefilled (padding not counted)
    padded_tokens: int = 0        # prompt positions computed, padding included
    prefill_s: float = 0.0
    decode_tokens: int = 0        # completion tokens sampled
    decode_s: float = 0.0
    batches: int = 0
    peak_kv_bytes: int = 0        # largest KV cache one batch held (after its prefill)


def kv_cache_bytes(model_config, tokens: int, bytes_per_value: int) -> int:
    """The KV cache ``tokens`` positions need: keys and values of every layer's KV heads."""
    text = getattr(model_config, "text_config", model_config)
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or text.num_attention_heads
    return 2 * text.num_hidden_layers * kv_heads * head_dim * tokens * bytes_per_value


def _cache_bytes(cache) -> int:
    total = 0
    for layer in getattr(cache, "layers", ()):
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if tensor is not None and hasattr(tensor, "nbytes"):
                total += tensor.nbytes
    return total


PAD_SLACK = 256  # padding a batch may add to a prompt whatever the ratio (short prompts batch freely)


def length_batches(lengths: Sequence[int], per_row: int, max_rows: int, max_tokens: int) -> list[list[int]]:
    """Prompt indices grouped into batches, longest first: each batch at most ``max_rows`` rows and
    ``max_tokens`` padded prompt tokens (rows x its longest prompt; ``per_row`` rows per prompt),
    so long prompts go together in small batches and short ones fill big ones. A prompt under half
    the batch's longest (and more than :data:`PAD_SLACK` tokens shorter) starts a new batch rather
    than be padded to it. A prompt longer than the budget gets a batch of its own."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for index in order:
        if batches:
            batch = batches[-1]
            rows = (len(batch) + 1) * per_row
            longest = lengths[batch[0]]
            padded_badly = 2 * lengths[index] < longest and longest - lengths[index] > PAD_SLACK
            if rows <= max_rows and rows * longest <= max_tokens and not padded_badly:
                batch.append(index)
                continue
        batches.append([index])
    return batches


def _filtered_logits(logits, params: SamplingParams):
    """Logits at the sampling temperature with top-k / top-p applied (-inf outside the nucleus)."""
    import torch

    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = torch.topk(logits, params.top_k, dim=-1).values[..., -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop = cumulative - sorted_logits.softmax(-1) > params.top_p  # keep the first token always
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


def pick_tokens(logits, params: SamplingParams, uniforms=None):
    """One token per row: argmax when greedy, else inverse-CDF sampling with ``uniforms`` (one
    draw in [0, 1) per row, from that row's own stream): the first token whose cumulative
    probability exceeds ``u * total``. A token of probability 0 is never picked (its cumulative
    value equals its predecessor's), and a row's pick depends on nothing but its logits and its u."""
    import torch

    if params.temperature == 0:
        return logits.argmax(dim=-1)
    probs = _filtered_logits(logits, params).softmax(-1)
    cdf = probs.cumsum(-1)
    target = uniforms.to(cdf.dtype) * cdf[:, -1]
    picked = torch.searchsorted(cdf, target[:, None], right=True).squeeze(-1)
    # u * total can round up to total: fall back to the last token that has probability
    last = probs.shape[-1] - 1 - (probs > 0).flip(-1).to(torch.int8).argmax(-1)
    return torch.minimum(picked, last)


class RowNoise:
    """Each row's uniforms for the whole completion, drawn once from that row's own generator."""

    def __init__(self, seeds: list[int], steps: int, device):
        import torch

        self.tape = torch.stack([
            torch.rand(steps, generator=torch.Generator(device=device).manual_seed(seed), device=device)
            for seed in seeds]) if seeds else torch.empty((0, steps), device=device)

    def at(self, step: int):
        return self.tape[:, step]

    def select(self, index) -> None:
        self.tape = self.tape[index]


class StopChecker:
    """Finds stop strings in the decoded tail of a row without decoding the whole row each step."""

    def __init__(self, tokenizer, stops: Sequence[str]):
        self.tokenizer = tokenizer
        self.stops = tuple(stops)
        self.tail_tokens = max((len(s) for s in self.stops), default=0) + 4

    def hit(self, ids: list[int]) -> bool:
        if not self.stops:
            return False
        tail = self.tokenizer.decode(ids[-self.tail_tokens:], skip_special_tokens=True)
        return any(s in tail for s in self.stops)

    def cut(self, text: str) -> str:
        return cut_at_stop(text, self.stops)


def cut_at_stop(text: str, stops: Sequence[str]) -> str:
    """``text`` up to the first stop string it holds (all of it when it holds none)."""
    positions = [text.find(s) for s in stops if s in text]
    return text[: min(positions)] if positions else text


def completion_text(tokenizer, token_ids: Sequence[int], stops: Sequence[str]) -> str:
    """A completion's text as both engines report it: its ids decoded without special tokens, cut
    at the first stop string. (A text built up token by token would differ where the ids end inside
    a multi-byte character.)"""
    return cut_at_stop(tokenizer.decode(list(token_ids), skip_special_tokens=True), stops)


def eos_token_ids(model, tokenizer) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if value is None:
            continue
        ids.update(value if isinstance(value, (list, tuple, set)) else [value])
    return ids


def decode_batch(model, tokenizer, prompt_ids: list[list[int]], params: SamplingParams, *,
                 max_batch_size: int = 64, seeds: Seeds | None = None, with_logprobs: bool = False,
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS,
                 stats: DecodeStats | None = None) -> list[list[DecodedRow]]:
    """Sample ``params.n`` completions for each tokenized prompt; returns rows grouped per prompt.

    ``seeds[i][j]`` seeds sample j of prompt i (see the module docstring; without it, from
    ``params.seed``, else from torch's global RNG). ``with_logprobs`` records, per completion token,
    its log-probability under the model's distribution at the sampling temperature, before top-k /
    top-p truncation: the quantity the GRPO trainer recomputes (as TRL does), so the two can be
    compared. The model runs in whatever dtype it holds; call under ``torch.inference_mode``.
    Batches: :func:`length_batches`; prefill in chunks of ``prefill_chunk_tokens``; ``stats``
    accumulates what it cost.
    """
    import torch

    seeds = resolve_seeds(seeds, params, len(prompt_ids))
    if seeds is None and params.temperature > 0:  # unseeded: fresh seeds from torch's global RNG
        seeds = torch.randint(0, 2 ** SEED_BITS - 1, (len(prompt_ids), params.n), device="cpu").tolist()
    eos = eos_token_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)
    stops = StopChecker(tokenizer, params.stop)
    results: list[list[DecodedRow]] = [[] for _ in prompt_ids]
    device = next(model.parameters()).device
    stats = stats if stats is not None else DecodeStats()
    batches = length_batches([len(p) for p in prompt_ids], params.n, max(params.n, max_batch_size), max_batch_tokens)
    for chunk in batches:
        row_seeds = [s for i in chunk for s in seeds[i]] if seeds is not None else []
        started = time.perf_counter()
        rows = _decode_chunk(model, [prompt_ids[i] for i in chunk], params, eos, pad_id, stops,
                             row_seeds, device, with_logprobs, prefill_chunk_tokens, stats)
        share = (time.perf_counter() - started) / max(1, len(rows))
        for (local, ids, reason, logprobs) in rows:
            prompt_index = chunk[local // params.n]
            text = tokenizer.decode(ids, skip_special_tokens=True)
            if reason == "stop" and params.stop:
                text = stops.cut(text)
            results[prompt_index].append(DecodedRow(prompt_index, ids, text, reason, share, logprobs))
    return results


def cache_argument(model) -> str:
    """The name under which ``model.forward`` takes its KV cache: ``cache`` from transformers 5.20,
    ``past_key_values`` before (vLLM's CPU build pins transformers < 5.20). An unknown keyword is
    swallowed by ``**kwargs`` without a word, and decoding would then run without its cache."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _decode_chunk(model, prompts: list[list[int]], params: SamplingParams, eos: set[int], pad_id: int,
                  stops: StopChecker, row_seeds: list[int], device, with_logprobs: bool,
                  prefill_chunk: int, stats: DecodeStats):
    import torch
    from transformers import DynamicCache

    width = max(len(p) for p in prompts)  # left-padded, laid out in Python, one copy to the device
    ids = torch.tensor([[pad_id] * (width - len(p)) + list(p) for p in prompts], dtype=torch.long, device=device)
    attn = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long, device=device)
    positions = (attn.cumsum(-1) - 1).clamp(min=0)
    cache = DynamicCache(config=model.config)
    cache_kw = {cache_argument(model): cache}
    prefill_started = time.perf_counter()
    chunk = prefill_chunk if prefill_chunk > 0 else width
    for start in range(0, width, chunk):  # one forward for prompts up to a chunk long
        end = min(width, start + chunk)
        out = model(input_ids=ids[:, start:end], attention_mask=attn[:, :end], position_ids=positions[:, start:end],
                    **cache_kw, use_cache=True, logits_to_keep=1)
    logits = out.logits[:, -1].float()
    stats.prefill_s += time.perf_counter() - prefill_started
    stats.prompts += len(prompts)
    stats.batches += 1
    stats.prompt_tokens += sum(len(p) for p in prompts)
    stats.padded_tokens += width * len(prompts)
    decode_started = time.perf_counter()
    next_pos = positions[:, -1] + 1
    if params.n > 1:  # one prefill per distinct prompt, then n copies of its cache
        cache.batch_repeat_interleave(params.n)
        logits = logits.repeat_interleave(params.n, 0)
        attn = attn.repeat_interleave(params.n, 0)
        next_pos = next_pos.repeat_interleave(params.n, 0)
    stats.peak_kv_bytes = max(stats.peak_kv_bytes, _cache_bytes(cache))
    total = logits.shape[0]
    sampling = params.temperature > 0
    noise = RowNoise(row_seeds, params.max_new_tokens, logits.device) if sampling else None
    generated: list[list[int]] = [[] for _ in range(total)]
    logprobs: list[list[float]] | None = [[] for _ in range(total)] if with_logprobs else None
    finished: list[tuple[int, list[int], str, list[float] | None]] = []
    active = list(range(total))  # batch row -> sequence index
    for step in range(params.max_new_tokens):
        tokens = pick_tokens(logits, params, noise.at(step) if sampling else None)
        token_list = tokens.tolist()
        if with_logprobs:
            scaled = logits / params.temperature if sampling else logits
            chosen = scaled.log_softmax(-1).gather(-1, tokens[:, None]).squeeze(-1).tolist()
        keep = []
        for row, seq in enumerate(active):
            token = token_list[row]
            generated[seq].append(token)
            if with_logprobs:
                logprobs[seq].append(chosen[row])
            done = ("stop" if token in eos or stops.hit(generated[seq]) else
                    "length" if len(generated[seq]) >= params.max_new_tokens else None)
            if done:
                finished.append((seq, generated[seq], done, logprobs[seq] if with_logprobs else None))
            else:
                keep.append(row)
        if not keep:
            break
        if len(keep) < len(active):
            index = torch.tensor(keep, dtype=torch.long, device=device)
            cache.batch_select_indices(index)
            attn, tokens, next_pos = attn[index], tokens[index], next_pos[index]
            if noise is not None:
                noise.select(index.to(noise.tape.device))
            active = [active[r] for r in keep]
        attn = torch.cat([attn, attn.new_ones((attn.shape[0], 1))], dim=1)
        out = model(input_ids=tokens[:, None], attention_mask=attn, position_ids=next_pos[:, None],
                    **cache_kw, use_cache=True)
        logits = out.logits[:, -1].float()
        next_pos = next_pos + 1
    finished.sort(key=lambda f: f[0])
    stats.decode_s += time.perf_counter() - decode_started
    stats.decode_tokens += sum(len(f[1]) for f in finished)
    return finished


# -- the torch engine ---------------------------------------------------------------------------


class TorchEngine(TokenizerPrompts):
    """Batched KV-cache generation with plain torch (the CPU backend)."""

    name = "torch"

    def __init__(self, model, tokenizer, *, max_batch_size: int = 64, policy_ref: str | None = None,
                 max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
                 prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS, rope_scaling: str | None = None):
        for name, value, least in (("max_batch_size", max_batch_size, 1), ("max_batch_tokens", max_batch_tokens, 1),
                                   ("prefill_chunk_tokens", prefill_chunk_tokens, 0)):
            if not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}"
                                 + (" (0: whole prompts)" if least == 0 else ""))
        self.model = model
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self.policy_ref = policy_ref
        self.rope_scaling = rope_scaling  # the spec the model was loaded with (generation.rope), provenance
        self.label: str | None = None  # what was done to the weights (a variant's method, e.g. int8), provenance
        self.stats = DecodeStats()  # accumulated over every generate call

    def kv_cache_bytes(self, tokens: int) -> int:
        """What ``tokens`` positions of KV cache take in the model's dtype."""
        dtype = next(self.model.parameters()).dtype
        return kv_cache_bytes(self.model.config, tokens, dtype.itemsize)


    @property
    def identity(self) -> str:
        """The engine and the dtype it runs the model in, e.g. ``torch/bfloat16`` (provenance)."""
        dtype = str(next(self.model.parameters()).dtype).removeprefix('torch.')
        return (f"torch/{dtype}" + (f"/rope={self.rope_scaling}" if self.rope_scaling else "")
                + (f"/{self.label}" if self.label else ""))



    def generate(self, prompts: list[str], params: SamplingParams, seeds: Seeds | None = None, *,
                 with_logprobs: bool = False) -> list[list[Generation]]:
        """``params.n`` completions per prompt; ``seeds[i][j]`` seeds sample j of prompt i. With
        ``with_logprobs``, each token's log-prob at the sampling temperature (before top-k / top-p:
        see :func:`decode_batch`)."""
        import torch

        if not prompts:
            return []
        prompt_ids = self.encode(prompts)
        if any(not ids for ids in prompt_ids):
            raise ValueError("an empty prompt cannot be generated from: give every prompt some text")
        self.model.eval()
        with torch.inference_mode():
            rows = decode_batch(self.model, self.tokenizer, prompt_ids, params,
                                max_batch_size=self.max_batch_size, seeds=seeds, with_logprobs=with_logprobs,
                                max_batch_tokens=self.max_batch_tokens,
                                prefill_chunk_tokens=self.prefill_chunk_tokens, stats=self.stats)
        return [[Generation(text=r.text, completion_tokens=len(r.completion_ids),
                            prompt_tokens=len(prompt_ids[i]), finish_reason=r.finish_reason,
                            latency_s=r.latency_s, token_ids=r.completion_ids, token_logprobs=r.logprobs)
                 for r in per_prompt]
                for i, per_prompt in enumerate(rows)]

    def close(self) -> None:
        """Nothing to free beyond the model itself (symmetry with the vLLM engine)."""


# ``auto`` picks vLLM from this size up. Measured (bench/RESULTS.md): vLLM is faster from
# SmolLM2-135M (134.5M parameters) on; on the 0.5M-parameter tiny test policy its per-call
# scheduling costs more than the decoding (64 samples x 16 tokens: 0.10 s vs 0.035 s for the torch
# engine, plus ~10 s to import vLLM and start the engine). Sizes in between are unmeasured: the
# switch sits just below the smallest model measured faster.
