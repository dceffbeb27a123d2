"""The deployment profile (storage/deployment.py): parsed from the environment or a file,
refused with how to fix it, and the local profile exactly today's embedded setup."""

from __future__ import annotations

import pytest

from storage.deployment import Profile, ProfileError, load_profile, open_lake, redacted
from storage.lake import Lake

TEAM = {"ASSAY_PROFILE": "team", "ASSAY_POSTGRES_URL": "postgresql://assay:s3cret@db.internal:5432/postgres",
        "ASSAY_S3_BUCKET": "lake-bucket", "ASSAY_S3_ENDPOINT": "http://minio:9000"}


def test_unset_is_the_local_profile_and_opens_todays_parquet_lake(tmp_path):
    profile = load_profile({})
    assert profile.name == "local" and not profile.shared
    lake = open_lake(tmp_path / "home", profile=profile)
    assert type(lake) is Lake and lake.mlflow_uri == f"sqlite:///{tmp_path / 'home' / 'mlflow.db'}"
    assert not (tmp_path / "home").exists()  # reading creates nothing


def test_the_team_profile_gives_each_engine_its_own_database_on_one_server():
    profile = load_profile(TEAM)
    assert profile.shared
    urls = {engine: profile.database_url(engine) for engine in ("dagster", "mlflow", "lake")}
    assert urls == {"dagster": "postgresql+psycopg2://assay:s3cret@db.internal:5432/assay_dagster",
                    "mlflow": "postgresql+psycopg2://assay:s3cret@db.internal:5432/assay_mlflow",
                    "lake": "postgresql+psycopg2://assay:s3cret@db.internal:5432/assay_lake"}
    assert profile.warehouse == "s3://lake-bucket/lake/assay" and profile.mlflow_artifacts == "s3://lake-bucket/mlartifacts"
    assert profile.s3_options()["s3.endpoint"] == "http://minio:9000"
    assert redacted(profile.mlflow_uri) == "postgresql+psycopg2://assay@db.internal:5432/assay_mlflow"


def test_a_file_profile_reads_the_same_fields(tmp_path):
    path = tmp_path / "profile.yaml"
    path.write_text("name: cluster\npostgres_url: postgresql://a@b/postgres\ns3_bucket: x\nlake_catalog: prod\n")
    profile = load_profile({"ASSAY_PROFILE_FILE": str(path), "ASSAY_PROFILE": "local"})  # the file wins
    assert profile.name == "cluster" and profile.warehouse == "s3://x/lake/prod"


@pytest.mark.parametrize("env, message", [
    ({"ASSAY_PROFILE": "teams"}, "use one of local, team, cluster"),
    ({"ASSAY_PROFILE": "team"}, "needs ASSAY_POSTGRES_URL and ASSAY_S3_BUCKET"),
    ({**TEAM, "ASSAY_POSTGRES_URL": "mysql://db/x"}, "must start with postgresql://"),
    ({**TEAM, "ASSAY_S3_ENDPOINT": "minio:9000"}, r"must be an http\(s\) URL"),
    ({**TEAM, "ASSAY_LAKE_CATALOG": "a b"}, "use letters, digits"),
    ({"ASSAY_PROFILE_FILE": "/nonexistent/profile.yaml"}, "no such file"),
])
def test_bad_settings_are_refused_with_how_to_fix_them(env, message):
    with pytest.raises(ProfileError, match=message):
        load_profile(env)


def test_unknown_fields_in_a_profile_file_are_refused(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("name: team\npostgres: postgresql://a@b/c\n")
    with pytest.raises(ProfileError, match="postgres: Extra inputs are not permitted"):
        load_profile({"ASSAY_PROFILE_FILE": str(path)})


def test_the_profile_is_typed_and_frozen():
    with pytest.raises(Exception):
        Profile(name="team", postgres_url="postgresql://a@b/c", s3_bucket="x").name = "local"
