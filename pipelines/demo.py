"""The main job on the embedded defaults: what `make demo` (`assay demo`) runs.

Stages, each a real Dagster run recorded in the instance under ``$ASSAY_HOME/dagster`` (so
`make ui` shows them afterwards):

1. ingest + gate every selected domain (``domain_pipeline_job``, one run per domain partition).
   Difficulty: the train domain's is measured on the policy (the recipe's base policy, K =
   ``--difficulty-samples`` samples of ``--max-new-tokens`` tokens per train row, cached), the
   other domains use the text heuristic, a cheaper estimate that keeps the demo within minutes;
   ``--difficulty heuristic`` uses it everywhere. The tiny recipe's random policy solves nothing, so
   under the default ``--difficulty auto`` its train domain uses the heuristic too, said on the
   console and in the summary. The summary names each domain's estimate;
2. train the default policy with GRPO for a few steps on an easy domain;
3. sweep the base model and the new checkpoint on every selected domain;
4. compare them per domain, then promote the candidate or refuse;
5. print a per-domain summary and where to look next.

On the console: one progress line per stage (and tqdm bars for the long ones) on stderr, the summary
on stdout. Dagster's own event stream (DEBUG and up) goes to ``$ASSAY_HOME/logs/demo-<time>-<pid>.log``
(:mod:`pipelines.event_log`), named at the start and the end.

Defaults are sized to finish in minutes on a 2-core CPU; flags scale every stage up.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pipelines.config_flags import DomainNames
from storage import deployment
from storage.errors import UserError

# Domain packs (one module registering many domains) are left out of the default "core" demo.
PACK_SOURCES = ("domains/builtin/reasoning_gym_pack.py",)
# Multi-turn terminal episodes cost minutes per checkpoint on a CPU: also out of "core" (add them by name).
EPISODE_SOURCES = ("domains/builtin/terminal.py",)
# Long-context buckets (1k-16k-token prompts, 30 domains) cost minutes per checkpoint on a CPU too.
LONG_CONTEXT_SOURCES = ("domains/builtin/long_context.py",)


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class DemoOptions(BaseModel):
    """What ``assay demo`` runs; its flags are these fields (:mod:`pipelines.config_flags`)."""

    model_config = ConfigDict(extra="forbid")

    domains: DomainNames = Field(["core"], description="domain names, or one of 'core' (the built-in domains without "
                                 "the 100+ reasoning-gym pack domains, the terminal-task suite and the long-context "
                                 "buckets), 'builtin' (every built-in domain, pack included: about an hour here) and "
                                 "'all' (plugins too)")
    train_samples: int = Field(64, description="generated train rows per domain")
    recipe: str = Field("smollm2", description="training recipe: smollm2, tiny or a YAML path")
    train_domain: str = Field("math_arith_easy", description="domain to train on (the default, math_arith_easy, "
                                                             "is 2-term single-digit sums)")
    steps: int = Field(8, description="GRPO steps")
    sweep_items: int = Field(24, description="eval items per domain in the sweeps")
    sweep_samples: int = Field(1, description="samples per eval item (K)")
    max_new_tokens: int = Field(64, description="completion length in the sweeps")
    skip_training: bool = Field(False, description="stop after ingest and gates")
    difficulty: Literal["auto", "policy", "heuristic"] = Field(
        "auto", description="difficulty estimate of the train domain's gate: 'policy' (pass rate of the recipe's base "
                            "policy over --difficulty-samples samples per train row), 'heuristic', or 'auto' (policy, "
                            "except for the tiny recipe, whose random policy solves nothing: heuristic, said so); "
                            "the other domains use the heuristic (cheaper)")
    difficulty_samples: int = Field(4, description="samples per train row (K) of the train domain's policy pass rates")
    log: Callable[[str], None] = Field(_to_stderr, exclude=True,
                                       description="where progress lines go (stderr); not a command-line flag")

    @field_validator("train_samples", "steps", "sweep_items", "sweep_samples", "max_new_tokens", "difficulty_samples")
    @classmethod
    def _at_least_one(cls, value, info):
        if value < 1:
            hint = "; to stop after ingest and gates use --skip-training" if info.field_name == "steps" else ""
            raise ValueError(f"{info.field_name} must be >= 1, got {value}{hint}")
        return value


DOMAIN_SETS = ("core", "builtin", "all")


def select_domains(spec: list[str] | str) -> list[str]:
    """The demo's domains: one of :data:`DOMAIN_SETS`, or names (words, each may hold commas)."""
    from domains import get_registry
    from pipelines.cli import split_domain_words

    names = split_domain_words(spec)
    sets = [n for n in names if n in DOMAIN_SETS]
    if sets and len(names) > 1:
        raise UserError(f"--domains {' '.join(names)}: {sets[0]!r} names a set of domains and stands alone; give "
                       f"one of {', '.join(DOMAIN_SETS)} or domain names")
    registry = get_registry()
    builtin = [d.name for d in registry if registry.sources[d.name].startswith("domains/builtin/")]
    if names == ["builtin"]:
        return builtin
    if names == ["core"]:
        return [n for n in builtin if registry.sources[n] not in PACK_SOURCES + EPISODE_SOURCES + LONG_CONTEXT_SOURCES]
    if names == ["all"]:
        return registry.names
    for name in names:
        registry.get(name)  # raises UnknownDomainError with the known names
    return names


def check_training_choice(options: DemoOptions, names: list[str]) -> None:
    """Refuse a bad --recipe or --train-domain before the ingest stage spends minutes."""
    from domains import get_registry
    from training.config import load_recipe

    get_registry().get(options.train_domain)  # UnknownDomainError with the known names
    if options.train_domain not in names:
        raise UserError(f"--train-domain {options.train_domain!r} is not among the demo's domains "
                         f"(--domains {' '.join(options.domains)}): add it to --domains or choose one of "
                         f"{', '.join(names[:8])}{', ...' if len(names) > 8 else ''}")
    # parses and validates the whole recipe (name, keys, values): RecipeError is a UserError
    load_recipe(options.recipe, domains=[options.train_domain], max_steps=options.steps)


class JobRunner:
    """Runs jobs in this process on the persistent Dagster instance under ``$DAGSTER_HOME`` (default
    ``$ASSAY_HOME/dagster``, queued with pool limits: :mod:`pipelines.instance`), so `make ui` shows
    the demo's runs afterwards. Their event stream goes to ``event_log``, not the console."""

    def __init__(self, event_log, log: Callable[[str], None]):
        from pipelines.instance import open_instance

        self.instance = open_instance()
        self.event_log = event_log
        self.log = log

    def _wait_notice(self, job) -> None:
        """Say so when a pool this job needs is full (e.g. `make ui` is sweeping): the run waits."""
        for pool in sorted({n.definition.pool for n in job.graph.nodes if getattr(n.definition, "pool", None)}):
            info = self.instance.event_log_storage.get_concurrency_info(pool)
            if info.slot_count and info.active_slot_count >= info.slot_count:
                holders = ", ".join(sorted(r[:8] for r in info.active_run_ids))
                self.log(f"  waiting: pool '{pool}' is full ({info.active_slot_count}/{info.slot_count} in use "
                         f"by run {holders}); this stage starts when a slot frees")

    def run(self, job_name: str, *, run_config: dict | None = None, partition_key: str | None = None) -> dict:
        """Execute one job run, recorded in the instance; summarise it."""
        from pipelines.definitions import defs
        from pipelines.instance import own_run_tags

        job = self.event_log.job(defs.resolve_job_def(job_name))
        self._wait_notice(job)
        started = time.monotonic()
        result = job.execute_in_process(
            run_config=self.event_log.run_config(run_config), instance=self.instance, partition_key=partition_key,
            raise_on_error=False, tags=own_run_tags())
        outcome: dict = {"run_id": result.run_id, "success": result.success,
                         "seconds": round(time.monotonic() - started, 2), "failed_checks": [], "errors": []}
        for event in result.all_events:
            if event.event_type_value == "ASSET_MATERIALIZATION":
                materialization = event.event_specific_data.materialization
                outcome[materialization.asset_key.to_user_string()] = {
                    k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
            elif event.event_type_value == "ASSET_CHECK_EVALUATION":
                data = event.event_specific_data
                if not data.passed:
                    advice = data.metadata.get("what_to_do")  # quality.expectations.difficulty_advice
                    outcome["failed_checks"].append(f"{data.check_name} ({data.severity.value})"
                                                    + (f": {advice.value}" if advice is not None else ""))
            elif event.event_type_value == "STEP_FAILURE":
                error = event.event_specific_data.error
                outcome["errors"].append(f"{event.step_key}: {error.message.strip().splitlines()[-1] if error else '?'}")
        return outcome


# recipes whose base policy solves nothing, so its pass rates cannot judge difficulty: measured on it,
# every item is "too hard" and the gate (rightly) blocks. --difficulty auto uses the heuristic for them
# and says so; --difficulty policy still measures (and blocks), and every other recipe measures.
CANNOT_MEASURE = {"tiny": "the tiny policy cannot measure difficulty (it is random and solves nothing)"}


def cannot_measure_note(options: DemoOptions) -> str:
    """Why the train domain's difficulty is the heuristic although it would be measured; '' if it is not."""
    if options.difficulty == "auto" and options.recipe in CANNOT_MEASURE:
        return (f"{CANNOT_MEASURE[options.recipe]}: {options.train_domain} gated on the text heuristic "
                f"(--difficulty policy measures it anyway)")
    return ""


def difficulty_settings(options: DemoOptions, name: str) -> dict:
    """The ``policy_pass_rates`` config of domain ``name``: on the policy for the train domain
    (the recipe's base policy: the demo trains from it), the heuristic for the others."""
    from generation.policy import BUILTIN_POLICIES

    if options.difficulty == "heuristic" or name != options.train_domain or cannot_measure_note(options):
        return {"estimate": "heuristic"}
    # a recipe file has no built-in base: then the champion, else the policy resource's base
    policy = f"base-{options.recipe}" if options.recipe in BUILTIN_POLICIES else ""
    return {"estimate": "policy", "policy": policy, "samples": options.difficulty_samples,
            "max_new_tokens": options.max_new_tokens}


def ingest_run_config(options: DemoOptions, name: str) -> dict:
    """``domain_pipeline_job``'s run config for domain ``name``."""
    return {"ops": {"domain_samples": {"config": {"train_samples": options.train_samples}},
                    "policy_pass_rates": {"config": difficulty_settings(options, name)}}}


def run_ingest_stage(runner: JobRunner, names: list[str], options: DemoOptions) -> dict[str, dict]:
    """``domain_pipeline_job`` for each domain partition: ingest, difficulty, gates, train set."""
    from tqdm import tqdm

    outcomes = {}
    bar = tqdm(names, desc="  ingest + gates", unit="domain", file=sys.stderr, leave=False)
    for name in bar:
        bar.set_postfix_str(name)
        outcome = outcomes[name] = runner.run("domain_pipeline_job", run_config=ingest_run_config(options, name),
                                              partition_key=name)
        problems = outcome["failed_checks"] + outcome["errors"]
        if problems:
            bar.write(f"  {name}: blocked: {'; '.join(problems)}", file=sys.stderr)
    bar.close()
    return outcomes


def run_training_stage(runner: JobRunner, options: DemoOptions) -> dict:
    """``training_job``: GRPO on the train domain's gated train set; returns the run summary."""
    config = {"ops": {"policy_checkpoint": {"config": {
        "recipe": options.recipe, "domains": [options.train_domain], "steps": options.steps}}}}
    return runner.run("training_job", run_config=config)


def run_evaluation_stage(runner: JobRunner, checkpoint: str, names: list[str], options: DemoOptions) -> dict:
    """``checkpoint_evaluation_job`` for one checkpoint: sweep, regression report, promotion."""
    runner.instance.add_dynamic_partitions("checkpoint", [checkpoint])
    sweep = {"domains": names, "samples": options.sweep_samples, "limit": options.sweep_items,
             "max_new_tokens": options.max_new_tokens}
    return runner.run("checkpoint_evaluation_job", partition_key=checkpoint,
                      run_config={"ops": {"checkpoint_sweep": {"config": sweep}}})


def _ingest_lines(outcomes: dict[str, dict], notes: dict[str, str] | None = None) -> list[str]:
    lines = [f"{'domain':<30} {'admitted':>8} {'quarantined':>11}  gates"]
    estimates = []
    for name, outcome in outcomes.items():
        meta = outcome.get("domain_samples", {})
        admitted = meta.get("train_admitted", 0) + meta.get("eval_admitted", 0)
        problems = outcome["failed_checks"] + outcome["errors"]
        gates = "blocked: " + "; ".join(problems) if problems else "passed"
        lines.append(f"{name:<30} {admitted:>8} {meta.get('quarantined', 0):>11}  {gates}")
        gate = outcome.get("gated_samples", {})
        rates = outcome.get("policy_pass_rates", {})
        estimate = gate.get("difficulty_estimate") or rates.get("difficulty_estimate") or "not estimated"
        if isinstance(gate.get("mean_pass_rate"), float) and rates.get("estimate") == "policy":
            estimate += (f"; mean pass rate {gate['mean_pass_rate']:.2f}, {gate.get('in_band', 0)}/"
                         f"{gate.get('train_rows', 0)} train rows in band")
        estimates.append(f"  {name}: {estimate}" + (f" ({notes[name]})" if name in (notes or {}) else ""))
    return lines + ["difficulty estimate per domain:"] + estimates


def _unswept_lines(domains) -> list[str]:
    """A line per domain the sweep leaves out because it has no verifier (said, not silently absent)."""
    from domains import get_registry

    registry = get_registry()
    blind = [name for name in domains if not registry.get(name).has_verifier]
    return [f"{name:<30} not swept: no verifier (its learned reward per training step is on the dashboard's "
            "training page)" for name in blind]


def _comparison_lines(lake, candidate: str, baseline: str) -> list[str]:
    """Per-domain scores of both checkpoints and the regression verdicts, from the lake."""
    summary = lake.read("sweep_summary")
    regression = lake.read("regression", where={"candidate": candidate})
    if summary.is_empty():
        return ["no sweep results"]
    import polars as pl

    score = {(r["checkpoint"], r["domain"]): r["mean"] for r in summary.iter_rows(named=True)}
    verdicts = {}
    if not regression.is_empty():
        latest = regression.filter(pl.col("baseline") == baseline).sort("created_at")
        verdicts = {r["domain"]: r for r in latest.iter_rows(named=True)}
    domains = sorted({d for (c, d) in score if c in (candidate, baseline)})
    lines = [f"{'domain':<30} {'base':>6} {'new':>6} {'delta':>7} {'MDE':>6}  verdict"]

    def pct(value):
        return f"{100 * value:6.1f}" if value is not None else "   n/a"

    for domain in domains:
        v = verdicts.get(domain, {})
        delta = f"{100 * v['delta']:+7.1f}" if v.get("delta") is not None else "    n/a"
        lines.append(f"{domain:<30} {pct(score.get((baseline, domain)))} {pct(score.get((candidate, domain)))} "
                     f"{delta} {pct(v.get('mde'))}  {v.get('verdict', 'not compared')}")
    return lines


def run_demo(options: DemoOptions) -> dict:
    from pipelines.event_log import EventLogFile
    from pipelines.settings import open_lake
    from storage.lake import resolve_home

    names = select_domains(options.domains)
    if not options.skip_training:
        check_training_choice(options, names)
    home = resolve_home()
    lake = open_lake(home, write=True)
    with EventLogFile(home, "demo") as event_log:
        options.log(f"assay demo: {len(names)} domains, {options.train_samples} train rows each; data under {home}")
        options.log(f"Dagster's event log for these runs: {event_log.path}")
        result = _run_stages(JobRunner(event_log, options.log), lake, names, options)
    result["event_log"] = str(event_log.path)
    result["text"] += f"\n  less {event_log.path}   every Dagster event of these runs (DEBUG and up)"
    options.log(f"done; Dagster's event log: {event_log.path}")
    return result


def _run_stages(runner: JobRunner, lake, names: list[str], options: DemoOptions) -> dict:
    log = options.log
    home = lake.home
    stages = 1 if options.skip_training else 3
    started = time.monotonic()
    log(f"[1/{stages}] ingest + quality gates for {len(names)} domain(s) (domain_pipeline_job per domain)")
    if note := cannot_measure_note(options):
        log(f"      {note}")
    outcomes = run_ingest_stage(runner, names, options)
    passed = [n for n, o in outcomes.items() if o["success"] and not o["failed_checks"]]
    log(f"      {len(passed)}/{len(names)} domains passed their gates ({time.monotonic() - started:.0f} s)")
    note = cannot_measure_note(options)
    lines = ["", "== 1. Ingest and quality gates (domain_pipeline_job per domain) =="] + _ingest_lines(
        outcomes, {options.train_domain: CANNOT_MEASURE[options.recipe]} if note else None)
    if note:
        lines.append(f"difficulty: {note}")
    lines.append(f"{len(passed)}/{len(names)} domains passed their gates")
    result: dict = {"ok": True, "domains": outcomes}

    if not options.skip_training:
        if options.train_domain not in passed:
            raise UserError(f"cannot train on {options.train_domain!r}: its gates did not pass (see the Dagster event "
                            "log named above); pick another --train-domain or fix its data")
        log(f"[2/{stages}] GRPO training: {options.recipe}, {options.steps} steps on {options.train_domain} (training_job)")
        training = run_training_stage(runner, options)
        result["training"] = training
        meta = training.get("policy_checkpoint", {})
        if not training["success"] or "checkpoint" not in meta:
            result["ok"] = False
            log(f"      training FAILED after {training['seconds']:.0f} s: {'; '.join(training['errors'])}")
            lines += ["", "== 2. Training FAILED ==", *training["errors"]]
        else:
            candidate = meta["checkpoint"]
            log(f"      checkpoint {candidate}, final reward {meta.get('final_reward')} ({training['seconds']:.0f} s)")
            lines += ["", f"== 2. GRPO training ({options.recipe}, {meta.get('steps')} steps on {options.train_domain}) ==",
                      f"checkpoint {candidate}; final reward {meta.get('final_reward')}; "
                      f"{meta.get('seconds', 0):.0f} s; MLflow run {meta.get('mlflow_run_id')}"]
            from generation.checkpoints import ensure_base_checkpoint

            base = ensure_base_checkpoint(options.recipe, lake, lake.mlflow_uri).checkpoint
            log(f"[3/{stages}] sweep, regression report and promotion of {base}, then {candidate}, on "
                f"{len(passed)} domains ({options.sweep_items} items x K={options.sweep_samples}, "
                f"{options.max_new_tokens} new tokens; checkpoint_evaluation_job)")
            evaluations = {}
            for ckpt in (base, candidate):
                evaluation = evaluations[ckpt] = run_evaluation_stage(runner, ckpt, passed, options)
                verdict = evaluation.get("champion_promotion", {}).get("reason") or "; ".join(
                    evaluation["failed_checks"] + evaluation["errors"]) or "not promoted"
                log(f"      {ckpt}: {verdict} ({evaluation['seconds']:.0f} s)")
            result["evaluations"] = evaluations
            promotion = evaluations[candidate].get("champion_promotion", {})
            decision = promotion.get("reason") or "refused: " + "; ".join(
                evaluations[candidate]["failed_checks"] or evaluations[candidate]["errors"] or ["see Dagster run"])
            lines += ["", f"== 3. Sweep ({options.sweep_items} eval items per domain, K={options.sweep_samples}, "
                          f"greedy, {options.max_new_tokens} new tokens) and regression report vs {base} ==",
                      *_comparison_lines(lake, candidate, base),
                      *_unswept_lines(passed),
                      "MDE: the smallest drop this run could detect at 80% power; raise --sweep-items/"
                      "--sweep-samples to shrink it.",
                      "", "== 4. Promotion ==", str(decision)]
            result["ok"] = all(e["success"] or e["failed_checks"] for e in evaluations.values())

    lines += [
        "",
        f"finished in {time.monotonic() - started:.0f} s; data under {home}",
        "Where to look next:",
        "  make ui          Dagster UI (runs, materializations, checks): http://localhost:3000",
        "  make dashboard   Streamlit dashboard for domain owners: http://localhost:8501",
        f"  mlflow ui --backend-store-uri {deployment.redacted(lake.mlflow_uri)} --port 5000   MLflow runs and models",
        "  assay sql \"SELECT domain, count(*) FROM samples GROUP BY 1\"   query the lake",
    ]
    result["text"] = "\n".join(lines)
    return result

