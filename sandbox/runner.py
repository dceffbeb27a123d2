"""Run one untrusted program: bubblewrap as an unprivileged uid, rlimits, a wall clock, capped output.

What a sandboxed program gets (and nothing else):

- a read-only ``/usr`` (with the ``/bin``, ``/lib*`` links into it), a read-only root, a minimal
  ``/dev`` (null, zero, full, random, urandom; ``/dev/shm`` points into the scratch) and a ``/proc``
  of its own pid namespace; of ``/etc`` only ``/etc/alternatives`` (links into /usr, so ``awk`` runs); no ``/home``, no ``/root``, no repository, no host ``/tmp``;
- a private writable scratch folder: a tmpfs at ``/tmp`` of ``Limits.scratch_mb`` (its cwd and
  ``$HOME``), holding the program and the extra files given;
- no network (its own empty network namespace: only a loopback with nothing listening);
- a minimal environment (PATH, HOME, TMPDIR, LANG, USER): nothing of the parent's leaks;
- a numeric uid that owns nothing on the host (when started as root; see ``uids``), so root-only
  files stay unreadable, it cannot signal any other process, and RLIMIT_NPROC (ignored for root)
  applies per run; started by another user, it runs as that user inside the same namespaces;
- rlimits on CPU seconds, address space, file size, processes and open files; a wall-clock limit;
  stdout/stderr capped at ``Limits.output_bytes`` (more than that and it is killed).

A caller that needs state across runs (a terminal episode, :mod:`sandbox.terminal`) passes
``mounts``: host folders bound at fixed in-sandbox paths (read-only or writable), one of which may
be the run's ``cwd``; with ``uid`` from :meth:`Sandbox.hold_uid` every run of the series is the
same uid, so what one run writes the next may change; and ``watch``, polled while the program runs,
to stop it for a limit the kernel cannot enforce (a host folder's size). Runs stay separate
processes: only the mounted folders carry over.

Its whole process tree dies with it: the program is pid 1 of its own pid namespace, and when it
exits (or is killed) the kernel kills everything left inside, daemons included. Being pid 1, it
ignores signals it has no handler for (SIGTERM from itself does nothing); the kernel's SIGKILL for
the CPU limit and faults such as SIGSEGV still end it.
"""

from __future__ import annotations

import math
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Callable, Iterator, Mapping, Sequence

from sandbox.errors import SandboxError, SandboxUnavailable
from sandbox.isolation import (
    INSTALL_HINT, UNSAFE_ENV, SandboxConfig, find_bwrap, find_interpreter, host_root_binds, probe_bwrap,
)
from sandbox.limits import Limits
from sandbox.result import ExecutionResult
from sandbox.uids import allocator_for

SCRATCH = "/tmp"
# A hand-made /dev: bwrap's --dev adds a writable, uncapped /dev/shm tmpfs (a way to fill RAM).
# /dev/shm points into the capped scratch instead, so multiprocessing's semaphores still work.
DEV_ARGS: tuple[str, ...] = (
    *(arg for node in ("null", "zero", "full", "random", "urandom") for arg in ("--dev-bind", f"/dev/{node}", f"/dev/{node}")),
    "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0", "/dev/stdin",
    "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr",
    "--symlink", SCRATCH, "/dev/shm",
)
PROGRAM_NAME = "main.py"
# bwrap's monitor, outside the namespace, runs as the sandbox uid too.
OWN_PROCESSES = 1
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": SCRATCH,
    "TMPDIR": SCRATCH,
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "USER": "sandbox",
    "LOGNAME": "sandbox",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# What a program that ran out of address space leaves on stderr (Python, C, C++, Rust, Go).
MEMORY_PATTERN = re.compile(rb"\bMemoryError\b|Cannot allocate memory|std::bad_alloc|out of memory|memory allocation of \d+ bytes failed")
DRAIN_GRACE_S = 1.0
CHAIN_ABOVE_RSS_MB = 256  # see _launch
READ_CHUNK = 65536
Files = Mapping[str, "str | bytes"]
WATCH_EVERY_S = 0.05  # a walk of a small folder costs well under a millisecond
# A reason to stop a run early, or None: polled every WATCH_EVERY_S while a program runs.
Watch = Callable[[], "str | None"]


@dataclass(frozen=True)
class Mount:
    """A host folder seen inside the sandbox at ``target`` (absolute), read-only unless ``writable``.

    A writable mount is written as the run's uid: the folder must belong to it (see
    :meth:`Sandbox.hold_uid`), and nothing caps its size but ``watch``."""

    host: str
    target: str
    writable: bool = False

    def __post_init__(self) -> None:
        target = PurePosixPath(self.target)
        if not target.is_absolute() or ".." in target.parts or len(target.parts) < 2:
            raise ValueError(f"mount target {self.target!r} must be an absolute path below /, e.g. '/work'")
        if target.parts[1] in ("usr", "bin", "lib", "lib64", "proc", "dev", "tmp", "sbin"):
            raise ValueError(f"mount target {self.target!r} would hide the sandbox's own {target.parts[1]}; use e.g. '/work'")


@dataclass(frozen=True)
class RootFilesystem:
    """A whole filesystem as the sandbox's root, instead of the host's ``/usr`` and a scratch
    ``/tmp``: an image episode's writable overlay (:mod:`sandbox.image_episode`), bound at ``/``.

    ``uid``/``gid``: who the program is inside (the image's user: root by default; the host uid the
    run drops to is mapped to it, and owns the overlay's files). ``env``: its whole environment.
    ``network``: keep the host's network (only for a task that asks for the internet).
    ``as_root``: an argv prefix run as root before the uid is dropped (joining a control group,
    :meth:`sandbox.cgroups.EpisodeGroup.join_argv`). ``ca_bundle``: a host CA bundle shown
    read-only at :data:`ROOT_CA` (with ``network``: the machine's trust, e.g. a proxy's CA). Files
    given to the run are placed under :data:`ROOT_FILES` (a small tmpfs, never in the image's
    filesystem)."""

    path: str
    uid: int = 0
    gid: int = 0
    env: tuple[tuple[str, str], ...] = ()
    network: bool = False
    as_root: tuple[str, ...] = ()
    ca_bundle: str | None = None


ROOT_FILES = "/dev/.assay"
ROOT_CA = "/dev/.assay-ca.crt"


def _as_bytes(data: "str | bytes | None") -> bytes:
    if data is None:
        return b""
    return data.encode() if isinstance(data, str) else bytes(data)


def _check_relative(path: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if rel.is_absolute() or not rel.parts or ".." in rel.parts:
        raise ValueError(f"sandbox file name {path!r} must be a relative path inside the scratch folder, e.g. 'data/input.txt'")
    return rel


def _memfd(name: str, data: bytes) -> int:
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _rlimit_pairs(limits: Limits, nproc: int | None) -> list[tuple[str, int, int, int]]:
    """(prlimit option, resource constant, soft, hard) for every limit a run gets."""
    cpu = max(1, math.ceil(limits.cpu_s))
    pairs = [
        # soft == hard: pid 1 of a namespace ignores SIGXCPU, so the kernel's SIGKILL is what ends it.
        ("cpu", resource.RLIMIT_CPU, cpu, cpu),
        ("as", resource.RLIMIT_AS, limits.memory_mb << 20, limits.memory_mb << 20),
        ("fsize", resource.RLIMIT_FSIZE, limits.file_size_mb << 20, limits.file_size_mb << 20),
        ("core", resource.RLIMIT_CORE, 0, 0),
        ("nofile", resource.RLIMIT_NOFILE, 256, 256),
    ]
    if nproc is not None:
        pairs.append(("nproc", resource.RLIMIT_NPROC, nproc, nproc))
    return pairs


def _resident_mb() -> float:
    try:
        with open("/proc/self/statm", "rb") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return float("inf")


def _launch(command: list[str], limits: Limits, nproc: int | None, uid: int | None,
            prlimit: str | None, setpriv: str | None, as_root: Sequence[str] = ()) -> tuple[list[str], dict]:
    """The argv and Popen options that start ``command`` as ``uid`` under the limits.

    Two ways, chosen by the size of this process. Setting limits and uid between fork and exec
    (``preexec_fn``, ``user=``) makes CPython fork(), copying this process's page tables: cheap
    for a small process, but from a 3 GB parent (a trainer holding a model) a run took ~290 ms here
    instead of ~60 ms. Above ``CHAIN_ABOVE_RSS_MB`` the run starts through util-linux's
    ``prlimit`` and ``setpriv`` instead (two extra execs, ~2 ms CPU), so Popen needs neither
    option and CPython uses vfork, whose cost does not grow with the parent.
    """
    pairs = _rlimit_pairs(limits, nproc)
    if as_root and not (prlimit and setpriv):
        raise SandboxError("joining an episode's control group needs util-linux's prlimit and setpriv "
                           "(`apt-get install util-linux`)")
    if prlimit and (uid is None or setpriv) and (as_root or _resident_mb() > CHAIN_ABOVE_RSS_MB):
        # ``as_root`` (e.g. moving into a control group) runs before the uid is dropped
        argv = [prlimit, *(f"--{name}={soft}:{hard}" for name, _, soft, hard in pairs), "--", *as_root]
        if uid is not None:
            argv += [setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs", "--"]
        return argv + command, {}

    def apply() -> None:  # runs in the child between fork and exec
        for _, which, soft, hard in pairs:
            resource.setrlimit(which, (soft, hard))

    spawn: dict = {"preexec_fn": apply}
    if uid is not None:
        spawn.update(user=uid, group=uid, extra_groups=[])
    return command, spawn


class Sandbox:
    """Runs untrusted programs. Thread-safe: a :class:`~sandbox.pool.SandboxPool` shares one."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig.from_env()
        self._mode: str | None = None
        self._why_unavailable = ""
        self._bwrap = ""
        self._interpreter = ""
        self._base_args: tuple[str, ...] = ()
        self._mutex = threading.Lock()
        self._is_root = os.geteuid() == 0
        self._prlimit = shutil.which("prlimit") if self.config.exec_chain else None
        self._setpriv = shutil.which("setpriv") if self.config.exec_chain else None

    # -- isolation ------------------------------------------------------------------------------

    @property
    def isolation(self) -> str:
        """``bubblewrap`` or ``none`` (unsafe opt-in); raises :class:`SandboxUnavailable` otherwise."""
        with self._mutex:
            if self._mode is None:
                self._resolve()
        if self._mode == "unavailable":
            raise SandboxUnavailable(self._why_unavailable)
        return self._mode

    def _resolve(self) -> None:
        self._interpreter, extra_binds = find_interpreter(self.config)
        bwrap = find_bwrap(self.config)
        binds: list[str] = []
        for folder in extra_binds:
            binds += ["--ro-bind", folder, folder]
        base_args = (
            # --as-pid-1: the program itself is pid 1, so bwrap's monitor reaps it before exiting.
            # With bwrap's own init instead, the monitor exits on an eventfd message, init is
            # reaped late by the host's init, and each run leaves a phantom RLIMIT_NPROC charge on
            # its uid for ~1.7 s and no CPU accounting (both measured here).
            bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--as-pid-1",
            *host_root_binds(), *binds, *DEV_ARGS, "--proc", "/proc",
        )
        if bwrap is None:
            problem = "bubblewrap (bwrap) is not installed" + (f" at {self.config.bwrap}" if self.config.bwrap else "")
        else:
            # Probe with the real set-up (scratch, read-only root), so an old or crippled bwrap is
            # refused here with its own words rather than failing every run later.
            probe = (*base_args, "--size", str(1 << 20), "--tmpfs", SCRATCH, "--remount-ro", "/", "--", "true")
            allocator = allocator_for(self.config.uid_base) if self._is_root else None
            probe_uid = allocator.acquire()[0] if allocator else None
            try:
                reason = probe_bwrap(probe, probe_uid)
            finally:
                if allocator:
                    allocator.release(probe_uid)
            problem = None if reason is None else f"bubblewrap cannot create a sandbox here: {reason}"
        if problem is None:
            self._mode, self._bwrap, self._base_args = "bubblewrap", bwrap, base_args
        elif self.config.allow_unsafe:
            self._mode, self._why_unavailable = "none", problem
        else:
            self._mode = "unavailable"
            self._why_unavailable = f"refusing to run untrusted code without isolation: {problem}. To fix: {INSTALL_HINT}"

    # -- running ----------------------------------------------------------------------------------

    @contextmanager
    def hold_uid(self) -> Iterator[int | None]:
        """One uid for a series of runs (pass it as ``uid=``): files one run leaves in a writable
        mount belong to the uid the next run has. None when not started as root (runs are then
        this user, as always). No other run gets the uid while it is held."""
        if self.isolation != "bubblewrap" or not self._is_root:
            yield None
            return
        allocator = allocator_for(self.config.uid_base)
        uid, _ = allocator.acquire()
        try:
            yield uid
        finally:
            allocator.release(uid)

    def run_program(self, source: "str | bytes", *, stdin: "str | bytes | None" = None, files: Files | None = None,
                    limits: Limits | None = None, argv: Sequence[str] = ()) -> ExecutionResult:
        """Run Python ``source`` (saved as ``main.py`` in the scratch folder) with ``argv``."""
        self.isolation  # resolve first: the interpreter depends on it
        all_files = {**dict(files or {}), PROGRAM_NAME: source}
        return self.run_command([self._interpreter, "-E", "-s", "-B", PROGRAM_NAME, *argv],
                                stdin=stdin, files=all_files, limits=limits)

    def run_command(self, command: Sequence[str], *, stdin: "str | bytes | None" = None, files: Files | None = None,
                    limits: Limits | None = None, mounts: Sequence[Mount] = (), cwd: str | None = None,
                    uid: int | None = None, watch: Watch | None = None,
                    root: RootFilesystem | None = None) -> ExecutionResult:
        """Run ``command`` (an argv list; relative paths resolve in the scratch folder, or in
        ``cwd``). ``mounts``, ``cwd`` (a mount's target), ``uid`` (from :meth:`hold_uid`) and
        ``watch``: see the module docstring; they need bubblewrap. ``root``: run in that filesystem
        instead (:class:`RootFilesystem`; ``cwd`` is then any folder of it)."""
        if isinstance(command, (str, bytes)) or not command:
            raise ValueError("command must be a non-empty list of arguments, e.g. ['/usr/bin/python3', 'main.py']")
        limits = limits or Limits()
        payload = {str(_check_relative(name)): _as_bytes(data) for name, data in (files or {}).items()}
        if root is None and cwd is not None and cwd not in {m.target for m in mounts}:
            raise ValueError(f"cwd {cwd!r} must be the target of one of the mounts ({[m.target for m in mounts]})")
        mode = self.isolation
        if mode == "bubblewrap":
            return self._run_bwrap(list(command), _as_bytes(stdin), payload, limits, tuple(mounts), cwd, uid, watch,
                                   root)
        if mounts or uid is not None or watch is not None or root is not None:
            raise SandboxError(f"mounted folders (terminal episodes) need bubblewrap, and {UNSAFE_ENV}=1 runs without "
                               f"it ({self._why_unavailable}). To fix: {INSTALL_HINT}")
        return self._run_unsafe(list(command), _as_bytes(stdin), payload, limits)

    def _run_bwrap(self, command: list[str], stdin: bytes, files: dict[str, bytes], limits: Limits,
                   mounts: tuple[Mount, ...] = (), cwd: str | None = None, held_uid: int | None = None,
                   watch: Watch | None = None, root: RootFilesystem | None = None) -> ExecutionResult:
        fds: list[int] = []
        file_fds: list[int] = []
        if root is None:
            args = [*self._base_args, "--size", str(limits.scratch_mb << 20), "--tmpfs", SCRATCH,
                    "--chdir", cwd or SCRATCH]
            files_at = SCRATCH
        else:
            args = self._root_args(root, limits, cwd)
            files_at = ROOT_FILES
        for mount in mounts:
            args += ["--bind" if mount.writable else "--ro-bind", mount.host, mount.target]
        made_dirs: set[str] = set()
        try:
            for name, data in files.items():
                for parent in reversed(PurePosixPath(name).parents[:-1]):
                    if str(parent) not in made_dirs:
                        made_dirs.add(str(parent))
                        args += ["--dir", f"{files_at}/{parent}"]
                fd = _memfd("sandbox-file", data)
                fds.append(fd)
                file_fds.append(fd)
                args += (["--perms", "0444"] if root is not None else []) + ["--file", str(fd), f"{files_at}/{name}"]
            status_read, status_write = os.pipe2(os.O_CLOEXEC)
            fds += [status_read, status_write]
            if root is None:
                # Last: bwrap's root tmpfs (and the /dev built on it) read-only; only /tmp stays writable.
                args += ["--remount-ro", "/"]
            args += ["--json-status-fd", str(status_write), "--", *command]
            stdin_fd = _memfd("sandbox-stdin", stdin) if stdin else None
            if stdin_fd is not None:
                fds.append(stdin_fd)
            allocator = allocator_for(self.config.uid_base) if self._is_root else None
            for attempt in range(2):
                if held_uid is not None and allocator:
                    uid, lingering = held_uid, 0  # held by the caller: never released here
                else:
                    uid, lingering = allocator.acquire() if allocator else (None, 0)
                try:
                    # Non-root: no uid of our own to count on, so the user's own process limit applies.
                    nproc = limits.nproc + OWN_PROCESSES + lingering if uid is not None else None
                    argv, spawn = _launch(args, limits, nproc, uid, self._prlimit, self._setpriv,
                                          root.as_root if root is not None else ())
                    for fd in file_fds + ([stdin_fd] if stdin_fd is not None else []):
                        os.lseek(fd, 0, os.SEEK_SET)  # a retry must read every file from the start
                    result, setup_error = self._supervise(
                        argv, limits, stdin_fd, spawn=spawn, status_fd=status_read,
                        pass_fds=[fd for fd in fds if fd not in (status_read, stdin_fd)], watch=watch)
                finally:
                    if uid is not None and uid != held_uid:
                        allocator.release(uid)
                if result is not None:
                    return result
            raise SandboxError(f"bubblewrap failed to set up the sandbox (twice): {setup_error}")
        finally:
            for fd in fds:
                try:
                    os.close(fd)
                except OSError:
                    pass

    def _root_args(self, root: RootFilesystem, limits: Limits, cwd: str | None) -> list[str]:
        """bwrap arguments for a run in ``root`` (see :class:`RootFilesystem`)."""
        args = [self._bwrap, "--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--as-pid-1",
                "--uid", str(root.uid), "--gid", str(root.gid), "--hostname", "assay",
                "--bind", root.path, "/", "--proc", "/proc",
                # a /dev of its own: the usual nodes, /dev/shm into the episode's /tmp (capped with it)
                "--size", str(1 << 20), "--tmpfs", "/dev",
                *(arg for node in ("null", "zero", "full", "random", "urandom")
                  for arg in ("--dev-bind", f"/dev/{node}", f"/dev/{node}")),
                "--symlink", "/proc/self/fd", "/dev/fd", "--symlink", "/proc/self/fd/0", "/dev/stdin",
                "--symlink", "/proc/self/fd/1", "/dev/stdout", "--symlink", "/proc/self/fd/2", "/dev/stderr",
                "--symlink", "/tmp", "/dev/shm", "--dir", ROOT_FILES, "--chdir", cwd or "/", "--clearenv"]
        if not root.network:
            args.insert(1, "--unshare-net")
        elif os.path.exists("/etc/resolv.conf"):
            args += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
        if root.ca_bundle:
            args += ["--ro-bind", root.ca_bundle, ROOT_CA]
        for name, value in root.env:
            args += ["--setenv", name, value]
        return args

    def _run_unsafe(self, command: list[str], stdin: bytes, files: dict[str, bytes], limits: Limits) -> ExecutionResult:
        print(f"WARNING: {UNSAFE_ENV}=1: running untrusted code WITHOUT isolation ({self._why_unavailable}). "
              "It can read your files and use the network.", file=sys.stderr, flush=True)
        scratch = tempfile.mkdtemp(prefix="assay-unsafe-")
        stdin_fd = None
        try:
            for name, data in files.items():
                target = os.path.join(scratch, name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as handle:
                    handle.write(data)
            stdin_fd = _memfd("sandbox-stdin", stdin) if stdin else None
            env = {**SANDBOX_ENV, "HOME": scratch, "TMPDIR": scratch}
            allocator = allocator_for(self.config.uid_base) if self._is_root else None
            uid, lingering = allocator.acquire() if allocator else (None, 0)
            try:
                # Even without isolation, root drops to a uid of its own: root-only files stay closed.
                if uid is not None:
                    for folder, _, names in os.walk(scratch):
                        for name in [folder, *(os.path.join(folder, n) for n in names)]:
                            os.chown(name, uid, uid)
                nproc = limits.nproc + lingering if uid is not None else None
                argv, spawn = _launch(command, limits, nproc, uid, self._prlimit, self._setpriv)
                result, _ = self._supervise(argv, limits, stdin_fd, pass_fds=[], spawn=spawn, status_fd=None,
                                            cwd=scratch, env=env)
            finally:
                if uid is not None:
                    allocator.release(uid)
            return ExecutionResult(**{**result.__dict__, "isolation": "none"})
        finally:
            if stdin_fd is not None:
                os.close(stdin_fd)
            shutil.rmtree(scratch, ignore_errors=True)

    # -- supervising one process ----------------------------------------------------------------

    def _supervise(self, args: list[str], limits: Limits, stdin_fd: int | None, *, pass_fds, spawn,
                   status_fd: int | None, cwd: str = "/", env: dict | None = None,
                   watch: Watch | None = None) -> tuple[ExecutionResult | None, str]:
        """Start ``args``, enforce the wall clock, the output cap and ``watch``, and classify the outcome.

        Returns ``(None, why)`` when bubblewrap itself failed to set up (the caller retries).
        """
        started = time.monotonic()
        proc = subprocess.Popen(
            args, stdin=stdin_fd if stdin_fd is not None else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env or SANDBOX_ENV, cwd=cwd, start_new_session=True,
            pass_fds=pass_fds, close_fds=True, **spawn)
        pidfd = os.pidfd_open(proc.pid)
        out, err = bytearray(), bytearray()
        cap = limits.output_bytes
        killed_for: str | None = None
        exited, exited_at = False, 0.0
        deadline = started + limits.wall_s
        next_watch = started + WATCH_EVERY_S
        selector = selectors.DefaultSelector()
        try:
            selector.register(proc.stdout, selectors.EVENT_READ, out)
            selector.register(proc.stderr, selectors.EVENT_READ, err)
            selector.register(pidfd, selectors.EVENT_READ, None)
            while selector.get_map():
                now = time.monotonic()
                if exited:
                    remaining = min(deadline, exited_at + DRAIN_GRACE_S) - now
                else:
                    remaining = deadline - now
                if remaining <= 0:
                    if not exited and killed_for is None:
                        killed_for = "wall"
                        self._kill(proc)
                        deadline = now + DRAIN_GRACE_S
                        continue
                    break  # exited, but something still holds the pipes: stop waiting for them
                if watch is not None and not exited and killed_for is None:
                    if now >= next_watch:
                        next_watch = now + WATCH_EVERY_S
                        reason = watch()
                        if reason:
                            killed_for = reason
                            self._kill(proc)
                            deadline = time.monotonic() + DRAIN_GRACE_S
                            continue
                    remaining = min(remaining, max(0.0, next_watch - now))
                for key, _ in selector.select(remaining):
                    if key.data is None:
                        selector.unregister(pidfd)
                        exited, exited_at = True, time.monotonic()
                        continue
                    chunk = os.read(key.fd, READ_CHUNK)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        continue
                    buffer = key.data
                    room = cap - len(buffer)
                    if room > 0:
                        buffer += chunk[:room]
                    if len(chunk) > room and killed_for is None:
                        killed_for = "output"
                        self._kill(proc)
                        deadline = time.monotonic() + DRAIN_GRACE_S
        finally:
            selector.close()
            os.close(pidfd)
            if not exited:  # an error in the loop above: never leave the sandbox running
                self._kill(proc)
            _, wait_status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(wait_status)
            proc.stdout.close()
            proc.stderr.close()
        duration = time.monotonic() - started
        cpu = usage.ru_utime + usage.ru_stime
        raw_code = proc.returncode
        if status_fd is not None:
            status = _read_nonblocking(status_fd)
            if killed_for is None and b"child-pid" not in status:
                return None, err.decode(errors="replace").strip() or f"exit {raw_code}"
        return _classify(raw_code, bytes(out), bytes(err), duration, cpu, limits, killed_for,
                         from_bwrap=status_fd is not None), ""

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        # bwrap's monitor leads its own session; its pid 1 inside dies with it (--die-with-parent),
        # and the kernel then kills every process left in the pid namespace.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _read_nonblocking(fd: int) -> bytes:
    os.set_blocking(fd, False)
    data = bytearray()
    try:
        while chunk := os.read(fd, READ_CHUNK):
            data += chunk
    except BlockingIOError:
        pass
    return bytes(data)


def _classify(raw_code: int, out: bytes, err: bytes, duration: float, cpu: float, limits: Limits,
              killed_for: str | None, from_bwrap: bool) -> ExecutionResult:
    code = raw_code
    # bwrap reports a program killed by signal N as exit 128+N; report it as -N like subprocess.
    if from_bwrap and killed_for is None and 128 < code < 128 + signal.NSIG:
        code = -(code - 128)
    signum = -code if code < 0 else None
    limit = killed_for
    if killed_for == "wall":
        status = "timeout"
    elif killed_for is not None:  # the output cap, or a caller's watch
        status = "killed"
    # The program is pid 1 of its namespace: nothing inside can SIGKILL it, so an unexplained SIGKILL
    # is the kernel's: the CPU limit (rusage lags the limit's own clock a little, hence the margin).
    elif signum == signal.SIGXCPU or (signum == signal.SIGKILL and cpu >= 0.5 * limits.cpu_s):
        status, limit = "timeout", "cpu"
    elif code != 0 and MEMORY_PATTERN.search(err[-4096:]):
        status, limit = "memory", "memory"
    elif signum is not None:
        status = "killed"
    else:
        status = "ok" if code == 0 else "error"
    truncated = len(out) >= limits.output_bytes or len(err) >= limits.output_bytes
    return ExecutionResult(
        status=status, returncode=code if killed_for is None else -signal.SIGKILL,
        stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"),
        duration_s=duration, limit=limit, truncated=truncated, cpu_s=cpu,
    )


_DEFAULT_SANDBOX: Sandbox | None = None
_DEFAULT_MUTEX = threading.Lock()


def default_sandbox() -> Sandbox:
    """The process-wide sandbox configured from the environment (``ASSAY_SANDBOX_*``, ``ASSAY_UNSAFE_LOCAL_EXEC``)."""
    global _DEFAULT_SANDBOX
    with _DEFAULT_MUTEX:
        if _DEFAULT_SANDBOX is None:
            _DEFAULT_SANDBOX = Sandbox()
        return _DEFAULT_SANDBOX


def run_program(source: "str | bytes", *, stdin: "str | bytes | None" = None, files: Files | None = None,
                limits: Limits | None = None, argv: Sequence[str] = ()) -> ExecutionResult:
    """Run Python ``source`` in the default sandbox. See :class:`Sandbox`."""
    return default_sandbox().run_program(source, stdin=stdin, files=files, limits=limits, argv=argv)


def run_command(command: Sequence[str], *, stdin: "str | bytes | None" = None, files: Files | None = None,
                limits: Limits | None = None, **options) -> ExecutionResult:
    """Run an argv list in the default sandbox. See :meth:`Sandbox.run_command` (``options``:
    ``mounts``, ``cwd``, ``uid``, ``watch``)."""
    return default_sandbox().run_command(command, stdin=stdin, files=files, limits=limits, **options)
