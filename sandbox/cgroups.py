"""Kernel limits for a whole episode: a control group with cpus, memory and processes (root only).

rlimits cap each process (address space, CPU seconds) but not a process tree, and cannot cap CPU
*share*: a Harbor task's ``cpus`` and ``memory_mb`` mean the container's, so an episode's commands
run in a control group of their own with ``cpus`` (CFS quota), ``memory_mb`` (resident memory, swap
included, and the tmpfs pages the episode writes) and a process count. The group is made inside this
process's own group (limits nest: whatever caps this process caps the episode too) and removed when
the episode closes. Each command's first process moves itself into the group before it drops root
(:func:`join_argv`, run by the launcher), so nothing it starts is ever outside.

cgroup v1 (a hierarchy per controller, as on this machine) and v2 (one unified hierarchy; needs a
cgroup whose ``subtree_control`` can be written: the root, or a delegated one) are supported. Where
neither can be used, :func:`episode_group` returns None and the caller says which limits stay
per-process rlimits only (:attr:`EpisodeGroup.enforced` names what is enforced).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
V1_CONTROLLERS = ("memory", "cpu", "pids")
JOIN_SCRIPT = 'for f; do [ "$f" = -- ] && break; echo $$ > "$f" || exit 125; shift; done; shift; exec "$@"'


@dataclass
class EpisodeGroup:
    """A control group (one folder per v1 controller, one folder in v2) and what it enforces."""

    folders: list[Path]
    procs: list[str]
    enforced: tuple[str, ...]
    closed: bool = field(default=False)

    def oom_kills(self) -> int:
        """Processes the kernel killed for the group's memory limit so far."""
        for folder in self.folders:
            for name in ("memory.oom_control", "memory.events"):
                with contextlib.suppress(OSError):
                    for line in (folder / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
        return 0

    def join_argv(self) -> list[str]:
        """argv prefix that moves the starting process into the group, then execs the rest (after '--')."""
        return ["/bin/sh", "-c", JOIN_SCRIPT, "sh", *self.procs, "--"]

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for folder in self.folders:
            for _ in range(50):  # the last command's processes may still be being reaped
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _own(controller: str) -> str | None:
    """This process's group path in the hierarchy of ``controller`` ('' for v2)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(",") or (controller == "" and controllers == ""):
                return path
    return None


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _v1(name: str, cpus: float | None, memory_mb: int | None, pids: int | None) -> EpisodeGroup | None:
    folders, procs, enforced = [], [], []
    try:
        for controller in V1_CONTROLLERS:
            mount = ROOT / controller
            own = _own(controller)
            if own is None or not (mount / "cgroup.procs").is_file():
                continue
            wanted = {"memory": memory_mb, "cpu": cpus, "pids": pids}[controller]
            if wanted is None:
                continue
            folder = mount / own.lstrip("/") / name
            folder.mkdir()
            folders.append(folder)
            if controller == "memory":
                _write(folder / "memory.limit_in_bytes", str(memory_mb << 20))
                with contextlib.suppress(OSError):  # swap counted too, where the kernel accounts it
                    _write(folder / "memory.memsw.limit_in_bytes", str(memory_mb << 20))
            elif controller == "cpu":
                _write(folder / "cpu.cfs_period_us", str(PERIOD_US))
                _write(folder / "cpu.cfs_quota_us", str(max(1000, int(cpus * PERIOD_US))))
            else:
                _write(folder / "pids.max", str(pids))
            procs.append(str(folder / "cgroup.procs"))
            enforced.append({"memory": "memory_mb", "cpu": "cpus", "pids": "processes"}[controller])
    except OSError:
        for folder in folders:
            with contextlib.suppress(OSError):
                folder.rmdir()
        return None
    return EpisodeGroup(folders, procs, tuple(enforced)) if folders else None


def _v2(name: str, cpus: float | None, memory_mb: int | None, pids: int | None) -> EpisodeGroup | None:
    own = _own("")
    if own is None or not (ROOT / "cgroup.controllers").is_file():
        return None
    parent = ROOT / own.lstrip("/")
    folder = parent / name
    try:
        available = (parent / "cgroup.controllers").read_text().split()
        wanted = [c for c in ("memory", "cpu", "pids") if c in available]
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        folder.mkdir()
        enforced = []
        if memory_mb is not None and "memory" in wanted:
            _write(folder / "memory.max", str(memory_mb << 20))
            with contextlib.suppress(OSError):
                _write(folder / "memory.swap.max", "0")
            enforced.append("memory_mb")
        if cpus is not None and "cpu" in wanted:
            _write(folder / "cpu.max", f"{max(1000, int(cpus * PERIOD_US))} {PERIOD_US}")
            enforced.append("cpus")
        if pids is not None and "pids" in wanted:
            _write(folder / "pids.max", str(pids))
            enforced.append("processes")
    except OSError:
        with contextlib.suppress(OSError):
            folder.rmdir()
        return None
    return EpisodeGroup([folder], [str(folder / "cgroup.procs")], tuple(enforced))


def episode_group(cpus: float | None, memory_mb: int | None, pids: int | None) -> EpisodeGroup | None:
    """A fresh control group with these limits (None: not limited), or None where this machine
    offers no usable cgroup (not root, or no writable hierarchy)."""
    if os.geteuid() != 0:
        return None
    name = f"assay-episode-{os.getpid()}-{secrets.token_hex(4)}"
    if (ROOT / "memory" / "cgroup.procs").is_file() or (ROOT / "cpu" / "cgroup.procs").is_file():
        return _v1(name, cpus, memory_mb, pids)
    return _v2(name, cpus, memory_mb, pids)


__all__ = ["EpisodeGroup", "episode_group"]
