"""Training stage: GRPO on the gated train sets of the chosen domains, as one checkpoint.

``policy_checkpoint`` depends on ``domain_train_set`` (so on the gates: a domain whose latest
gate evaluation failed has no train set and is refused with a message naming the failed gates,
see ``training.data``). The run's identity includes the fingerprint of the rows it trains on, so
materializing again after new gated data trains a new run, while the same rows and config return
(or resume) the earlier one; the fingerprint is in the metadata and on the checkpoint.

Training runs in its own process (``python -m training.run_grpo``, or ``torchrun`` for several
ranks): DeepSpeed's process group and torch's thread pools stay out of the Dagster worker, and a
killed run is resumed by materializing again. The new checkpoint becomes a partition of
``checkpoint_partitions`` so the evaluation assets can run for it at once (the sensor would also
find it in MLflow).
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

import dagster as dg

from pipelines.instance import POOL_TRAINER
from pipelines.partitions import checkpoint_partitions
from pipelines.resources import LakeResource, MlflowResource, PolicyResource
from storage.markdown import markdown_table

REPO_ROOT = Path(__file__).resolve().parents[1]


class TrainConfig(dg.Config):
    recipe: str = ""
    """tiny | smollm2 | path to a recipe YAML (empty: the policy resource's recipe)."""
    domains: list[str] = []
    """Domains to train on (empty: the recipe's). Each needs a gated train_set."""
    steps: Optional[int] = None
    """Optimizer steps (None: the recipe's max_steps)."""
    seed: Optional[int] = None
    nproc: int = 1
    """Processes (ranks); more than one runs under torchrun with gloo on CPU."""
    threads_per_process: int = 2
    """OMP_NUM_THREADS for each rank (without it CPU training runs 10-50x slower)."""


def _command(config: TrainConfig, recipe: str, output: str) -> list[str]:
    args = ["--recipe", recipe, "--require-train-set", "--output", output]
    if config.domains:
        args += ["--domains", ",".join(config.domains)]
    if config.steps is not None:
        args += ["--steps", str(config.steps)]
    if config.seed is not None:
        args += ["--seed", str(config.seed)]
    if config.nproc > 1:
        torchrun = str(Path(sys.executable).with_name("torchrun"))
        return [torchrun, "--standalone", "--nproc_per_node", str(config.nproc),
                "-m", "training.run_grpo", *args]
    return [sys.executable, "-m", "training.run_grpo", *args]


def _history_table(history: list[dict]) -> str:
    """Each domain's last logged step."""
    last = {row["domain"]: row for row in history}
    rows = [{"domain": domain, "step": row["step"], "reward": f"{row['reward_mean']:.3f}",
             "kl": "n/a" if row["kl"] is None else f"{row['kl']:.4f}"} for domain, row in sorted(last.items())]
    return markdown_table(rows, ["domain", "step", "reward", "kl"], width=None)


@dg.asset(
    group_name="training",
    deps=["domain_train_set"],
    kinds={"deepspeed", "torch", "mlflow"},
    pool=POOL_TRAINER,  # one GRPO run at a time across all runs (pipelines.instance)
    description="GRPO (DeepSpeed, KL to the frozen reference) on the gated train sets of the chosen "
                "domains; registers the checkpoint in MLflow and as a checkpoint partition.",
)
def policy_checkpoint(context: dg.AssetExecutionContext, config: TrainConfig, lake: LakeResource,
                      mlflow: MlflowResource, policy: PolicyResource) -> dg.MaterializeResult:
    the_lake = lake.lake()
    recipe = config.recipe or policy.recipe
    with tempfile.TemporaryDirectory() as tmp:
        output = str(Path(tmp) / "result.json")
        command = _command(config, recipe, output)
        # The trainer sets up its own process group: a rank/port inherited from this process
        # (one that already initialised torch.distributed) would collide with it (EADDRINUSE).
        inherited = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
        env = {**{k: v for k, v in os.environ.items() if k not in inherited}, "ASSAY_HOME": str(the_lake.home),
               "OMP_NUM_THREADS": str(config.threads_per_process), "TOKENIZERS_PARALLELISM": "false"}
        context.log.info(f"training: {' '.join(command)}")
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        tail: list[str] = []
        for line in proc.stderr:  # the trainer's notes (resume, generated rows) reach the run log
            line = line.rstrip()
            if line and "[WARNING]" not in line:
                tail = (tail + [line])[-40:]
                if not line.startswith(("[rank", " ")):
                    context.log.info(line)
        if proc.wait() != 0 or not Path(output).exists():
            reason = next((line[len("error: "):] for line in reversed(tail) if line.startswith("error: ")), None)
            raise dg.Failure(reason or f"training exited with code {proc.returncode}", metadata={
                "stderr_tail": dg.MetadataValue.md("```\n" + "\n".join(tail) + "\n```")})
        result = json.loads(Path(output).read_text())
    checkpoint = result["checkpoint"]
    context.instance.add_dynamic_partitions(checkpoint_partitions.name, [checkpoint])
    final = {row["domain"]: row["reward_mean"] for row in result["history"]}
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
    })
