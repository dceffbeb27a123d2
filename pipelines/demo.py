"""The main job on the embedded defaults: what `make demo` (`assay demo`) runs.

Stages, each a real Dagster run recorded in the instance under ``$ASSAY_HOME/dagster`` (so
`make ui` shows them afterwards):

1. ingest + gate every selected domain (``domain_pipeline_job``, one run per domain partition);
2. train the default policy with GRPO for a few steps on an easy domain;
3. sweep the base model and the new checkpoint on every selected domain;
4. compare them per domain, then promote the candidate or refuse;
5. print a per-domain summary and where to look next.

Defaults are sized to finish in minutes on a 2-core CPU; flags scale every stage up.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from domains import get_registry

PACK_TAG = "reasoning_gym_pack"


@dataclass
class DemoOptions:
    domains: str = "builtin"  # "builtin" (every built-in domain), "core" (no reasoning-gym pack) or a,b,c
    train_samples: int = 64
    recipe: str = "smollm2"
    train_domain: str = "math_arith"
    steps: int = 8
    sweep_items: int = 24
    sweep_samples: int = 1
    skip_training: bool = False
    log: Callable[[str], None] = field(default=lambda msg: print(msg, file=sys.stderr, flush=True))

    def __post_init__(self) -> None:
        for name in ("train_samples", "sweep_items", "sweep_samples"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.steps < 0:
            raise ValueError(f"steps must be >= 0, got {self.steps}")


def select_domains(spec: str) -> list[str]:
    registry = get_registry()
    builtin = [d.name for d in registry if registry.sources[d.name].startswith("domains/builtin/")]
    if spec == "builtin":
        return builtin
    if spec == "core":
        return [n for n in builtin if PACK_TAG not in registry.get(n).tags]
    if spec == "all":
        return registry.names
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for name in names:
        registry.get(name)  # raises UnknownDomainError with the known names
    return names


def run_ingest_stage(names: list[str], options: DemoOptions) -> dict[str, dict]:
    """Run ``domain_pipeline_job`` for each domain partition; returns per-domain outcomes."""
    import dagster as dg
    from tqdm import tqdm

    from pipelines.definitions import defs
    from pipelines.settings import dagster_home

    dagster_home()
    instance = dg.DagsterInstance.get()
    job = defs.resolve_job_def("domain_pipeline_job")
    outcomes: dict[str, dict] = {}
    config = {"ops": {"domain_samples": {"config": {"train_samples": options.train_samples}}}}
    for name in tqdm(names, desc="ingest + gates", unit="domain", file=sys.stderr):
        started = time.monotonic()
        result = job.execute_in_process(run_config=config, instance=instance, partition_key=name,
                                        raise_on_error=False)
        outcome: dict = {"run_id": result.run_id, "success": result.success,
                         "seconds": round(time.monotonic() - started, 2)}
        for event in result.get_asset_materialization_events():
            key = event.asset_key.to_user_string()
            outcome[key] = {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}
        outcome["failed_checks"] = [
            e.asset_check_evaluation_data.check_name
            for e in result.all_events
            if e.event_type_value == "ASSET_CHECK_EVALUATION" and not e.asset_check_evaluation_data.passed
        ]
        outcomes[name] = outcome
    return outcomes


def _ingest_table(outcomes: dict[str, dict]) -> list[str]:
    lines = [f"{'domain':<28} {'admitted':>8} {'quarantined':>11}  gates"]
    for name, outcome in outcomes.items():
        meta = outcome.get("domain_samples", {})
        admitted = meta.get("train_admitted", 0) + meta.get("eval_admitted", 0)
        failed = outcome["failed_checks"]
        gates = "FAILED: " + ", ".join(failed) if failed else ("ok" if outcome["success"] else "run failed")
        lines.append(f"{name:<28} {admitted:>8} {meta.get('quarantined', 0):>11}  {gates}")
    return lines


def run_demo(options: DemoOptions) -> dict:
    names = select_domains(options.domains)
    options.log(f"assay demo: {len(names)} domains, {options.train_samples} train rows each")
    started = time.monotonic()
    outcomes = run_ingest_stage(names, options)
    lines = ["", "== Ingest and quality gates =="] + _ingest_table(outcomes)
    blocked = sorted(n for n, o in outcomes.items() if o["failed_checks"] or not o["success"])
    from quality.lake import resolve_home

    home = resolve_home()
    lines += [
        "",
        f"{len(names) - len(blocked)}/{len(names)} domains passed their gates"
        + (f"; blocked: {', '.join(blocked)}" if blocked else ""),
        f"finished in {time.monotonic() - started:.0f} s; data under {home}",
        "",
        "Where to look next:",
        "  make ui          Dagster UI (runs, materializations, checks): http://localhost:3000",
        "  make dashboard   Streamlit dashboard for domain owners: http://localhost:8501",
        f"  mlflow ui --backend-store-uri sqlite:///{home / 'mlflow.db'}   MLflow runs and models",
        "  assay sql \"SELECT domain, count(*) FROM samples GROUP BY 1\"   query the lake",
    ]
    return {"ok": not any(not o["success"] for o in outcomes.values()), "domains": outcomes,
            "text": "\n".join(lines)}
