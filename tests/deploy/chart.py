"""What the tests know of the Dagster Helm chart (dagster/dagster 1.13.x), without helm or the chart.

Two halves, both written by hand from the chart's source (helm/dagster/ in dagster-io/dagster):

- :class:`ChartValues`: the keys of the chart's values schema (``schema/charts/.../subschema``,
  from which ``values.schema.json`` is generated) for the sections deploy/helm/values.yaml sets.
  Unknown keys are refused, as the chart's own schema does for these sections (``extra="forbid"``
  there too), so a misspelled key fails here instead of being silently ignored by the templates.
  A section the file does not set is accepted as is; transcribe its keys before using it.
- :func:`render_instance`: the ``dagster.yaml`` that the chart's instance ConfigMap template
  (``configmap-instance.yaml`` and ``helpers/instance/*.tpl``) renders from those values, so that
  Dagster's own config schemas can judge it.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PullPolicy = Literal["Always", "IfNotPresent", "Never"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class EnvSource(_Strict):
    """A Kubernetes ConfigMapEnvSource / SecretEnvSource."""

    name: str
    optional: bool | None = None


class Image(_Strict):
    repository: str
    tag: str | int | None = None
    pullPolicy: PullPolicy


class Global(_Strict):
    postgresqlSecretName: str | None = None
    dagsterHome: str | None = None
    serviceAccountName: str | None = None
    celeryConfigSecretName: str | None = None


class PostgresService(_Strict):
    port: int


class PostgreSQL(_Strict):
    postgresqlScheme: str | None = None
    image: dict[str, Any] | None = None
    enabled: bool
    postgresqlHost: str
    postgresqlUsername: str
    postgresqlPassword: str | None = None
    postgresqlDatabase: str
    postgresqlParams: dict[str, Any] | None = None
    service: PostgresService


class IncludeConfigInLaunchedRuns(_Strict):
    enabled: bool


class UserDeployment(_Strict):
    name: str
    image: Image
    dagsterApiGrpcArgs: list[str] | None = None
    codeServerArgs: list[str] | None = None
    includeConfigInLaunchedRuns: IncludeConfigInLaunchedRuns | None = None
    deploymentNamespace: str | None = None
    port: int
    replicaCount: int | None = Field(default=None, gt=0)
    env: dict[str, str] | list[dict[str, Any]] | None = None
    envConfigMaps: list[EnvSource] | None = None
    envSecrets: list[EnvSource] | None = None
    annotations: dict[str, str] | None = None
    nodeSelector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    podSecurityContext: dict[str, Any] | None = None
    securityContext: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None
    livenessProbe: dict[str, Any] | None = None
    readinessProbe: dict[str, Any] | None = None
    startupProbe: dict[str, Any] | None = None
    labels: dict[str, str] | None = None
    volumeMounts: list[dict[str, Any]] | None = None
    volumes: list[dict[str, Any]] | None = None
    schedulerName: str | None = None


class UserDeployments(_Strict):
    enabled: bool
    enableSubchart: bool | None = None
    imagePullSecrets: list[dict[str, str]] | None = None
    deployments: list[UserDeployment]


class RunK8sConfig(_Strict):
    containerConfig: dict[str, Any] | None = None
    podSpecConfig: dict[str, Any] | None = None
    podTemplateSpecMetadata: dict[str, Any] | None = None
    jobSpecConfig: dict[str, Any] | None = None
    jobMetadata: dict[str, Any] | None = None


class K8sRunLauncherConfig(_Strict):
    image: Image | None = None
    imagePullPolicy: PullPolicy
    jobNamespace: str | None = None
    loadInclusterConfig: bool
    kubeconfigFile: str | None = None
    envConfigMaps: list[EnvSource] | None = None
    envSecrets: list[EnvSource] | None = None
    envVars: list[str] | None = None
    volumeMounts: list[dict[str, Any]] | None = None
    volumes: list[dict[str, Any]] | None = None
    labels: dict[str, str] | None = None
    failPodOnRunFailure: bool | None = None
    resources: dict[str, Any] | None = None
    schedulerName: str | None = None
    securityContext: dict[str, Any] | None = None
    runK8sConfig: RunK8sConfig | None = None


class RunLauncherConfig(_Strict):
    celeryK8sRunLauncher: dict[str, Any] | None = None
    k8sRunLauncher: K8sRunLauncherConfig | None = None
    customRunLauncher: dict[str, Any] | None = None


class RunLauncher(_Strict):
    type: Literal["CeleryK8sRunLauncher", "K8sRunLauncher", "CustomRunLauncher"]
    config: RunLauncherConfig


class BlockOpConcurrencyLimitedRuns(_Strict):
    enabled: bool
    opConcurrencySlotBuffer: int


class QueuedRunCoordinatorConfig(_Strict):
    maxConcurrentRuns: int | None = None
    tagConcurrencyLimits: list[dict[str, Any]] | None = None
    dequeueIntervalSeconds: int | None = None
    dequeueNumWorkers: int | None = None
    dequeueUseThreads: bool | None = None
    blockOpConcurrencyLimitedRuns: BlockOpConcurrencyLimitedRuns | None = None


class RunCoordinatorConfig(_Strict):
    queuedRunCoordinator: QueuedRunCoordinatorConfig | None = None
    customRunCoordinator: dict[str, Any] | None = None


class RunCoordinator(_Strict):
    enabled: bool
    type: Literal["QueuedRunCoordinator", "CustomRunCoordinator"]
    config: RunCoordinatorConfig


class RunMonitoring(_Strict):
    """The chart types this as a free dict; these are the keys its template reads (a typo would
    be dropped without a word, so the test is stricter than the chart here)."""

    enabled: bool
    startTimeoutSeconds: int | None = None
    cancelTimeoutSeconds: int | None = None
    maxResumeRunAttempts: int | None = None
    pollIntervalSeconds: int | None = None
    freeSlotsAfterRunEndSeconds: int | None = None


class Daemon(_Strict):
    enabled: bool | None = None
    image: Image | None = None
    runCoordinator: RunCoordinator | None = None
    heartbeatTolerance: int | None = None
    env: dict[str, str] | list[dict[str, Any]] | None = None
    envConfigMaps: list[EnvSource] | None = None
    envSecrets: list[EnvSource] | None = None
    deploymentLabels: dict[str, str] | None = None
    labels: dict[str, str] | None = None
    nodeSelector: dict[str, str] | None = None
    affinity: dict[str, Any] | None = None
    tolerations: list[dict[str, Any]] | None = None
    podSecurityContext: dict[str, Any] | None = None
    securityContext: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None
    checkDbReadyInitContainer: bool | None = None
    livenessProbe: dict[str, Any] | None = None
    readinessProbe: dict[str, Any] | None = None
    startupProbe: dict[str, Any] | None = None
    annotations: dict[str, str] | None = None
    runMonitoring: RunMonitoring | None = None
    runRetries: dict[str, Any] | None = None
    sensors: dict[str, Any] | None = None
    schedules: dict[str, Any] | None = None
    backfills: dict[str, Any] | None = None
    schedulerName: str | None = None
    logFormat: str | None = None
    volumeMounts: list[dict[str, Any]] | None = None
    volumes: list[dict[str, Any]] | None = None


class ConcurrencyPools(_Strict):
    defaultLimit: int | None = None
    granularity: Literal["run", "op"] | None = None
    opGranularityRunBuffer: int | None = None


class ConcurrencyRuns(_Strict):
    maxConcurrentRuns: int | None = None
    tagConcurrencyLimits: list[dict[str, Any]] = []


class Concurrency(_Strict):
    enabled: bool = False
    pools: ConcurrencyPools = ConcurrencyPools()
    runs: ConcurrencyRuns = ConcurrencyRuns()


class Telemetry(_Strict):
    enabled: bool


class ChartValues(_Strict):
    """The chart's top-level keys; typed where deploy/helm/values.yaml sets something."""

    global_: Global | None = Field(default=None, alias="global")
    generatePostgresqlPasswordSecret: bool | None = None
    postgresql: PostgreSQL | None = None
    dagster_user_deployments: UserDeployments | None = Field(default=None, alias="dagster-user-deployments")
    runLauncher: RunLauncher | None = None
    dagsterDaemon: Daemon | None = None
    concurrency: Concurrency | None = None
    telemetry: Telemetry | None = None
    # Sections Assay leaves at the chart's defaults.
    nameOverride: Any = None
    fullnameOverride: Any = None
    rbacEnabled: Any = None
    dagsterWebserver: Any = None
    generateCeleryConfigSecret: Any = None
    rabbitmq: Any = None
    redis: Any = None
    flower: Any = None
    ingress: Any = None
    imagePullSecrets: Any = None
    computeLogManager: Any = None
    scheduler: Any = None
    pythonLogs: Any = None
    busybox: Any = None
    migrate: Any = None
    serviceAccount: Any = None
    retention: Any = None
    additionalInstanceConfig: Any = None


# The chart defaults that the instance templates read and Assay's values leave alone.
CHART_DEFAULTS: dict[str, Any] = {
    "global": {"dagsterHome": "/opt/dagster/dagster_home", "serviceAccountName": ""},
    "postgresql": {"postgresqlParams": {}},
    "dagsterDaemon": {"enabled": True,
                      "runMonitoring": {"startTimeoutSeconds": 300, "pollIntervalSeconds": 120}},
    "concurrency": {"enabled": False, "pools": {}, "runs": {"tagConcurrencyLimits": []}},
    "telemetry": {"enabled": True},
}


def deep_merge(base: dict, override: dict) -> dict:
    """Helm's merge of user values over chart defaults (maps merge, everything else replaces)."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _postgres_storage(values: dict) -> dict:
    pg = values["postgresql"]
    return {"postgres_db": {"username": pg["postgresqlUsername"], "password": {"env": "DAGSTER_PG_PASSWORD"},
                            "hostname": pg["postgresqlHost"], "db_name": pg["postgresqlDatabase"],
                            "port": pg["service"]["port"], "params": pg.get("postgresqlParams") or {}}}


def _k8s_run_launcher(values: dict, release: str, namespace: str) -> dict:
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    config: dict[str, Any] = {
        "load_incluster_config": launcher["loadInclusterConfig"],
        "job_namespace": launcher.get("jobNamespace") or namespace,
        "image_pull_policy": launcher["imagePullPolicy"],
        "service_account_name": values["global"]["serviceAccountName"] or release,
        "dagster_home": values["global"]["dagsterHome"],
        "instance_config_map": f"{release}-instance",
        "postgres_password_secret": values["global"]["postgresqlSecretName"],
    }
    renamed = {"kubeconfigFile": "kubeconfig_file", "envVars": "env_vars", "volumeMounts": "volume_mounts",
               "volumes": "volumes", "labels": "labels", "resources": "resources",
               "schedulerName": "scheduler_name", "securityContext": "security_context"}
    for key, name in renamed.items():
        if launcher.get(key):
            config[name] = launcher[key]
    for key, name in (("envConfigMaps", "env_config_maps"), ("envSecrets", "env_secrets")):
        if launcher.get(key):
            config[name] = [source["name"] for source in launcher[key] if "name" in source]
    if launcher.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    if launcher.get("runK8sConfig"):
        config["run_k8s_config"] = {
            snake: launcher["runK8sConfig"][camel]
            for camel, snake in (("containerConfig", "container_config"), ("podSpecConfig", "pod_spec_config"),
                                 ("podTemplateSpecMetadata", "pod_template_spec_metadata"),
                                 ("jobSpecConfig", "job_spec_config"), ("jobMetadata", "job_metadata"))
            if launcher["runK8sConfig"].get(camel)}
    return {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config}


def _queued_run_coordinator(values: dict) -> dict:
    queued = values["dagsterDaemon"]["runCoordinator"]["config"].get("queuedRunCoordinator") or {}
    concurrency_enabled = values["concurrency"]["enabled"]
    rendered: dict[str, Any] = {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator"}
    if not any(value not in (None, [], {}, "") for value in queued.values()):
        return rendered
    config: dict[str, Any] = {}
    if not concurrency_enabled or queued.get("maxConcurrentRuns") is not None:
        config["max_concurrent_runs"] = -1 if queued.get("maxConcurrentRuns") is None else queued["maxConcurrentRuns"]
    if queued.get("tagConcurrencyLimits"):
        config["tag_concurrency_limits"] = queued["tagConcurrencyLimits"]
    for key, name in (("dequeueIntervalSeconds", "dequeue_interval_seconds"),
                      ("dequeueUseThreads", "dequeue_use_threads"), ("dequeueNumWorkers", "dequeue_num_workers")):
        if queued.get(key):
            config[name] = queued[key]
    if queued.get("blockOpConcurrencyLimitedRuns"):
        block = queued["blockOpConcurrencyLimitedRuns"]
        config["block_op_concurrency_limited_runs"] = {"enabled": block["enabled"],
                                                       "op_concurrency_slot_buffer": block["opConcurrencySlotBuffer"]}
    rendered["config"] = config
    return rendered


def _concurrency(values: dict) -> dict:
    pools, runs = values["concurrency"]["pools"], values["concurrency"]["runs"]
    queued = values["dagsterDaemon"]["runCoordinator"]["config"].get("queuedRunCoordinator") or {}
    if runs.get("maxConcurrentRuns") is not None and queued.get("maxConcurrentRuns") is not None:
        # the chart's template fails the install on this
        raise ValueError("Cannot set both concurrency.runs.maxConcurrentRuns and "
                         "dagsterDaemon.runCoordinator.config.queuedRunCoordinator.maxConcurrentRuns")
    rendered: dict[str, Any] = {}
    pool_config = {name: pools[key] for key, name in (("defaultLimit", "default_limit"), ("granularity", "granularity"),
                                                      ("opGranularityRunBuffer", "op_granularity_run_buffer"))
                   if pools.get(key) is not None}
    if pool_config:
        rendered["pools"] = pool_config
    run_config: dict[str, Any] = {}
    if runs.get("maxConcurrentRuns") is not None:
        run_config["max_concurrent_runs"] = runs["maxConcurrentRuns"]
    if runs.get("tagConcurrencyLimits"):
        run_config["tag_concurrency_limits"] = runs["tagConcurrencyLimits"]
    if run_config:
        rendered["runs"] = run_config
    return rendered


def render_instance(user_values: dict, release: str = "dagster", namespace: str = "assay") -> dict:
    """The instance's ``dagster.yaml`` (as a dict) for the sections Assay's values touch."""
    values = deep_merge(CHART_DEFAULTS, user_values)
    storage = _postgres_storage(values)
    instance: dict[str, Any] = {
        "schedule_storage": {"module": "dagster_postgres.schedule_storage", "class": "PostgresScheduleStorage",
                             "config": storage},
        "run_storage": {"module": "dagster_postgres.run_storage", "class": "PostgresRunStorage", "config": storage},
        "event_log_storage": {"module": "dagster_postgres.event_log", "class": "PostgresEventLogStorage",
                              "config": storage},
        "telemetry": {"enabled": values["telemetry"]["enabled"]},
    }
    if values["runLauncher"]["type"] == "K8sRunLauncher":
        instance["run_launcher"] = _k8s_run_launcher(values, release, namespace)
    daemon = values["dagsterDaemon"]
    coordinator = daemon.get("runCoordinator") or {}
    if daemon["enabled"] and coordinator.get("enabled") and coordinator.get("type") == "QueuedRunCoordinator":
        instance["run_coordinator"] = _queued_run_coordinator(values)
    if values["concurrency"]["enabled"]:
        instance["concurrency"] = _concurrency(values)
    monitoring = daemon.get("runMonitoring") or {}
    if daemon["enabled"] and monitoring.get("enabled"):
        rendered = {"enabled": True, "start_timeout_seconds": monitoring["startTimeoutSeconds"],
                    "poll_interval_seconds": monitoring["pollIntervalSeconds"]}
        for key, name in (("cancelTimeoutSeconds", "cancel_timeout_seconds"),
                          ("maxResumeRunAttempts", "max_resume_run_attempts"),
                          ("freeSlotsAfterRunEndSeconds", "free_slots_after_run_end_seconds")):
            if monitoring.get(key) is not None:
                rendered[name] = monitoring[key]
        instance["run_monitoring"] = rendered
    return instance
