"""Shared pieces of the sandbox tests: skip reasons, and scanning the host's processes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

HAS_BWRAP = shutil.which("bwrap") is not None
IS_ROOT = os.geteuid() == 0

needs_bwrap = pytest.mark.skipif(not HAS_BWRAP, reason="bubblewrap is not installed (`make install` installs it as root)")
needs_root = pytest.mark.skipif(not IS_ROOT, reason="uid switching (and RLIMIT_NPROC per uid) needs root")
HAS_MMDEBSTRAP = shutil.which("mmdebstrap") is not None
# images of Harbor tasks: built as root from Debian's archive (the first build on a machine takes a
# minute; tests share ASSAY_IMAGE_CACHE, tests/conftest.py), run with id-mapped overlay mounts
needs_images = pytest.mark.skipif(not (IS_ROOT and HAS_BWRAP and HAS_MMDEBSTRAP),
                                  reason="image builds and runs need root, bubblewrap and mmdebstrap "
                                         "(`make system-deps` as root)")


def pids_with_cmdline(marker: str) -> list[int]:
    """Host processes whose command line contains ``marker`` (zombies have none and do not count)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def pids_of_uid(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def stop_and_kill(marker: str) -> list[int]:
    """Kill host processes whose command line has ``marker``: the litter of a broken sandbox.

    A fork bomb that escaped keeps forking while it is killed one pid at a time, so stop every
    one first (stopped processes cannot fork), then kill them. Returns the pids found.
    """
    import signal

    found: list[int] = []
    for _ in range(50):
        running = [pid for pid in pids_with_cmdline(marker) if pid not in found]
        if not running:
            break
        for pid in running:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        found += running
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return found
