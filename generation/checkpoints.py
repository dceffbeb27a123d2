"""Checkpoints: HF folders on disk, one lake row each, and their MLflow registration.

- Id: ``<run name>-step<NNNNNN>``; the base models are pseudo-checkpoints ``base-smollm2`` and
  ``base-tiny`` (registered on first use so they can be swept and be the first champion).
- Files: ``$ASSAY_HOME/checkpoints/<id>/`` = a Hugging Face folder (config.json,
  model.safetensors, tokenizer files) + ``assay_checkpoint.json``. Base pseudo-checkpoints point
  at the cached model folder under ``$ASSAY_HOME/models/`` instead of copying it.
- Lake: ``checkpoints/checkpoint=<id>/part.parquet`` (``storage.tables.CHECKPOINTS``).
- MLflow: a LoggedModel named ``<id>`` (source_run_id = the training run; tags
  ``assay.checkpoint``, ``assay.path``, ``assay.data_fingerprint``) and a version of the
  registered model ``assay-policy`` tagged ``checkpoint=<id>`` and ``data_fingerprint=<fp>``: the
  fingerprint of the rows the run trained on (``training.data.rows_fingerprint``), also in the
  lake row and ``assay_checkpoint.json``. The alias ``champion`` on ``assay-policy`` marks the champion; only
  the promotion step moves it. The names and the MLflow calls are :mod:`storage.tracking`'s.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import polars as pl

from storage import tables, tracking
from storage.lake import Lake
from storage.errors import UserError

TABLE = "checkpoints"
METADATA_FILE = "assay_checkpoint.json"


class CheckpointError(UserError, LookupError):
    """A checkpoint reference that names no registered checkpoint."""


@dataclass
class CheckpointRecord:
    checkpoint: str
    run_id: str | None
    step: int
    path: str
    recipe: str
    base_model: str
    domains: list[str] = field(default_factory=list)
    mlflow_model_id: str | None = None
    created_at: str = ""
    data_fingerprint: str | None = None  # the training rows' fingerprint (None: a base model)
    variant_of: str | None = None        # the parent checkpoint of a variant (generation.variants)
    variant_method: str | None = None

    @property
    def is_variant(self) -> bool:
        return self.variant_of is not None


def checkpoint_id(run_name: str, step: int) -> str:
    return f"{run_name}-step{step:06d}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _register_in_mlflow(record: CheckpointRecord, tracking_uri: str, artifact_root: str | None) -> str:
    model_tags = {"assay.checkpoint": record.checkpoint, "assay.path": record.path,
                  "assay.recipe": record.recipe, "assay.step": str(record.step)}
    version_tags = {}
    if record.data_fingerprint:
        model_tags["assay.data_fingerprint"] = version_tags["data_fingerprint"] = record.data_fingerprint
    if record.variant_of:  # lineage: the variant's model version names its parent and how it was made
        model_tags["assay.variant_of"] = version_tags["variant_of"] = record.variant_of
        model_tags["assay.variant_method"] = version_tags["variant_method"] = record.variant_method or ""
    return tracking.register_model_version(
        tracking_uri, record.checkpoint, Path(record.path).as_uri(), run_id=record.run_id,
        model_tags=model_tags, model_params={"base_model": record.base_model, "domains": ",".join(record.domains)},
        version_tags=version_tags, artifact_root=artifact_root)


def register_checkpoint(lake: Lake, tracking_uri: str, *, checkpoint: str, path: str | os.PathLike,
                        run_id: str | None, step: int, recipe: str, base_model: str,
                        domains: list[str], artifact_root: str | None = None,
                        data_fingerprint: str | None = None, variant_of: str | None = None,
                        variant_method: str | None = None) -> CheckpointRecord:
    """Record a saved HF folder: metadata file, lake row, MLflow LoggedModel + model version."""
    record = CheckpointRecord(checkpoint=checkpoint, run_id=run_id, step=int(step), path=str(Path(path).resolve()),
                              recipe=recipe, base_model=base_model, domains=list(domains), created_at=_now(),
                              data_fingerprint=data_fingerprint, variant_of=variant_of, variant_method=variant_method)
    folder = Path(record.path)
    if not (folder / "config.json").exists():
        raise CheckpointError(f"checkpoint folder {folder} has no config.json: save the model before registering it")
    record.mlflow_model_id = _register_in_mlflow(record, tracking_uri,
                                                 artifact_root or str(lake.mlflow_artifacts))
    if not checkpoint.startswith("base-") and not variant_of:  # base folders are the shared model cache
        meta = {k: v for k, v in asdict(record).items() if k in
                ("checkpoint", "run_id", "step", "recipe", "base_model", "domains", "created_at", "data_fingerprint")}
        (folder / METADATA_FILE).write_text(json.dumps(meta, indent=2))
    frame = tables.conform(pl.DataFrame([asdict(record)], schema_overrides={"domains": pl.List(pl.Utf8)}),
                                tables.CHECKPOINTS)
    lake.write_batch(TABLE, {"checkpoint": checkpoint}, {"part": frame})
    return record


def list_checkpoints(lake: Lake) -> list[CheckpointRecord]:
    frame = lake.read(TABLE)
    if frame.is_empty():
        return []
    frame = tables.conform(frame, tables.CHECKPOINTS).sort(["created_at", "checkpoint"])
    return [CheckpointRecord(**{**row, "domains": list(row["domains"] or [])}) for row in frame.iter_rows(named=True)]


def ensure_base_checkpoint(recipe: str, lake: Lake, tracking_uri: str) -> CheckpointRecord:
    """The pseudo-checkpoint ``base-<recipe>`` (the untrained policy), registered on first use."""
    from generation.policy import BUILTIN_POLICIES, policy_path

    if recipe not in BUILTIN_POLICIES:
        raise CheckpointError(f"no base model for recipe {recipe!r} (known: {', '.join(BUILTIN_POLICIES)})")
    name = f"base-{recipe}"
    for record in list_checkpoints(lake):
        if record.checkpoint == name:
            return record
    path = policy_path(recipe, lake.home)
    return register_checkpoint(lake, tracking_uri, checkpoint=name, path=path, run_id=None, step=0,
                               recipe=recipe, base_model=recipe, domains=[])


def ensure_checkpoint(ref: str, lake: Lake, tracking_uri: str) -> CheckpointRecord:
    """:func:`resolve_checkpoint` for a writer (a sweep, a pass-rate measurement, a variant): a
    ``base-<recipe>`` not yet known is registered first (lake row + MLflow model version)."""
    if ref.startswith("base-") and not any(r.checkpoint == ref for r in list_checkpoints(lake)):
        return ensure_base_checkpoint(ref[len("base-"):], lake, tracking_uri)
    return resolve_checkpoint(ref, lake, tracking_uri)


def resolve_checkpoint(ref: str, lake: Lake, tracking_uri: str) -> CheckpointRecord:
    """``ref``: a checkpoint id, ``"latest"`` (the newest trained checkpoint, variants aside),
    ``"champion"``, ``"fast"`` (the certified fast variant) or ``"base-<recipe>"``. Only reads:
    a base policy never swept or measured is not registered yet (:func:`ensure_checkpoint` does)."""
    records = list_checkpoints(lake)
    for record in records:  # an exact id first: a variant of a base model starts with "base-" too
        if record.checkpoint == ref:
            return record
    if ref.startswith("base-"):
        raise CheckpointError(f"checkpoint {ref!r} is not registered yet: a sweep or a pass-rate measurement of it "
                              f"registers it (`assay sweep --checkpoint {ref}`)")
    if ref == "latest":
        trained = [r for r in records if not r.checkpoint.startswith("base-") and not r.is_variant]
        if not trained:
            raise CheckpointError("no trained checkpoint yet: run `assay train` first")
        return trained[-1]
    if ref == tracking.CHAMPION_ALIAS:
        champion = tracking.current_champion(tracking_uri)
        if champion is None:
            raise CheckpointError(f"no champion yet: the alias '{tracking.CHAMPION_ALIAS}' on "
                                  f"'{tracking.REGISTERED_MODEL}' is unset (promote a checkpoint first)")
        ref = champion
    if ref == tracking.FAST_ALIAS:
        fast = tracking.alias_checkpoint(tracking_uri, tracking.FAST_ALIAS)
        if fast is None:
            raise CheckpointError(f"no fast variant yet: the alias '{tracking.FAST_ALIAS}' on "
                                  f"'{tracking.REGISTERED_MODEL}' is unset (certify one with `assay variant`)")
        ref = fast
    for record in records:
        if record.checkpoint == ref:
            return record
    known = ", ".join(r.checkpoint for r in records[-8:]) or "none"
    raise CheckpointError(f"unknown checkpoint {ref!r} (latest known: {known}; also 'latest', 'champion', 'fast', "
                          "'base-<recipe>')")
