"""The team profile end to end, as `make team-up` + `assay demo` run it: a real PostgreSQL (the
system's package) and a real S3 server (moto), a domain ingested and gated, a tiny GRPO run, sweeps,
the regression report and the promotion, then the dashboard reading it all. Nothing may land in
the local stores: Dagster's runs are in PostgreSQL, MLflow's runs in PostgreSQL with artifacts in
the bucket, the lake in Iceberg tables whose files are in the bucket."""

from __future__ import annotations

import boto3
import dagster as dg
import pytest

from storage.deployment import load_profile, open_lake
from storage.iceberg_lake import IcebergLake
from storage.tracking import CHAMPION_ALIAS, REGISTERED_MODEL, client
from tests.conftest import run_cli


@pytest.mark.slow
def test_the_demo_on_the_team_profile_keeps_everything_in_postgres_and_object_storage(team_env, tiny_home, monkeypatch):
    home = tiny_home
    monkeypatch.delenv("DAGSTER_HOME")  # the instance's yaml (with its PostgreSQL storage) is Assay's to write
    (home / "mlflow.db").unlink()       # the team profile must not need, nor write, the local store
    # exactly the README's team walk-through command (issue 32: extra flags here hid that it failed)
    out = run_cli("demo", "--recipe", "tiny", "--domains", "math_arith_easy", "--steps", "2", "--sweep-items", "3",
                  timeout=900, unset=("DS_ACCELERATOR", "DAGSTER_HOME"))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "promoted" in out.stdout, out.stdout[-2000:]
    assert f"@127.0.0.1:{load_profile().postgres_url.rsplit(':', 1)[1].split('/')[0]}/assay_mlflow" in out.stdout

    # nothing in the local stores
    assert not (home / "mlflow.db").exists() and not (home / "lake").exists() and not (home / "mlartifacts").exists()
    dagster_yaml = (home / "dagster" / "dagster.yaml").read_text()
    assert "postgres_url: postgresql+psycopg2://" in dagster_yaml and "/assay_dagster" in dagster_yaml

    # Dagster: the runs are in the PostgreSQL instance
    with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        jobs = sorted(r.job_name for r in instance.get_runs())
    for job in ("domain_pipeline_job", "training_job", "checkpoint_evaluation_job"):
        assert job in jobs, jobs

    # the lake: Iceberg tables in this test's catalog, every stage's table there
    lake = open_lake()
    assert isinstance(lake, IcebergLake)
    tables = set(lake.tables())
    assert {"ingest", "gate_results", "train_set", "checkpoints", "training_history", "results", "sweep_summary",
            "regression", "promotions"} <= tables, tables
    promotions = lake.read("promotions")
    assert promotions.height == 2 and promotions["promoted"].to_list().count(True) >= 1
    trained = [c for c in lake.read("checkpoints")["checkpoint"].to_list() if c.startswith("tiny-")]
    assert len(trained) == 1

    # MLflow: the champion alias and the training run in PostgreSQL, artifacts in the bucket
    store = client(lake.mlflow_uri)
    champion = store.get_model_version_by_alias(REGISTERED_MODEL, CHAMPION_ALIAS)
    assert champion.tags.get("checkpoint") in (trained[0], "base-tiny")
    runs = store.search_runs([store.get_experiment_by_name("assay").experiment_id])
    assert runs and all(r.info.artifact_uri.startswith(f"s3://{team_env['ASSAY_S3_BUCKET']}/mlartifacts")
                        for r in runs)
    s3 = boto3.client("s3", endpoint_url=team_env["ASSAY_S3_ENDPOINT"], region_name="us-east-1")
    keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=team_env["ASSAY_S3_BUCKET"])
            for o in page.get("Contents", [])]
    assert any(k.startswith("mlartifacts/") for k in keys)
    # <warehouse = lake/<catalog>>/<namespace>/<table>/data/...
    lake_files = [k for k in keys if k.startswith(f"lake/{team_env['ASSAY_LAKE_CATALOG']}/assay/results/data/")]
    assert lake_files and all(k.endswith(".parquet") for k in lake_files), sorted(keys)[:20]

    # the dashboard reads the same lake and store
    from tests.ui.conftest import fresh_app

    at = fresh_app()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Assay quality overview"
    shown = at.dataframe[0].value
    assert "math_arith_easy" in list(shown["domain"])
    assert any(f"Champion: **{champion.tags['checkpoint']}**" in c.value for c in at.caption), \
        [c.value for c in at.caption]
