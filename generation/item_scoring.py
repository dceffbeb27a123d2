"""Generate and score eval items with given seeds: the one code path sweeps and in-loop validation share.

A benchmark sweep (:mod:`evaluation.sweep`), a pass-rate measurement (:mod:`evaluation.pass_rates`)
and the trainer's in-loop validation (:mod:`training.validation`) all turn "these items, K samples
each, under these sampling parameters" into scored rows the same way, here:

- prompts are formatted by the engine (:meth:`format_prompt`, :mod:`generation.prompts`), so an
  engine over the trainer's rollout model (:class:`TokenEngine`) and a sweep's engine give the model
  the same token ids;
- every sample has its own seed, a stable hash of what the sample *is* (:func:`sample_seed`: base
  seed, domain, item id, sample index, generation config), never of where or when it ran; greedy
  decoding (K=1) draws nothing;
- each batch is scored in one ``Domain.safe_score_many`` call; a scorer that fails raises
  :class:`ItemScoringError` naming the domain and the item, and nothing is scored 0;
- a terminal domain's samples are multi-turn episodes scored by the task's hidden tests
  (:func:`run_episode_samples`).

So a validation score the trainer computes in the loop equals a sweep of that checkpoint on the same
items with the same sampling parameters (``tests/training/test_validation.py`` checks it item by item).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Sequence

from generation.contract import Generation, derive_seed, gen_identity, gen_params_of

if TYPE_CHECKING:
    import polars as pl

CLUSTER_KEYS = ("cluster_id", "template")


class ItemScoringError(RuntimeError):
    """Items could not be generated or scored (a scorer that raised, an engine that misbehaved)."""


def generation_config(params, prompt_format: str, rope_scaling: str | None = None) -> tuple[str, str]:
    """``(gen_config, gen_params)``: the sampling parameters that shape every sample (not ``n``, which
    batching chooses, nor the seed) and the prompt format, hashed and as JSON. A RoPE scaling
    (:mod:`generation.rope`) changes what the model computes, so it is part of the key when set."""
    return gen_identity(gen_params_of(params, prompt_format, rope_scaling))


def cluster_of(item: dict) -> str | None:
    """An item's cluster for clustered standard errors: its metadata's ``cluster_id``, else ``template``."""
    metadata = item.get("metadata") or {}
    for key in CLUSTER_KEYS:
        if metadata.get(key) not in (None, ""):
            return str(metadata[key])
    return None


def sample_seed(seed: int, domain: str, item_id: str, sample_idx: int, gen_config: str) -> int:
    """The seed of one sample: a stable hash of what the sample *is*, not of where or when it ran.
    The same for every checkpoint (common random numbers: :mod:`evaluation.sweep`)."""
    return derive_seed("assay.sweep", seed, domain, item_id, sample_idx, gen_config)


def episode_format(domain, prompt_format: str) -> str:
    """The prompt format a domain's samples are generated under: a terminal domain's episodes add
    the agent protocol (:data:`generation.agent_loop.PROTOCOL`), so changing it is another cache key."""
    if getattr(domain, "episode_task", None) is None:
        return prompt_format
    from generation.agent_loop import PROTOCOL

    return f"{prompt_format}+{PROTOCOL}"


def run_episode_samples(engine, domain, chunk: list[tuple[dict, list[int]]], params, checkpoint: str,
                        gen_config: str, seed: int) -> "pl.DataFrame":
    """A terminal domain's samples: each one a multi-turn episode of the policy (each turn at most
    ``params.max_new_tokens``), scored by the task's hidden tests on the host; ``completion`` holds
    the episode's transcript as JSON (every turn: assistant text, command, output, exit code, timing)."""
    import json

    import polars as pl

    from generation.agent_loop import run_episodes
    from storage.tables import RESULTS

    plan = [(item, s) for item, missing in chunk for s in missing]
    tasks = [domain.episode_task(item) for item, _ in plan]
    seeds = [sample_seed(seed, domain.name, item["id"], s, gen_config) for item, s in plan]
    episodes = run_episodes(engine, tasks, params, episode_seeds=seeds)
    now = datetime.now(timezone.utc).isoformat()
    rows = [{"checkpoint": checkpoint, "domain": domain.name, "item_id": item["id"], "sample_idx": s,
             "score": episode.reward,
             "completion": json.dumps({"end": episode.end, "passed": episode.passed, "turns": episode.transcript(),
                                       "tests": episode.test_output[-2000:], "rewards": episode.rewards},
                                      ensure_ascii=False),
             "latency_s": float(episode.seconds), "tokens": int(episode.tokens), "cluster_id": cluster_of(item),
             "gen_config": gen_config, "created_at": now}
            for (item, s), episode in zip(plan, episodes)]
    return pl.DataFrame(rows, schema=RESULTS)


def generate_and_score(engine, domain, chunk: list[tuple[dict, list[int]]], params, checkpoint: str,
                       gen_config: str, seed: int) -> "pl.DataFrame":
    """Generate the missing samples of ``chunk`` (``(item, [sample indices])``; grouped by how many
    each item misses, so each engine call shares one prefill per item) and score them in one
    ``Domain.safe_score_many`` call. ``seed``: the base seed of :func:`sample_seed`. Rows in the
    schema of lake table ``results``. A terminal domain's samples are episodes (:func:`run_episode_samples`)."""
    return generate_and_score_domains(engine, [(domain, chunk, gen_config)], params, checkpoint, seed)[0]


def generate_and_score_domains(engine, parts: list[tuple[object, list[tuple[dict, list[int]]], str]], params,
                               checkpoint: str, seed: int) -> list["pl.DataFrame"]:
    """:func:`generate_and_score` of several domains (``(domain, chunk, gen_config)`` each) with one
    engine call per number of missing samples across all of them (a bigger batch: the in-loop
    validation's many small domains), then one ``safe_score_many`` call per domain. Frames in the
    order of ``parts``."""
    import polars as pl

    from storage.tables import RESULTS

    frames: list = [None] * len(parts)
    groups: dict[int, list[tuple[int, dict, list[int]]]] = {}  # n missing -> (part, item, sample indices)
    for index, (domain, chunk, gen_config) in enumerate(parts):
        if getattr(domain, "episode_task", None) is not None:
            frames[index] = run_episode_samples(engine, domain, chunk, params, checkpoint, gen_config, seed)
            continue
        for item, missing in chunk:
            groups.setdefault(len(missing), []).append((index, item, missing))
    generated: dict[int, list] = {}  # part -> [(item, sample_idx, generation)]
    for n, group in groups.items():
        batch_params = replace(params, n=n)
        prompts = [engine.format_prompt(item["prompt"]) for _, item, _ in group]
        seeds = None
        if params.temperature > 0:
            seeds = [[sample_seed(seed, parts[index][0].name, item["id"], s, parts[index][2]) for s in missing]
                     for index, item, missing in group]
        outputs = engine.generate(prompts, batch_params, seeds=seeds)
        for (index, item, missing), generations in zip(group, outputs):
            if len(generations) != n:
                raise ItemScoringError(f"engine returned {len(generations)} completions for item {item['id']!r}, "
                                       f"expected {n}")
            generated.setdefault(index, []).extend((item, sample_idx, gen) for sample_idx, gen in zip(missing, generations))
    now = datetime.now(timezone.utc).isoformat()
    for index, (domain, _, gen_config) in enumerate(parts):
        if frames[index] is not None:
            continue
        done = generated.get(index, [])
        scores = score_batch(domain, [gen.text for _, _, gen in done], [item for item, _, _ in done])
        rows = [{"checkpoint": checkpoint, "domain": domain.name, "item_id": item["id"], "sample_idx": sample_idx,
                 "score": score, "completion": gen.text, "latency_s": float(gen.latency_s),
                 "tokens": int(gen.completion_tokens), "cluster_id": cluster_of(item), "gen_config": gen_config,
                 "created_at": now}
                for (item, sample_idx, gen), score in zip(done, scores)]
        frames[index] = pl.DataFrame(rows, schema=RESULTS)
    return frames


def score_batch(domain, completions: list[str], items: list[dict]) -> list[float]:
    """One batch of a domain, scored in one call; a failure is raised as :class:`ItemScoringError`
    naming the domain and the item (the batch's items when the domain's ``score_many`` cannot say
    which): never a 0."""
    from domains import ScoringError

    try:
        return domain.safe_score_many(completions, items)
    except Exception as exc:
        ids = sorted(set(exc.sample_ids if isinstance(exc, ScoringError) else [item["id"] for item in items]), key=str)
        where = f"item {ids[0]!r}" if len(ids) == 1 else f"one of items {', '.join(map(repr, ids))}"
        cause = exc.__cause__ if isinstance(exc, ScoringError) and exc.__cause__ is not None else exc
        raise ItemScoringError(f"domain {domain.name!r} scorer failed on {where}: {type(cause).__name__}: "
                               f"{cause}") from exc


class TokenEngine:
    """An engine (``format_prompt``, ``generate``) over a token-level sampler: the GRPO trainer's rollout
    engine (:mod:`training.rollout_engine`: ``generate(prompt_ids, params, seeds, with_logprobs)`` ->
    rows with ``completion_ids``, ``text``, ``finish_reason``, ``latency_s``), so in-loop validation
    generates through the model already loaded, with prompts formatted and tokenized exactly as the
    sweep's engines do (:class:`generation.prompts.TokenizerPrompts`). Prompts are never truncated,
    as in a sweep."""

    def __init__(self, sampler, tokenizer, name: str | None = None):
        self.sampler = sampler
        self.tokenizer = tokenizer
        self.name = name or getattr(sampler, "name", "rollout")

    @property
    def identity(self) -> str:
        return f"{self.name}/rollout-engine"

    @property
    def prompt_format(self) -> str:
        from generation.prompts import prompt_format_of_tokenizer

        return prompt_format_of_tokenizer(self.tokenizer)

    def format_prompt(self, user_text: str) -> str:
        from generation.prompts import chat_prompt

        return chat_prompt(self.tokenizer, user_text)

    def generate(self, prompts: Sequence[str], params, seeds=None, *, with_logprobs: bool = False) -> list[list[Generation]]:
        from generation.prompts import encode_prompt

        if not prompts:
            return []
        prompt_ids = [encode_prompt(self.tokenizer, p) for p in prompts]
        if seeds is None and params.temperature > 0:
            raise ItemScoringError("sampled generation through the rollout engine needs a seed per sample")
        rows = self.sampler.generate(prompt_ids, params, seeds if params.temperature > 0 else None, with_logprobs)
        return [[Generation(text=r.text, completion_tokens=len(r.completion_ids), prompt_tokens=len(prompt_ids[i]),
                            finish_reason=r.finish_reason, latency_s=r.latency_s, token_ids=list(r.completion_ids),
                            token_logprobs=r.logprobs)
                 for r in per_prompt] for i, per_prompt in enumerate(rows)]
