"""A terminal episode in an image's filesystem, then its verifier: Harbor's trial, offline (root only).

:class:`sandbox.terminal.TerminalEpisode` gives an agent the host's ``/usr`` and a private
``/work``; an :class:`ImageEpisode` gives it a whole container filesystem built from a Dockerfile
(:mod:`sandbox.images`) instead, as Harbor does::

    with ImageEpisode(image, limits=EpisodeLimits(cpus=1, memory_mb=2048, storage_mb=2048),
                      timeout_s=600) as episode:
        episode.run("apt list --installed | wc -l")    # CommandResult, as TerminalEpisode.run
        verdict = episode.verify(tests_dir, timeout_s=120)   # VerifierResult: rewards, output

What an episode is:

- its filesystem: the image's layers, id-mapped to an unprivileged host uid held for the whole
  episode (:mod:`sandbox.mounts`), under a writable overlay whose upper is a tmpfs of the task's
  ``storage_mb``: everything the agent changes anywhere (``/app``, ``/etc``, ``/usr``...) persists
  from command to command and nothing reaches the image or the host;
- each command is ``bash`` in a fresh bubblewrap sandbox on that root (:class:`sandbox.runner.
  RootFilesystem`), as the image's user (``root`` by default, or the task's agent user) mapped onto
  the held uid; cwd the image's ``WORKDIR``; environment the image's ``ENV`` plus the task's; no
  network unless the task allows the internet (then this machine's CA bundle is trusted, as in
  builds: :mod:`sandbox.images`); its processes end with the command (nothing keeps running between
  commands: no services);
- limits: the episode's commands run in a control group of the task's ``cpus``, ``memory_mb`` and a
  process cap where the machine offers one (:mod:`sandbox.cgroups`; else ``memory_mb`` is each
  process's address space and ``cpus`` is not enforced: :attr:`ImageEpisode.enforced` says), each
  command's wall clock is what is left of the episode's ``timeout_s``, output is capped;
- the verifier (:meth:`ImageEpisode.verify`): ``/tests`` (a copy of the task's ``tests/``) appears
  only now, with an empty ``/logs/verifier``; ``bash /tests/test.sh`` runs as the verifier's user in
  the episode's final filesystem (Harbor's ``shared`` mode) or in a fresh one of the same image into
  which only the declared ``artifacts`` (paths) of the episode's filesystem are copied (``separate``
  mode: the agent cannot have touched anything the tests run with). The reward is read from
  ``/logs/verifier/reward.json`` (named metrics) or ``reward.txt`` (one number, named ``reward``).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import stat
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Mapping, Sequence

from sandbox.cgroups import EpisodeGroup, episode_group
from sandbox.dockerfile import DEFAULT_PATH
from sandbox.errors import SandboxError
from sandbox.images import CA_VARIABLES, Image, folder_bytes, inside
from sandbox.isolation import host_ca_bundle
from sandbox.limits import Limits
from sandbox.mounts import (
    mount_idmapped, mount_overlay, mount_tmpfs, private_folder, release_folder, require_root, sweep_stale, unmount,
)
from sandbox.runner import ROOT_CA, Mount, RootFilesystem, Sandbox, default_sandbox
from sandbox.terminal import (
    BASH, COMMAND_FILE, MERGED, TIMEOUT_EXIT, CommandResult, WorkdirTooLarge, cap_output, wait_until_gone, copy_tree,
)

VERIFIER_OUTPUT_BYTES = 16_384
VERIFIER_SCRATCH_MB = 64  # /logs/verifier and the verifier's writes into /tests, past the tests' own size
REWARD_FILE_BYTES = 1_000_000
NO_CGROUP_STORAGE_CAP_MB = 2048  # a tmpfs counts against RAM: without a memory cgroup, keep it bounded
# address space per process when a memory cgroup caps the episode (runtimes reserve far more
# virtual memory than they use: an RLIMIT_AS of memory_mb would break a JVM or Go)
UNCAPPED_ADDRESS_SPACE_MB = 1 << 24
MAX_ARTIFACT_ENTRIES = 200_000


@dataclass(frozen=True)
class EpisodeLimits:
    """What an episode may use (a Harbor task's ``[environment]``): ``cpus`` (None: not capped),
    ``memory_mb`` (None: not capped), ``storage_mb`` (what the episode may write), ``processes``
    (at once), ``output_bytes`` (of a command, as the agent reads it)."""

    cpus: float | None = 1.0
    memory_mb: int | None = 2048
    storage_mb: int = 2048
    processes: int = 512
    output_bytes: int = 4096

    def __post_init__(self) -> None:
        if self.cpus is not None and not self.cpus > 0:
            raise ValueError(f"cpus must be positive or None, got {self.cpus!r}")
        if self.memory_mb is not None and self.memory_mb < 32:
            raise ValueError(f"memory_mb must be at least 32, got {self.memory_mb!r}")
        if self.storage_mb < 1 or self.processes < 8 or self.output_bytes < 64:
            raise ValueError(f"storage_mb >= 1, processes >= 8, output_bytes >= 64 (got {self})")


@dataclass(frozen=True)
class VerifierResult:
    """The verifier's outcome. ``rewards``: the metrics it wrote (``{"reward": x}`` for reward.txt);
    ``error``: why there is no reward (no file, unreadable, timed out), else None."""

    rewards: dict[str, float]
    exit_code: int | None
    output: str
    seconds: float
    error: str | None = None

    def reward(self, key: str = "reward") -> float:
        return float(self.rewards.get(key, 0.0))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class _User:
    name: str
    uid: int
    gid: int
    home: str


def _passwd_entry(root: Path, spec: str) -> _User:
    """The image user ``spec`` (name or uid, optionally ``:group``) from the image's /etc/passwd."""
    name, _, group = str(spec).partition(":")
    entries = []
    with contextlib.suppress(OSError):
        entries = [line.split(":") for line in inside(root, "/etc/passwd").read_text(errors="replace").splitlines()]
    found = next((e for e in entries if len(e) >= 6 and (e[0] == name or (name.isdigit() and e[2] == name))), None)
    if found is None:
        if not name.isdigit():
            raise SandboxError(f"user {name!r} does not exist in the image (its /etc/passwd): create it in the "
                               "Dockerfile (useradd) or name another user")
        user = _User(name, int(name), int(name), "/")
    else:
        user = _User(found[0], int(found[2]), int(found[3]), found[5] or "/")
    if group:
        groups = []
        with contextlib.suppress(OSError):
            groups = [line.split(":") for line in inside(root, "/etc/group").read_text(errors="replace").splitlines()]
        match = next((g for g in groups if len(g) >= 3 and (g[0] == group or g[2] == group)), None)
        user.gid = int(match[2]) if match else int(group) if group.isdigit() else user.gid
    return user


class ImageFilesystem:
    """One writable overlay of an image, id-mapped for one host uid (see the module docstring)."""

    def __init__(self, image: Image, host_uid: int, user: str, storage_mb: int):
        require_root("running in an image")
        sweep_stale()
        self.folder = private_folder("episode")
        try:
            state, merged = self.folder / "state", self.folder / "root"
            state.mkdir()
            merged.mkdir()
            mount_tmpfs(state, storage_mb)
            for name in ("upper", "work"):
                (state / name).mkdir()
                os.chown(state / name, host_uid, host_uid)
            # the user is looked up in the image itself before its owner is mapped
            probe = self.folder / "probe"
            probe.mkdir()
            lowers_plain = list(reversed(image.layer_paths))
            self.user = self._lookup(lowers_plain, probe, user)
            lowers = []
            for index, layer in enumerate(image.layer_paths):
                target = self.folder / f"l{index}"
                target.mkdir()
                mount_idmapped(layer, target, self.user.uid, self.user.gid, host_uid)
                lowers.append(target)
            (state / "upper").chmod(0o755)
            mount_overlay(merged, list(reversed(lowers)), state / "upper", state / "work")
            merged.chmod(0o755)
            self.root = merged
            self.host_uid = host_uid
        except BaseException:
            release_folder(self.folder)
            raise

    def _lookup(self, lowers: list[Path], probe: Path, user: str) -> _User:
        if str(user) in ("root", "0", "0:0", ""):
            return _User("root", 0, 0, "/root")
        # a read-only overlay of the plain layers, only to read /etc/passwd and /etc/group
        _mount_readonly(probe, lowers)
        try:
            return _passwd_entry(probe, user)
        finally:
            unmount(probe)

    def close(self) -> None:
        release_folder(self.folder)


def _mount_readonly(target: Path, lowers: list[Path]) -> None:
    if len(lowers) == 1:
        done = subprocess.run(["mount", "--bind", "-o", "ro", str(lowers[0]), str(target)], capture_output=True,
                              text=True)
    else:
        common = os.path.commonpath([str(p) for p in lowers])
        options = "lowerdir=" + ":".join(os.path.relpath(p, common) for p in lowers)
        done = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(target)], capture_output=True,
                              text=True, cwd=common)
    if done.returncode != 0:
        raise SandboxError(f"could not read the image's users: {done.stderr.strip()}")


class ImageEpisode:
    """Commands over a persistent image filesystem, then its verifier; a context manager.

    ``image``: a built :class:`~sandbox.images.Image`. ``user``: the agent's user (default: the
    image's ``USER``). ``workdir``: the commands' cwd (default: the image's ``WORKDIR``). ``env``:
    added to the image's. ``timeout_s``: the whole episode's time (each command gets what is left).
    ``network``: keep the host's network (a task that allows the internet; only what this machine
    reaches)."""

    def __init__(self, image: Image, *, limits: EpisodeLimits | None = None, timeout_s: float = 600.0,
                 user: str | None = None, workdir: str | None = None, env: Mapping[str, str] | None = None,
                 network: bool = False, sandbox: Sandbox | None = None):
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.image = image
        self.limits = limits or EpisodeLimits()
        self.timeout_s = float(timeout_s)
        self.network = bool(network)
        self.sandbox = sandbox or default_sandbox()
        self.sandbox.isolation  # refuse now when there is no sandbox
        self.workdir_path = workdir or image.config.workdir or "/"
        self.extra_env = dict(env or {})
        self._stack = contextlib.ExitStack()
        self.closed = True
        try:
            host_uid = self._stack.enter_context(self.sandbox.hold_uid())
            if host_uid is None:
                require_root("running in an image")
            self.host_uid = host_uid
            self.group: EpisodeGroup | None = episode_group(self.limits.cpus, self.limits.memory_mb,
                                                            self.limits.processes)
            if self.group is not None:
                self._stack.callback(self.group.close)
            storage = self.limits.storage_mb
            if self.group is None or "memory_mb" not in self.group.enforced:
                storage = min(storage, NO_CGROUP_STORAGE_CAP_MB)
            self.fs = ImageFilesystem(image, host_uid, user or image.config.user or "root", storage)
            self._stack.callback(self.fs.close)
        except BaseException:
            self._stack.close()
            raise
        self.started = time.monotonic()
        self.closed = False

    # -- what the episode enforces ------------------------------------------------------------------

    @property
    def enforced(self) -> tuple[str, ...]:
        """The limits the kernel enforces for the whole episode (the rest are per-process rlimits)."""
        return ("storage_mb", *(self.group.enforced if self.group else ()))

    @property
    def root(self) -> Path:
        """The host path of the episode's filesystem (its merged root)."""
        return self.fs.root

    def environment(self, extra: Mapping[str, str] | None = None, user=None) -> dict[str, str]:
        user = user or self.fs.user
        env = {"PATH": DEFAULT_PATH, "HOME": user.home, "USER": user.name, "HOSTNAME": "assay", "TERM": "dumb",
               **self.image.config.env, **self.extra_env, **dict(extra or {})}
        return env

    def _command_limits(self, wall_s: float) -> Limits:
        cpus = self.limits.cpus or 1.0
        memory = (UNCAPPED_ADDRESS_SPACE_MB if self.group and "memory_mb" in self.group.enforced
                  else max(64, self.limits.memory_mb or UNCAPPED_ADDRESS_SPACE_MB))
        return Limits(cpu_s=max(1.0, wall_s * max(1.0, cpus)), wall_s=wall_s, memory_mb=memory,
                      nproc=self.limits.processes, file_size_mb=max(1, self.limits.storage_mb),
                      output_bytes=1_000_000, scratch_mb=1)

    def _root(self, fs: ImageFilesystem, env: Mapping[str, str], network: bool | None = None) -> RootFilesystem:
        network = self.network if network is None else network
        bundle = host_ca_bundle() if network else None
        if bundle:  # with the network, trust what this machine trusts (a proxy's CA), as builds do
            env = {**{name: ROOT_CA for name in CA_VARIABLES}, **env}
        return RootFilesystem(path=str(fs.root), uid=fs.user.uid, gid=fs.user.gid, env=tuple(env.items()),
                              network=network, as_root=tuple(self.group.join_argv()) if self.group else (),
                              ca_bundle=bundle)

    # -- the agent's commands -----------------------------------------------------------------------

    def remaining_s(self) -> float:
        return self.timeout_s - (time.monotonic() - self.started)

    def run(self, command: str, *, timeout_s: float | None = None) -> CommandResult:
        """Run ``command`` with bash in a fresh sandbox on the episode's filesystem (cwd: the
        working folder). Its wall clock is what is left of the episode (or ``timeout_s`` if shorter)."""
        if self.closed:
            raise RuntimeError("this image episode is closed; start a new ImageEpisode")
        if not isinstance(command, str):
            raise TypeError(f"command must be a str, got {type(command).__name__}")
        wall = self.remaining_s() if timeout_s is None else min(float(timeout_s), self.remaining_s())
        started = time.monotonic()
        if wall <= 0:
            return CommandResult(command, "[not run: the episode's time is up]", TIMEOUT_EXIT, 0.0, False, True)
        wall = max(wall, 0.5)
        ooms = self.group.oom_kills() if self.group else 0
        result = self.sandbox.run_command(
            [BASH, "-c", MERGED, f"/dev/.assay/{COMMAND_FILE}"], files={COMMAND_FILE: command},
            limits=self._command_limits(wall), cwd=self.workdir_path, uid=self.host_uid,
            root=self._root(self.fs, self.environment()))
        if result.limit is not None:
            wait_until_gone(self.host_uid)
        output, truncated = cap_output(result.stdout + result.stderr, self.limits.output_bytes)
        timed_out = result.status == "timeout"
        note = {"wall": f"timed out after {wall:g} s (the episode's time left)",
                "cpu": "stopped at its CPU limit", "output": "killed: printed more than 1000000 bytes"}.get(
            result.limit or "")
        if result.status == "memory" or (self.group and self.group.oom_kills() > ooms):
            note = f"killed: out of memory (the task's memory_mb={self.limits.memory_mb})"
        if note:
            output += ("" if not output or output.endswith("\n") else "\n") + f"[{note}]"
        code = TIMEOUT_EXIT if timed_out else (128 + 9 if result.returncode is None else
                                               128 - result.returncode if result.returncode < 0 else result.returncode)
        return CommandResult(command=command, output=output, exit_code=code, seconds=round(time.monotonic() - started, 4),
                             truncated=truncated or result.truncated, timed_out=timed_out)

    # -- the verifier ------------------------------------------------------------------------------

    def verify(self, tests_dir: Path | str, *, timeout_s: float, env: Mapping[str, str] | None = None,
               user: str | None = None, separate: bool = False, artifacts: Sequence[str] = (),
               script: str = "test.sh", network: bool | None = None) -> VerifierResult:
        """Run ``tests_dir/<script>`` as ``bash /tests/<script>`` after the episode; see the module
        docstring for the two modes. ``user``: the verifier's user (default: the agent's; in the
        shared mode it must be the agent's). ``network``: the verifier's (default: the episode's).
        Never raises for what the tests do."""
        tests_dir = Path(tests_dir)
        if not (tests_dir / script).is_file():
            raise FileNotFoundError(f"{tests_dir / script} is missing: a Harbor task's tests/ needs {script} "
                                    "(it writes /logs/verifier/reward.txt or reward.json)")
        started = time.monotonic()
        # /tests (a writable copy, as Harbor uploads it) and /logs/verifier live on a tmpfs of their
        # own: what the verifier writes there is capped, never the host's disk
        folder = private_folder("verifier")
        scratch = folder / "data"
        scratch.mkdir()
        mount_tmpfs(scratch, VERIFIER_SCRATCH_MB + (folder_bytes(tests_dir) >> 20))
        fs = self.fs
        cleanup = contextlib.ExitStack()
        try:
            if separate:
                uid = cleanup.enter_context(self.sandbox.hold_uid())
                fs = ImageFilesystem(self.image, uid, user or self.image.config.user or "root", self.limits.storage_mb)
                cleanup.callback(fs.close)
                problem = self._copy_artifacts(fs, artifacts)
                if problem:
                    return VerifierResult({}, None, f"[not verified: {problem}]", time.monotonic() - started,
                                          error=problem)
            elif user and _passwd_entry(fs.root, user).uid != fs.user.uid:
                raise SandboxError(f"the verifier's user {user!r} is not the agent's ({fs.user.name}): in the shared "
                                   "mode both run on one filesystem mapping (set [verifier] environment_mode = "
                                   "'separate' to verify as another user)")
            host_uid = fs.host_uid
            tests = scratch / "tests"
            copy_tree(tests_dir, tests, max_bytes=1 << 30, owner=host_uid)
            logs = scratch / "logs"
            logs.mkdir()
            os.chown(logs, host_uid, host_uid)
            wall = max(1.0, float(timeout_s))
            root = self._root(fs, self.environment(env, fs.user), self.network if network is None else network)
            result = self.sandbox.run_command(
                [BASH, "-c", f'exec {BASH} /tests/{script} 2>&1'], limits=self._command_limits(wall),
                cwd=self.workdir_path, uid=host_uid, root=root,
                mounts=[Mount(str(tests), "/tests", writable=True), Mount(str(logs), "/logs/verifier", writable=True)])
            output, _ = cap_output(result.stdout + result.stderr, VERIFIER_OUTPUT_BYTES)
            rewards, error = read_rewards(logs)
            if result.status == "timeout":
                error = f"the verifier timed out after {wall:g} s"
                output += f"\n[{error}]"
            return VerifierResult(rewards if not result.status == "timeout" else {}, result.returncode, output,
                                  round(time.monotonic() - started, 4), error)
        finally:
            cleanup.close()
            release_folder(folder)

    def _copy_artifacts(self, fs: ImageFilesystem, artifacts: Sequence[str]) -> str | None:
        """Copy each artifact path of the episode's filesystem to the same path of ``fs``."""
        for artifact in artifacts:
            path = str(PurePosixPath("/", artifact))
            source = inside(self.fs.root, path, follow_last=False)
            target = inside(fs.root, path, follow_last=False)
            if not (source.exists() or source.is_symlink()):
                continue  # nothing there after the episode: the fresh image's own stays
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                if source.is_dir() and not source.is_symlink():
                    copy_tree(source, target, max_bytes=self.limits.storage_mb << 20,
                              max_entries=MAX_ARTIFACT_ENTRIES, owner=fs.host_uid)
                    target.chmod(source.stat().st_mode & 0o777)
                elif source.is_symlink():
                    os.symlink(os.readlink(source), target)
                    os.lchown(target, fs.host_uid, fs.host_uid)
                else:  # a regular file only: a FIFO or device the agent left is not an artifact
                    _copy_regular(source, target, self.limits.storage_mb << 20, fs.host_uid)
            except WorkdirTooLarge as exc:
                return f"artifact {path} is too large to copy: {exc}"
        return None

    # -- closing -----------------------------------------------------------------------------------

    def close(self) -> None:
        """Unmount the episode's filesystem, remove its control group, give the uid back (idempotent)."""
        self.closed = True
        self._stack.close()

    def __enter__(self) -> "ImageEpisode":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _copy_regular(source: Path, target: Path, max_bytes: int, owner: int) -> None:
    """Copy ``source`` to ``target`` if it is a regular file (opened without following a link and
    without blocking on a FIFO), at most ``max_bytes``; anything else is skipped."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    with os.fdopen(fd, "rb") as reader:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        if st.st_size > max_bytes:
            raise WorkdirTooLarge(f"{source} holds more than {max_bytes >> 20} MB")
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(out, "wb") as writer:
            copied = 0
            while chunk := reader.read(1 << 20):
                copied += len(chunk)
                if copied > max_bytes:
                    raise WorkdirTooLarge(f"{source} grew past {max_bytes >> 20} MB while copied")
                writer.write(chunk)
    os.chown(target, owner, owner)
    target.chmod(stat.S_IMODE(st.st_mode) & 0o777)


def _head(path: Path, limit: int = REWARD_FILE_BYTES) -> str:
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", "replace")


def read_rewards(logs: Path) -> tuple[dict[str, float], str | None]:
    """The metrics in ``logs/reward.json`` (numbers by name), else ``logs/reward.txt`` (one number,
    named ``reward``); ({}, why) when neither holds them."""
    json_path, txt_path = logs / "reward.json", logs / "reward.txt"
    if json_path.is_file() and not json_path.is_symlink():
        try:
            data = json.loads(_head(json_path))
        except ValueError as exc:
            return {}, f"reward.json is not JSON: {exc}"
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            data = {"reward": data}
        if not isinstance(data, dict):
            return {}, f"reward.json must map metric names to numbers, got {type(data).__name__}"
        rewards = {str(k): float(v) for k, v in data.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}
        if not rewards:
            return {}, "reward.json holds no finite number"
        return rewards, None
    if txt_path.is_file() and not txt_path.is_symlink():
        text = _head(txt_path, 1000).strip()
        try:
            value = float(text)
        except ValueError:
            return {}, f"reward.txt holds {text[:40]!r}, not a number"
        if not math.isfinite(value):
            return {}, f"reward.txt holds {text!r}, not a finite number"
        return {"reward": value}, None
    return {}, "the verifier wrote neither /logs/verifier/reward.txt nor reward.json"


__all__ = ["EpisodeLimits", "ImageEpisode", "ImageFilesystem", "VerifierResult", "read_rewards"]
