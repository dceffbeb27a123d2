"""Which process wrote something, in a form that outlives the process, and whether it still runs.

The lake names each in-flight folder after the process that made it (:mod:`storage.lake`), so
that recovery removes what a dead writer left and never the work of a live one in another
process. A pid alone cannot say that: pids are reused, and after a reboot they start again. The
identity is therefore ``(boot id, pid, start time)``:

- the boot id (``/proc/sys/kernel/random/boot_id``) changes at every boot, so nothing written
  before a reboot is taken for live work;
- the start time (field 22 of ``/proc/<pid>/stat``, clock ticks since boot) tells the writer
  apart from a later process that got the same pid.

A process is alive when, on this boot, ``/proc/<pid>/stat`` exists with the same start time and
it is not a zombie (a killed process its parent has not reaped yet will never finish its write).
Threads share their process's identity: a process never counts its own work as dead.

Limits, by design: writers and the lake are on one machine (a writer on another host has another
boot id and counts as dead), and writers share one pid namespace (containers writing to one lake
need ``--pid=host`` or one shared namespace). Without ``/proc`` (not Linux) boot id and start time
are unknown; liveness then falls back to "some process has that pid", which errs towards keeping
a dead writer's leftovers, never towards deleting live work.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"
UNKNOWN_BOOT = "0"  # no /proc: boot id and start times are unknown
_TOKEN = re.compile(r"^(?P<boot>[0-9a-f]{1,32})-(?P<pid>[0-9]+)-(?P<start>[0-9]+)$")
_DEAD_STATES = ("Z", "X", "x")  # zombie, dead


@dataclass(frozen=True)
class ProcessIdentity:
    """A process as ``(boot, pid, start)``; ``token`` is its file-name form ``<boot>-<pid>-<start>``."""

    boot: str
    pid: int
    start: int

    @property
    def token(self) -> str:
        return f"{self.boot}-{self.pid}-{self.start}"

    @classmethod
    def parse(cls, token: str) -> "ProcessIdentity | None":
        """The identity written as ``token``, or None if ``token`` is not one."""
        found = _TOKEN.match(token)
        if found is None:
            return None
        return cls(found["boot"], int(found["pid"]), int(found["start"]))

    def is_alive(self) -> bool:
        """Whether this very process still runs (not merely some process with its pid)."""
        if self.boot == UNKNOWN_BOOT:
            return _pid_exists(self.pid)
        if self.boot != boot_id():
            return False
        stat = process_stat(self.pid)
        return stat is not None and stat[1] == self.start and stat[0] not in _DEAD_STATES


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot's id as 16 hex digits (``UNKNOWN_BOOT`` without ``/proc``)."""
    try:
        with open(BOOT_ID_FILE) as handle:
            return handle.read().strip().replace("-", "").lower()[:16] or UNKNOWN_BOOT
    except OSError:
        return UNKNOWN_BOOT


def process_stat(pid: int) -> tuple[str, int] | None:
    """``(state, start time)`` of ``pid`` from ``/proc/<pid>/stat``, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            text = handle.read()
    except OSError:  # gone (ENOENT, ESRCH) or not Linux
        return None
    return parse_stat(text)


def parse_stat(text: str) -> tuple[str, int]:
    """``(state, start time)`` from the text of ``/proc/<pid>/stat``. The command name (field 2)
    may hold spaces and parentheses, so fields are counted from its last ``)``."""
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[19])  # field 3 is the state, field 22 the start time


def current() -> ProcessIdentity:
    """This process's identity (recomputed after a fork, so a child never writes as its parent)."""
    return _identity_of(os.getpid())


@lru_cache(maxsize=4)
def _identity_of(pid: int) -> ProcessIdentity:
    boot = boot_id()
    stat = process_stat(pid) if boot != UNKNOWN_BOOT else None
    return ProcessIdentity(boot if stat else UNKNOWN_BOOT, pid, stat[1] if stat else 0)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True
