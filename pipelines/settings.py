"""Where things live, resolved once at the edges (CLI, Dagster resources), never inside assets."""

from __future__ import annotations

import os
from pathlib import Path

from quality.lake import HOME_ENV, Lake, resolve_home

__all__ = ["HOME_ENV", "Lake", "resolve_home", "open_lake", "dagster_home"]


def open_lake(home: str | os.PathLike | None = None) -> Lake:
    lake = Lake.at(home)
    lake.recover()
    return lake


def dagster_home(home: str | os.PathLike | None = None) -> Path:
    """``$DAGSTER_HOME`` if set, else ``$ASSAY_HOME/dagster``: created, with Assay's dagster.yaml
    (run queue and concurrency pools: :mod:`pipelines.instance`)."""
    from pipelines.instance import dagster_home as _dagster_home

    return _dagster_home(home)
