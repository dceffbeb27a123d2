"""Training tests share one built tiny policy: building it takes seconds, copying it milliseconds."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory) -> Path:
    from training.policy import ensure_tiny

    return ensure_tiny(tmp_path_factory.mktemp("tiny_home"))


@pytest.fixture
def tiny_home(assay_home, tiny_source) -> Path:
    """An ASSAY_HOME whose models/tiny is already built."""
    target = assay_home / "models" / "tiny"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tiny_source, target)
    return assay_home
