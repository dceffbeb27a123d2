"""Certifying a variant: faster than its parent, and no worse on any domain, measured.

:func:`certify_variant` is what ``assay variant`` and the ``fast_variant`` asset call:

1. **Make** the variant of the parent checkpoint (:mod:`generation.variants`) and register it as a
   checkpoint of its own: lake row in ``checkpoints`` with ``variant_of``/``variant_method``, an
   MLflow LoggedModel and ``assay-policy`` version tagged with its parent and method (lineage).
   It is then a checkpoint partition like any other (swept by the nightly schedule and the
   new-checkpoint sensor); the promotion refuses it as champion.
2. **Speed**: parent and variant each decode the same prompts in a fresh process, one after the
   other, in this run, on this machine (:mod:`evaluation.variant_speed`): tokens/s at batch 1 and
   at the sweep's batch, time to first token, peak memory. The speedups are the variant's figures
   over the parent's, the parent on its standard engine (the torch engine). The 1-minute load
   average is recorded beside them: a ratio taken on a busy machine is weak evidence.
3. **Equivalence**: parent and variant are swept on the same domains and items with the same
   generation config (greedy by default; the sweep cache serves what was already scored), and
   :func:`evaluation.noninferiority.noninferiority_report` tests each domain for non-inferiority at
   the margin (default 2 points). "Equivalent" needs every domain shown non-inferior; an
   underpowered domain is reported as such (with the items it would need), never as a pass.
4. **Decision**: the variant becomes the ``fast`` alias only when it is equivalent *and* at least
   ``min_speedup`` (default 2x) faster at batch 1. The decision, the speed figures and the
   per-domain tests are recorded in lake tables ``variants`` and ``variant_domains`` whatever the
   outcome, and on the variant's MLflow model version as tags.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Sequence

import polars as pl

from evaluation.promotion import decision_id
from evaluation.regression import json_safe
from evaluation.variant_config import VariantConfig
from storage import tables, tracking
from storage.lake import Lake

Log = Callable[[str], None]


class VariantRefused(RuntimeError):
    """A variant that cannot be made from this parent (a variant of a variant, no domains...)."""


@dataclass
class SpeedReport:
    parent: dict
    variant: dict
    load_average: float

    def ratio(self, key: str) -> float:
        base, fast = self.parent.get(key), self.variant.get(key)
        return fast / base if base and fast is not None else float("nan")

    @property
    def speedup_batch1(self) -> float:
        return self.ratio("tokens_per_s_batch1")

    @property
    def speedup_batch(self) -> float:
        return self.ratio("tokens_per_s_batch")


@dataclass
class VariantCertificate:
    variant: str
    parent: str
    method: str
    speed: SpeedReport
    report: object                      # evaluation.noninferiority.EquivalenceReport
    fast_alias: bool
    reasons: list[str] = field(default_factory=list)
    decision: str | None = None
    config: VariantConfig | None = None

    @property
    def equivalent(self) -> bool:
        return bool(self.report.equivalent)

    def to_json(self) -> dict:
        return {
            **json_safe({"variant": self.variant, "parent": self.parent, "method": self.method,
                         "speedup_batch1": self.speed.speedup_batch1, "speedup_batch": self.speed.speedup_batch}),
            "domains": [json_safe({"domain": d.domain, "delta": d.delta, "ci_low": d.ci_low, "ci_high": d.ci_high,
                                   "verdict": d.verdict, "n": d.n, "items_for_power": d.items_for_power})
                        for d in self.report.domains],
            "fast_alias": self.fast_alias, "equivalent": self.equivalent, "reasons": self.reasons,
            "decision": self.decision, "margin": self.report.margin, "alpha": self.report.alpha,
            "speed": {"parent": self.speed.parent, "variant": self.speed.variant,
                      "load_average": self.speed.load_average},
            "not_comparable": self.report.not_comparable,
        }


# -- 1. make and register ----------------------------------------------------------------------------

def create_variant(lake: Lake, tracking_uri: str, parent_ref: str, config: VariantConfig, *, log: Log = print):
    """The variant's checkpoint record (made and registered unless it exists already)."""
    from generation.checkpoints import ensure_checkpoint, list_checkpoints, register_checkpoint
    from generation.variants import make_variant, variant_id

    parent = ensure_checkpoint(parent_ref, lake, tracking_uri)
    if parent.is_variant:
        raise VariantRefused(f"{parent.checkpoint} is itself a variant (of {parent.variant_of}): make variants of "
                             f"the checkpoint it serves, {parent.variant_of}")
    name = variant_id(parent.checkpoint, config.method)
    for record in list_checkpoints(lake):
        if record.checkpoint == name:
            return parent, record
    folder = make_variant(parent.checkpoint, parent.path, config.method, lake.home / "checkpoints",
                          draft=config.draft, log=log)
    record = register_checkpoint(lake, tracking_uri, checkpoint=name, path=folder, run_id=parent.run_id,
                                 step=parent.step, recipe=parent.recipe, base_model=parent.base_model,
                                 domains=parent.domains, data_fingerprint=parent.data_fingerprint,
                                 variant_of=parent.checkpoint, variant_method=config.method)
    log(f"variant {name} registered (parent {parent.checkpoint}, method {config.method})")
    return parent, record


# -- 2. speed --------------------------------------------------------------------------------------

def speed_prompts(domains: Sequence, count: int) -> list[str]:
    """``count`` user prompts taken in turn from the domains' eval items (what the variant will serve)."""
    pools = [[item["prompt"] for item in domain.eval_items()] for domain in domains]
    pools = [p for p in pools if p]
    if not pools:
        raise VariantRefused("the chosen domains have no eval items to time the variant on")
    prompts, i = [], 0
    while len(prompts) < count:
        pool = pools[i % len(pools)]
        prompts.append(pool[(i // len(pools)) % len(pool)])
        i += 1
    return prompts


def _measure_one(model_dir: str, prompts_file: str, config: VariantConfig, home: str) -> dict:
    command = [sys.executable, "-m", "evaluation.variant_speed", "--model", model_dir, "--prompts", prompts_file,
               "--max-new-tokens", str(config.speed_new_tokens), "--batch1-prompts", str(config.speed_batch1_prompts),
               "--dtype", config.dtype, "--home", home]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"speed measurement of {model_dir} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_speed(lake: Lake, parent_path: str, variant_path: str, domains: Sequence, config: VariantConfig, *,
                  log: Log = print) -> SpeedReport:
    prompts = speed_prompts(domains, config.speed_prompts)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
        json.dump(prompts, handle)
    try:
        load = os.getloadavg()[0]
        log(f"timing the parent ({len(prompts)} prompts x {config.speed_new_tokens} tokens) ...")
        parent = _measure_one(parent_path, handle.name, config, str(lake.home))
        log("timing the variant ...")
        variant = _measure_one(variant_path, handle.name, config, str(lake.home))
        load = max(load, os.getloadavg()[0])
    finally:
        os.unlink(handle.name)
    return SpeedReport(parent=parent, variant=variant, load_average=load)


# -- 3. equivalence --------------------------------------------------------------------------------

def scope_items(domains: Sequence, limit: int | None) -> pl.DataFrame:
    """(domain, item_id) of the items a sweep with ``limit`` scores: the comparison is on these only,
    whatever else either side was swept on before."""
    rows = [{"domain": d.name, "item_id": item["id"]} for d in domains
            for item in (d.eval_items() if limit is None else d.eval_items()[:limit])]
    return pl.DataFrame(rows, schema={"domain": pl.Utf8, "item_id": pl.Utf8})


def equivalence(lake: Lake, tracking_uri: str, parent: str, variant: str, domains: Sequence, config: VariantConfig,
                *, log: Log = print):
    from evaluation.noninferiority import noninferiority_report
    from evaluation.results import comparable_results
    from evaluation.sweep import sweep_checkpoint
    from evaluation.sweep_config import SweepConfig

    sweep = SweepConfig(samples=config.samples, limit=config.limit, max_new_tokens=config.max_new_tokens,
                        progress=config.progress)
    for name, backend in ((parent, config.parent_backend), (variant, "torch")):
        log(f"sweeping {name} on {len(domains)} domain(s) ...")
        sweep_checkpoint(lake, tracking_uri, name, domains, config=sweep, backend=backend, dtype=config.dtype,
                         log=log)
    cand, base = comparable_results(lake, variant, parent)
    scope = scope_items(domains, config.limit)
    cand = cand.join(scope, on=["domain", "item_id"], how="semi")
    base = base.join(scope, on=["domain", "item_id"], how="semi")
    return noninferiority_report(base, cand, margin=config.margin, alpha=config.alpha,
                                 baseline_name=parent, candidate_name=variant)


# -- 4. decision ------------------------------------------------------------------------------------

def decide(speed: SpeedReport, report, config: VariantConfig) -> tuple[bool, list[str]]:
    """(fast alias?, reasons): fast only when equivalent and at least ``min_speedup`` faster at batch 1."""
    reasons = []
    speedup = speed.speedup_batch1
    if not speedup >= config.min_speedup:  # NaN fails too
        reasons.append(f"{speedup:.2f}x tokens/s at batch 1, below the {config.min_speedup:g}x required")
    if not report.equivalent:
        reasons.extend(report.reasons())
    return not reasons, reasons


def _record(lake: Lake, cert: VariantCertificate, config: VariantConfig) -> str:
    now = datetime.now(timezone.utc)
    decision = decision_id(cert.variant, now)
    p, v = cert.speed.parent, cert.speed.variant
    row = {"decision": decision, "variant": cert.variant, "parent": cert.parent, "method": cert.method,
           "created_at": now.isoformat(), "engine": v.get("engine"), "parent_engine": p.get("engine"),
           "batch": v.get("batch"), "new_tokens": config.speed_new_tokens,
           "tokens_per_s_batch1": v.get("tokens_per_s_batch1"), "parent_tokens_per_s_batch1": p.get("tokens_per_s_batch1"),
           "speedup_batch1": cert.speed.speedup_batch1,
           "tokens_per_s_batch": v.get("tokens_per_s_batch"), "parent_tokens_per_s_batch": p.get("tokens_per_s_batch"),
           "speedup_batch": cert.speed.speedup_batch, "ttft_s": v.get("ttft_s"), "parent_ttft_s": p.get("ttft_s"),
           "peak_rss_gib": v.get("peak_rss_gib"), "parent_peak_rss_gib": p.get("peak_rss_gib"),
           "margin": config.margin, "min_speedup": config.min_speedup, "equivalent": cert.equivalent,
           "fast_alias": cert.fast_alias,
           "reason": ("certified: equivalent on every domain and "
                      f"{cert.speed.speedup_batch1:.2f}x at batch 1") if cert.fast_alias else "refused: " + "; ".join(cert.reasons),
           "load_average": cert.speed.load_average}
    domains = (cert.report.to_frame().rename({"candidate": "variant", "baseline": "parent"})
               .with_columns(pl.lit(decision).alias("decision")))
    lake.write_batch("variant_domains", {"decision": decision}, {"part": tables.conform(domains, tables.VARIANT_DOMAINS)})
    lake.write_batch("variants", {"decision": decision}, {"part": pl.DataFrame([row], schema=tables.VARIANTS)})
    return decision


def _apply_alias(lake: Lake, tracking_uri: str, cert: VariantCertificate) -> None:
    """Tag the variant's model version with the decision; move ``fast`` to it when certified (under
    the promotion lock, the one lock that moves registry aliases)."""
    from evaluation.promotion import promotion_lock

    versions = tracking.checkpoint_versions(tracking_uri, cert.variant)
    if not versions:
        raise VariantRefused(f"variant {cert.variant} has no model version in MLflow: register it first")
    version = versions[-1].version
    for key, value in (("speedup_batch1", f"{cert.speed.speedup_batch1:.3f}"),
                       ("speedup_batch", f"{cert.speed.speedup_batch:.3f}"),
                       ("equivalent", str(cert.equivalent).lower()), ("variant_decision", cert.decision or "")):
        tracking.tag_model_version(tracking_uri, version, key, value)
    if cert.fast_alias:
        with promotion_lock(lake):
            tracking.set_alias(tracking_uri, tracking.FAST_ALIAS, version)


def certify_variant(lake: Lake, tracking_uri: str, parent_ref: str, domains: Sequence, config: VariantConfig, *,
                    log: Log = print) -> VariantCertificate:
    """Make (or reuse), time and certify the variant ``config.method`` of ``parent_ref`` on ``domains``."""
    if not domains:
        raise VariantRefused("no domains to prove equivalence on: pick some with --domains/--tag")
    parent, record = create_variant(lake, tracking_uri, parent_ref, config, log=log)
    speed = measure_speed(lake, parent.path, record.path, domains, config, log=log)
    log(f"speed: {speed.variant['tokens_per_s_batch1']:.1f} vs {speed.parent['tokens_per_s_batch1']:.1f} tokens/s at "
        f"batch 1 ({speed.speedup_batch1:.2f}x), {speed.speedup_batch:.2f}x at batch {speed.variant['batch']}")
    report = equivalence(lake, tracking_uri, parent.checkpoint, record.checkpoint, domains, config, log=log)
    fast, reasons = decide(speed, report, config)
    cert = VariantCertificate(variant=record.checkpoint, parent=parent.checkpoint, method=config.method, speed=speed,
                              report=report, fast_alias=fast and config.set_alias, reasons=reasons, config=config)
    if fast and not config.set_alias:
        cert.reasons.append("certified, but set_alias is off: the 'fast' alias was not moved")
    cert.decision = _record(lake, cert, config)
    _apply_alias(lake, tracking_uri, cert)
    return cert
