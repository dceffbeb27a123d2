"""Quality stage: the batch gates of each domain partition as blocking asset checks, and the
gated per-domain train set that GRPO reads.

``gated_samples`` (after ``policy_pass_rates``, :mod:`assets.difficulty`: the difficulty of each
train row is its measured pass rate on the difficulty policy, or the heuristic when so configured,
named in the metadata ``difficulty_estimate``) runs the environment self-test and the GE suites (format, safety, difficulty)
on the domain's **incoming** batch (:func:`quality.batch_gates.evaluate_batch_gates`: the batches
no evaluation has judged yet), stores the results in the lake (gate_results, gate_batches,
difficulty), logs one MLflow run per gate with its dataset, and reports each gate as a blocking
check: a critical failure is ERROR (``domain_train_set`` for that domain is skipped), a
warning-only failure is WARN. The domain's history (earlier accepted/rejected batches, drift
against the last accepted batch) is reported in the metadata beside the verdict, never in it.
Other domains' partitions are not affected.

``domain_train_set`` holds the in-band train rows of the domain's accepted batches; training uses
it only while the evaluation it was built after is the domain's latest (quality.gate_history), so
a domain whose latest gates failed has no train set until a later evaluation passes.
"""

import dagster as dg

from domains import get_registry
from assets.config_bridge import dagster_config
from assets.pools import POOL_INGEST
from assets.k8s import k8s_op_tags
from assets.partitions import domain_partitions
from assets.resources import LakeResource, MlflowResource
from storage.markdown import markdown_table
from quality.batch_gates import GateSettings, TrainSetError, evaluate_batch_gates, write_train_set
from quality.expectations import ExpectationOutcome, combined_advice, gate_severity, outcomes_markdown

GATE_CHECKS = {"format": "format_gate", "safety": "safety_gate", "difficulty": "difficulty_gate",
               "selftest": "selftest_gate"}


GateConfig = dagster_config(GateSettings, name="GateConfig")


def _check_result(gate: str, gate_outcomes: list[ExpectationOutcome], extra: dict) -> dg.AssetCheckResult:
    severity = gate_severity(gate_outcomes)
    failed = [o for o in gate_outcomes if not o.success]
    metadata = {
        "expectations": dg.MetadataValue.md(outcomes_markdown(gate_outcomes)),
        "failed": len(failed),
        "failed_expectations": ", ".join(o.expectation for o in failed) or "none",
    } | extra
    advice = [o.message for o in failed if o.message]
    if advice:  # what to do, in words (quality.expectations.difficulty_advice)
        metadata["what_to_do"] = dg.MetadataValue.text(combined_advice(advice))
    return dg.AssetCheckResult(
        check_name=GATE_CHECKS[gate], passed=severity is None, metadata=metadata,
        severity=dg.AssetCheckSeverity.WARN if severity == "WARN" else dg.AssetCheckSeverity.ERROR,
    )


@dg.asset(
    partitions_def=domain_partitions,
    group_name="quality",
    deps=["domain_samples", "policy_pass_rates"],
    kinds={"great_expectations", "parquet"},
    pool=POOL_INGEST,
    op_tags=k8s_op_tags(POOL_INGEST),  # CPU-only pod on the cluster profile (assets.k8s)
    check_specs=[dg.AssetCheckSpec(name, asset="gated_samples", blocking=True,
                                   description=f"{gate} gate (blocking: a critical failure stops training on the domain)")
                 for gate, name in GATE_CHECKS.items()],
    description="A domain's incoming batch after the batch gates: GE format/safety/difficulty suites and the "
                "environment self-test; difficulty estimates and out-of-band quarantine.",
)
def gated_samples(context: dg.AssetExecutionContext, config: GateConfig, lake: LakeResource,
                  mlflow: MlflowResource) -> dg.MaterializeResult:
    from evaluation.policy_difficulty import DifficultyNotMeasured

    domain = get_registry().get(context.partition_key)
    try:
        result = evaluate_batch_gates(lake.lake(write=True), domain, selftest_samples=config.selftest_samples,
                                      tracker=mlflow.tracker() if config.log_to_mlflow else None)
    except DifficultyNotMeasured as exc:
        raise dg.Failure(str(exc)) from None
    outcomes, run_ids = result.outcomes, result.mlflow_runs
    checks = [_check_result(gate, outcomes[gate], {"mlflow_run": dg.MetadataValue.url(mlflow.run_url(run_ids[gate]))}
                            if gate in run_ids else {}) for gate in GATE_CHECKS]
    stats = result.stats
    context.log.info(f"{domain.name}: gates " + ", ".join(
        f"{g}={'pass' if c.passed else c.severity.value}" for g, c in zip(GATE_CHECKS, checks)))
    all_outcomes = [o for g in GATE_CHECKS for o in outcomes[g]]
    return dg.MaterializeResult(
        metadata={
            "evaluation": result.evaluation,
            "admitted": stats["admitted"],
            "quarantined": stats["quarantined"],
            "train_rows": stats["train_rows"],
            "in_band": stats["in_band"],
            "out_of_band_quarantined": stats["out_of_band"],
            "zero_signal_fraction": dg.MetadataValue.float(stats["zero_signal_fraction"])
            if stats["zero_signal_fraction"] is not None else dg.MetadataValue.text("n/a (no train rows)"),
            "difficulty_method": str(stats["difficulty_method"]),
            "difficulty_estimate": stats["difficulty_estimate"]["described"],
            "mean_pass_rate": dg.MetadataValue.float(stats["mean_pass_rate"]) if stats["mean_pass_rate"] is not None
            else dg.MetadataValue.text("n/a (heuristic estimate or no train rows)"),
            "learnable_band": str(stats["band"]),
            "expectations": dg.MetadataValue.md(outcomes_markdown(all_outcomes)),
            "incoming_batches": dg.MetadataValue.json(stats["incoming_batches"]),
            "history": dg.MetadataValue.json(stats["history"]),
            "drift_vs_last_accepted": dg.MetadataValue.json(stats["drift"]) if stats["drift"] is not None
            else dg.MetadataValue.text("n/a (no earlier accepted batch)"),
        },
        check_results=checks,
    )


REWARD_GATE_CHECK = "reward_gate"


def _reward_gate_check(the_lake, domain) -> dg.AssetCheckResult:
    """The domain's learned reward, judged as GRPO will judge it (training.learned_rewards): its
    reward model's newest ``assay reward check`` must have passed. A domain without one passes."""
    from quality.reward_gate import latest_reward_gate
    from training.data import TrainingDataError
    from training.learned_rewards import gated_reward_model

    if domain.learned_reward is None:
        return dg.AssetCheckResult(check_name=REWARD_GATE_CHECK, passed=True,
                                   metadata={"learned_reward": "none (rewarded by its verifier)"})
    metadata = {"learned_reward": f"reward_model={domain.learned_reward.reward_model}, "
                                  f"weight={domain.learned_reward.weight:g}",
                "verifier": "yes" if domain.has_verifier else "none (the learned reward is the whole reward)"}
    try:
        gated = gated_reward_model(the_lake, domain)
    except TrainingDataError as exc:
        return dg.AssetCheckResult(check_name=REWARD_GATE_CHECK, passed=False, severity=dg.AssetCheckSeverity.ERROR,
                                   metadata={**metadata, "what_to_do": dg.MetadataValue.text(str(exc))})
    rows = latest_reward_gate(the_lake, domain.name, gated["reward_model"])
    table = markdown_table([{"criterion": r["criterion"], "observed": _num(r["observed"]), "interval": _interval(r),
                             "bar": _num(r["threshold"]), "verdict": "ok" if r["passed"] else "FAIL"} for r in rows],
                           ["criterion", "observed", "interval", "bar", "verdict"])
    return dg.AssetCheckResult(check_name=REWARD_GATE_CHECK, passed=True, metadata={
        **metadata, "reward_model": gated["reward_model"], "gate_check": gated["gate_check"],
        "criteria": dg.MetadataValue.md(table)})


def _num(value) -> str:
    return f"{value:.3f}" if value is not None else ""


def _interval(row: dict) -> str:
    return f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]" if row.get("ci_low") is not None else ""


@dg.asset(
    partitions_def=domain_partitions,
    group_name="training",
    deps=["gated_samples"],
    kinds={"parquet"},
    check_specs=[dg.AssetCheckSpec(REWARD_GATE_CHECK, asset="domain_train_set", blocking=True,
                                   description="a domain that declares a learned reward: its reward model's newest "
                                               "`assay reward check` passed (blocking: GRPO does not train on it "
                                               "otherwise)")],
    description="The in-band train rows of a domain's accepted batches, built after an evaluation that passed "
                "(lake/train_set/domain=<d>); what GRPO reads. Skipped when a blocking gate check fails; its "
                "reward_gate check blocks training on a domain whose learned reward has not passed its gate.",
)
def domain_train_set(context: dg.AssetExecutionContext, lake: LakeResource) -> dg.MaterializeResult:
    the_lake = lake.lake(write=True)
    try:  # the library refuses a domain whose latest evaluation failed (guards a run of this asset alone)
        built = write_train_set(the_lake, context.partition_key)
    except TrainSetError as exc:
        raise dg.Failure(str(exc)) from None
    rows = built.rows
    check = _reward_gate_check(the_lake, get_registry().get(context.partition_key))
    if not check.passed:
        context.log.error(f"{context.partition_key}: {check.metadata['what_to_do'].value}")
    return dg.MaterializeResult(check_results=[check], metadata={
        "rows": rows.height, "evaluation": built.evaluation,
        "accepted_batches": dg.MetadataValue.json(built.accepted_batches),
        "rejected_batches": dg.MetadataValue.json(built.rejected_batches),
        "mean_difficulty": dg.MetadataValue.float(float(rows["difficulty"].mean())) if rows.height else
        dg.MetadataValue.text("n/a"),
        "lake_path": dg.MetadataValue.path(built.path),
    })
