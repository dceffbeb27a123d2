"""Difficulty on the policy as a Dagster dependency: the ``champion`` source asset and the
per-domain ``policy_pass_rates`` that the gate and the train set read.

Design, and why it is the simplest one that is correct:

- ``champion`` is an observable source asset whose data version is the champion's checkpoint id
  (``none`` before the first promotion). ``champion_promotion`` moves an MLflow alias, not an
  asset Dagster materializes, so the dependency has to be observed; the observation is cheap (one
  registry lookup).
- ``policy_pass_rates`` (group quality, per domain) depends on ``champion`` and ``domain_samples``:
  it measures every admitted train row of the domain with the difficulty policy (config
  :class:`quality.difficulty_settings.DifficultySettings`; default: the champion, else the base
  policy of the policy resource's recipe) and replaces the domain's ``policy_difficulty`` rows
  (:mod:`evaluation.policy_difficulty`). The pass-rate cache (lake table ``pass_rates``, per
  policy, item, K and generation config) makes a re-run cost only what is new: new items, or all
  items under a new champion. ``gated_samples`` depends on it and judges the incoming batch by
  those rates; ``domain_train_set`` keeps the rows they mark in band, so the train set follows
  the latest measurement of the current difficulty policy.
- ``champion_change_sensor`` (:mod:`pipelines.sensors`, running by default under ``dagster dev``)
  compares the champion with its cursor each minute; on a change it records a ``champion``
  observation with the new data version and requests ``difficulty_refresh_job``
  (policy_pass_rates -> gated_samples -> domain_train_set) for every domain whose last measurement
  follows the champion (``policy`` left empty), with the settings it was measured with. A domain
  measured with a fixed policy or the heuristic does not depend on the champion and is not re-run.
  A sensor rather than declarative automation: automation conditions need the asset daemon's
  "auto-materialize" switched on per deployment and cannot carry the domain's own settings as run
  config; a sensor runs with the default daemon and does both.
"""


import warnings

import dagster as dg

from domains import get_registry
from assets.config_bridge import dagster_config
from assets.pools import POOL_SWEEP
from assets.k8s import k8s_op_tags
from assets.partitions import domain_partitions
from assets.resources import LakeResource, MlflowResource, PolicyResource
from quality.difficulty_settings import DifficultySettings

NO_CHAMPION = "none"
DifficultyConfig = dagster_config(DifficultySettings, name="DifficultyConfig")


def champion_version(mlflow: MlflowResource) -> str:
    """The data version of ``champion``: the champion's checkpoint id, or ``none``."""
    from storage.tracking import current_champion

    return current_champion(mlflow.tracking_uri) or NO_CHAMPION


with warnings.catch_warnings():  # observable_source_asset is marked beta; the warning would print at every load
    warnings.simplefilter("ignore")

    @dg.observable_source_asset(
        group_name="regression",
        description="The policy the MLflow alias 'champion' points at; data version = its checkpoint id ('none' "
                    "before the first promotion). Observed by champion_change_sensor; policy_pass_rates depends on it.")
    def champion(mlflow: MlflowResource) -> dg.DataVersion:
        return dg.DataVersion(champion_version(mlflow))


def _metadata(summary: dict) -> dict:
    def num(value):
        return dg.MetadataValue.float(value) if value is not None else dg.MetadataValue.text("n/a")

    histogram = summary["histogram"]
    return {
        "estimate": summary["estimate"], "difficulty_estimate": summary["described"],
        "policy": summary["policy"] or "none (heuristic)", "items": summary["items"],
        "in_band_share": num(summary["in_band_share"]), "mean_pass_rate": num(summary["mean_pass_rate"]),
        "verdicts": dg.MetadataValue.json(summary["verdicts"]),
        "pass_rate_histogram": dg.MetadataValue.md(
            "| pass rate | items |\n|---|---|\n" + "\n".join(f"| {h['bin']} | {h['items']} |" for h in histogram))
        if histogram else dg.MetadataValue.text("n/a (no pass rates measured)"),
        "computed": summary["computed"], "cached": summary["cached"], "seconds": summary["seconds"],
        "engine": summary["engine"] or "none (nothing generated)",
    }


@dg.asset(
    partitions_def=domain_partitions,
    group_name="quality",
    deps=["domain_samples", champion.key],
    kinds={"torch", "polars", "parquet"},
    pool=POOL_SWEEP,  # it generates: limited like sweeps
    op_tags=k8s_op_tags(POOL_SWEEP),  # GPU pod on the cluster profile (assets.k8s)
    description="Pass rate of the difficulty policy (default: the champion, else the base policy) over K samples "
                "on each admitted train row of the domain (cached per policy, item, K, generation config), or the "
                "heuristic when configured; what the difficulty gate and the train set read "
                "(lake/policy_difficulty/domain=<d>). Re-measured when the champion changes.",
)
def policy_pass_rates(context: dg.AssetExecutionContext, config: DifficultyConfig, lake: LakeResource,
                      mlflow: MlflowResource, policy: PolicyResource) -> dg.MaterializeResult:
    from evaluation.pass_rates import PassRateError
    from evaluation.policy_difficulty import measure_domain_difficulty
    from generation.checkpoints import CheckpointError

    domain = get_registry().get(context.partition_key)
    settings = config.to_library()
    try:
        result = measure_domain_difficulty(lake.lake(write=True), mlflow.tracking_uri, domain, settings,
                                           recipe=policy.recipe, backend=policy.backend, dtype=policy.dtype,
                                           log=context.log.info)
    except (CheckpointError, PassRateError) as exc:
        raise dg.Failure(f"{domain.name}: {exc}") from None
    summary = result.summary()
    context.log.info(f"{domain.name}: difficulty by {summary['described']}: {summary['items']} items, "
                     f"{summary['computed']} computed, {summary['cached']} cached")
    return dg.MaterializeResult(metadata=_metadata(summary))
