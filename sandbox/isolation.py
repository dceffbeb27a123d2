"""Which isolation this machine offers, found once per process, and how to fix it when none.

The default isolation is bubblewrap (``bwrap``) started as an unprivileged uid with rlimits. When
bwrap is missing or cannot create namespaces here, untrusted code is refused with
:class:`SandboxUnavailable`, unless ``ASSAY_UNSAFE_LOCAL_EXEC=1`` opts into running it as a plain
local process (rlimits, a temp folder, a minimal environment, and a loud warning on every run).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandbox.errors import SandboxUnavailable
from sandbox.uids import DEFAULT_UID_BASE

UNSAFE_ENV = "ASSAY_UNSAFE_LOCAL_EXEC"
BWRAP_ENV = "ASSAY_SANDBOX_BWRAP"
PYTHON_ENV = "ASSAY_SANDBOX_PYTHON"
UID_BASE_ENV = "ASSAY_SANDBOX_UID_BASE"
CA_BUNDLE_ENV = "ASSAY_BUILD_CA_BUNDLE"
CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")

SYSTEM_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
INSTALL_HINT = (
    "install bubblewrap (`sudo apt-get install bubblewrap`, `sudo dnf install bubblewrap`; `make install` "
    "does it when run as root) and make sure unprivileged user namespaces are enabled "
    "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0); or, only on a machine "
    f"you do not mind a model's code running on, set {UNSAFE_ENV}=1"
)


class SandboxConfig(BaseModel):
    """Where the sandbox finds its tools. ``from_env`` reads the ``ASSAY_SANDBOX_*`` variables."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    bwrap: str | None = Field(None, description=f"path of bubblewrap (${BWRAP_ENV}); unset: search PATH and /usr/bin")
    interpreter: str | None = Field(
        None, description=f"the Python that runs programs (${PYTHON_ENV}); unset: the system python3 (it must be "
                          "readable by an unprivileged uid: a root-only pyenv build is not)")
    uid_base: int = Field(DEFAULT_UID_BASE, description=f"first of the numeric uids runs switch to "
                                                              f"(${UID_BASE_ENV}; root only; no passwd entry needed)")
    allow_unsafe: bool = Field(
        False, description=f"run without isolation when none is available (${UNSAFE_ENV}=1)")
    exec_chain: bool = Field(
        True, description="start runs through util-linux prlimit/setpriv when present (fast from a large parent "
                          "process); false sets limits and uid between fork and exec instead")

    @field_validator("uid_base")
    @classmethod
    def _unprivileged(cls, value):
        if value < 1:
            raise ValueError(f"uid_base must be a positive uid (0 is root: runs would keep root's rights), got "
                             f"{value}; set {UID_BASE_ENV} to e.g. {DEFAULT_UID_BASE}, or unset it")
        return value

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "SandboxConfig":
        env = os.environ if environ is None else environ
        raw_base = env.get(UID_BASE_ENV, "").strip()
        try:
            base = int(raw_base) if raw_base else DEFAULT_UID_BASE
        except ValueError:
            raise ValueError(f"{UID_BASE_ENV}={raw_base!r} must be an integer uid, e.g. {DEFAULT_UID_BASE}") from None
        return cls(bwrap=env.get(BWRAP_ENV) or None, interpreter=env.get(PYTHON_ENV) or None,
                   uid_base=base, allow_unsafe=env.get(UNSAFE_ENV, "").strip() == "1")


def _world_runnable(path: Path) -> bool:
    """Whether a uid with no groups can execute ``path`` (every folder above it searchable)."""
    try:
        real = path.resolve(strict=True)
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def find_interpreter(config: SandboxConfig) -> tuple[str, tuple[str, ...]]:
    """The interpreter for sandboxed Python, and extra folders to bind read-only for it.

    Order: ``config.interpreter`` ($ASSAY_SANDBOX_PYTHON), the system python3, then this process's
    own base interpreter if an unprivileged uid can run it (its install prefix is then bound).
    """
    candidates = [config.interpreter] if config.interpreter else [*SYSTEM_PYTHONS, getattr(sys, "_base_executable", sys.executable)]
    for candidate in candidates:
        path = Path(candidate)
        if not path.is_file():
            if config.interpreter:
                raise SandboxUnavailable(f"{PYTHON_ENV}={candidate!r} is not a file: point it at a python3 binary")
            continue
        if os.geteuid() == 0 and not _world_runnable(path):
            if config.interpreter:
                raise SandboxUnavailable(
                    f"{PYTHON_ENV}={candidate!r} is not executable by an unprivileged uid (the sandbox "
                    "drops root): make it and its folders world-readable or use /usr/bin/python3")
            continue
        real = path.resolve()
        if str(real).startswith("/usr/"):
            return str(path), ()
        # e.g. /opt/python/bin/python3.11 -> bind /opt/python (stdlib lives under the prefix)
        return str(real), (str(real.parent.parent),)
    raise SandboxUnavailable(
        "no Python interpreter an unprivileged uid can run: install the system python3 "
        f"(`apt-get install python3`) or set {PYTHON_ENV} to a world-readable python3")


def host_ca_bundle() -> str | None:
    """This machine's CA bundle (``$ASSAY_BUILD_CA_BUNDLE``, else the system's), or None: what image
    builds and network episodes trust, as this machine's own pip does (a proxy's CA included)."""
    configured = os.environ.get(CA_BUNDLE_ENV, "").strip()
    for candidate in ([configured] if configured else list(CA_BUNDLES)):
        if os.path.isfile(candidate):
            return candidate
    return None


def find_bwrap(config: SandboxConfig) -> str | None:
    if config.bwrap:
        return config.bwrap if Path(config.bwrap).is_file() else None
    return shutil.which("bwrap") or ("/usr/bin/bwrap" if Path("/usr/bin/bwrap").is_file() else None)


def host_root_binds() -> tuple[str, ...]:
    """bwrap arguments recreating /usr and the top-level links into it (merged-/usr or not)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    # Debian's /usr/bin/awk, vi, pager... are links through /etc/alternatives: without it `awk` is
    # "command not found". It holds only links into /usr; the rest of /etc stays out.
    if Path("/etc/alternatives").is_dir():
        args += ["--ro-bind", "/etc/alternatives", "/etc/alternatives"]
    return tuple(args)


_PROBES: dict[tuple, str | None] = {}
_PROBE_MUTEX = threading.Lock()


def probe_bwrap(command: tuple[str, ...], uid: int | None) -> str | None:
    """None when bwrap runs ``command`` (the real sandbox around ``true``) as ``uid``, else why not.

    Cached per process: a machine either supports the sandbox or not.
    """
    key = (command, uid is not None)
    with _PROBE_MUTEX:
        if key in _PROBES:
            return _PROBES[key]
        kwargs = {"user": uid, "group": uid, "extra_groups": []} if uid is not None else {}
        try:
            done = subprocess.run(list(command), capture_output=True, text=True, timeout=30, cwd="/",
                                  env={"PATH": "/usr/bin:/bin"}, **kwargs)
            reason = None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")
        except (OSError, subprocess.SubprocessError) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        _PROBES[key] = reason
        return reason
