"""Where Assay keeps everything: ``$ASSAY_HOME``, else ``.assay`` in the working directory.

Stdlib only, so ``assay --version`` can say where the home points without loading the lake.
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "ASSAY_HOME"
DEFAULT_HOME = ".assay"


def resolve_home(home: str | os.PathLike | None = None) -> Path:
    """``home``, else ``$ASSAY_HOME``, else ``.assay`` in the working directory (made absolute)."""
    chosen = home if home else os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Path(chosen).expanduser().resolve()


def home_from_environment() -> bool:
    """Whether ``$ASSAY_HOME`` chose the home (else ``.assay`` in the working directory)."""
    return bool(os.environ.get(HOME_ENV))

