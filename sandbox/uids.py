"""Unprivileged uids for sandboxed runs, distinct per concurrent run and per process.

Why uids at all: bubblewrap started by root reads host files as root and the kernel ignores
RLIMIT_NPROC for root, so every run drops to a numeric uid that owns nothing on the host (no passwd
entry is needed). RLIMIT_NPROC counts per uid, so runs executing at the same time get distinct uids.

Two facts shape this module (both verified on this machine, kernel 6.x):

- A process may be counted against its uid for a moment after the run that owned it ended: with
  bwrap's own init as pid 1 (no ``--as-pid-1``), each run left a phantom charge for ~1.7 s, and
  back-to-back runs on one uid then failed with "Can't fork for pid 1". The runner now uses
  ``--as-pid-1`` (no phantom measured), and this allocator still hands out the least recently
  released uid of a block and reports how often that uid was released within ``LINGER_S``, so the
  caller can add exactly that slack to RLIMIT_NPROC whatever the kernel does.
- Several processes (a trainer, a sweep, tests) may run sandboxes at once. Each process leases
  whole blocks of uids with ``flock`` on a lock file per block; the kernel drops the lock when the
  process dies, so a crashed process never strands its block.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

BLOCK_SIZE = 64
MAX_BLOCKS = 256
LINGER_S = 3.0  # measured phantom charge lasts ~1.7 s; keep a margin
# Far from system users (< 1000), nobody (65534), systemd dynamic users (61184-65519) and the usual
# /etc/subuid ranges (100000 + 65536 k for the first few thousand users).
DEFAULT_UID_BASE = 1_500_000_000


def _lock_dir() -> Path:
    for candidate in (Path("/run/assay-sandbox"), Path(tempfile.gettempdir()) / f"assay-sandbox-{os.geteuid()}"):
        try:
            candidate.mkdir(mode=0o700, exist_ok=True)
            st = candidate.lstat()
        except OSError:
            continue
        # Never trust a folder someone else planted in a shared /tmp.
        if st.st_uid == os.geteuid() and not (st.st_mode & 0o022) and candidate.is_dir() and not candidate.is_symlink():
            return candidate
    raise OSError("no private folder for sandbox uid locks (tried /run/assay-sandbox and $TMPDIR)")


class UidAllocator:
    """Thread-safe pool of uids ``base + k`` leased from cross-process blocks."""

    def __init__(self, base: int = DEFAULT_UID_BASE, lock_dir: Path | None = None):
        if not 1000 <= base <= 4_000_000_000:
            raise ValueError(f"sandbox uid base {base} must lie in [1000, 4000000000]")
        self.base = base
        self._lock_dir = lock_dir
        self._mutex = threading.Lock()
        self._free: deque[int] = deque()  # least recently released first
        self._released_at: dict[int, deque[float]] = {}
        self._lock_files: list[int] = []

    def _lease_block(self) -> None:
        lock_dir = self._lock_dir or _lock_dir()
        leased = {self._block_of(uid) for uid in self._released_at}
        for block in range(MAX_BLOCKS):
            if block in leased:
                continue
            fd = os.open(lock_dir / f"block-{self.base}-{block}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._lock_files.append(fd)
            first = self.base + block * BLOCK_SIZE
            for uid in range(first, first + BLOCK_SIZE):
                self._free.append(uid)
                self._released_at[uid] = deque()
            return
        raise OSError(f"all {MAX_BLOCKS} sandbox uid blocks are leased by other processes")

    def _block_of(self, uid: int) -> int:
        return (uid - self.base) // BLOCK_SIZE

    def acquire(self) -> tuple[int, int]:
        """A uid no other run is using, and how many of its phantom charges may still linger."""
        with self._mutex:
            if not self._free:
                self._lease_block()
            uid = self._free.popleft()
            now = time.monotonic()
            recent = self._released_at[uid]
            while recent and now - recent[0] > LINGER_S:
                recent.popleft()
            return uid, len(recent)

    def release(self, uid: int) -> None:
        with self._mutex:
            self._released_at[uid].append(time.monotonic())
            self._free.append(uid)


_DEFAULT: dict[tuple[int, int], UidAllocator] = {}
_DEFAULT_MUTEX = threading.Lock()


def allocator_for(base: int) -> UidAllocator:
    """The process-wide allocator for ``base`` (one lease per process, shared by all threads).

    Keyed by pid too: a forked child must lease its own blocks, not share its parent's.
    """
    key = (base, os.getpid())
    with _DEFAULT_MUTEX:
        if key not in _DEFAULT:
            _DEFAULT[key] = UidAllocator(base)
        return _DEFAULT[key]
