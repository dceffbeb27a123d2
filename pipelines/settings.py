"""Where things live, resolved once at the edges (CLI, Dagster resources), never inside assets."""

from __future__ import annotations

import os
from pathlib import Path

from storage.lake import HOME_ENV, Lake, resolve_home

__all__ = ["HOME_ENV", "Lake", "resolve_home", "open_lake", "dagster_home"]


def open_lake(home: str | os.PathLike | None = None, *, write: bool = False) -> Lake:
    """The lake of the deployment profile (``ASSAY_PROFILE``: :func:`storage.deployment.open_lake`):
    under ``home`` locally. For reading (the default) nothing on disk is touched, not even a
    missing folder created. ``write=True`` creates the folder and cleans up after writers that
    died mid-write (:meth:`Lake.recover`; live writers' work is never touched)."""
    from storage.deployment import open_lake as _open_lake

    return _open_lake(home, write=write)


def dagster_home(home: str | os.PathLike | None = None) -> Path:
    """``$DAGSTER_HOME`` if set, else ``$ASSAY_HOME/dagster``: created, with Assay's dagster.yaml
    (run queue and concurrency pools: :mod:`pipelines.instance`)."""
    from pipelines.instance import dagster_home as _dagster_home

    return _dagster_home(home)
