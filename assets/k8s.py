"""Kubernetes resource requests per concurrency pool, for the ``cluster`` profile (dagster-k8s).

Each heavy asset sits in one of Assay's pools (:mod:`pipelines.instance`); on a cluster the pool
also says what pod its step needs: ``trainer`` (``policy_checkpoint``) and ``sweep`` (sweeps,
difficulty pass rates, fast variants: they generate) get a GPU, ``ingest`` and ``maintenance``
(lake maintenance) only CPU and memory.

The requests travel as the ``dagster-k8s/config`` op tag, which dagster-k8s's
``k8s_job_executor`` applies to each step's pod. The ``K8sRunLauncher`` alone reads run tags
only, so the cluster profile runs with :func:`k8s_step_executor`. Other launchers ignore the
tag, which is why the assets carry it in every profile.

This module imports neither dagster nor dagster_k8s at import time: the definitions load it in
every profile, and dagster-k8s (with the kubernetes client) is only installed for the cluster.
Change a request for one launch with the executor's ``per_step_k8s_config`` run config, or here
for good.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from assets.pools import POOL_INGEST, POOL_MAINTENANCE, POOL_SWEEP, POOL_TRAINER, POOLS

K8S_CONFIG_TAG = "dagster-k8s/config"  # dagster_k8s.job.USER_DEFINED_K8S_CONFIG_KEY
GPU_RESOURCE = "nvidia.com/gpu"  # the NVIDIA device plugin's extended resource


class PodResources(BaseModel):
    """What one step's container asks the scheduler for (Kubernetes quantities)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu: str = Field(description="CPU request, e.g. '4' or '500m' (no limit: a CPU limit only throttles)")
    memory: str = Field(description="memory request and limit, e.g. '32Gi' (equal, so a step that "
                                    "outgrows it is killed instead of starving its node)")
    gpus: int = Field(default=0, ge=0, description=f"{GPU_RESOURCE} count; GPUs are requested as limits")

    def container_resources(self) -> dict[str, dict[str, str]]:
        """A ``V1ResourceRequirements`` dict: extended resources such as GPUs must be limits."""
        requests = {"cpu": self.cpu, "memory": self.memory}
        limits = {"memory": self.memory}
        if self.gpus:
            requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(self.gpus)
        return {"requests": requests, "limits": limits}


# Sized for one GRPO run / one sweep of a small policy per GPU; ingest is polars on CPU.
POOL_RESOURCES: dict[str, PodResources] = {
    POOL_TRAINER: PodResources(cpu="8", memory="64Gi", gpus=1),
    POOL_SWEEP: PodResources(cpu="4", memory="32Gi", gpus=1),
    POOL_INGEST: PodResources(cpu="2", memory="8Gi"),
    POOL_MAINTENANCE: PodResources(cpu="1", memory="4Gi"),
}

# GPU nodes are commonly tainted so that CPU-only pods stay off them; GPU steps tolerate it.
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


def k8s_config(pool: str) -> dict[str, Any]:
    """The ``dagster-k8s/config`` value for a step in ``pool`` (container and pod spec, in
    dagster-k8s's snake_case form)."""
    if pool not in POOL_RESOURCES:
        raise ValueError(f"no Kubernetes resources for pool {pool!r}; Assay's pools are {', '.join(POOLS)}")
    resources = POOL_RESOURCES[pool]
    config: dict[str, Any] = {"container_config": {"resources": resources.container_resources()}}
    if resources.gpus:
        config["pod_spec_config"] = {"tolerations": [dict(GPU_TOLERATION)]}
    return config


def k8s_op_tags(pool: str) -> dict[str, Any]:
    """Op tags for an asset in ``pool``: pass as ``op_tags=`` beside ``pool=``."""
    return {K8S_CONFIG_TAG: k8s_config(pool)}


def k8s_step_executor():
    """dagster-k8s's ``k8s_job_executor``, one pod per step, so each step gets its pool's request
    (imported here, on call, so that only the cluster profile needs dagster-k8s)."""
    try:
        from dagster_k8s import k8s_job_executor
    except ImportError as exc:
        raise ImportError("the cluster profile needs dagster-k8s: pip install dagster-k8s "
                          "(the image built by deploy/Dockerfile has it)") from exc
    return k8s_job_executor
