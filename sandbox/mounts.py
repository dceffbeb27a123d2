"""Mounts for image filesystems: overlays of image layers, id-mapped layers, capped tmpfs (root only).

An image (:mod:`sandbox.images`) is a stack of layer folders, each an overlayfs "upper" diff owned
by root as Docker's overlay2 stores them. Two uses:

- building a layer: an overlay of the parent layers (read-only) with the new layer's folder as
  the writable upper, mounted as root (:func:`mount_overlay`);
- an episode: the agent runs as an unprivileged host uid (:mod:`sandbox.uids`) that must see the
  image's root-owned files as its own, as root sees them in a container. Each layer is cloned as an
  *id-mapped* mount (``open_tree`` + ``mount_setattr(MOUNT_ATTR_IDMAP)``, Linux >= 5.12) in which
  the files of the image's user (uid 0 by default) belong to that host uid; the overlay stacks those
  clones under an upper folder on a tmpfs of the task's storage size (the kernel caps what the
  episode writes). Inside bubblewrap's user namespace the uid is mapped back to the image user, so
  the agent is ``root`` and owns what root owns in the image, and nothing else on the host.

Mount points live under a private folder per owning process (``assay-mounts-<pid>-...`` in the
temporary folder); :func:`sweep_stale` unmounts those of processes that died without cleaning up.
Stdlib only (ctypes for the three mount syscalls Python has no wrapper for).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from sandbox.errors import SandboxError

# x86_64 and aarch64 share these numbers (the new mount API is in the generic syscall table)
SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_IDMAP = 0x00100000
MNT_DETACH = 2
MOUNT_PREFIX = "assay-mounts-"
# Every other id of an image (0..65535 but the user's) is mapped to this host range, where no process
# ever runs: the mounter (root) must see every id as valid, or the kernel denies it the override it
# needs to read a file such as /etc/shadow (group shadow) through the overlay.
FOREIGN_BASE = 1_900_000_000
IMAGE_IDS = 65536


class MountError(SandboxError):
    """A mount needed for an image could not be made; the message says which and how to fix it."""


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


_LIBC = None
_USERNS: dict[tuple[int, int, int], int] = {}
_USERNS_MUTEX = threading.Lock()


def _libc():
    global _LIBC
    if _LIBC is None:
        _LIBC = ctypes.CDLL(None, use_errno=True)
    return _LIBC


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise MountError(f"{what} failed: {os.strerror(errno)} (errno {errno}); id-mapped mounts need root and "
                         "Linux >= 5.12 with a filesystem that supports them (ext4, xfs, btrfs, tmpfs >= 6.3)")
    return result


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise MountError(f"{what} needs root: image filesystems are overlay and id-mapped mounts (run as root, "
                         "as `make install` and CI do), or use the host-root task format (task.yaml)")


def userns_fd(uid: int, gid: int, outside: int) -> int:
    """An fd of a user namespace mapping ``uid`` and ``gid`` to host id ``outside`` (one id each),
    cached per process: what an id-mapped mount needs to show files of on-disk owner ``uid`` (group
    ``gid``) as owned by host id ``outside``."""
    key = (uid, gid, outside)
    with _USERNS_MUTEX:
        if key in _USERNS:
            return _USERNS[key]
        unshare = shutil.which("unshare") or "/usr/bin/unshare"
        child = subprocess.Popen([unshare, "--user", "--", "sleep", "30"], stdin=subprocess.DEVNULL,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 5
            own = os.readlink("/proc/self/ns/user")
            while os.readlink(f"/proc/{child.pid}/ns/user") == own:  # until unshare(2) happened
                if child.poll() is not None or time.monotonic() > deadline:
                    raise MountError(f"could not create a user namespace: {child.stderr.read().decode()[:300]}")
                time.sleep(0.002)
            for name, inside in (("uid_map", uid), ("gid_map", gid)):
                with open(f"/proc/{child.pid}/{name}", "w") as handle:
                    handle.write(_id_map(inside, outside))
            fd = os.open(f"/proc/{child.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            child.kill()
            child.wait()
            child.stderr.close()
        _USERNS[key] = fd
        return fd


def _id_map(inside: int, outside: int) -> str:
    """uid_map lines: ``inside`` -> ``outside``, every other id below 65536 -> FOREIGN_BASE + id."""
    lines = []
    if inside > 0:
        lines.append(f"0 {FOREIGN_BASE} {min(inside, IMAGE_IDS)}")
    lines.append(f"{inside} {outside} 1")
    if inside + 1 < IMAGE_IDS:
        lines.append(f"{inside + 1} {FOREIGN_BASE + inside + 1} {IMAGE_IDS - inside - 1}")
    return "\n".join(lines) + "\n"


def mount_idmapped(source: Path, target: Path, uid: int, gid: int, outside: int) -> None:
    """Bind ``source`` at ``target`` so that files owned by on-disk ``uid`` (group ``gid``) appear
    owned by host id ``outside``; every other id below 65536 appears as ``FOREIGN_BASE + id`` (in
    the sandbox's own user namespace, which maps only ``outside``, those show as nobody)."""
    libc = _libc()
    fd = _check(libc.syscall(SYS_OPEN_TREE, AT_FDCWD, os.fsencode(source), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC),
                f"open_tree({source})")
    try:
        attr = _MountAttr(MOUNT_ATTR_IDMAP, 0, 0, userns_fd(uid, gid, outside))
        _check(libc.syscall(SYS_MOUNT_SETATTR, fd, b"", AT_EMPTY_PATH, ctypes.byref(attr), ctypes.sizeof(attr)),
               f"mount_setattr(idmap {uid}:{gid}->{outside}, {source})")
        _check(libc.syscall(SYS_MOVE_MOUNT, fd, b"", AT_FDCWD, os.fsencode(target), MOVE_MOUNT_F_EMPTY_PATH),
               f"move_mount({target})")
    finally:
        os.close(fd)


MS_NOSUID, MS_NODEV = 0x2, 0x4
MOUNT_DATA_MAX = 4000  # mount options are one page (4096 bytes), the terminating NUL included


def _mount(fstype: str, target: Path, data: str, what: str, flags: int = 0) -> None:
    """mount(2) directly: no mount(8) process to start (an episode mounts two filesystems)."""
    if _libc().mount(fstype.encode(), os.fsencode(target), fstype.encode(), flags, data.encode()) != 0:
        errno = ctypes.get_errno()
        raise MountError(f"{what} failed: {os.strerror(errno)} (errno {errno})")


def mount_tmpfs(target: Path, size_mb: int, mode: int = 0o711) -> None:
    _mount("tmpfs", target, f"size={size_mb}m,mode={mode:o}", f"tmpfs of {size_mb} MB at {target}",
           MS_NOSUID | MS_NODEV)


def mount_overlay(target: Path, lowers: list[Path], upper: Path, work: Path) -> None:
    """Overlay ``lowers`` (top first) under ``upper`` at ``target``. The options are capped at one
    page: past it, the paths are given relative to their common folder by mount(8), run there."""
    options = f"lowerdir={':'.join(map(str, lowers))},upperdir={upper},workdir={work}"
    if len(options) <= MOUNT_DATA_MAX:
        _mount("overlay", target, options, f"overlay at {target}")
        return
    common = Path(os.path.commonpath([*map(str, lowers), str(upper), str(work)]))
    rel = lambda p: os.path.relpath(p, common)  # noqa: E731
    options = f"lowerdir={':'.join(rel(p) for p in lowers)},upperdir={rel(upper)},workdir={rel(work)}"
    if len(options) > MOUNT_DATA_MAX:
        raise MountError(f"too many layers to overlay ({len(lowers)}): merge RUN steps in the Dockerfile")
    done = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(target)], capture_output=True,
                          text=True, cwd=common)
    if done.returncode != 0:
        raise MountError(f"overlay at {target} failed: {done.stderr.strip() or done.returncode}")


def unmount(target: Path) -> None:
    """Unmount ``target`` (lazily if busy); a folder that is no mount point is left alone.
    (``os.path.ismount`` cannot tell: a bind mount of a folder of the same filesystem looks like
    a plain folder to it, so every mount of ``/proc/self/mountinfo`` at ``target`` is undone.)"""
    for _ in range(8):
        if str(target) not in mount_points(target):
            return
        if _libc().umount2(os.fsencode(target), 0) != 0:
            _libc().umount2(os.fsencode(target), MNT_DETACH)


def mount_points(under: Path) -> list[str]:
    """Mount points at or below ``under`` (from /proc/self/mountinfo), deepest first."""
    found = []
    with contextlib.suppress(OSError):
        with open("/proc/self/mountinfo", encoding="utf-8") as handle:
            for line in handle:
                point = line.split()[4].encode().decode("unicode_escape")
                if point == str(under) or point.startswith(str(under) + "/"):
                    found.append(point)
    return sorted(found, key=len, reverse=True)


def private_folder(kind: str) -> Path:
    """A fresh folder for mount points, named after this process so a later sweep can find it
    when this process dies without unmounting; 0711 so a sandbox uid can reach a mount inside.
    As root it is itself a small tmpfs: its mount points are made and removed in memory (on this
    machine's disk each rmdir cost ~2 ms, most of an episode's teardown)."""
    root = Path(tempfile.mkdtemp(prefix=f"{MOUNT_PREFIX}{os.getpid()}-{kind}-"))
    root.chmod(0o711)
    if os.geteuid() == 0:
        try:
            _mount("tmpfs", root, "size=1m,mode=711", f"tmpfs at {root}", MS_NOSUID | MS_NODEV)
        except MountError:
            pass  # plain folders then
    return root


def release_folder(root: Path) -> None:
    """Unmount everything under ``root`` (deepest first), then remove its now empty folders.

    Never a recursive delete: a mount left in place (busy) would let it reach into what is mounted
    there (an image layer). Only empty folders are removed; anything else stays for a later sweep."""
    for point in mount_points(root):
        unmount(Path(point))
    if mount_points(root):
        subprocess.run(["umount", "-R", "-l", str(root)], capture_output=True)
    if mount_points(root):
        return
    for folder, dirs, files in os.walk(root, topdown=False):
        if files:
            continue
        with contextlib.suppress(OSError):
            os.rmdir(folder)


def sweep_stale() -> list[Path]:
    """Release the mount folders of processes that are gone (a crash or a kill -9 mid-episode)."""
    released = []
    base = Path(tempfile.gettempdir())
    for entry in base.glob(f"{MOUNT_PREFIX}*"):
        pid = entry.name[len(MOUNT_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            release_folder(entry)
            released.append(entry)
    return released


__all__ = ["MountError", "mount_idmapped", "mount_overlay", "mount_tmpfs", "private_folder", "release_folder",
           "require_root", "sweep_stale", "unmount", "userns_fd"]
