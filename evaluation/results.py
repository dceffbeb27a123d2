"""The one reader of sweep results: a checkpoint's per-sample rows and sweep summaries, read once.

Every consumer of swept samples (promotion and regression via :mod:`evaluation.promotion`, variant
certification, the GRPO run's comparisons in the benches, a rescore) reads them here, so what
"a checkpoint's results on a domain" means is decided in one place:

- :func:`read_checkpoint` reads lake tables ``results`` and ``sweep_summary`` for one checkpoint,
  all its domains at once (two reads, not two per domain);
- :meth:`CheckpointResults.configs` lists the generation configs the checkpoint was swept with
  on a domain, latest first: the config of its latest ``sweep_summary`` row, then the others by
  their newest row, with K when the summary names it;
- :meth:`CheckpointResults.rows_for` keeps one config's rows (and the summary's K), each
  (item, sample) once, its newest row: a batch re-written after a crash, or a re-run of the same
  samples, repeats a sample;
- :func:`checkpoint_results` is a checkpoint's latest sweep per domain; :func:`comparable_results`
  pairs two checkpoints per domain on a config both were swept with; :func:`compared_rows` is one
  domain's pair as a stored comparison used it (the dashboard's item-by-item view).

Nothing here writes: reading results never registers a checkpoint or records a comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

import polars as pl

from storage.lake import Lake
from storage.tables import RESULTS, SWEEP_SUMMARY, conform


@dataclass(frozen=True)
class SweptConfig:
    """One generation config a checkpoint was swept with on a domain."""

    gen_config: str
    gen_params: str | None      # readable JSON (null in data written before it was recorded)
    k: int | None               # K of the sweep summary when it names this config, else None (all samples)
    swept_at: str               # the newest row's created_at


def _empty_results() -> pl.DataFrame:
    return conform(pl.DataFrame(), RESULTS)


@dataclass
class CheckpointResults:
    """One checkpoint's swept samples (``results`` contract) and sweep summaries, as read once."""

    checkpoint: str
    rows: pl.DataFrame = field(repr=False)
    summaries: pl.DataFrame = field(repr=False)

    @property
    def domains(self) -> list[str]:
        """The domains the checkpoint has a sweep summary of (a finished sweep), sorted."""
        return sorted(set(self.summaries["domain"].to_list())) if self.summaries.height else []

    def domain_rows(self, domain: str) -> pl.DataFrame:
        return self.rows.filter(pl.col("domain") == domain) if self.rows.height else _empty_results()

    def configs(self, domain: str) -> list[SweptConfig]:
        rows = self.domain_rows(domain)
        if rows.height == 0:
            return []
        summary = self.summaries.filter(pl.col("domain") == domain) if self.summaries.height else self.summaries
        latest = summary.sort("created_at").row(-1, named=True) if summary.height else {}
        found = (rows.group_by("gen_config")
                 .agg(pl.col("gen_params").drop_nulls().first(), pl.col("created_at").max())
                 .sort("created_at", descending=True, nulls_last=True))
        configs = [SweptConfig(c, params, int(latest["k"]) if latest.get("gen_config") == c and latest.get("k")
                               else None, at or "") for c, params, at in found.iter_rows() if c is not None]
        return sorted(configs, key=lambda c: c.gen_config != latest.get("gen_config"))  # stable: the summary's first

    def rows_for(self, domain: str, config: SweptConfig) -> pl.DataFrame:
        rows = self.domain_rows(domain).filter(pl.col("gen_config") == config.gen_config)
        if config.k is not None:
            rows = rows.filter(pl.col("sample_idx") < config.k)
        rows = rows.sort("created_at", descending=True, nulls_last=True, maintain_order=True)
        return rows.unique(subset=["item_id", "sample_idx"], keep="first", maintain_order=True)

    def config_named(self, domain: str, gen_config: str) -> SweptConfig | None:
        return next((c for c in self.configs(domain) if c.gen_config == gen_config), None)

    def latest(self, domains: Iterable[str] | None = None) -> pl.DataFrame:
        """Per-sample rows of the latest sweep of each domain (of ``domains`` when given)."""
        wanted = set(domains) if domains is not None else None
        frames = []
        for domain in self.domains:
            if wanted is not None and domain not in wanted:
                continue
            configs = self.configs(domain)
            if configs:
                frames.append(self.rows_for(domain, configs[0]))
        return pl.concat(frames) if frames else _empty_results()


def _read(lake: Lake, table: str, checkpoint: str, domains: Sequence[str] | None) -> pl.DataFrame:
    if domains is None:
        return lake.read(table, where={"checkpoint": checkpoint})
    frames = [f for d in domains if (f := lake.read(table, where={"checkpoint": checkpoint, "domain": d})).height]
    return pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()


def read_checkpoint(lake: Lake, checkpoint: str, domains: Sequence[str] | None = None) -> CheckpointResults:
    """``checkpoint``'s results and sweep summaries: one read of each table for every domain, or
    only ``domains``' partitions (a page about one domain reads that domain's files only)."""
    rows = _read(lake, "results", checkpoint, domains)
    summaries = _read(lake, "sweep_summary", checkpoint, domains)
    return CheckpointResults(checkpoint, conform(rows, RESULTS) if rows.height else _empty_results(),
                             conform(summaries, SWEEP_SUMMARY) if summaries.height
                             else conform(pl.DataFrame(), SWEEP_SUMMARY))


def swept_configs(lake: Lake, checkpoint: str, domain: str) -> list[SweptConfig]:
    """The generation configs of ``checkpoint``'s results on ``domain``, latest first."""
    return read_checkpoint(lake, checkpoint).configs(domain)


def checkpoint_results(lake: Lake, checkpoint: str, domains: Iterable[str] | None = None) -> pl.DataFrame:
    """Per-sample rows of ``checkpoint``'s latest sweep of each domain (``results`` contract)."""
    return read_checkpoint(lake, checkpoint).latest(domains)


def pair_results(candidate: CheckpointResults, baseline: CheckpointResults) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(candidate rows, baseline rows), per domain on a generation config both were swept with.
    A domain without a common config keeps each side's latest: the differing ``gen_config`` /
    ``gen_params`` columns then make :func:`evaluation.regression.compare_results` list it as not
    comparable. The baseline's K for the common config is its own summary's when it names it."""
    cand_frames, base_frames = [], []
    cand_domains, base_domains = set(candidate.domains), set(baseline.domains)
    for domain in sorted(cand_domains | base_domains):
        c_cfgs = candidate.configs(domain) if domain in cand_domains else []
        b_cfgs = baseline.configs(domain) if domain in base_domains else []
        by_config = {c.gen_config: c for c in b_cfgs}
        common = next((c for c in c_cfgs if c.gen_config in by_config), None)
        if common is not None:
            cand_frames.append(candidate.rows_for(domain, common))
            base_frames.append(baseline.rows_for(domain, by_config[common.gen_config]))
            continue
        if c_cfgs:
            cand_frames.append(candidate.rows_for(domain, c_cfgs[0]))
        if b_cfgs:
            base_frames.append(baseline.rows_for(domain, b_cfgs[0]))
    return (pl.concat(cand_frames) if cand_frames else _empty_results(),
            pl.concat(base_frames) if base_frames else _empty_results())


def comparable_results(lake: Lake, candidate: str, baseline: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """:func:`pair_results` of two checkpoints read from ``lake`` (each read once)."""
    return pair_results(read_checkpoint(lake, candidate), read_checkpoint(lake, baseline))


def compared_rows(lake: Lake, candidate: str, baseline: str, domain: str,
                  gen_config: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(candidate rows, baseline rows) of one domain as a comparison used them: on ``gen_config``
    (a ``regression`` row's) when given and both sides have it, else as :func:`pair_results` pairs them."""
    cand, base = read_checkpoint(lake, candidate, [domain]), read_checkpoint(lake, baseline, [domain])
    if gen_config:
        c_cfg, b_cfg = cand.config_named(domain, gen_config), base.config_named(domain, gen_config)
        if c_cfg is not None and b_cfg is not None:
            return cand.rows_for(domain, c_cfg), base.rows_for(domain, b_cfg)
    return pair_results(cand, base)
