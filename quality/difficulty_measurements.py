"""Reading a domain's stored policy-difficulty measurement: what the difficulty gate consumes.

The measurement itself (sampling the policy on every admitted train row) is evaluation's work,
:mod:`evaluation.policy_difficulty`, which writes the ``policy_difficulty`` table; the gates in
:mod:`quality.batch_gates` only read that table through this module, so quality never imports
evaluation (the import contracts in pyproject.toml).
"""

from __future__ import annotations

import json

import polars as pl

from quality.difficulty_settings import DifficultySettings
from storage import tables
from storage.lake import Lake

TABLE = "policy_difficulty"


class DifficultyNotMeasured(RuntimeError):
    """The gate needs pass rates that the domain's current measurement does not hold."""


def current_difficulty(lake: Lake, domain: str) -> pl.DataFrame | None:
    """The domain's latest ``policy_difficulty`` rows, or None when it was never measured."""
    frame = lake.read(TABLE, where={"domain": domain})
    return tables.conform(frame, tables.POLICY_DIFFICULTY) if frame.height else None


def measured_settings(frame: pl.DataFrame | None) -> DifficultySettings | None:
    """The settings a ``policy_difficulty`` frame was measured with."""
    if frame is None or not frame.height:
        return None
    return DifficultySettings(**json.loads(frame["settings"][0]))
