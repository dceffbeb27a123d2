"""Difficulty measured on the policy: the pass rate of a named policy on a domain's train items.

An item's pass rate is the share of K samples of the policy that pass (score == 1, full credit,
as in sweeps: :data:`domains.base.PASS_SCORE`). Its verdict against the domain's pass-rate band
(:func:`quality.difficulty.pass_rate_verdict`): ``too_easy`` when all K pass, ``too_hard`` when all
fail (either way every reward of the item's GRPO group is equal and it teaches nothing), else by
the band's ``[difficulty_min, difficulty_max]``.

Samples are drawn exactly like a sweep's (:mod:`evaluation.sweep`): the same sampling parameters
(:class:`evaluation.pass_rate_config.PassRateConfig` is a sweep config with other defaults), the
same generation config hash (sampling parameters + prompt format), the same per-sample seed
(:func:`evaluation.sweep.sample_seed`), generated and scored by the same
:func:`evaluation.sweep.generate_and_score` (one ``Domain.safe_score_many`` call per batch: a scorer
that raises or returns NaN fails the run naming the item, it never becomes a pass or a fail).

Cache: lake table ``pass_rates`` (:data:`storage.tables.PASS_RATES`), one row per (policy checkpoint,
domain, item, K, generation config), one batch per computation. A second call with the same key
generates nothing and does not even build the engine; new items are computed; another policy, K
or generation config is another key. The engine is not part of the key, as in sweeps.

Items: the domain's admitted train rows in the lake (``assay ingest``) when there are any, else
the first ``limit`` of the domain's own train split (``Domain.generate("train", limit)``); listed by id.
"""

from __future__ import annotations

import json
import math
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

import polars as pl

from evaluation.pass_rate_config import PassRateConfig
from evaluation.sweep import (PASS_SCORE, SweepError, check_prompt_format, engine_factory_for, engine_identity,
                              episode_format, generate_and_score, generation_config, longest_prompt)
from quality.difficulty import Band, pass_rate_verdict
from storage.lake import Lake
from storage.tables import PASS_RATES, SAMPLES, conform

TABLE = "pass_rates"
DEFAULT_RECIPE = "tiny"  # `assay train`'s default recipe: its base policy serves when there is no champion


class PassRateError(RuntimeError):
    """Pass rates could not be measured (no items, a scorer that failed, an engine that misbehaved)."""


@dataclass
class PassRates:
    """One measurement: per item ``id, pass_rate, samples, passes, verdict, cached``."""

    checkpoint: str
    domain: str
    items: pl.DataFrame = field(repr=False)
    computed: int            # items whose samples were generated in this call
    cached: int              # items found in the lake
    seconds: float
    gen_config: str
    engine: str | None = None  # what generated this call's samples (None: all cached)
    source: str = ""           # where the items came from: "lake" or "generated"

    def summary(self) -> dict:
        n = self.items.height
        return {"checkpoint": self.checkpoint, "domain": self.domain, "items": n,
                "in_band_share": float((self.items["verdict"] == "in_band").mean()) if n else None,
                "mean_pass_rate": float(self.items["pass_rate"].mean()) if n else None,
                "computed": self.computed, "cached": self.cached, "seconds": round(self.seconds, 3),
                "engine": self.engine, "gen_config": self.gen_config, "source": self.source}

    def per_item(self) -> list[dict]:
        """The CLI's JSON: ``{"id", "pass_rate", "samples", "verdict"}`` per item."""
        return self.items.select("id", "pass_rate", "samples", "verdict").to_dicts()


def cached_pass_rates(lake: Lake, checkpoint: str, domain: str, samples: int, gen_config: str) -> pl.DataFrame:
    """The ``pass_rates`` rows of one cache key (first committed row per item)."""
    rows = lake.read(TABLE, where={"checkpoint": checkpoint, "domain": domain})
    if rows.height == 0:
        return conform(pl.DataFrame(), PASS_RATES)
    rows = conform(rows, PASS_RATES).filter((pl.col("gen_config") == gen_config) & (pl.col("samples") == samples))
    return rows.unique(subset=["item_id"], keep="first", maintain_order=True)


def train_items(lake: Lake, domain, limit: int | None) -> tuple[list[dict], str]:
    """(train items sorted by id, "lake" | "generated"): the first ``limit`` by id of the domain's
    admitted train rows when it has any, else the first ``limit`` its train split generates."""
    frame = lake.read("ingest", "samples", where={"domain": domain.name})
    if frame.height:
        frame = conform(frame, SAMPLES).filter(pl.col("split") == "train")
    if frame.height:
        frame = frame.unique(subset=["id"], keep="last", maintain_order=True).sort("id")
        if limit:
            frame = frame.head(limit)
        return [{"id": r["id"], "prompt": r["prompt"], "answer": r["answer"],
                 "metadata": json.loads(r["metadata"]) if r["metadata"] else {}}
                for r in frame.iter_rows(named=True)], "lake"
    items = sorted(domain.generate("train", limit or domain.eval_size, seed=0), key=lambda r: r["id"])
    return items, "generated"


def measure_pass_rates(lake: Lake, checkpoint: str, domain, items: Sequence[dict],
                       engine_factory: Callable[[], Any], config: PassRateConfig = PassRateConfig(), *,
                       prompt_format: str, band: Band | None = None, params=None) -> PassRates:
    """Pass rates of ``checkpoint`` on ``items`` of ``domain`` (K = ``config.samples``), computing
    only the items not cached and writing them as one ``pass_rates`` batch. ``engine_factory()`` is
    called at most once, and only when some item is not cached. ``prompt_format``: the policy's
    (:func:`generation.prompts.prompt_format_of_folder`), part of the generation config. ``params``:
    sampling parameters that replace ``config.sampling(K)`` (a training run's rollout sampling)."""
    from tqdm import tqdm

    started = time.perf_counter()
    band = band or Band.for_domain(domain)
    k = config.samples
    params = params if params is not None else config.sampling(k)
    gen_config, gen_params = generation_config(params, episode_format(domain, prompt_format), config.rope_scaling)
    items = list(items)
    if not items:
        raise PassRateError(f"domain {domain.name!r} has no train items to measure")
    ids = [item["id"] for item in items]
    if len(set(ids)) != len(ids):
        raise PassRateError(f"domain {domain.name!r}: train item ids repeat; each item needs its own id")
    cached = cached_pass_rates(lake, checkpoint, domain.name, k, gen_config).filter(pl.col("item_id").is_in(ids))
    have = set(cached["item_id"].to_list())
    todo = [item for item in items if item["id"] not in have]
    engine = None
    computed = conform(pl.DataFrame(), PASS_RATES)
    if todo:
        bar = tqdm(total=len(todo) * k, desc=f"pass rates {checkpoint} {domain.name}", unit="sample",
                   file=sys.stderr, disable=not config.progress)
        frames = []
        try:
            for start in range(0, len(todo), config.batch_items):
                chunk = todo[start:start + config.batch_items]
                if engine is None:
                    engine = engine_factory()
                    check_prompt_format(engine, prompt_format)
                try:
                    rows = generate_and_score(engine, domain, [(item, list(range(k))) for item in chunk], params,
                                              checkpoint, gen_config, config.seed)
                except SweepError as exc:
                    raise PassRateError(str(exc)) from exc
                frames.append(rows)
                bar.update(rows.height)
        finally:
            bar.close()
        samples = pl.concat(frames)
        computed = _per_item(samples, k).with_columns(
            pl.lit(checkpoint).alias("checkpoint"), pl.lit(domain.name).alias("domain"),
            pl.lit(gen_config).alias("gen_config"), pl.lit(gen_params).alias("gen_params"),
            pl.lit(engine_identity(engine)).alias("engine"),
            pl.lit(datetime.now(timezone.utc).isoformat()).alias("created_at"))
        computed = conform(computed, PASS_RATES)
        lake.write_batch(TABLE, {"checkpoint": checkpoint, "domain": domain.name,
                                 "batch": f"{gen_config}-k{k}-{uuid.uuid4().hex[:12]}"}, {"part": computed})
    rows = pl.concat([cached, computed]).unique(subset=["item_id"], keep="first", maintain_order=True)
    by_id = {r["item_id"]: r for r in rows.iter_rows(named=True)}
    table = pl.DataFrame([{
        "id": i, "pass_rate": by_id[i]["pass_rate"], "samples": by_id[i]["samples"], "passes": by_id[i]["passes"],
        "verdict": pass_rate_verdict(by_id[i]["passes"], by_id[i]["samples"], band), "cached": i in have}
        for i in ids], schema={"id": pl.Utf8, "pass_rate": pl.Float64, "samples": pl.Int64, "passes": pl.Int64,
                               "verdict": pl.Utf8, "cached": pl.Boolean})
    return PassRates(checkpoint, domain.name, table, len(todo), len(items) - len(todo),
                     time.perf_counter() - started, gen_config, engine_identity(engine) if engine else None)


def _per_item(samples: pl.DataFrame, k: int) -> pl.DataFrame:
    """Per-sample rows (``storage.tables.RESULTS``) -> one row per item with its K samples."""
    per_item = samples.group_by("item_id", maintain_order=True).agg(
        pl.len().alias("samples"), (pl.col("score") >= PASS_SCORE).sum().cast(pl.Int64).alias("passes"),
        pl.col("score").mean().alias("mean_score"))
    wrong = per_item.filter(pl.col("samples") != k)
    if wrong.height:
        raise PassRateError(f"item {wrong['item_id'][0]!r} got {wrong['samples'][0]} scored samples, expected {k}")
    if not all(math.isfinite(v) for v in per_item["mean_score"].to_list()):  # safe_score_many forbids it
        raise PassRateError("a score is not a finite number")
    return per_item.with_columns((pl.col("passes") / pl.col("samples")).alias("pass_rate"))


def default_policy(tracking_uri: str) -> str:
    """The champion when there is one, else the base policy of the default recipe."""
    from storage.tracking import current_champion

    return current_champion(tracking_uri) or f"base-{DEFAULT_RECIPE}"


def policy_pass_rates(lake: Lake, tracking_uri: str, ref: str, domain, items: Sequence[dict] | None = None, *,
                      config: PassRateConfig = PassRateConfig(), backend: str = "auto", dtype: str = "bfloat16",
                      log: Callable[[str], None] | None = None, **engine_options) -> PassRates:
    """Resolve ``ref`` (checkpoint id | champion | latest | base-<recipe>) and measure its pass rates on
    ``items`` (default: :func:`train_items` up to ``config.limit``). The engine (``backend`` torch,
    vllm or auto) is built only if some item is not cached. Raises
    :class:`generation.checkpoints.CheckpointError` for an unknown policy."""
    from generation.checkpoints import ensure_checkpoint
    from generation.prompts import prompt_format_of_folder

    record = ensure_checkpoint(ref, lake, tracking_uri)  # measuring writes: a base policy is registered
    source = "given"
    if items is None:
        items, source = train_items(lake, domain, config.limit)

    if config.rope_scaling:  # what the samples are keyed on is what the engine runs
        engine_options = {**engine_options, "rope_scaling": config.rope_scaling}
    factory = engine_factory_for(record.path, lake, backend=backend, dtype=dtype, log=log,
                                 prompt_tokens=longest_prompt([domain]), max_new_tokens=config.max_new_tokens,
                                 **engine_options)
    result = measure_pass_rates(lake, record.checkpoint, domain, items, factory, config,
                                prompt_format=prompt_format_of_folder(record.path))
    result.source = source
    return result


def pass_rate_estimator(lake: Lake, tracking_uri: str, ref: str, *, config: PassRateConfig = PassRateConfig(),
                        backend: str = "auto", dtype: str = "bfloat16"):
    """A function for :func:`quality.difficulty.register_pass_rate_estimator`: ``(domain, rows, k) ->
    rates`` measured (and cached) on policy ``ref`` with this module; ``k`` replaces ``config.samples``."""

    def estimate(domain, rows: Sequence[dict], k: int) -> list[float]:
        items = [{**row, "metadata": json.loads(row["metadata"]) if isinstance(row.get("metadata"), str)
                  and row["metadata"] else (row.get("metadata") or {})} for row in rows]
        result = policy_pass_rates(lake, tracking_uri, ref, domain, items,
                                   config=PassRateConfig(**{**config.model_dump(), "samples": k}), backend=backend, dtype=dtype)
        return result.items["pass_rate"].to_list()

    return estimate


def measure_for_rollouts(lake: Lake, tracking_uri: str, policy_ref: str, rows: dict[str, list[dict]], registry, *,
                         params, samples: int, dtype: str, max_new_tokens: int, temperature: float, top_p: float,
                         rope_scaling: dict | None = None, backend: str = "auto",
                         log: Callable[[str], None] | None = None, progress: bool = True) -> dict[str, PassRates]:
    """Measure (or find cached) the pass rates of ``policy_ref`` on ``rows`` (domain -> train rows)
    with the rollouts' sampling ``params`` (a :class:`generation.contract.SamplingParams`), K =
    ``samples``, in ``dtype``: what a GRPO run's learnability sampling reads. One engine for all
    domains, built only if some item is not cached, closed before training builds its own. What a
    run's config means (which rows, which policy, which sampling) is decided by the caller
    (:func:`assets.learnability_rates.measure_for_training`), so evaluation never reads training's."""
    from generation.checkpoints import ensure_checkpoint
    from generation.prompts import prompt_format_of_folder

    record = ensure_checkpoint(policy_ref, lake, tracking_uri)
    build = engine_factory_for(record.path, lake, backend=backend, dtype=dtype, log=log,
                               prompt_tokens=longest_prompt([registry.get(d) for d in rows]),
                               max_new_tokens=max_new_tokens,
                               **({"rope_scaling": rope_scaling} if rope_scaling else {}))
    engines: list = []

    def factory():
        if not engines:
            engines.append(build())
        return engines[0]

    results = {}
    try:
        for name, domain_rows in rows.items():
            measured = PassRateConfig(samples=samples, limit=len(domain_rows), max_new_tokens=max_new_tokens,
                                      temperature=temperature, top_p=top_p, progress=progress,
                                      rope_scaling=rope_scaling)
            result = measure_pass_rates(lake, record.checkpoint, registry.get(name), domain_rows, factory, measured,
                                        prompt_format=prompt_format_of_folder(record.path), params=params)
            results[name] = result
            if log:
                s = result.summary()
                log(f"pass rates of {record.checkpoint} on {name} (K={samples}, the rollouts' sampling): "
                    f"{s['items']} items, mean {s['mean_pass_rate']:.2f}, {s['in_band_share']:.0%} in band; "
                    f"{result.computed} measured, {result.cached} cached, {result.seconds:.0f} s")
    finally:
        for engine in engines:
            close = getattr(engine, "close", None)
            if close is not None:
                close()
    return results
