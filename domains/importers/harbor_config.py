"""Harbor's ``task.toml`` as a typed model: schema 1.0-1.4, deprecated spellings normalised.

Field names are Harbor's (``harbor.models.task.config``; NeMo Gym keeps a typed mirror of 1.4).
Read, never written back:

- deprecated spellings: top-level ``version`` (-> ``schema_version``), ``[environment] memory`` /
  ``storage`` ("4G", "512M" -> ``memory_mb`` / ``storage_mb``), ``allow_internet`` (-> ``network_mode``
  public / no-network), the pre-1.3 ``multi_step_reward_mode`` (dropped, as Harbor drops it); each is
  reported in :attr:`HarborTaskConfig.notes`;
- keys this model does not know are listed in :attr:`HarborTaskConfig.unknown_keys` (Harbor ignores
  them too), never fatal;
- a value of the wrong type fails at parse time with the key, the value and what to write instead.

What Assay runs of it is decided by :mod:`domains.importers.harbor` (what it refuses, by name).
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

KNOWN_SCHEMAS = ("1.0", "1.1", "1.2", "1.3", "1.4")
NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])i?B?\s*$", re.IGNORECASE)


class HarborConfigError(ValueError):
    """task.toml cannot be read; the message names the file, the key and the fix."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=False)


class Author(_Model):
    name: str
    email: str | None = None


class PackageInfo(_Model):
    """``[task]``: the task's registry identity."""

    name: str = Field(description="'org/name'")
    version: str | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _org_name(cls, value: str) -> str:
        if not NAME.match(value) or ".." in value:
            raise ValueError(f"[task] name must be 'org/name' (letters, digits, '.', '_', '-'), got {value!r}")
        return value


NetworkMode = Literal["public", "no-network", "allowlist"]


class Healthcheck(_Model):
    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class Artifact(_Model):
    source: str
    destination: str | None = None
    exclude: list[str] = Field(default_factory=list)
    service: str | None = None


def _size_mb(value: Any, key: str) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"[environment] {key} = {value!r} is not a size like '4G' or '512M'; write "
                         f"{key}_mb = <megabytes> instead")
    number, unit = float(match.group(1)), match.group(2).upper()
    return int(number * {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}[unit])


class EnvironmentConfig(_Model):
    """``[environment]``: the container the agent works in."""

    build_timeout_sec: float = Field(600.0, gt=0)
    docker_image: str | None = None
    os: Literal["linux", "windows"] = "linux"
    cpus: float | None = Field(None, gt=0)
    memory_mb: int | None = Field(None, ge=32)
    storage_mb: int | None = Field(None, ge=1)
    gpus: int | None = Field(None, ge=0)
    gpu_types: list[str] | None = None
    tpu: dict | None = None
    mcp_servers: list[dict] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = None
    healthcheck: Healthcheck | None = None
    workdir: str | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None

    @field_validator("os", mode="before")
    @classmethod
    def _lower(cls, value):
        return value.lower() if isinstance(value, str) else value

    @model_validator(mode="before")
    @classmethod
    def _deprecated(cls, data):
        if not isinstance(data, dict):
            return data
        data = dict(data)
        notes = data.setdefault("_notes", [])
        for old in ("memory", "storage"):
            if old in data:
                value = data.pop(old)
                mb = _size_mb(value, old)
                if f"{old}_mb" in data and data[f"{old}_mb"] != mb:
                    raise ValueError(f"[environment] {old} = {value!r} ({mb} MB) and {old}_mb = {data[f'{old}_mb']} "
                                     f"disagree: keep {old}_mb only")
                data.setdefault(f"{old}_mb", mb)
                notes.append(f"deprecated [environment] {old} = {value!r} read as {old}_mb = {mb}")
        if "allow_internet" in data:
            allow = data.pop("allow_internet")
            if allow is not None and "network_mode" not in data and data.get("allowed_hosts") is None:
                data["network_mode"] = "public" if allow else "no-network"
                notes.append(f"deprecated [environment] allow_internet = {str(allow).lower()} read as network_mode = "
                             f"{data['network_mode']!r}")
        return data

    notes_: list[str] = Field(default_factory=list, alias="_notes", exclude=True)


class AgentConfig(_Model):
    """``[agent]``."""

    timeout_sec: float | None = Field(None, gt=0)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class VerifierConfig(_Model):
    """``[verifier]``."""

    timeout_sec: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: dict | None = None
    continuous: dict | None = None
    collect: list[dict] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mode(self):
        if self.environment_mode == "shared" and self.environment is not None:
            raise ValueError("[verifier] environment_mode = 'shared' cannot have a [verifier.environment]: omit it "
                             "or set environment_mode = 'separate'")
        return self

    @property
    def separate(self) -> bool:
        return self.environment_mode == "separate" or (self.environment_mode is None and self.environment is not None)


class SolutionConfig(_Model):
    env: dict[str, str] = Field(default_factory=dict)


class StepConfig(_Model):
    name: str


class HarborTaskConfig(_Model):
    """One ``task.toml``. ``notes``: deprecated spellings read; ``unknown_keys``: keys ignored."""

    schema_version: str = "1.4"
    task: PackageInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    solution: SolutionConfig = Field(default_factory=SolutionConfig)
    source: str | None = None
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    steps: list[StepConfig] | None = None
    artifacts: list[str | Artifact] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, exclude=True)
    unknown_keys: list[str] = Field(default_factory=list, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _deprecated(cls, data):
        if not isinstance(data, dict):
            return data
        data = dict(data)
        notes = []
        if "version" in data:
            old = data.pop("version")
            data.setdefault("schema_version", str(old))
            notes.append(f"deprecated top-level version = {old!r} read as schema_version")
        if "multi_step_reward_mode" in data:
            data.pop("multi_step_reward_mode")
            notes.append("pre-1.3 multi_step_reward_mode dropped (as Harbor drops it)")
        data["notes"] = notes
        return data

    @field_validator("schema_version", mode="before")
    @classmethod
    def _schema(cls, value):
        value = str(value)
        if value not in KNOWN_SCHEMAS:
            raise ValueError(f"schema_version {value!r} is not one this reader knows ({', '.join(KNOWN_SCHEMAS)})")
        return value

    @model_validator(mode="after")
    def _collect_notes(self):
        self.notes = [*self.notes, *self.environment.notes_]
        return self

    @property
    def artifact_sources(self) -> list[str]:
        return [a if isinstance(a, str) else a.source for a in self.artifacts]


def _known(model: type[BaseModel]) -> dict[str, Any]:
    return {(info.alias or name): info for name, info in model.model_fields.items()}


def unknown_keys(model: type[BaseModel], data: Any, prefix: str = "") -> list[str]:
    """Keys of ``data`` (a TOML table) that ``model`` has no field for, as dotted paths."""
    if not isinstance(data, dict):
        return []
    found = []
    fields = _known(model)
    for key, value in data.items():
        path = f"{prefix}{key}"
        if key not in fields and key not in ("version", "multi_step_reward_mode", "memory", "storage",
                                             "allow_internet"):
            found.append(path)
            continue
        info = fields.get(key)
        annotation = getattr(info, "annotation", None)
        nested = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if nested is None:
            for arg in getattr(annotation, "__args__", ()):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    nested = arg
        if nested is not None and isinstance(value, dict) and key != "metadata":
            found.extend(unknown_keys(nested, value, f"{path}."))
        elif nested is not None and isinstance(value, list) and key == "steps":
            for i, item in enumerate(value):
                found.extend(unknown_keys(nested, item, f"{path}[{i}]."))
    return found


def parse_task_toml(path: Path) -> HarborTaskConfig:
    """Read and validate ``path``; :class:`HarborConfigError` names the key and the fix."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarborConfigError(f"{path}: missing; a Harbor task folder holds task.toml") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise HarborConfigError(f"{path}: not valid TOML ({exc}); fix the syntax") from None
    try:
        config = HarborTaskConfig.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"] if p not in ("function-after", "function-before"))
            message = error["msg"].removeprefix("Value error, ")
            got = error.get("input")
            shown = f" (got {got!r})" if not isinstance(got, dict) and got is not None else ""
            problems.append(f"{where or '(top level)'}: {message}{shown}")
        raise HarborConfigError(f"{path}: " + "; ".join(problems)) from None
    config.unknown_keys = unknown_keys(HarborTaskConfig, data)
    return config


__all__ = ["HarborConfigError", "HarborTaskConfig", "KNOWN_SCHEMAS", "parse_task_toml", "unknown_keys"]
