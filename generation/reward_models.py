"""Saved learned reward models: one folder, one lake row and one MLflow model version each.

The sibling of :mod:`generation.checkpoints` for reward models (trained by
:mod:`training.reward_model`, scored by :mod:`generation.reward_scorer`):

- Id: ``rm-<domain>-<UTC time>-<4 hex>`` (``-control`` before the time for a label-shuffled
  control run).
- Files: ``$ASSAY_HOME/reward_models/<id>/``: the reward-model folder plus ``heldout_pairs.jsonl``,
  the pairs it never trained on (what ``assay reward check`` judges it on by default).
- Lake: ``reward_models/reward_model=<id>/part.parquet`` (``storage.tables.REWARD_MODELS``).
- MLflow: a LoggedModel named ``<id>`` (source run = the training run) and a version of the
  registered model ``assay-reward-model`` (:data:`storage.tracking.REWARD_MODEL_REGISTRY`, not
  ``assay-policy``: a reward model is never a policy's "latest" or champion), tagged
  ``checkpoint=<id>``, ``domain``, ``pairs_fingerprint`` and ``shuffled_labels``.

Here, below quality/ and training/, so the gate, the trainer and the CLI share one reader.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import polars as pl

from storage import tables, tracking
from storage.lake import Lake

TABLE = "reward_models"
HELDOUT_FILE = "heldout_pairs.jsonl"


class RewardModelNotFound(LookupError):
    """A reward-model reference that names no trained reward model, with what to do."""


@dataclass
class RewardModelRecord:
    reward_model: str
    domain: str
    base_model: str
    path: str
    pairs_source: str | None = None
    pairs_fingerprint: str | None = None
    train_pairs: int | None = None
    heldout_pairs: int | None = None
    shuffled_labels: bool = False
    steps: int | None = None
    final_loss: float | None = None
    train_accuracy: float | None = None
    heldout_accuracy: float | None = None
    train_seconds: float | None = None
    mlflow_run_id: str | None = None
    mlflow_model_id: str | None = None
    config: str | None = None
    created_at: str = ""

    @property
    def heldout_path(self) -> Path:
        return Path(self.path) / HELDOUT_FILE

    def to_json(self) -> dict:
        return asdict(self)


def reward_models_dir(lake: Lake) -> Path:
    return lake.home / "reward_models"


def register_reward_model(lake: Lake, tracking_uri: str, record: RewardModelRecord,
                          artifact_root: str | None = None) -> RewardModelRecord:
    """Record a saved reward-model folder: MLflow LoggedModel + model version, then the lake row."""
    folder = Path(record.path)
    if not (folder / "config.json").exists():
        raise RewardModelNotFound(f"reward model folder {folder} has no config.json: save it before registering it")
    shuffled = "true" if record.shuffled_labels else "false"
    tags = {"domain": record.domain, "pairs_fingerprint": record.pairs_fingerprint or "", "shuffled_labels": shuffled}
    record.mlflow_model_id = tracking.register_model_version(
        tracking_uri, record.reward_model, folder.resolve().as_uri(), run_id=record.mlflow_run_id,
        model_tags={"assay.checkpoint": record.reward_model, "assay.path": str(folder.resolve()),
                    "assay.kind": "reward_model", **{f"assay.{k}": v for k, v in tags.items()}},
        model_params={"base_model": record.base_model, "domain": record.domain},
        version_tags=tags, artifact_root=artifact_root or str(lake.mlflow_artifacts),
        registered_model=tracking.REWARD_MODEL_REGISTRY)
    frame = tables.conform(pl.DataFrame([asdict(record)]), tables.REWARD_MODELS)
    lake.write_batch(TABLE, {"reward_model": record.reward_model}, {"part": frame})
    return record


def list_reward_models(lake: Lake, domain: str | None = None) -> list[RewardModelRecord]:
    """Trained reward models (only ``domain``'s when given), oldest first."""
    frame = lake.read(TABLE)
    if frame.is_empty():
        return []
    frame = tables.conform(frame, tables.REWARD_MODELS).sort(["created_at", "reward_model"])
    if domain is not None:
        frame = frame.filter(pl.col("domain") == domain)
    return [RewardModelRecord(**row) for row in frame.iter_rows(named=True)]


def resolve_reward_model(lake: Lake, domain: str, ref: str = "latest") -> RewardModelRecord:
    """``ref``: a reward-model id, ``"latest"`` (``domain``'s newest, control runs included) or
    ``"champion"`` (the one ``assay reward promote`` last made the domain's champion)."""
    records = list_reward_models(lake, domain)
    if ref == "champion":
        frame = lake.read("reward_promotions", where={"domain": domain})  # evaluation.reward_promotion writes it
        promoted = (tables.conform(frame, tables.REWARD_PROMOTIONS).filter(pl.col("promoted")).sort("decided_at")
                    if not frame.is_empty() else frame)
        if promoted.is_empty():
            raise RewardModelNotFound(f"domain {domain!r} has no champion reward model yet: run `assay reward "
                                      f"promote {domain} REWARD_MODEL` (its gate must have passed)")
        ref = promoted["candidate"][-1]
    if ref == "latest":
        if not records:
            raise RewardModelNotFound(f"no reward model trained for domain {domain!r} yet: run "
                                      f"`assay reward train {domain} --pairs FILE` first")
        return records[-1]
    for record in records:
        if record.reward_model == ref:
            return record
    elsewhere = [r for r in list_reward_models(lake) if r.reward_model == ref]
    if elsewhere:
        raise RewardModelNotFound(f"reward model {ref!r} was trained for domain {elsewhere[0].domain!r}, "
                                  f"not {domain!r}")
    known = ", ".join(r.reward_model for r in records[-5:]) or "none"
    raise RewardModelNotFound(f"unknown reward model {ref!r} for domain {domain!r} (latest known: {known}; "
                              "or 'latest')")


def new_reward_model_id(domain: str, *, control: bool, now: str, nonce: str) -> str:
    """``rm-<domain>[-control]-<YYYYmmddTHHMMSS>-<nonce>`` from ``now`` (ISO UTC) and a short nonce."""
    stamp = now.replace("-", "").replace(":", "").replace("+0000", "")[:15]
    return f"rm-{domain}{'-control' if control else ''}-{stamp}-{nonce}"


def model_folder(lake: Lake, reward_model: str) -> Path:
    return reward_models_dir(lake) / reward_model
