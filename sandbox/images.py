"""Images built offline from a Dockerfile plan, cached as overlay layers (root only).

A :class:`~sandbox.dockerfile.BuildPlan` becomes a stack of layers, each a folder holding what one
step changed (overlayfs' upper: new and changed files, whiteouts for deletions), as Docker's
overlay2 driver stores images:

- the base: ``mmdebstrap --variant=minbase`` of the Debian release from Debian's archive (-slim:
  without documentation, manual pages and locales, as Docker's -slim images); for a
  ``python:3.X-slim`` base one more layer installs Debian's python3, pip and venv;
- one layer per ``RUN`` (run as root under bubblewrap with the network, in an overlay of the layers
  below: ``apt-get`` reaches Debian's archive, ``pip`` PyPI), ``COPY``/``ADD`` (files of the build
  context, owners and modes as Docker sets them) and ``WORKDIR`` (the folder made).

Layers are content-addressed: a layer's key is the sha256 of its parent's key and of its step's
material (instruction, env, user, working folder, the copied files' digest), so Dockerfiles that
share a prefix share its layers, and an edited step rebuilds from there on. An image record
(``images/<plan digest>.json``: layers, config, notes, build time and size) is written once every
layer exists: a Dockerfile is built once per digest. Builds of one layer are serialized across
processes with ``flock`` (a second builder waits, then finds it built); a layer is written under a
temporary name and renamed when complete, so a crash leaves nothing half-built in the cache.

Steps reach the network as this machine does, trusting its certificate authorities: where the machine
reaches PyPI through a proxy with a CA of its own, a step's ``pip`` must trust that CA too, so the
machine's CA bundle (``$ASSAY_BUILD_CA_BUNDLE``, else the system's) is mounted read-only for each step
(on its private ``/dev``, never in a layer) and named by the usual variables (``SSL_CERT_FILE``,
``PIP_CERT``, ``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``, ``GIT_SSL_CAINFO``), unless the Dockerfile sets
them itself. Nothing of it stays in the image.

The store's folder is chosen by the caller (``$ASSAY_IMAGE_CACHE``, else ``$ASSAY_HOME/images``:
:func:`domains.importers.harbor.image_store`); a team shares one by pointing every machine at the
same path. Building runs the Dockerfile's commands as root with the network, as ``docker build``
does: import only tasks whose Dockerfile you would build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Callable

from sandbox.dockerfile import BuildPlan, ImageConfig, Step, context_files
from sandbox.errors import SandboxError
from sandbox.isolation import host_ca_bundle
from sandbox.mounts import mount_overlay, private_folder, release_folder, require_root, unmount

STORE_FORMAT = 1
BASE_RECIPE = "mmdebstrap-minbase-v1"
UBUNTU_ARCHIVE = "http://archive.ubuntu.com/ubuntu"
UBUNTU_SECURITY = "http://security.ubuntu.com/ubuntu"
UBUNTU_COMPONENTS = "main universe"
# The keys of Ubuntu's archive keyring (archive 2012 and 2018, CD image 2012), as published by Ubuntu:
# the keyring fetched from the archive is used only if it holds exactly these, so how it was fetched
# (plain HTTP, the only way here) does not matter
UBUNTU_ARCHIVE_KEYS = frozenset({"790BC7277767219C42C86F933B4FE6ACC0B21F32", "F6ECB3762474EDA9D21B7022871920D1991BC93C",
                                 "843938DF228D22F7B3742BC0D94AA3F0EFE21092"})
UBUNTU_KEYRING_SUITE = "noble"
# Ubuntu's minbase lacks apt (it is not Priority: required there): Docker's ubuntu images have it
UBUNTU_BASE_PACKAGES = ("apt", "ubuntu-keyring")
PYTHON_RECIPE = "debian-python3-v1"
SLIM_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/info/*", "/usr/share/locale/*",
                 "/usr/share/groff/*", "/usr/share/lintian/*", "/usr/share/linda/*")
SLIM_INCLUDES = ("/usr/share/doc/*/copyright", "/usr/share/locale/locale.alias")
PYTHON_STACK = (
    "set -e; apt-get update -qq; "
    "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-pip python3-venv "
    "python-is-python3 ca-certificates >/dev/null; rm -rf /var/lib/apt/lists/*; "
    "rm -f /usr/lib/python3*/EXTERNALLY-MANAGED; "  # the official python images let pip install system-wide
    "for name in python python3 pip pip3; do [ -e /usr/bin/$name ] && ln -sf /usr/bin/$name /usr/local/bin/$name; "
    "done; true")
OUTPUT_TAIL_LINES = 60
CA_INSIDE = "/dev/.assay-ca.crt"  # on bwrap's /dev tmpfs: never in a layer
CA_VARIABLES = ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
                "NODE_EXTRA_CA_CERTS")
Progress = Callable[[dict], None]


class BuildError(SandboxError):
    """A step of an image build failed; the message names the step and holds its output's tail."""


@dataclass(frozen=True)
class Layer:
    key: str
    path: Path          # the layer's folder (its files)
    description: str


@dataclass(frozen=True)
class Image:
    """A built image: its layers (bottom first) and what a container of it starts with."""

    digest: str
    layers: tuple[Layer, ...]
    config: ImageConfig
    record: dict

    @property
    def layer_paths(self) -> list[Path]:
        return [layer.path for layer in self.layers]


def _key(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def folder_bytes(folder: Path) -> int:
    total = 0
    for root, dirs, files in os.walk(folder):
        for name in files + dirs:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, name))
                total += st.st_blocks * 512
    return total


def _tail(text: str, lines: int = OUTPUT_TAIL_LINES) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(kept)


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ImageStore:
    """Layers and image records under ``root``; see the module docstring."""

    def __init__(self, root: Path | str):
        self.root = Path(root).expanduser().resolve()

    @property
    def layers_dir(self) -> Path:
        return self.root / "layers"

    def _record_path(self, plan: BuildPlan) -> Path:
        return self.root / "images" / f"{plan.digest}.json"

    # -- keys ------------------------------------------------------------------------------------

    def layer_keys(self, plan: BuildPlan) -> list[tuple[str, str, Step | None]]:
        """(key, description, step) of every layer of ``plan``, bottom first (step None: synthetic)."""
        base = plan.base
        parts = [f"store-v{STORE_FORMAT}", BASE_RECIPE, base.suite, "slim" if base.slim else "full"]
        if base.distro != "debian":
            parts += [base.distro, ",".join(UBUNTU_BASE_PACKAGES)]
        if base.packages:
            parts.append(",".join(base.packages))
        key = _key(*parts)
        distro = "Ubuntu" if base.distro == "ubuntu" else "Debian"
        out: list[tuple[str, str, Step | None]] = [
            (key, f"base: {distro} {base.suite}{' (slim)' if base.slim else ''}"
                  + (f" + {', '.join(base.packages)}" if base.packages else "")
                  + f" from {distro}'s archive (mmdebstrap)", None)]
        if base.python:
            key = _key(key, PYTHON_RECIPE)
            out.append((key, f"base: Debian's python3 for {base.reference}", None))
        for step in plan.steps:
            key = _key(key, step.material)
            out.append((key, step.describe(), step))
        return out

    def _layer_path(self, key: str) -> Path:
        return self.layers_dir / key[:24]

    # -- reading -----------------------------------------------------------------------------------

    def get(self, plan: BuildPlan) -> Image | None:
        """The built image of ``plan``, or None when it is not (completely) in the store."""
        path = self._record_path(plan)
        if not path.is_file():
            return None
        record = json.loads(path.read_text())
        layers = tuple(Layer(k, self._layer_path(k), d) for k, d in zip(record["layers"], record["descriptions"]))
        if not all((layer.path / "meta.json").is_file() for layer in layers):
            return None
        return Image(plan.digest, tuple(Layer(l.key, l.path / "diff", l.description) for l in layers),
                     ImageConfig(**record["config"]), record)

    # -- building ----------------------------------------------------------------------------------

    def build(self, plan: BuildPlan, *, progress: Progress | None = None, timeout_s: float = 600.0) -> Image:
        """The image of ``plan``, built now where the store lacks it (cached layers are reused).
        ``progress(event)`` hears each layer: {"index", "total", "description", "state": "cached" |
        "building" | "built", "seconds"}. Raises :class:`BuildError` with the failing step's output."""
        found = self.get(plan)
        if found is not None:
            return found
        require_root("building an image")
        for tool in ("mmdebstrap", "bwrap", "mount", "unshare"):
            if shutil.which(tool) is None:
                raise BuildError(f"building an image needs {tool}: `apt-get install mmdebstrap bubblewrap` "
                                 "(`make system-deps` does it as root)")
        emit = progress or (lambda event: None)
        started = time.monotonic()
        deadline = started + timeout_s
        keys = self.layer_keys(plan)
        built: list[Path] = []
        new_bytes = 0
        for index, (key, description, step) in enumerate(keys):
            target = self._layer_path(key)
            event = {"index": index + 1, "total": len(keys), "description": description}
            if (target / "meta.json").is_file():
                emit({**event, "state": "cached", "seconds": 0.0})
                built.append(target)
                continue
            with _locked(self.root / "locks" / f"{key[:24]}.lock"):
                if (target / "meta.json").is_file():
                    emit({**event, "state": "cached", "seconds": 0.0})
                    built.append(target)
                    continue
                emit({**event, "state": "building", "seconds": 0.0})
                t0 = time.monotonic()
                self._build_layer(plan, key, description, step, built, target, deadline)
                seconds = time.monotonic() - t0
                size = folder_bytes(target / "diff")
                new_bytes += size
                meta = {"key": key, "description": description, "seconds": round(seconds, 2), "bytes": size,
                        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                (target / "meta.json").write_text(json.dumps(meta, indent=1))
                emit({**event, "state": "built", "seconds": seconds})
            built.append(target)
        record = {"format": STORE_FORMAT, "digest": plan.digest, "dockerfile": str(plan.dockerfile),
                  "base": plan.base.reference, "layers": [k for k, _, _ in keys],
                  "descriptions": [d for _, d, _ in keys], "config": asdict(plan.config), "notes": list(plan.notes),
                  "seconds": round(time.monotonic() - started, 2), "new_bytes": new_bytes,
                  "bytes": sum(json.loads((p / "meta.json").read_text())["bytes"] for p in built),
                  "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        path = self._record_path(plan)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, indent=1))
        os.replace(tmp, path)
        image = self.get(plan)
        assert image is not None
        return image

    def _build_layer(self, plan: BuildPlan, key: str, description: str, step: Step | None, parents: list[Path],
                     target: Path, deadline: float) -> None:
        partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        (partial / "diff").mkdir()
        try:
            if not parents:
                self._bootstrap(plan, partial / "diff", deadline)
            else:
                self._replay(plan, step, description, [p / "diff" for p in reversed(parents)], partial, deadline)
            shutil.rmtree(partial / "work", ignore_errors=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(partial, target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise

    def _bootstrap(self, plan: BuildPlan, diff: Path, deadline: float) -> None:
        base = plan.base
        # mmdebstrap mounts proc, sys, devpts and a tmpfs inside the root it builds: in a mount namespace of
        # its own they vanish with it, so a build killed midway (a timeout, a restart) leaves no mount in the
        # store for a later `rm -rf` or rmtree to descend into (a partial layer held the host's /proc)
        argv = ["unshare", "--mount", "--propagation", "private", "--kill-child",
                "mmdebstrap", "--variant=minbase", "--quiet", "--mode=root"]
        if base.slim:
            argv += [f"--dpkgopt=path-exclude={p}" for p in SLIM_EXCLUDES]
            argv += [f"--dpkgopt=path-include={p}" for p in SLIM_INCLUDES]
        included = (UBUNTU_BASE_PACKAGES if base.distro == "ubuntu" else ()) + base.packages
        if included:
            argv.append(f"--include={','.join(included)}")
        sources: list[str] = []
        if base.distro == "ubuntu":
            keyring = ubuntu_keyring(self.root / "keyrings")
            argv += [f"--keyring={keyring}", f"--components={UBUNTU_COMPONENTS.replace(' ', ',')}"]
            sources = [f"deb {UBUNTU_ARCHIVE} {base.suite} {UBUNTU_COMPONENTS}",
                       f"deb {UBUNTU_ARCHIVE} {base.suite}-updates {UBUNTU_COMPONENTS}",
                       f"deb {UBUNTU_SECURITY} {base.suite}-security {UBUNTU_COMPONENTS}"]
        argv += [base.suite, str(diff), *sources]
        diff.rmdir()  # mmdebstrap makes it
        distro = "Ubuntu" if base.distro == "ubuntu" else "Debian"
        done = _run_logged(argv, deadline, f"mmdebstrap of {distro} {base.suite}")
        if done is not None:
            raise BuildError(f"the base image ({distro} {base.suite} from {distro}'s archive) could not be built: "
                             f"mmdebstrap failed:\n{done}")
        for name in ("etc/resolv.conf", "etc/hostname"):  # the build host's, copied in by mmdebstrap
            with contextlib.suppress(FileNotFoundError):
                (diff / name).unlink()

    def _replay(self, plan: BuildPlan, step: Step | None, description: str, lowers: list[Path], partial: Path,
                deadline: float) -> None:
        folder = private_folder("build")
        merged = folder / "root"
        merged.mkdir()
        (partial / "work").mkdir()
        try:
            mount_overlay(merged, lowers, partial / "diff", partial / "work")
            if step is None:  # the python3 stack of a python:3.X-slim base
                _run_step(merged, ("/bin/sh", "-c", PYTHON_STACK), env={"PATH": "/usr/local/sbin:/usr/local/bin:"
                          "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}, user="root", workdir="/",
                          deadline=deadline, what=description)
            elif step.kind == "run":
                _run_step(merged, step.command, env=step.state.env, user=step.state.user, workdir=step.state.workdir,
                          deadline=deadline, what=description)
            elif step.kind == "copy":
                _copy_step(merged, plan.context, step)
            elif step.kind == "workdir":
                _make_folder(merged, step.dest, _resolve_user(merged, step.state.user))
            else:  # pragma: no cover - the planner makes no other kind
                raise BuildError(f"unknown step kind {step.kind!r}")
        finally:
            unmount(merged)
            release_folder(folder)


def inside(root: Path, path: str, *, follow_last: bool = True) -> Path:
    """The host path of image path ``path`` under ``root``, symlinks resolved as a chroot would: an
    absolute link target starts again at ``root`` and ``..`` never leaves it, so a link in the image
    (``/app -> /etc``) can never lead the builder, which runs as root, to a host file."""
    parts = [p for p in PurePosixPath("/", path).parts[1:]]
    resolved: list[str] = []
    hops = 0
    while parts:
        name = parts.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if resolved:
                resolved.pop()
            continue
        candidate = root.joinpath(*resolved, name)
        if candidate.is_symlink() and (parts or follow_last):
            hops += 1
            if hops > 40:
                raise BuildError(f"too many symbolic links while resolving {path} in the image")
            target = os.readlink(candidate)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in PurePosixPath(target).parts if p != "/"] + parts
            continue
        resolved.append(name)
    return root.joinpath(*resolved)


def openpgp_fingerprints(data: bytes) -> set[str]:
    """The v4 fingerprints of the public keys (and subkeys) in a binary OpenPGP keyring."""
    found, i = set(), 0
    while i < len(data):
        header = data[i]
        if not header & 0x80:
            raise BuildError("not a binary OpenPGP keyring")
        if header & 0x40:  # new format
            tag, i = header & 0x3F, i + 1
            first = data[i]
            if first < 192:
                length, i = first, i + 1
            elif first < 224:
                length, i = ((first - 192) << 8) + data[i + 1] + 192, i + 2
            else:
                length, i = int.from_bytes(data[i + 1:i + 5], "big"), i + 5
        else:
            tag, kind, i = (header >> 2) & 0x0F, header & 0x03, i + 1
            size = {0: 1, 1: 2, 2: 4}.get(kind)
            if size is None:
                raise BuildError("OpenPGP packet of indeterminate length")
            length, i = int.from_bytes(data[i:i + size], "big"), i + size
        body = data[i:i + length]
        i += length
        if tag in (6, 14) and body[:1] == b"\x04":
            found.add(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())
    return found


def ubuntu_keyring(folder: Path) -> Path:
    """Ubuntu's archive keyring for mmdebstrap: fetched once from the archive (the ubuntu-keyring
    package) and used only when its keys are exactly :data:`UBUNTU_ARCHIVE_KEYS`."""
    import gzip
    import io
    import urllib.request

    target = folder / "ubuntu-archive-keyring.gpg"
    if target.is_file():
        return target
    if shutil.which("dpkg-deb") is None:
        raise BuildError("fetching Ubuntu's archive keyring needs dpkg-deb (`apt-get install dpkg`)")
    folder.mkdir(parents=True, exist_ok=True)
    index_url = f"{UBUNTU_ARCHIVE}/dists/{UBUNTU_KEYRING_SUITE}/main/binary-amd64/Packages.gz"
    try:
        with urllib.request.urlopen(index_url, timeout=60) as answer:
            index = gzip.GzipFile(fileobj=io.BytesIO(answer.read())).read().decode("utf-8", "replace")
        stanza = next(block for block in index.split("\n\n") if block.startswith("Package: ubuntu-keyring\n"))
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line)
        with urllib.request.urlopen(f"{UBUNTU_ARCHIVE}/{fields['Filename']}", timeout=60) as answer:
            package = answer.read()
    except (OSError, StopIteration, KeyError) as exc:
        raise BuildError(f"could not fetch Ubuntu's archive keyring from {UBUNTU_ARCHIVE}: {exc}") from None
    if hashlib.sha256(package).hexdigest() != fields.get("SHA256"):
        raise BuildError("the ubuntu-keyring package fetched does not match its index's SHA256")
    scratch = Path(tempfile.mkdtemp(prefix="assay-keyring-"))
    try:
        (scratch / "keyring.deb").write_bytes(package)
        subprocess.run(["dpkg-deb", "-x", str(scratch / "keyring.deb"), str(scratch / "x")], check=True,
                       capture_output=True)
        keyring = (scratch / "x" / "usr" / "share" / "keyrings" / "ubuntu-archive-keyring.gpg").read_bytes()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BuildError(f"could not unpack Ubuntu's keyring package: {exc}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    found = openpgp_fingerprints(keyring)
    if found != UBUNTU_ARCHIVE_KEYS:
        raise BuildError(f"Ubuntu's keyring fetched from the archive holds keys {sorted(found)}, not the published "
                         f"{sorted(UBUNTU_ARCHIVE_KEYS)}: refusing to trust it")
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(keyring)
    os.replace(tmp, target)
    return target


def _run_logged(argv: list[str], deadline: float, what: str, **popen) -> str | None:
    """Run ``argv``; None when it exits 0, else the tail of its merged output (and why)."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return f"[not started: the build ran past its time limit before {what}]"
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=remaining, **popen)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode(errors="replace")
        return _tail(out) + f"\n[{what} stopped: the build's time limit (environment.build_timeout_sec) ran out]"
    if done.returncode == 0:
        return None
    return _tail(done.stdout.decode(errors="replace")) + f"\n[{what} exited {done.returncode}]"


def _passwd(merged: Path, name: str, table: str) -> tuple[int, int, str] | None:
    path = inside(merged, f"/etc/{table}")
    with contextlib.suppress(OSError):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            fields = line.split(":")
            if len(fields) >= 4 and fields[0] == name:
                if table == "passwd" and len(fields) >= 6:
                    return int(fields[2]), int(fields[3]), fields[5]
                return int(fields[2]), int(fields[2]), ""
    return None


def _resolve_user(merged: Path, spec: str) -> tuple[int, int, str]:
    """(uid, gid, home) of a USER/--chown spec ``user[:group]`` in the image being built."""
    user, _, group = spec.partition(":")
    if user.isdigit():
        uid, gid, home = int(user), int(user), "/"
        found = next((line.split(":") for line in _lines(inside(merged, "/etc/passwd"))
                      if line.split(":")[2:3] == [user]),
                     None)
        if found and len(found) >= 6:
            gid, home = int(found[3]), found[5]
    else:
        entry = _passwd(merged, user, "passwd")
        if entry is None:
            raise BuildError(f"user {user!r} does not exist in the image (its /etc/passwd): create it in a RUN step "
                             "(useradd) before USER/--chown names it")
        uid, gid, home = entry
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            entry = _passwd(merged, group, "group")
            if entry is None:
                raise BuildError(f"group {group!r} does not exist in the image (its /etc/group)")
            gid = entry[0]
    return uid, gid, home or "/"


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def _run_step(merged: Path, command: tuple[str, ...], *, env: dict[str, str], user: str, workdir: str,
              deadline: float, what: str) -> None:
    """Run one RUN command as root (or USER) in the overlay at ``merged``, with the network."""
    uid, gid, home = _resolve_user(merged, user)
    resolv = inside(merged, "/etc/resolv.conf", follow_last=False)
    made_resolv = not resolv.exists() and not resolv.is_symlink()
    if made_resolv:
        resolv.parent.mkdir(parents=True, exist_ok=True)
        resolv.touch()
    inside(merged, workdir).mkdir(parents=True, exist_ok=True)
    full_env = {"PATH": env.get("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
                "HOME": home, "HOSTNAME": "assay-build", **env}
    argv = ["bwrap", "--bind", str(merged), "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", "/sys", "/sys",
            "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent", "--new-session",
            "--hostname", "assay-build", "--chdir", workdir, "--clearenv"]
    if os.path.exists("/etc/resolv.conf"):
        argv += ["--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
    bundle = host_ca_bundle()
    if bundle is not None:
        argv += ["--ro-bind", bundle, CA_INSIDE]
        full_env = {**{name: CA_INSIDE for name in CA_VARIABLES}, **full_env}
    for name, value in full_env.items():
        argv += ["--setenv", name, value]
    argv.append("--")
    if uid != 0:
        argv += ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]
    argv += list(command)
    try:
        failed = _run_logged(argv, deadline, what)
    finally:
        if made_resolv:
            with contextlib.suppress(OSError):
                resolv.unlink()
    if failed is not None:
        raise BuildError(f"{what} failed:\n{failed}")


def _make_folder(merged: Path, path: str, owner: tuple[int, int, str]) -> None:
    target = inside(merged, path)
    missing = [p for p in [target, *target.parents] if str(p).startswith(str(merged) + "/") and not p.exists()]
    target.mkdir(parents=True, exist_ok=True)
    for folder in missing:
        os.chown(folder, owner[0], owner[1])


def _copy_step(merged: Path, context: Path, step: Step) -> None:
    """COPY/ADD ``step.sources`` (context-relative) to ``step.dest`` in the overlay at ``merged``."""
    uid, gid = (0, 0)
    if step.chown:
        uid, gid, _ = _resolve_user(merged, step.chown)
    allowed = set(context_files(context))
    dest = inside(merged, step.dest)
    for source in step.sources:
        src = context / source if source != "." else context
        if src.is_dir() and not src.is_symlink():
            _ensure_dir(merged, dest, uid, gid, step.chmod)
            prefix = "" if source == "." else source + "/"
            for rel in sorted(f for f in allowed if f.startswith(prefix) or source == "."):
                inner = rel[len(prefix):]
                target = inside(merged, str(PurePosixPath(step.dest, inner)), follow_last=False)
                _place(context / rel, target, uid, gid, step.chmod, merged)
        else:
            target = (inside(merged, str(PurePosixPath(step.dest, src.name)), follow_last=False) if step.dest_is_dir
                      else inside(merged, step.dest, follow_last=False))
            if step.add and src.name.endswith(TAR_ARCHIVES):
                _ensure_dir(merged, dest, uid, gid, None)
                _unpack(src, dest, merged)
                continue
            _ensure_dir(merged, target.parent, 0, 0, None)
            _place(src, target, uid, gid, step.chmod, merged)


TAR_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")


def _ensure_dir(merged: Path, folder: Path, uid: int, gid: int, chmod: int | None) -> None:
    if not str(folder).startswith(str(merged)):
        raise BuildError(f"destination {folder} is outside the image")
    missing = [p for p in [folder, *folder.parents] if str(p).startswith(str(merged) + "/") and not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    for path in reversed(missing):
        os.chown(path, uid, gid)
        os.chmod(path, chmod if chmod is not None else 0o755)


def _place(src: Path, dst: Path, uid: int, gid: int, chmod: int | None, merged: Path) -> None:
    st = src.lstat()
    if stat.S_ISDIR(st.st_mode):
        if not dst.is_dir():
            if dst.exists() or dst.is_symlink():
                dst.unlink()
            dst.mkdir(parents=True)
        os.chown(dst, uid, gid)
        os.chmod(dst, chmod if chmod is not None else stat.S_IMODE(st.st_mode))
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    if dst.is_dir() and not dst.is_symlink():
        shutil.rmtree(dst)
    elif dst.exists() or dst.is_symlink():
        dst.unlink()
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(src), dst)
        os.lchown(dst, uid, gid)
        return
    shutil.copyfile(src, dst, follow_symlinks=False)
    os.chown(dst, uid, gid)
    os.chmod(dst, chmod if chmod is not None else stat.S_IMODE(st.st_mode))
    os.utime(dst, (st.st_atime, st.st_mtime))


def _unpack(archive: Path, dest: Path, merged: Path) -> None:
    """ADD of a local tar archive: its members into ``dest``, none outside it."""
    with tarfile.open(archive) as tar:
        for member in tar.getmembers():
            name = PurePosixPath(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise BuildError(f"ADD {archive.name}: member {member.name!r} would land outside {dest}")
            if member.islnk() or member.issym():
                link = PurePosixPath(member.linkname)
                if member.islnk() and (link.is_absolute() or ".." in link.parts):
                    raise BuildError(f"ADD {archive.name}: hard link {member.name!r} points outside the archive")
        tar.extractall(dest, filter="data")  # no member may write through a link out of dest


__all__ = ["BuildError", "Image", "ImageStore", "Layer", "folder_bytes"]
