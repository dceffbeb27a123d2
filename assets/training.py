"""Training stage: GRPO on the gated train sets of the chosen domains, as one checkpoint.

``policy_checkpoint`` depends on ``domain_train_set`` (so on the gates: a domain whose latest
gate evaluation failed has no train set and is refused with a message naming the failed gates,
see ``training.data``). The run's identity includes the fingerprint of the rows it trains on, so
materializing again after new gated data trains a new run, while the same rows and config return
(or resume) the earlier one; the fingerprint is in the metadata and on the checkpoint.

Training runs in its own process (:func:`training.launch.train_in_subprocess`: ``python -m
training.run_grpo``, or ``torchrun`` for several ranks): DeepSpeed's process group and torch's
thread pools stay out of the Dagster worker, and a killed run is resumed by materializing again.
The new checkpoint becomes a partition of ``checkpoint_partitions`` so the evaluation assets can
run for it at once (the sensor would also find it in MLflow).
"""

import dagster as dg

from assets.config_bridge import dagster_config
from assets.pools import POOL_TRAINER
from assets.k8s import k8s_op_tags
from assets.partitions import checkpoint_partitions
from assets.resources import LakeResource, MlflowResource, PolicyResource
from storage.markdown import markdown_table
from training.config import TrainRequest
from training.launch import TrainingProcessError, train_in_subprocess


TrainConfig = dagster_config(TrainRequest, name="TrainConfig")


def _history_table(history: list[dict]) -> str:
    """Each domain's last trained step (reward, KL) and last validation score."""
    last = {row["domain"]: row for row in history if row.get("reward_mean") is not None}
    validated = {row["domain"]: row for row in history if row.get("val_score") is not None}
    rows = [{"domain": domain,
             "step": last[domain]["step"] if domain in last else "",
             "reward": f"{last[domain]['reward_mean']:.3f}" if domain in last else "(not trained)",
             "kl": "n/a" if domain not in last or last[domain]["kl"] is None else f"{last[domain]['kl']:.4f}",
             "validation": (f"{validated[domain]['val_score']:.3f} (step {validated[domain]['step']})"
                            if domain in validated else "")}
            for domain in sorted({*last, *validated})]
    return markdown_table(rows, ["domain", "step", "reward", "kl", "validation"], width=None)


@dg.asset(
    group_name="training",
    deps=["domain_train_set"],
    kinds={"deepspeed", "torch", "mlflow"},
    pool=POOL_TRAINER,  # one GRPO run at a time across all runs (pipelines.instance)
    op_tags=k8s_op_tags(POOL_TRAINER),  # GPU pod on the cluster profile (assets.k8s)
    description="GRPO (DeepSpeed, KL to the frozen reference) on the gated train sets of the chosen "
                "domains; registers the checkpoint in MLflow and as a checkpoint partition.",
)
def policy_checkpoint(context: dg.AssetExecutionContext, config: TrainConfig, lake: LakeResource,
                      mlflow: MlflowResource, policy: PolicyResource) -> dg.MaterializeResult:
    recipe = config.recipe or policy.recipe
    pass_rates = _measure_pass_rates(context, lake, mlflow, recipe, config)
    try:
        result = train_in_subprocess(lake.lake().home, recipe, domains=config.domains, steps=config.steps,
                                     seed=config.seed, nproc=config.nproc, backend=config.backend,
                                     threads_per_process=config.threads_per_process, log=context.log.info,
                                     reward_hacking=config.reward_hacking, forgetting=config.forgetting)
    except TrainingProcessError as exc:
        raise dg.Failure(exc.reason, metadata={
            "stderr_tail": dg.MetadataValue.md("```\n" + "\n".join(exc.tail) + "\n```")}) from None
    checkpoint = result["checkpoint"]
    context.instance.add_dynamic_partitions(checkpoint_partitions.name, [checkpoint])
    final = {row["domain"]: row["reward_mean"] for row in result["history"] if row.get("reward_mean") is not None}
    validation = result.get("validation") or {}
    return dg.MaterializeResult(metadata={
        "checkpoint": checkpoint,
        "checkpoint_path": dg.MetadataValue.path(result["checkpoint_path"]),
        "steps": result["steps"],
        "resumed_from": result["resumed_from"],
        "recipe": recipe,
        "processes": result["world_size"],
        "mlflow_run": dg.MetadataValue.url(mlflow.run_url(result["mlflow_run_id"])),
        "mlflow_run_id": result["mlflow_run_id"],
        "run_name": result["run_name"],
        "data_fingerprint": result["data_fingerprint"],
        "data": dg.MetadataValue.json(result["data"]),
        "final_reward": dg.MetadataValue.json(final),
        "history": dg.MetadataValue.md(_history_table(result["history"])),
        "seconds": result["seconds"],
        # a stop (reward_hacking or validation.forgetting: stop) ended the run before its steps: why, with evidence
        **({"stopped": dg.MetadataValue.json(result["stopped"])} if result.get("stopped") else {}),
        # the latest in-loop validation per domain (training.validation) and the forgetting flags with evidence
        **({"validation": dg.MetadataValue.json(validation),
            "forgetting": dg.MetadataValue.json({"flagged": validation.get("flagged", {}),
                                                 "flagged_during_run": validation.get("flagged_ever", [])})}
           if validation else {}),
        **({"pass_rates": dg.MetadataValue.json(pass_rates)} if pass_rates else {}),
    })


def _measure_pass_rates(context, lake: LakeResource, mlflow: MlflowResource, recipe: str, config) -> dict:
    """With learnability sampling (training.learnability) the run reads its rows' pass rates under
    its starting policy from the lake: measure the missing ones here, before the training process."""
    from assets.learnability_rates import measure_for_training
    from evaluation.pass_rates import PassRateError
    from training.config import RecipeError, load_recipe
    from training.learnability import uses_pass_rates

    try:
        recipe_config = load_recipe(recipe, domains=config.domains or None, max_steps=config.steps, seed=config.seed,
                                    rollout={"backend": config.backend} if config.backend else None)
    except RecipeError as exc:
        raise dg.Failure(str(exc)) from None
    if not uses_pass_rates(recipe_config):
        return {}
    try:
        results = measure_for_training(lake.lake(write=True), mlflow.tracking_uri, recipe_config,
                                       backend=recipe_config.rollout.backend, log=context.log.info, progress=False)
    except (PassRateError, ValueError) as exc:
        raise dg.Failure(f"pass rates for learnability sampling: {exc}") from None
    return {name: result.summary() for name, result in results.items()}
