"""The generation engine contract: what every engine takes and returns, in one place.

An engine (:mod:`generation.torch_engine`, :mod:`generation.vllm_engine`, :mod:`generation.vllm_server`,
:mod:`generation.llamacpp_engine`, :mod:`generation.speculative_engine`; built by
:func:`generation.factory.make_engine`) generates ``n`` completions per prompt under
:class:`SamplingParams`, each sample from its own seed, and returns a :class:`Generation` per sample.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import asdict, dataclass, field
from typing import Literal, Protocol, Sequence, get_args, runtime_checkable

Backend = Literal["torch", "vllm", "vllm-server", "auto"]
"""A generation backend as configs name it (``auto``: :func:`resolve_backend`; ``vllm-server``: a running
vLLM server, :mod:`generation.vllm_server`, never chosen by ``auto``)."""
BACKENDS: tuple[str, ...] = get_args(Backend)
@dataclass(frozen=True)
class SamplingParams:
    """How to sample; ``temperature=0`` is greedy. ``n`` completions per prompt."""

    max_new_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    n: int = 1
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be a positive int, got {self.max_new_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k!r}")
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be a positive int, got {self.n!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"stop must hold non-empty strings, got {self.stop!r}")

    def key(self) -> str:
        """Stable hash of the parameters (a cache key for sweeps)."""
        blob = json.dumps(asdict(self), sort_keys=True, default=list)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass
class Generation:
    text: str                 # completion text (stop string excluded)
    completion_tokens: int
    prompt_tokens: int
    finish_reason: str        # "stop" | "length"
    latency_s: float          # wall time of the batch share for this completion
    token_ids: list[int] = field(default_factory=list, repr=False)  # completion ids
    # log p(token) of each completion token under the distribution it was sampled from (asked for
    # with ``with_logprobs``); None otherwise
    token_logprobs: list[float] | None = field(default=None, repr=False)


Seeds = Sequence[Sequence[int]]
"""``seeds[i][j]``: the seed of sample j of prompt i (``params.n`` per prompt)."""

SEED_BITS = 63  # torch.Generator, vLLM and numpy all take a non-negative int64


def derive_seed(*parts: object) -> int:
    """A stable seed from ``parts`` (str/int/float/None): the same in every process and Python
    version (a BLAKE2b digest, not ``hash()``, which is salted per process for strings)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in parts:
        if not isinstance(part, (str, int, float, type(None))) or isinstance(part, bool):
            raise TypeError(f"derive_seed takes str/int/float/None parts, got {type(part).__name__} {part!r}")
        blob = repr(part).encode()
        digest.update(struct.pack("<Q", len(blob)) + blob)  # length-prefixed: ("ab","c") != ("a","bc")
    return int.from_bytes(digest.digest(), "little") >> (64 - SEED_BITS)


def resolve_seeds(seeds: Seeds | None, params: SamplingParams, n_prompts: int) -> list[list[int]] | None:
    """The per-sample seeds to use: ``seeds`` (validated), else derived from ``params.seed``, else
    None (fresh randomness). Always None for greedy decoding, which draws nothing."""
    if params.temperature == 0:
        return None
    if seeds is None:
        if params.seed is None:
            return None
        return [[derive_seed(params.seed, i, j) for j in range(params.n)] for i in range(n_prompts)]
    seeds = [list(per_prompt) for per_prompt in seeds]
    if len(seeds) != n_prompts or any(len(per_prompt) != params.n for per_prompt in seeds):
        raise ValueError(f"seeds must hold {params.n} seed(s) (params.n) for each of the {n_prompts} prompts, "
                         f"got lengths {[len(p) for p in seeds]}")
    bad = [s for per_prompt in seeds for s in per_prompt
           if not isinstance(s, int) or isinstance(s, bool) or not 0 <= s < 2 ** SEED_BITS]
    if bad:
        raise ValueError(f"seeds must be ints in [0, 2**{SEED_BITS}), got {bad[0]!r}: use derive_seed(...)")
    return seeds


@runtime_checkable
class GenerationEngine(Protocol):
    name: str

    def generate(self, prompts: list[str], params: SamplingParams, seeds: Seeds | None = None, *,
                 with_logprobs: bool = False) -> list[list[Generation]]: ...

    def format_prompt(self, user_text: str) -> str: ...  # generation.prompts.chat_prompt


def gen_params_of(params, prompt_format: str, rope_scaling: str | None = None) -> dict:
    """The fields of a generation config as :func:`evaluation.sweep.generation_config` records them
    in ``gen_params`` (sampling parameters without ``n`` and the seed, plus the prompt format, and
    the RoPE scaling when one is set: unset, the fields are what they always were)."""
    fields = {k: v for k, v in asdict(params).items() if k not in ("n", "seed")}
    fields["stop"] = list(fields["stop"])
    fields["prompt_format"] = prompt_format
    if rope_scaling:
        fields["rope_scaling"] = rope_scaling
    return fields


def gen_identity(params: dict) -> tuple[str, str]:
    """``(gen_config, gen_params)``: a 16-hex hash and the canonical JSON of a generation config's
    fields (:func:`gen_params_of`): the key sweeps cache samples under and comparisons match on."""
    text = json.dumps(params, sort_keys=True, default=list)
    return hashlib.sha256(text.encode()).hexdigest()[:16], text
