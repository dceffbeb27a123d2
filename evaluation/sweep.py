"""Benchmark sweeps: every eval item of every chosen domain, K samples each, scored and summarised.

One sweep = one checkpoint x some domains. The model is loaded once (lazily: a fully cached
re-run never loads it) and serves every domain. Per domain:

1. items = ``Domain.eval_items()`` (optionally the first ``limit``); K = ``--samples`` or the
   domain's ``eval_samples_per_item``;
2. the cache: rows of lake table ``results`` for (checkpoint, domain, gen_config) already hold some
   (item, sample_idx) pairs; only the missing samples are generated. The generation config is the
   sampling parameters (without n and seed) plus the prompt format (the chat template the engine
   applies, as a hash, or ``raw``; :func:`generation.prompts.prompt_format_of_folder`), stored
   readable as ``gen_params`` (JSON) and hashed as ``gen_config`` (:func:`generation_config`), so
   raising K adds samples to the cached ones, and changing ``max_new_tokens``, the temperature or
   the chat template starts afresh. Comparisons use ``gen_params`` to compare like with like
   (:mod:`evaluation.comparability`);
3. generation in batches of ``batch_items`` items (:mod:`generation.item_scoring`, the code path the
   trainer's in-loop validation shares); each batch is scored in one
   ``Domain.safe_score_many`` call (the code domain runs the batch in a sandbox pool; a scorer
   that fails raises, naming the item, and nothing is scored 0) and becomes its own lake partition
   ``results/checkpoint=<c>/domain=<d>/batch=<b>/part.parquet``;
4. the summary row (lake table ``sweep_summary``): mean of the per-item means, pass@1 and pass@K
   (the unbiased estimator of Chen et al. 2021, "Evaluating Large Language Models Trained on
   Code", eq. 1; a sample passes when it earns full credit, score == 1), the SE of the mean
   (cluster-robust when items carry a ``cluster_id``, see :func:`evaluation.regression.standard_error`;
   Miller 2024, arXiv:2411.00640), a t-based 95% CI clipped to [0, 1], n, K and tokens/s of generation.

Commits are sized by work, not by batch (issue 30): finished batches and summaries are held and
committed together, every domain's of the last ``commit_seconds`` (default 30 s) as ONE
``write_batches`` unit per table (``results`` first, then ``sweep_summary``), and at the end of the
sweep. On the team lake a commit costs about the same whatever it holds (a catalog
compare-and-swap that rewrites the table's metadata), so a fully cached or fast sweep of 300
domains is two commits, not 600; on the local lake a unit is one rename per batch, as before.
Readers see whole batches only. A sweep stopped by an error (a scorer that fails, an interrupt)
commits what it finished before it re-raises; a sweep killed outright (SIGKILL, a lost node)
loses at most the last ``commit_seconds`` of work, and resumes where its last unit stopped. The
cache is read once per sweep (one read of the checkpoint's ``results``, not one per domain), and
a domain's summary is computed from it plus what this sweep generated.

Sampling: K=1 is greedy; K>1 samples at ``temperature`` (default 0.7, top_p 0.95), since K greedy
samples would all be the same. Every sample has its own seed, a stable hash of (sweep seed,
domain, item id, sample index, gen_config) (:func:`sample_seed`), so sample k of an item is the
same draw however the sweep was batched, ordered, resumed or extended: raising K from 2 to 4 adds
two *new* draws, and they equal samples 2 and 3 of a fresh K=4 sweep. The checkpoint is left out
on purpose (common random numbers): a champion and a candidate draw sample k of an item with the
same random stream, so identical weights give identical completions and the paired comparison of
:mod:`evaluation.regression` sees less sampling noise; each checkpoint's own samples stay independent
draws, so its means, pass@k and standard errors are unchanged in distribution. An item's
``cluster_id`` comes from its metadata (``cluster_id``, else ``template``); none means the items
are treated as independent.

Engines (``backend``: torch, vllm or auto, :func:`generation.factory.resolve_backend`): the
engine is *not* part of the generation config. Both engines format and tokenize prompts through
:mod:`generation.prompts` (same token ids), apply the same sampling parameters, and sample the same
policy, so their results are draws from the same distribution: a sample cached by one engine
serves a sweep run with the other, and a regression test may compare a champion swept with torch
with a candidate swept with vLLM (valid paired statistics). What crossing engines loses is the
common-random-numbers pairing: each engine turns a seed into a sample its own way, so identical
weights give identical completions only within one engine, and a cross-engine comparison has
the (larger) variance of independent draws. Putting the engine into ``gen_config`` would have made
such comparisons ``not_comparable`` and thrown away every cached sample on a backend switch, for a
difference that is numerical, not distributional (the same holds for the dtype, also left out).
The engine that generated each row is recorded in the ``engine`` column of ``results`` (e.g.
``vllm-0.32.0/bfloat16``) and on the sweep's MLflow run, for provenance.

MLflow: :func:`log_sweep_to_mlflow` logs ``score/<domain>`` and ``stderr/<domain>`` (and n, K,
pass@k) on a run tagged with the checkpoint, linked to the checkpoint's LoggedModel when it exists,
plus each domain's item table as an artifact (through :mod:`storage.tracking`).
"""

from __future__ import annotations

import math
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import polars as pl

from evaluation.regression import json_safe
from generation.item_scoring import (CLUSTER_KEYS, ItemScoringError, cluster_of, episode_format,  # noqa: F401
                                     generation_config, run_episode_samples, sample_seed)
from evaluation.sweep_config import SweepConfig  # defined apart so `assay sweep --help` needs no numpy/polars
from domains.base import PASS_SCORE  # a sample passes when it earns full credit; evaluation.sweep.PASS_SCORE stays importable
from storage.lake import Lake
from storage.tables import RESULTS, SWEEP_SUMMARY, conform

MAX_HELD_ROWS = 200_000  # results rows a sweep holds at most before committing them, whatever the time


class SweepError(RuntimeError):
    """A sweep could not run (bad settings, a scorer that raised)."""


@dataclass
class DomainSweep:
    """What one domain's sweep did: the summary row plus how much was cached."""

    domain: str
    summary: dict
    generated: int          # samples generated in this run
    cached: int             # samples found in the lake
    seconds: float
    items: pl.DataFrame = field(repr=False, default_factory=pl.DataFrame)


@dataclass
class SweepResult:
    checkpoint: str
    domains: list[DomainSweep]
    seconds: float
    model_loaded: bool
    engine: str | None = None  # what generated this run's samples (None: every sample was cached)

    @property
    def generated(self) -> int:
        return sum(d.generated for d in self.domains)

    @property
    def cached(self) -> int:
        return sum(d.cached for d in self.domains)

    def summaries(self) -> list[dict]:
        return [d.summary for d in self.domains]

    def to_json(self) -> dict:
        return {"checkpoint": self.checkpoint, "seconds": round(self.seconds, 3), "generated": self.generated,
                "cached": self.cached, "model_loaded": self.model_loaded, "engine": self.engine,
                "domains": [{**json_safe(d.summary), "generated": d.generated, "cached": d.cached,
                             "seconds": round(d.seconds, 3)} for d in self.domains]}


# -- statistics of one checkpoint's results ------------------------------------------------------

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c passes: 1 - C(n-c, k) / C(n, k) (Chen et al. 2021)."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples, got {n}")
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def summarize(rows: pl.DataFrame, *, k: int | None = None) -> dict:
    """Summary statistics of one (checkpoint, domain, gen_config)'s per-sample rows."""
    from scipy import stats

    from evaluation.regression import standard_error

    per_item = rows.group_by("item_id").agg(
        pl.col("score").mean().alias("mean"), pl.len().alias("n"),
        (pl.col("score") >= PASS_SCORE).sum().alias("passes"),
        pl.col("cluster_id").drop_nulls().first().alias("cluster_id")).sort("item_id")
    n_items = per_item.height
    k_used = int(per_item["n"].min()) if k is None else k
    means = per_item["mean"].to_numpy()
    clusters = None
    if per_item["cluster_id"].null_count() < n_items:
        clusters = per_item["cluster_id"].fill_null(pl.lit("__item__:") + per_item["item_id"]).to_numpy()
    se, df = standard_error(means, clusters)
    mean = float(means.mean()) if n_items else float("nan")
    tq = float(stats.t.ppf(0.975, df)) if df > 0 else float("nan")
    pass1 = float(np.mean([c / n for n, c in zip(per_item["n"], per_item["passes"])])) if n_items else float("nan")
    passk = float(np.mean([pass_at_k(n, c, k_used) for n, c in zip(per_item["n"], per_item["passes"])
                           if n >= k_used])) if n_items else float("nan")
    latency = float(rows["latency_s"].sum()) if "latency_s" in rows.columns else 0.0
    tokens = float(rows["tokens"].sum()) if "tokens" in rows.columns else 0.0
    return {"n": n_items, "k": k_used, "mean": mean, "pass1": pass1, "passk": passk, "stderr": se,
            # t interval clipped to the score range [0, 1]
            "ci_low": max(0.0, mean - tq * se) if math.isfinite(se) and math.isfinite(tq) else float("nan"),
            "ci_high": min(1.0, mean + tq * se) if math.isfinite(se) and math.isfinite(tq) else float("nan"),
            "tokens_per_s": tokens / latency if latency > 0 else float("nan"),
            "clusters": None if clusters is None else int(len(set(clusters.tolist())))}


# -- the sweep -----------------------------------------------------------------------------------

def cached_rows(lake: Lake, checkpoint: str, domain: str, gen_config: str) -> pl.DataFrame:
    return _cached_of(lake.read("results", where={"checkpoint": checkpoint, "domain": domain}), domain, gen_config)


def _cached_of(rows: pl.DataFrame, domain: str, gen_config: str, fresh: Sequence[pl.DataFrame] = ()) -> pl.DataFrame:
    """One domain's cached rows under ``gen_config`` out of ``rows`` (read from the lake), then the
    ``fresh`` rows this sweep generated (committed or still held)."""
    rows = conform(rows, RESULTS) if rows.height else conform(pl.DataFrame(), RESULTS)
    if "domain" in rows.columns and rows.height:
        rows = rows.filter(pl.col("domain") == domain)
    rows = pl.concat([rows.filter(pl.col("gen_config") == gen_config), *(conform(f, RESULTS) for f in fresh)])
    # a batch re-written after a crash could repeat a sample: keep the first committed one
    return rows.unique(subset=["item_id", "sample_idx"], keep="first", maintain_order=True)


class _Unit:
    """Finished ``results`` batches and ``sweep_summary`` rows held for one commit per table."""

    def __init__(self, lake: Lake, seconds: float, log: Callable[[str], None]):
        self.lake, self.seconds, self.log = lake, seconds, log
        self.results: list[tuple[dict, dict]] = []
        self.summaries: dict[tuple[str, str], tuple[dict, dict]] = {}
        self.since: float | None = None
        self.rows = 0
        self.commits = 0

    def add_results(self, partition: dict, rows: pl.DataFrame) -> None:
        self.results.append((partition, {"part": rows}))
        self._held(rows.height)

    def add_summary(self, partition: dict, row: pl.DataFrame) -> None:
        self.summaries[(partition["checkpoint"], partition["domain"])] = (partition, {"part": row})
        self._held(1)

    def _held(self, rows: int) -> None:
        self.rows += rows
        if self.since is None:
            self.since = time.monotonic()
        if self.rows >= MAX_HELD_ROWS or time.monotonic() - self.since >= self.seconds:
            self.commit()

    def commit(self) -> None:
        if self.results:  # results before the summaries that describe them
            self.lake.write_batches("results", self.results)
            self.commits += 1
        if self.summaries:
            self.lake.write_batches("sweep_summary", list(self.summaries.values()))
            self.commits += 1
        if self.results or self.summaries:
            self.log(f"committed {len(self.results)} results batches and {len(self.summaries)} summaries "
                     f"({self.rows} rows) as one unit per table")
        self.results, self.summaries, self.since, self.rows = [], {}, None, 0


EngineFactory = Callable[[], Any]


def check_prompt_format(engine, prompt_format: str) -> None:
    """The cache key must describe what the engine really does to prompts."""
    from generation.prompts import prompt_format_of_engine

    actual = prompt_format_of_engine(engine)
    if actual is not None and actual != prompt_format:
        raise SweepError(f"the engine formats prompts as {actual!r} but the sweep was keyed on {prompt_format!r}: "
                         "pass the prompt format of the model folder the engine loads "
                         "(generation.prompts.prompt_format_of_folder)")


def run_sweep(lake: Lake, checkpoint: str, domains: Sequence, engine_factory: EngineFactory,
              config: SweepConfig = SweepConfig(), log: Callable[[str], None] | None = None, *,
              prompt_format: str | None = None) -> SweepResult:
    """Sweep ``checkpoint`` on ``domains`` (``Domain`` objects); writes ``results`` batches and one
    ``sweep_summary`` row per domain. ``engine_factory()`` builds the generation engine; it is
    called at most once, and only if some sample is not cached. ``prompt_format`` (see
    :func:`generation.prompts.prompt_format_of_folder`) is part of the cache key; None asks the
    engine, which then has to be built first even when everything is cached."""
    from tqdm import tqdm

    from generation.prompts import prompt_format_of_engine

    log = log or (lambda message: None)
    started = time.perf_counter()
    blind = [d.name for d in domains if not getattr(d, "has_verifier", True)]
    if blind:  # nothing can score them exactly: said, and no result row pretends otherwise
        log(f"not swept (no verifier; their learned reward is logged per training step): {', '.join(blind)}")
        domains = [d for d in domains if getattr(d, "has_verifier", True)]
    if not domains:
        return SweepResult(checkpoint, [], time.perf_counter() - started, False)
    engine = None
    if prompt_format is None:
        engine = engine_factory()
        prompt_format = prompt_format_of_engine(engine)
        if prompt_format is None:
            raise SweepError("the engine does not say how it formats prompts: pass prompt_format= "
                             "(generation.prompts.prompt_format_of_folder(model folder), or 'raw')")
    plans = []
    # the cache: one read of the checkpoint's results for every domain (a read is a scan on the team lake)
    committed = lake.read("results", where={"checkpoint": checkpoint})
    for domain in domains:
        k = config.samples or domain.eval_samples_per_item
        params = config.sampling(k)
        gen_config, gen_params = generation_config(params, episode_format(domain, prompt_format),
                                                   config.rope_scaling)
        items = domain.eval_items()
        if config.limit:
            items = items[: config.limit]
        if not items:
            raise SweepError(f"domain {domain.name!r} has no eval items to sweep")
        cached = _cached_of(committed, domain.name, gen_config)
        have: dict[str, set[int]] = {}
        for item_id, idx in cached.select("item_id", "sample_idx").iter_rows():
            have.setdefault(item_id, set()).add(idx)
        todo = [(item, [s for s in range(k) if s not in have.get(item["id"], ())]) for item in items]
        todo = [(item, missing) for item, missing in todo if missing]
        plans.append((domain, k, params, gen_config, gen_params, items, todo, cached))
    del committed
    total_missing = sum(len(m) for *_, todo, _ in plans for _, m in todo)
    bar = tqdm(total=total_missing, desc=f"sweep {checkpoint}", unit="sample", file=sys.stderr,
               disable=not config.progress or total_missing == 0)
    results = []
    unit = _Unit(lake, config.commit_seconds, log)
    try:
        for domain, k, params, gen_config, gen_params, items, todo, cached in plans:
            domain_start = time.perf_counter()
            generated = 0
            fresh = []
            bar.set_postfix_str(domain.name)
            for start in range(0, len(todo), config.batch_items):
                chunk = todo[start:start + config.batch_items]
                if engine is None:
                    log(f"loading the model for {checkpoint}")
                    engine = engine_factory()
                    check_prompt_format(engine, prompt_format)
                rows = generate_and_score(engine, domain, chunk, params, checkpoint, gen_config, config.seed)
                rows = rows.with_columns(pl.lit(gen_params, dtype=pl.Utf8).alias("gen_params"),
                                         pl.lit(engine_identity(engine), dtype=pl.Utf8).alias("engine"))
                unit.add_results({"checkpoint": checkpoint, "domain": domain.name,
                                  "batch": f"{gen_config}-{uuid.uuid4().hex[:12]}"}, rows)
                fresh.append(rows)
                generated += rows.height
                bar.update(rows.height)
            ids = {item["id"] for item in items}
            rows = _cached_of(cached, domain.name, gen_config, fresh).filter(pl.col("item_id").is_in(list(ids)))
            rows = rows.filter(pl.col("sample_idx") < k)
            summary = {"checkpoint": checkpoint, "domain": domain.name, **summarize(rows, k=k),
                       "gen_config": gen_config, "gen_params": gen_params,
                       "created_at": datetime.now(timezone.utc).isoformat()}
            unit.add_summary({"checkpoint": checkpoint, "domain": domain.name},
                             conform(pl.DataFrame([{c: summary.get(c) for c in SWEEP_SUMMARY}],
                                                  schema=SWEEP_SUMMARY), SWEEP_SUMMARY))
            cached_count = rows.height - generated
            log(f"{domain.name}: mean {summary['mean']:.3f} +/- {summary['stderr']:.3f} (n={summary['n']}, "
                f"K={k}; {generated} generated, {cached_count} cached)")
            results.append(DomainSweep(domain.name, summary, generated, cached_count,
                                       time.perf_counter() - domain_start, rows))
        unit.commit()
    except BaseException:
        try:  # what finished before the error is kept: a re-run resumes after it
            unit.commit()
        except Exception as exc:  # the lake itself failed: the first error is the one to see
            log(f"could not commit the finished batches after the error: {type(exc).__name__}: {exc}")
        raise
    finally:
        bar.close()
    return SweepResult(checkpoint, results, time.perf_counter() - started, engine is not None,
                       engine_identity(engine) if engine is not None else None)


def engine_identity(engine) -> str:
    """What generated a sample, for provenance (not part of the cache key: see the module docstring)."""
    return getattr(engine, "identity", None) or getattr(engine, "name", type(engine).__name__)


def generate_and_score(engine, domain, chunk: list[tuple[dict, list[int]]], params, checkpoint: str,
                       gen_config: str, seed: int) -> pl.DataFrame:
    """:func:`generation.item_scoring.generate_and_score` (the code path in-loop validation shares),
    its failures raised as :class:`SweepError`."""
    from generation.item_scoring import generate_and_score as shared

    try:
        return shared(engine, domain, chunk, params, checkpoint, gen_config, seed)
    except ItemScoringError as exc:
        raise SweepError(str(exc)) from exc


def _score_batch(domain, completions: list[str], items: list[dict]) -> list[float]:
    """:func:`generation.item_scoring.score_batch`, its failures raised as :class:`SweepError`."""
    from generation.item_scoring import score_batch

    try:
        return score_batch(domain, completions, items)
    except ItemScoringError as exc:
        raise SweepError(str(exc)) from exc


def rescore_cached(lake: Lake, checkpoint: str, domains: Sequence, log: Callable[[str], None] | None = None) -> dict:
    """Score a checkpoint's cached samples again with each domain's *current* scorer and replace
    their results batches (one unit per domain: its replaced batches together): a fixed scorer must not leave stale cached
    scores behind, and the cache key (the generation config) does not name the scorer. The
    completions are not regenerated. Terminal domains are skipped (an episode's verdict was taken on
    its final folder, which is gone). Returns ``{domain: {"rows", "changed"}}``; a later sweep
    summarizes the new scores."""
    out = {}
    for domain in domains:
        if not getattr(domain, "has_verifier", True):
            continue  # never swept: nothing cached to rescore
        if getattr(domain, "episode_task", None) is not None:
            if log:
                log(f"{domain.name}: terminal episodes cannot be rescored (sweep again to re-run them)")
            continue
        items = {item["id"]: item for item in domain.eval_items()}
        rows_total = changed = 0
        replaced = []
        for path in lake.files("results", where={"checkpoint": checkpoint, "domain": domain.name}):
            frame = conform(pl.read_parquet(path), RESULTS)
            known = frame.filter(pl.col("item_id").is_in(list(items)))
            if known.height == 0:
                continue
            scores = _score_batch(domain, known["completion"].fill_null("").to_list(),
                                  [items[i] for i in known["item_id"].to_list()])
            fresh = known.select("item_id", "sample_idx").with_columns(
                pl.Series("new_score", scores, dtype=pl.Float64))
            rescored = (frame.join(fresh, on=["item_id", "sample_idx"], how="left", maintain_order="left")
                        .with_columns(pl.col("new_score").fill_null(pl.col("score")).alias("score"))
                        .drop("new_score").select(frame.columns))
            diff = int((rescored["score"] != frame["score"]).sum())
            rows_total += frame.height
            changed += diff
            if diff:
                batch = path.parent.name.split("=", 1)[1]
                replaced.append(({"checkpoint": checkpoint, "domain": domain.name, "batch": batch},
                                 {"part": rescored}))
        lake.write_batches("results", replaced)  # the domain's replaced batches as one unit
        out[domain.name] = {"rows": rows_total, "changed": changed}
        if log:
            log(f"{domain.name}: rescored {rows_total} cached samples of {checkpoint}, {changed} changed")
    return out


# -- reading sweeps back -------------------------------------------------------------------------

def checkpoint_results(lake: Lake, checkpoint: str, domains: Iterable[str] | None = None) -> pl.DataFrame:
    """Per-sample rows of a checkpoint's latest sweep per domain (the reader: evaluation.results)."""
    from evaluation.results import checkpoint_results as read

    return read(lake, checkpoint, domains)


# -- MLflow -------------------------------------------------------------------------------------

def log_sweep_to_mlflow(result: SweepResult, tracking_uri: str, *, artifact_root: str | None = None,
                        run_name: str | None = None) -> str:
    """Log a sweep as an MLflow run against the checkpoint (its LoggedModel when registered,
    :func:`storage.tracking.find_logged_model_id`); returns the run id."""
    import tempfile
    from pathlib import Path

    from storage.tracking import Tracker, find_logged_model_id

    tracker = Tracker(tracking_uri, artifact_root)
    model_id = find_logged_model_id(tracking_uri, result.checkpoint, tracker.experiment_id())
    with tracker.run(run_name or f"sweep-{result.checkpoint}",
                     tags={"assay.kind": "sweep", "assay.checkpoint": result.checkpoint,
                           **({"assay.model_id": model_id} if model_id else {}),
                           **({"assay.engine": result.engine} if result.engine else {})}):
        metrics = {}
        for d in result.domains:
            s = d.summary
            for key in ("mean", "stderr", "pass1", "passk", "n", "k", "tokens_per_s"):
                value = s[key]
                if value is not None and math.isfinite(float(value)):
                    metrics[f"{'score' if key == 'mean' else key}/{d.domain}"] = float(value)
        tracker.log_metrics(0, metrics, model_id=model_id)
        tracker.log_metrics(0, {"sweep_seconds": result.seconds})
        with tempfile.TemporaryDirectory() as tmp:
            for d in result.domains:
                path = Path(tmp) / f"{d.domain}.parquet"
                d.items.write_parquet(path)
                tracker.log_artifact(str(path), artifact_path="items")
    return tracker.run_id


# -- the one call the CLI, Dagster and the demo make ---------------------------------------------

def engine_factory_for(model_dir, lake: Lake, *, backend: str, dtype: str,
                       log: Callable[[str], None] | None = None, prompt_tokens: int | None = None,
                       max_new_tokens: int = 0, **engine_options) -> EngineFactory:
    """``() -> engine`` for a checkpoint folder: ``backend`` resolved (torch | vllm | auto, said in
    ``log``) only when called, i.e. only if some sample has to be generated. ``prompt_tokens``: the
    longest prompt the work holds, when known; a vLLM engine is sized for it plus ``max_new_tokens``
    (:func:`vllm_length_for`) unless ``max_model_len`` is given."""

    def factory():
        from generation.factory import make_engine, resolve_backend
        from generation.variants import read_manifest

        if read_manifest(model_dir) is not None:  # a variant's method decides its engine (generation.variants)
            return make_engine(model_dir, "torch", dtype=dtype, home=str(lake.home))
        chosen, why = resolve_backend(backend, model_dir)
        if log:
            log(f"generation engine: {why}")
        options = dict(engine_options)
        if chosen == "vllm" and prompt_tokens and not options.get("max_model_len"):
            options["max_model_len"] = vllm_length_for(model_dir, prompt_tokens, max_new_tokens,
                                                       options.get("rope_scaling"))
        return make_engine(model_dir, chosen, dtype=dtype, home=str(lake.home), **options)

    return factory


def longest_prompt(domains: Sequence) -> int | None:
    """The longest formatted prompt a sweep of ``domains`` holds, from the long-context buckets they
    declare (``Domain.context_tokens``: a bucket's prompts are built 128 tokens short of it, room for
    the chat template); None when none declares one."""
    declared = [d.context_tokens for d in domains if getattr(d, "context_tokens", None)]
    return max(declared) if declared else None


def vllm_length_for(model_dir, prompt_tokens: int, max_new_tokens: int, rope_scaling: str | None) -> int:
    """vLLM's ``max_model_len`` for prompts up to ``prompt_tokens`` with completions of
    ``max_new_tokens``: at least vLLM's usual default, never past the model's window (with the
    scaling) while the prompts fit in it (a completion then stops at the window). Prompts that do
    not fit get what they need, which the engine refuses with how to fix it (a RoPE scaling)."""
    from generation.rope import RopeScaling, model_window
    from generation.vllm_engine import DEFAULT_MAX_MODEL_LEN

    window = model_window(RopeScaling.parse(rope_scaling), model_dir)
    needed = max(prompt_tokens + max_new_tokens, DEFAULT_MAX_MODEL_LEN)
    if window is None or prompt_tokens > window:
        return needed
    return min(needed, window)


def sweep_checkpoint(lake: Lake, tracking_uri: str, ref: str, domains: Sequence, *,
                     config: SweepConfig = SweepConfig(), backend: str = "auto", dtype: str = "bfloat16",
                     artifact_root: str | None = None, log_mlflow: bool = True,
                     log: Callable[[str], None] | None = None, **engine_options) -> tuple[SweepResult, str | None]:
    """Resolve ``ref`` (checkpoint id | champion | latest | base-<recipe>), sweep it on ``domains``
    with one model load, and log the sweep to MLflow. Returns (result, MLflow run id or None).
    ``backend``: torch, vllm or auto (:func:`generation.factory.resolve_backend`), decided only
    if some sample has to be generated; ``dtype`` applies to either engine."""
    from generation.checkpoints import ensure_checkpoint

    # a sweep writes: a base policy swept for the first time is registered here (scoped to MLflow's URI)
    record = ensure_checkpoint(ref, lake, tracking_uri)

    if config.rope_scaling:
        engine_options = {**engine_options, "rope_scaling": config.rope_scaling}
    factory = engine_factory_for(record.path, lake, backend=backend, dtype=dtype, log=log,
                                 prompt_tokens=longest_prompt(domains), max_new_tokens=config.max_new_tokens,
                                 **engine_options)

    from generation.prompts import prompt_format_of_folder

    # read from the tokenizer files, so a fully cached re-run still never loads the model
    result = run_sweep(lake, record.checkpoint, domains, factory, config, log=log,
                       prompt_format=prompt_format_of_folder(record.path))
    run_id = None
    if log_mlflow:
        run_id = log_sweep_to_mlflow(result, tracking_uri, artifact_root=artifact_root or str(lake.mlflow_artifacts))
    return result, run_id
