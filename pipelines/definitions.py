"""The Dagster code location: every asset and check under ``assets/``, plus jobs, sensors,
schedules and the resources chosen in :mod:`assets.resources`.

``dagster dev -w workspace.yaml`` and ``dagster definitions validate -w workspace.yaml`` load this.
It imports no torch, deepspeed, great_expectations or transformers. Under the ``cluster`` profile
(``ASSAY_PROFILE=cluster``, :mod:`storage.deployment`) every step runs in its own Kubernetes pod
sized by its pool (:mod:`assets.k8s`); elsewhere steps run in the run's process.
"""

from __future__ import annotations

import dagster as dg

import assets
from pipelines.jobs import JOBS
from assets.k8s import k8s_step_executor
from assets.resources import default_resources
from pipelines.schedules import SCHEDULES
from pipelines.sensors import SENSORS
from storage.deployment import load_profile

defs = dg.Definitions(
    assets=dg.load_assets_from_package_module(assets),
    asset_checks=dg.load_asset_checks_from_package_module(assets),
    jobs=JOBS,
    sensors=SENSORS,
    schedules=SCHEDULES,
    resources=default_resources(),  # ASSAY_HOME, read by storage.lake.resolve_home
    **({"executor": k8s_step_executor()} if load_profile().name == "cluster" else {}),
)
