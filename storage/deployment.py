"""Where Assay keeps its state: one typed deployment profile, chosen by ``ASSAY_PROFILE``.

- ``local`` (the default): everything embedded under ``ASSAY_HOME`` (``.assay``): the Parquet lake
  (:class:`storage.lake.Lake`), MLflow on SQLite, Dagster's SQLite instance. ``make demo`` uses it.
- ``team``: shared engines, so several people and machines work on one platform. PostgreSQL holds
  Dagster's instance (``dagster-postgres``), MLflow's tracking store and the lake's Iceberg catalog,
  one database each (their schemas clash: Dagster and MLflow both have a ``runs`` table); MLflow's
  artifacts and the lake's data files go to S3-compatible object storage, the lake being Apache
  Iceberg tables (:class:`storage.iceberg_lake.IcebergLake`). Checkpoints (model weights) stay
  under ``ASSAY_HOME``, which a team puts on a shared volume.
- ``cluster``: ``team`` plus Dagster's Kubernetes run launcher (``deploy/``); Assay's code sees
  the same settings as ``team``.

Settings come from ``ASSAY_PROFILE_FILE`` (a YAML file with the fields of :class:`Profile`) or
the environment (``ASSAY_PROFILE``, ``ASSAY_POSTGRES_URL``, ``ASSAY_S3_ENDPOINT``,
``ASSAY_S3_BUCKET``, ``ASSAY_S3_REGION`` or ``AWS_DEFAULT_REGION``, ``ASSAY_LAKE_CATALOG``; the S3 keys from the usual ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``). ``make team-up`` starts a PostgreSQL and an S3 server on this machine
and writes the matching variables (:mod:`storage.team_services`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal, Mapping
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from storage.errors import UserError

PROFILE_ENV = "ASSAY_PROFILE"
PROFILE_FILE_ENV = "ASSAY_PROFILE_FILE"
PROFILES = ("local", "team", "cluster")
# one database per engine on the profile's PostgreSQL server
DATABASES = {"dagster": "assay_dagster", "mlflow": "assay_mlflow", "lake": "assay_lake"}



class ProfileError(UserError, ValueError):
    """A deployment setting that cannot be used, with how to fix it."""


class Profile(BaseModel):
    """The deployment profile: which engines hold Assay's state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["local", "team", "cluster"] = "local"
    postgres_url: str | None = None   # server URL, e.g. postgresql://assay:secret@db:5432/postgres
    s3_endpoint: str | None = None    # e.g. http://minio:9000; None = AWS S3 itself
    s3_bucket: str | None = None
    s3_region: str = "us-east-1"
    lake_prefix: str = "lake"         # the lake's Iceberg warehouse: s3://<bucket>/<lake_prefix>/<lake_catalog>
    lake_catalog: str = "assay"       # the catalog's name in the PostgreSQL database: one per lake
    artifacts_prefix: str = "mlartifacts"

    @field_validator("postgres_url")
    @classmethod
    def _postgres(cls, url):
        if url is not None and urlsplit(url).scheme not in ("postgresql", "postgres", "postgresql+psycopg2"):
            raise ValueError(f"postgres_url {url!r} must start with postgresql:// "
                             "(e.g. postgresql://assay:secret@localhost:5432/postgres)")
        return url

    @field_validator("lake_catalog", "lake_prefix")
    @classmethod
    def _plain_name(cls, name):
        import re

        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
            raise ValueError(f"{name!r}: use letters, digits, '_', '-', '.' (it names a catalog and an S3 prefix)")
        return name

    @field_validator("s3_endpoint")
    @classmethod
    def _endpoint(cls, url):
        if url is not None and urlsplit(url).scheme not in ("http", "https"):
            raise ValueError(f"s3_endpoint {url!r} must be an http(s) URL (e.g. http://localhost:9000)")
        return url

    @model_validator(mode="after")
    def _shared_engines_named(self):
        if self.name != "local":
            missing = [env for env, value in (("ASSAY_POSTGRES_URL", self.postgres_url),
                                              ("ASSAY_S3_BUCKET", self.s3_bucket)) if not value]
            if missing:
                raise ValueError(f"profile {self.name!r} needs {' and '.join(missing)} (a PostgreSQL server URL and an "
                                 "S3 bucket); `make team-up` starts both on this machine and prints them")
        return self

    @property
    def shared(self) -> bool:
        """Whether state lives in shared engines (PostgreSQL, object storage)."""
        return self.name != "local"

    def database_url(self, engine: Literal["dagster", "mlflow", "lake"], driver: str = "+psycopg2") -> str:
        """The URL of ``engine``'s own database on the profile's server, naming the driver:
        SQLAlchemy 2.1 reads a bare ``postgresql://`` as psycopg 3, and psycopg2 is what
        dagster-postgres ships with."""
        if self.postgres_url is None:
            raise ProfileError(f"profile {self.name!r} has no PostgreSQL (set ASSAY_PROFILE=team and ASSAY_POSTGRES_URL)")
        parts = urlsplit(self.postgres_url)
        return urlunsplit((f"postgresql{driver}", parts.netloc, f"/{DATABASES[engine]}", parts.query, ""))

    @property
    def mlflow_uri(self) -> str:
        return self.database_url("mlflow")

    @property
    def mlflow_artifacts(self) -> str:
        return f"s3://{self.s3_bucket}/{self.artifacts_prefix}"

    @property
    def warehouse(self) -> str:
        return f"s3://{self.s3_bucket}/{self.lake_prefix}/{self.lake_catalog}"

    def s3_options(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for the bucket (keys from the environment, as boto does)."""
        options = {"s3.region": self.s3_region}
        if self.s3_endpoint:
            options["s3.endpoint"] = self.s3_endpoint
        for key, env in (("s3.access-key-id", "AWS_ACCESS_KEY_ID"), ("s3.secret-access-key", "AWS_SECRET_ACCESS_KEY")):
            if os.environ.get(env):
                options[key] = os.environ[env]
        return options

    def export_client_env(self) -> None:
        """Point the libraries that read the environment (MLflow's S3 artifact store, boto) at the
        profile's object storage. Called where a shared profile is opened."""
        if self.s3_endpoint:
            os.environ.setdefault("MLFLOW_S3_ENDPOINT_URL", self.s3_endpoint)
            os.environ.setdefault("AWS_ENDPOINT_URL_S3", self.s3_endpoint)
        os.environ.setdefault("AWS_DEFAULT_REGION", self.s3_region)


def redacted(uri: str) -> str:
    """``uri`` without its password, for summaries and pages (``postgresql://user@host/db``)."""
    if "://" not in uri or "@" not in uri:
        return uri
    scheme, rest = uri.split("://", 1)
    credentials, place = rest.rsplit("@", 1)
    return f"{scheme}://{credentials.split(':', 1)[0]}@{place}"


def load_profile(environ: Mapping[str, str] | None = None) -> Profile:
    """The profile named by ``ASSAY_PROFILE_FILE`` (YAML) or the environment; ``local`` when unset."""
    environ = os.environ if environ is None else environ
    path = environ.get(PROFILE_FILE_ENV, "").strip()
    if path:
        return _from_file(Path(path).expanduser())
    name = environ.get(PROFILE_ENV, "").strip() or "local"
    if name not in PROFILES:
        raise ProfileError(f"{PROFILE_ENV}={name!r}: use one of {', '.join(PROFILES)} (unset it for 'local')")
    fields = {"name": name}
    for field, env in (("postgres_url", "ASSAY_POSTGRES_URL"), ("s3_endpoint", "ASSAY_S3_ENDPOINT"),
                       ("s3_bucket", "ASSAY_S3_BUCKET"), ("s3_region", "AWS_DEFAULT_REGION"),
                       ("s3_region", "ASSAY_S3_REGION"),  # the later name wins
                       ("lake_catalog", "ASSAY_LAKE_CATALOG")):
        if environ.get(env, "").strip():
            fields[field] = environ[env].strip()
    return _validated(fields, "the environment")


def _from_file(path: Path) -> Profile:
    import yaml

    if not path.is_file():
        raise ProfileError(f"{PROFILE_FILE_ENV}={path}: no such file (unset it to use the environment)")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping of profile fields ({', '.join(Profile.model_fields)})")
    return _validated(data, str(path))


def _validated(fields: dict, source: str) -> Profile:
    try:
        return Profile(**fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'profile'}: {e['msg']}" for e in exc.errors())
        raise ProfileError(f"deployment profile from {source}: {problems}") from None


def open_lake(home: str | os.PathLike | None = None, *, write: bool = False, profile: Profile | None = None):
    """The lake of the current profile: the Parquet lake under ``home`` (local) or the Iceberg
    lake on object storage (team, cluster). For reading (the default) nothing is created;
    ``write=True`` creates the local folders and cleans up after writers that died mid-write."""
    from storage.lake import Lake, resolve_home

    profile = profile or load_profile()
    if profile.shared:
        from storage.iceberg_lake import IcebergLake

        profile.export_client_env()
        lake = IcebergLake(resolve_home(home), profile)
        if write:
            lake.home.mkdir(parents=True, exist_ok=True)
        return lake
    if not write:
        return Lake(resolve_home(home))
    lake = Lake.at(home)
    lake.recover()
    return lake
