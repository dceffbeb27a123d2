"""A domain's current difficulty measurement: every admitted train row judged by the difficulty
policy's pass rate (or the heuristic), what the ``policy_pass_rates`` asset computes.

:func:`measure_domain_difficulty` resolves the policy of :class:`quality.difficulty_settings.DifficultySettings`
(a named one, else the current champion, else ``base-<recipe>`` of the policy resource), measures
its pass rates over K samples on **all** the domain's admitted train rows with
:func:`evaluation.pass_rates.policy_pass_rates` (cached in ``pass_rates`` per (policy, item, K,
generation config): only new items, or every item under a new champion, cost generation), and
replaces lake table ``policy_difficulty`` for the domain (:data:`storage.tables.POLICY_DIFFICULTY`):
one row per item with its pass rate and verdict, and the settings it was measured with.

That table is the one answer to "how hard is this item now": the batch gates read it for the
incoming rows (:func:`quality.batch_gates.evaluate_batch_gates`; under ``policy`` a row it lacks is
an error, never a heuristic guess), the train set keeps the rows it marks ``in_band``
(:func:`quality.batch_gates.train_set_rows`), and the champion sensor re-measures the domains whose
settings follow the champion (``policy`` empty) when the champion changes.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import polars as pl

from evaluation.pass_rate_config import PassRateConfig
# the stored measurement's readers live with the gates that consume them (quality never imports
# evaluation); re-exported here, where the measurement is written
from quality.difficulty_measurements import (TABLE, DifficultyNotMeasured, current_difficulty,  # noqa: F401
                                             measured_settings)
from quality.difficulty_settings import DifficultySettings
from storage import tables
from storage.lake import Lake

HISTOGRAM_BINS = 10


@dataclass
class DomainDifficulty:
    domain: str
    settings: DifficultySettings
    rows: pl.DataFrame = field(repr=False)   # tables.POLICY_DIFFICULTY
    checkpoint: str | None = None           # the policy measured (None: heuristic, or no rows)
    computed: int = 0
    cached: int = 0
    seconds: float = 0.0
    engine: str | None = None

    def summary(self) -> dict:
        n = self.rows.height
        measured = self.rows.filter(pl.col("pass_rate").is_not_null())
        verdicts = measured["verdict"].value_counts().to_dicts() if measured.height else []
        return {
            "domain": self.domain, "estimate": self.settings.estimate, "policy": self.checkpoint,
            "described": self.settings.describe(self.checkpoint), "items": n,
            "in_band_share": float((measured["verdict"] == "in_band").mean()) if measured.height else None,
            "mean_pass_rate": float(measured["pass_rate"].mean()) if measured.height else None,
            "verdicts": {v["verdict"]: int(v["count"]) for v in verdicts},
            "histogram": pass_rate_histogram(measured["pass_rate"]) if measured.height else [],
            "computed": self.computed, "cached": self.cached, "seconds": round(self.seconds, 3),
            "engine": self.engine,
        }


def pass_rate_histogram(rates: pl.Series, bins: int = HISTOGRAM_BINS) -> list[dict]:
    """Counts of pass rates in ``bins`` equal bins of [0, 1] (the last one closed)."""
    counts = [0] * bins
    for rate in rates.to_list():
        counts[min(int(rate * bins), bins - 1)] += 1
    return [{"bin": f"[{i / bins:.1f}, {(i + 1) / bins:.1f}{']' if i == bins - 1 else ')'}", "items": c}
            for i, c in enumerate(counts)]


def admitted_train_rows(lake: Lake, domain: str) -> pl.DataFrame:
    """The domain's admitted train rows (latest version of each id), sorted by id."""
    frame = lake.read("ingest", "samples", where={"domain": domain})
    if not frame.height:
        return tables.empty(tables.SAMPLES)
    frame = tables.conform(frame, tables.SAMPLES).filter(pl.col("split") == "train")
    return frame.unique(subset=["id"], keep="last", maintain_order=True).sort("id")


def pass_rate_config_of(settings: DifficultySettings) -> PassRateConfig:
    """The pass-rate measurement the difficulty settings ask for (K samples, tokens, temperature)."""
    return PassRateConfig(samples=settings.samples, max_new_tokens=settings.max_new_tokens,
                          temperature=settings.temperature, progress=False)


def resolve_policy_ref(settings: DifficultySettings, tracking_uri: str, recipe: str) -> str:
    """The policy reference to measure with: the named one, else the champion, else ``base-<recipe>``."""
    from storage.tracking import current_champion

    return settings.policy or current_champion(tracking_uri) or f"base-{recipe}"


def measure_domain_difficulty(lake: Lake, tracking_uri: str, domain, settings: DifficultySettings, *,
                              recipe: str = "tiny", backend: str = "auto", dtype: str = "bfloat16",
                              log=None) -> DomainDifficulty:
    """Measure the domain's admitted train rows under ``settings`` and replace its
    ``policy_difficulty`` rows. ``recipe``/``backend``/``dtype``: the policy resource's, used when the
    settings name no policy / no backend."""
    from storage.tracking import current_champion

    started = time.perf_counter()
    rows = admitted_train_rows(lake, domain.name)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    champion = current_champion(tracking_uri) if settings.estimate == "policy" else None  # the heuristic needs no MLflow
    base = {"domain": domain.name, "estimate": settings.estimate, "policy_ref": settings.policy or None,
            "champion": champion, "settings": json.dumps(settings.model_dump(), sort_keys=True), "measured_at": now}
    result = DomainDifficulty(domain.name, settings, tables.empty(tables.POLICY_DIFFICULTY))
    if settings.estimate == "policy" and rows.height:
        from evaluation.pass_rates import policy_pass_rates

        ref = resolve_policy_ref(settings, tracking_uri, recipe)
        items = [{"id": r["id"], "prompt": r["prompt"], "answer": r["answer"],
                  "metadata": json.loads(r["metadata"]) if r["metadata"] else {}} for r in rows.iter_rows(named=True)]
        rates = policy_pass_rates(lake, tracking_uri, ref, domain, items, config=pass_rate_config_of(settings),
                                  backend=settings.backend or backend, dtype=dtype, log=log)
        frame = rates.items.select("id", "samples", "passes", "pass_rate", "verdict").with_columns(
            pl.lit(rates.checkpoint).alias("checkpoint"), pl.lit(rates.gen_config).alias("gen_config"))
        result.checkpoint, result.computed, result.cached, result.engine = (
            rates.checkpoint, rates.computed, rates.cached, rates.engine)
    else:
        frame = rows.select("id")
    frame = frame.with_columns(*[pl.lit(v).alias(k) for k, v in base.items()])
    result.rows = tables.conform(frame, tables.POLICY_DIFFICULTY)
    lake.write_batch(TABLE, {"domain": domain.name}, {"part": result.rows})
    result.seconds = time.perf_counter() - started
    return result
