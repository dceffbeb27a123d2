"""A terminal episode: shell commands, one after another, over a private working folder.

The agent side of a coding task (issue 14). An episode owns a fresh host folder (a copy of the
task's ``files/``) that every command sees as its cwd, ``/work``, writable::

    with TerminalEpisode(task_files) as episode:
        episode.run("ls && python3 fix.py")      # CommandResult(output, exit_code, seconds, ...)
        episode.run("cat out.txt")
        verdict = run_hidden_tests(episode.workdir, task_tests, timeout_s=60)
    verdict.passed

What carries over between commands, and what does not:

- each command is ``bash`` in a FRESH sandbox (:mod:`sandbox.runner`: bubblewrap, no network,
  rlimits, a minimal environment, an unprivileged uid held for the whole episode); only the files
  under ``/work`` persist. Shell state does not: ``cd``, variables, functions, aliases and
  background jobs end with the command (chain with ``&&`` or write a script instead). ``/tmp``
  (also ``$HOME``) is a new empty tmpfs each time;
- stdout and stderr come back merged in order, capped at ``output_bytes`` (the head and the tail
  kept, a marker in between); a command printing more than ``Limits.output_bytes`` in all is killed;
- a command ends at ``command_timeout_s`` (wall clock; ``timed_out``, exit code 124), at its CPU
  limit, or when ``/work`` grows past ``workdir_mb`` / ``MAX_ENTRIES`` (the kernel cannot cap a
  host folder's size, so the folder is measured every ``WATCH_EVERY_S`` while a command runs: a
  fast writer can overshoot by what it writes in that time; a folder left over the cap fails the
  verdict; the next commands may shrink it, and one that grows it is stopped like the first);
- the episode sees ``/usr`` (system tools) read-only, ``/work``, its own ``/tmp``, ``/proc`` and a
  minimal ``/dev``: not the host's home, repositories, task folders (tests included) or other
  episodes' folders, neither to read nor to write.

The verdict (:func:`run_hidden_tests`) runs in another fresh sandbox as another uid, with a COPY of
the final ``/work`` as its cwd (regular files, folders and symlinks only: a FIFO or socket the agent
left is dropped, so it cannot hang the tests; set-uid bits are dropped; the copy is capped like
the folder) and a copy of the task's ``tests/`` mounted read-only at a random path the episode never
saw; it runs ``bash <that path>/run.sh`` with the same minimal environment (a fixed ``PATH`` of
system folders: an executable named ``python3`` or ``bash`` in ``/work`` is never picked, and
non-interactive bash reads no ``.bashrc``). Exit 0 means solved.

What stays the tests' job: code the tests themselves run (the agent's program) runs beside them in
the verdict sandbox and could read them there (``/proc``, the mount table name their path); and
``python3 -c``/``-m`` put the cwd first on ``sys.path``, where a ``json.py`` the agent left would
shadow the standard library. Run checks as a script (``python3 "$(dirname "$0")/check.py"``,
whose ``sys.path[0]`` is the read-only tests folder) and import the agent's code deliberately.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from sandbox.limits import Limits
from sandbox.runner import WATCH_EVERY_S, Mount, Sandbox, default_sandbox  # noqa: F401 (documented)

WORKDIR = "/work"  # the episode's cwd inside the sandbox, the same path in the verdict sandbox
COMMAND_FILE = ".assay-command.sh"  # in the per-command /tmp: a command may hold any byte, even NUL
BASH = "/bin/bash"
# Run the file with stderr merged into stdout, in order; exec: bash stays pid 1 of the sandbox.
MERGED = 'exec /bin/bash "$0" 2>&1'
DEFAULT_WORKDIR_MB = 64
MAX_ENTRIES = 20_000  # files, folders and links in /work: a million empty files fill no quota
MAX_DEPTH = 64  # folders inside folders that a copy of /work follows
TIMEOUT_EXIT = 124  # as coreutils' timeout(1)
DEFAULT_LIMITS = Limits(cpu_s=10, wall_s=10, memory_mb=512, nproc=64, file_size_mb=16, output_bytes=1_000_000)


@dataclass(frozen=True)
class CommandResult:
    """One command of an episode. ``output``: stdout and stderr merged, capped (``truncated``),
    with a bracketed note when a limit ended the command. ``exit_code``: bash's exit status;
    124 when the wall clock or CPU limit ended it (``timed_out``), 128+N when signal N did (137
    when it was killed for printing too much or for filling ``/work``)."""

    command: str
    output: str
    exit_code: int
    seconds: float
    truncated: bool
    timed_out: bool

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TestVerdict:
    """The hidden tests' verdict: ``passed`` iff ``run.sh`` exited 0 within its time.
    ``exit_code`` is None when the tests did not get to exit (timed out, or the working folder
    could not be copied); ``output`` says why then."""

    __test__ = False  # not a pytest test class

    passed: bool
    exit_code: int | None
    output: str
    seconds: float

    def to_dict(self) -> dict:
        return asdict(self)


class WorkdirTooLarge(Exception):
    """The working folder holds more than its cap (bytes or entries)."""


# -- the host side of a working folder ---------------------------------------------------------


def _private_root(prefix: str) -> Path:
    """A fresh host folder only its owner can list; a sandbox uid may traverse it to a child it owns
    (bubblewrap resolves a mount's source as that uid)."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o711)
    return root


def _usage(folder: Path, max_bytes: float, max_entries: float) -> tuple[int, int]:
    """(bytes, entries) under ``folder``, counted until one passes its maximum (then partial).

    Walks without following links, so its cost is bounded by the maxima. A file counts by its
    size or its disk blocks, whichever is larger."""
    total = entries = 0
    stack = [str(folder)]
    while stack:
        try:
            with os.scandir(stack.pop()) as listing:
                for entry in listing:
                    entries += 1
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISREG(st.st_mode):
                        total += max(st.st_size, st.st_blocks * 512)
                    elif stat.S_ISDIR(st.st_mode):
                        stack.append(entry.path)
                    if total > max_bytes or entries > max_entries:
                        return total, entries
        except OSError:
            continue
    return total, entries


def folder_usage(folder: Path, max_bytes: int, max_entries: int = MAX_ENTRIES) -> str | None:
    """None while ``folder`` holds at most ``max_bytes`` and ``max_entries``, else what it exceeds."""
    total, entries = _usage(folder, max_bytes, max_entries)
    if total > max_bytes:
        return f"more than {max_bytes >> 20} MB"
    if entries > max_entries:
        return f"more than {max_entries} files and folders"
    return None


def copy_tree(source: Path, target: Path, *, max_bytes: int, max_entries: int = MAX_ENTRIES,
              owner: int | None = None) -> None:
    """Copy ``source`` into the new folder ``target`` the safe way for a tree an agent wrote.

    Regular files (content and permission bits, never set-uid/set-gid/sticky), folders and
    symlinks (as links, never followed) only: FIFOs, sockets and devices are skipped, and so is
    what cannot be read. Files are opened with O_NOFOLLOW and checked to be regular after
    opening. Iterative, so any depth is fine up to ``MAX_DEPTH``. Everything ends up owned by
    ``owner`` (when given). Raises :class:`WorkdirTooLarge` past the caps."""
    left = {"bytes": max_bytes, "entries": max_entries}

    def charge(nbytes: int) -> None:
        left["bytes"] -= nbytes
        left["entries"] -= 1
        if left["bytes"] < 0:
            raise WorkdirTooLarge(f"{source} holds more than {max_bytes >> 20} MB")
        if left["entries"] < 0:
            raise WorkdirTooLarge(f"{source} holds more than {max_entries} files and folders")

    def own(path: Path) -> None:
        if owner is not None:
            os.lchown(path, owner, owner)

    target.mkdir(mode=0o700)
    own(target)
    modes: list[tuple[Path, int]] = [(target, source.stat().st_mode)]
    pending: list[tuple[Path, Path, int]] = [(source, target, 0)]
    while pending:
        src, dst, depth = pending.pop()
        try:
            with os.scandir(src) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError:
            continue  # a folder made unreadable: copied empty
        for entry in entries:
            src_path, dst_path = Path(entry.path), dst / entry.name
            try:
                st = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    charge(0)
                    if depth + 1 > MAX_DEPTH:
                        raise WorkdirTooLarge(f"{source} nests folders deeper than {MAX_DEPTH}")
                    dst_path.mkdir(mode=0o700)
                    own(dst_path)
                    modes.append((dst_path, st.st_mode))
                    pending.append((src_path, dst_path, depth + 1))
                elif stat.S_ISLNK(st.st_mode):
                    charge(0)
                    os.symlink(os.readlink(src_path), dst_path)
                    own(dst_path)
                elif stat.S_ISREG(st.st_mode):
                    charge(st.st_size)
                    if _copy_file(src_path, dst_path, st.st_mode, left["bytes"] + st.st_size):
                        own(dst_path)
                # anything else (FIFO, socket, device) is not part of a working folder
            except WorkdirTooLarge:
                raise
            except OSError:
                continue  # gone, unreadable or a name too long to recreate: not copied
    for folder, mode in reversed(modes):  # last: a read-only folder must first be filled
        folder.chmod(stat.S_IMODE(mode) & 0o777 | 0o700)


def _copy_file(src: Path, dst: Path, mode: int, max_bytes: int) -> bool:
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # unreadable (non-root host) or gone: not copied
    with os.fdopen(fd, "rb") as reader:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(out, "wb") as writer:
            copied = 0
            while chunk := reader.read(1 << 20):
                copied += len(chunk)
                if copied > max_bytes:  # the file grew after its size was read
                    raise WorkdirTooLarge(f"{src} grew past the copy's cap")
                writer.write(chunk)
    dst.chmod(stat.S_IMODE(mode) & 0o777)
    return True


def _remove(root: Path) -> None:
    """Remove a working folder whatever the agent did to it (folders it made unreadable or
    unwritable, nesting deeper than Python recurses)."""
    stack = [str(root)]
    while stack:  # first give every folder back to its owner (as root, or as the same user)
        folder = stack.pop()
        try:
            os.chmod(folder, 0o700)
            with os.scandir(folder) as listing:
                stack.extend(e.path for e in listing if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    try:
        shutil.rmtree(root)
    except (OSError, RecursionError):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(root)], check=False, capture_output=True)


def _processes_of(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                continue
    return count


def wait_until_gone(uid: int, timeout_s: float = 3.0) -> None:
    """After a killed command, wait (a little) until its processes are reaped: the kernel tears a
    killed sandbox's pid namespace down after the run returned, and until then its dying processes
    count against the uid's process limit, which the episode's next command shares."""
    deadline = time.monotonic() + timeout_s
    while _processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.05)


def cap_output(text: str, output_bytes: int) -> tuple[str, bool]:
    """``text`` within ``output_bytes`` (UTF-8): its head and tail around a marker."""
    data = text.encode()
    if len(data) <= output_bytes:
        return text, False
    head, tail = data[: output_bytes // 2], data[len(data) - output_bytes // 2:]
    omitted = len(data) - len(head) - len(tail)
    return (head.decode(errors="ignore") + f"\n[... {omitted} bytes of output omitted ...]\n"
            + tail.decode(errors="ignore")), True


# -- the episode ----------------------------------------------------------------------------------


class TerminalEpisode:
    """A persistent working folder and a ``run(command)`` over it; use as a context manager
    (or call :meth:`close`). See the module docstring for what persists and what is enforced.

    ``files_dir``: copied as the initial ``/work`` (None: empty). ``limits``: per-command limits
    (CPU, memory, processes, file size; ``wall_s`` is replaced by ``command_timeout_s``).
    ``output_bytes``: what a command's output is cut to. ``workdir_mb``: cap on ``/work``.
    """

    def __init__(self, files_dir: Path | None, *, limits: Limits | None = None, command_timeout_s: float = 10,
                 output_bytes: int = 4096, workdir_mb: int = DEFAULT_WORKDIR_MB, sandbox: Sandbox | None = None):
        if not command_timeout_s > 0:
            raise ValueError(f"command_timeout_s must be a positive number of seconds, got {command_timeout_s!r}")
        if output_bytes < 64:
            raise ValueError(f"output_bytes must be >= 64, got {output_bytes!r}")
        if workdir_mb < 1:
            raise ValueError(f"workdir_mb must be a positive int, got {workdir_mb!r}")
        base = limits or DEFAULT_LIMITS
        self.limits = base.replace(wall_s=float(command_timeout_s),
                                   output_bytes=max(base.output_bytes, output_bytes))
        self.output_bytes = output_bytes
        self.max_bytes = workdir_mb << 20
        self.sandbox = sandbox or default_sandbox()
        self.sandbox.isolation  # refuse now when there is no sandbox
        self._stack = contextlib.ExitStack()
        self._root: Path | None = None
        try:
            self.uid = self._stack.enter_context(self.sandbox.hold_uid())
            self._root = _private_root("assay-episode-")
            self._workdir = self._root / "work"
            if files_dir is not None:
                files_dir = Path(files_dir)
                if not files_dir.is_dir():
                    raise FileNotFoundError(f"episode files folder {files_dir} does not exist; pass a folder or None")
                copy_tree(files_dir, self._workdir, max_bytes=self.max_bytes, owner=self.uid)
            else:
                self._workdir.mkdir(mode=0o700)
                if self.uid is not None:
                    os.chown(self._workdir, self.uid, self.uid)
            self._workdir.chmod(0o700)
        except BaseException:
            self.close()
            raise
        self.closed = False

    @property
    def workdir(self) -> Path:
        """The host path of the episode's ``/work`` (read it, or pass it to :func:`run_hidden_tests`)."""
        return self._workdir

    def run(self, command: str, *, timeout_s: float | None = None) -> CommandResult:
        """Run ``command`` with bash in a fresh sandbox whose cwd is ``/work``. ``timeout_s``: a
        shorter wall clock for this command (e.g. what is left of an episode's ``timeout_s``)."""
        if getattr(self, "closed", True):
            raise RuntimeError("this terminal episode is closed; start a new TerminalEpisode")
        if not isinstance(command, str):
            raise TypeError(f"command must be a str, got {type(command).__name__}")
        limits = self.limits
        if timeout_s is not None:
            if not timeout_s > 0:
                raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
            limits = limits.replace(wall_s=min(limits.wall_s, float(timeout_s)))
        started = time.monotonic()
        # The agent owns /work and may chmod it away; the next command must still start there.
        self._workdir.chmod(0o700)
        # The cap stops growth: a folder already over it (a write faster than the watch) may
        # still run the commands that shrink it.
        held_bytes, held_entries = _usage(self._workdir, 16 * self.max_bytes, 16 * MAX_ENTRIES)
        max_bytes, max_entries = max(self.max_bytes, held_bytes), max(MAX_ENTRIES, held_entries)
        result = self.sandbox.run_command(
            [BASH, "-c", MERGED, f"/tmp/{COMMAND_FILE}"], files={COMMAND_FILE: command}, limits=limits,
            mounts=[Mount(str(self._workdir), WORKDIR, writable=True)], cwd=WORKDIR, uid=self.uid,
            watch=lambda: "workdir" if folder_usage(self._workdir, max_bytes, max_entries) else None)
        if result.limit is not None and self.uid is not None:
            wait_until_gone(self.uid)
        output, truncated = cap_output(result.stdout + result.stderr, self.output_bytes)
        truncated = truncated or result.truncated
        timed_out = result.status == "timeout"
        note = {"wall": f"timed out after {limits.wall_s:g} s",
                "cpu": f"stopped at its CPU limit of {self.limits.cpu_s:g} s",
                "output": f"killed: printed more than {self.limits.output_bytes} bytes",
                "workdir": f"killed: {WORKDIR} grew past {self.max_bytes >> 20} MB or {MAX_ENTRIES} entries",
                "memory": None}.get(result.limit or "")
        if note:
            output += ("" if not output or output.endswith("\n") else "\n") + f"[{note}]"
        if timed_out:
            code = TIMEOUT_EXIT
        elif result.returncode is None:
            code = 128 + 9
        else:
            code = 128 - result.returncode if result.returncode < 0 else result.returncode
        return CommandResult(command=command, output=output, exit_code=code,
                             seconds=round(time.monotonic() - started, 4), truncated=truncated, timed_out=timed_out)

    def close(self) -> None:
        """Remove the working folder and give the uid back (idempotent)."""
        self.closed = True
        try:
            if self._root is not None:
                _remove(self._root)
                self._root = None
        finally:
            self._stack.close()

    def __enter__(self) -> "TerminalEpisode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# -- the verdict ------------------------------------------------------------------------------------


def run_hidden_tests(workdir: Path, tests_dir: Path, *, timeout_s: float, limits: Limits | None = None,
                     workdir_mb: int = DEFAULT_WORKDIR_MB, sandbox: Sandbox | None = None) -> TestVerdict:
    """Run ``tests_dir/run.sh`` against a copy of ``workdir`` in a fresh sandbox; exit 0 = passed.

    ``workdir``: an episode's final working folder (host path; its own mode is reset to 0700 first,
    as before each command). ``tests_dir``: the task's ``tests/``
    folder, copied and mounted read-only at a random path (``$(dirname "$0")`` in ``run.sh``).
    The tests run as a uid of their own with ``/work`` (the copy, writable) as cwd. A working folder
    over ``workdir_mb`` fails without running anything."""
    tests_dir, workdir = Path(tests_dir), Path(workdir)
    if not (tests_dir / "run.sh").is_file():
        raise FileNotFoundError(f"{tests_dir / 'run.sh'} is missing: a task's tests/ folder needs a run.sh "
                                "(exit 0 means solved)")
    sandbox = sandbox or default_sandbox()
    sandbox.isolation
    base = limits or DEFAULT_LIMITS
    limits = base.replace(wall_s=float(timeout_s), cpu_s=max(base.cpu_s, float(timeout_s)))
    started = time.monotonic()
    root = _private_root("assay-verdict-")
    with contextlib.suppress(OSError):  # as before each command: the agent may have chmod-ed /work away
        workdir.chmod(0o700)
    try:
        with sandbox.hold_uid() as uid:
            try:
                copy_tree(workdir, root / "work", max_bytes=workdir_mb << 20, owner=uid)
            except WorkdirTooLarge as exc:
                return TestVerdict(False, None, f"[not tested: the working folder is too large: {exc}]",
                                   round(time.monotonic() - started, 4))
            (root / "work").chmod(0o700)
            copy_tree(tests_dir, root / "tests", max_bytes=1 << 30)  # owned by this user: read-only to the tests
            _readable_by_all(root / "tests")
            hidden = f"/verdict-{secrets.token_hex(16)}"
            result = sandbox.run_command(
                [BASH, "-c", MERGED, f"{hidden}/run.sh"], limits=limits, cwd=WORKDIR, uid=uid,
                mounts=[Mount(str(root / "work"), WORKDIR, writable=True), Mount(str(root / "tests"), hidden)])
    finally:
        _remove(root)
    output, _ = cap_output(result.stdout + result.stderr, 16_384)
    if result.status == "timeout":
        return TestVerdict(False, None, output + f"\n[tests timed out after {timeout_s:g} s]",
                           round(time.monotonic() - started, 4))
    code = result.returncode
    return TestVerdict(passed=result.status == "ok" and code == 0, exit_code=code, output=output,
                       seconds=round(time.monotonic() - started, 4))


def _readable_by_all(folder: Path) -> None:
    for path, dirs, files in os.walk(folder):
        os.chmod(path, 0o755)
        for name in files:
            full = os.path.join(path, name)
            if not os.path.islink(full):
                os.chmod(full, stat.S_IMODE(os.lstat(full).st_mode) | 0o444)


__all__ = ["CommandResult", "TerminalEpisode", "TestVerdict", "WORKDIR", "WorkdirTooLarge", "cap_output", "copy_tree",
           "folder_usage", "run_hidden_tests", "wait_until_gone"]
