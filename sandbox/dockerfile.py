"""A Dockerfile read as a build plan: the supported subset, or a refusal before anything runs.

No image registry is reachable here, but Debian's archive and PyPI are, so the images Harbor tasks
describe are rebuilt offline (:mod:`sandbox.images`): the base from Debian's archive with
mmdebstrap, then each instruction replayed. This module only reads: :func:`plan_dockerfile` parses
the whole file, resolves variables, hashes what ``COPY`` takes from the build context, and returns
a :class:`BuildPlan`, or raises :class:`DockerfileRefused` naming the first instruction (line and
text) outside the subset and why. Nothing is built or run by it.

The subset (:data:`SUPPORTED`):

- ``FROM`` one base of :data:`DEBIAN_TAGS` (``debian:bookworm``, ``debian:trixie``, ``debian:12``,
  ``debian:13``, each also ``-slim``; ``debian``/``debian:latest``/``stable`` mean trixie), of
  :data:`UBUNTU_TAGS` (``ubuntu:20.04|22.04|24.04``, from Ubuntu's archive, which is reachable too),
  a known derived image (:data:`KNOWN_DERIVED`: Terminal-Bench's base images, rebuilt as the release
  plus the packages their documentation says they add, with a note), or
  ``python:3.X-slim`` (also ``-slim-bookworm`` / ``-slim-trixie``), which becomes Debian's own
  ``python3`` (with ``pip`` and ``venv``, pip allowed to install system-wide as in the official
  image, ``python``/``pip`` aliases): bookworm's 3.11 or trixie's 3.13, the nearest release
  unless the tag names one; a version other than the one Debian ships is stated in
  :attr:`BuildPlan.notes`. ``--platform`` other than linux/amd64 and a second ``FROM``
  (a multi-stage build) are refused; ``AS name`` is allowed. A ``@sha256:`` pin cannot be honoured
  (the base is rebuilt from the archive): noted.
- ``RUN`` (shell form, exec form, BuildKit heredocs; ``--mount``/``--security`` refused),
  ``COPY``/``ADD`` of local files (globs, folders, ``--chown``, ``--chmod``; ``ADD`` of a local tar
  archive unpacks it; ``ADD <url>``, ``ADD <git>``, ``COPY --from`` refused), ``WORKDIR``, ``ENV``,
  ``USER``, ``LABEL``, ``ARG`` (defaults only: there are no build arguments), ``SHELL``.
- ignored, with a note (they describe how Docker starts a container, and Harbor starts its own
  command): ``CMD``, ``EXPOSE``, ``VOLUME``, ``STOPSIGNAL``, ``HEALTHCHECK``, ``MAINTAINER``.
- refused: ``ENTRYPOINT`` (a process the container would start before the agent: services do not
  outlive a command here), ``ONBUILD``, and anything unknown.

Variables are expanded as Docker does in ``FROM`` (global ``ARG``s), ``ENV``, ``ARG``, ``LABEL``,
``WORKDIR``, ``USER``, ``COPY``/``ADD`` (``$X``, ``${X}``, ``${X:-word}``, ``${X:+word}``);
``RUN`` gets them as environment variables. A ``.dockerignore`` in the context is honoured.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sandbox.errors import SandboxError

SUPPORTED = ("FROM", "RUN", "COPY", "ADD", "WORKDIR", "ENV", "USER", "LABEL", "ARG", "SHELL")
IGNORED = ("CMD", "EXPOSE", "VOLUME", "STOPSIGNAL", "HEALTHCHECK", "MAINTAINER")
REFUSED = {
    "ENTRYPOINT": "an ENTRYPOINT starts a process before the agent's commands, and no process outlives a command "
                  "here (each command is its own sandbox); start what the task needs in its instructions instead",
    "ONBUILD": "ONBUILD triggers only run in another build that uses this image as its base",
}
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
DEFAULT_SHELL = ("/bin/sh", "-c")
# Debian releases this subset builds, with the python3 each ships.
DEBIAN_PYTHON = {"bookworm": "3.11", "trixie": "3.13"}
DEBIAN_TAGS = {"bookworm": "bookworm", "12": "bookworm", "trixie": "trixie", "13": "trixie",
               "latest": "trixie", "stable": "trixie"}
UBUNTU_TAGS = {"20.04": "focal", "focal": "focal", "22.04": "jammy", "jammy": "jammy", "24.04": "noble",
               "noble": "noble", "latest": "noble", "rolling": "noble"}
# images known to be a Debian/Ubuntu release plus packages: Terminal-Bench's base images (their
# documentation: Ubuntu 24.04 / Python 3.13 "with tmux and asciinema pre-installed")
KNOWN_DERIVED = {
    "ghcr.io/laude-institute/t-bench/ubuntu-24-04": ("ubuntu", "noble", None, ("tmux", "asciinema")),
    "ghcr.io/laude-institute/t-bench/python-3-13": ("debian", "trixie", "3.13", ("tmux", "asciinema")),
}
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_HEREDOC = re.compile(r"<<(-?)[ \t]*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::([-+])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_PYTHON_TAG = re.compile(r"^3\.(\d+)(?:\.\d+)?-slim(?:-(bookworm|trixie))?$")
_DEBIAN_TAG = re.compile(r"^(bookworm|trixie|12|13|latest|stable)(?:\.\d+)?(?:-(\d{8}))?(-slim)?(?:-\d{8})?$")
_UBUNTU_TAG = re.compile(r"^(20\.04|22\.04|24\.04|focal|jammy|noble|latest|rolling)(?:\.\d+)?(?:-\d{8}(?:\.\d+)?)?$")


class DockerfileRefused(SandboxError):
    """The Dockerfile is outside the supported subset (or unreadable); the message names the
    instruction (file, line, text) and the reason. Raised before anything is built or run."""


@dataclass(frozen=True)
class BaseImage:
    """The base a ``FROM`` resolves to: a Debian or Ubuntu release built from its archive (``slim``:
    without documentation, as Docker's -slim and Ubuntu's minimized images), optionally with the
    distribution's python3 stack and a few more packages (what a known derived image adds)."""

    reference: str            # as written in the Dockerfile
    suite: str                # bookworm | trixie | focal | jammy | noble
    slim: bool
    python: str | None = None  # the python:3.X the FROM asked for (Debian's python3 is installed)
    distro: str = "debian"     # debian | ubuntu
    packages: tuple[str, ...] = ()  # installed in the base layer (a known derived image's additions)

    @property
    def key(self) -> str:
        extra = f"+{','.join(self.packages)}" if self.packages else ""
        return (f"{self.distro}:{self.suite}{'-slim' if self.slim else ''}" + ("+python3" if self.python else "")
                + extra)


@dataclass(frozen=True)
class Step:
    """One instruction that changes the filesystem (a layer). ``kind``: run | copy | workdir.

    ``state``: what the instruction runs with (env, user, workdir, shell); ``material``: the
    canonical text its layer's cache key is made of (instruction, state, copied files' digest)."""

    kind: str
    line: int
    text: str
    state: "BuildState"
    command: tuple[str, ...] = ()      # run: argv (exec form) or (shell..., script)
    sources: tuple[str, ...] = ()      # copy: context-relative paths (after globbing)
    dest: str = ""                      # copy: absolute destination; workdir: the folder
    chown: str | None = None
    chmod: int | None = None
    add: bool = False                   # ADD: local tar archives are unpacked
    dest_is_dir: bool = False
    content_digest: str = ""            # copy: digest of the copied files

    @property
    def material(self) -> str:
        return json.dumps({"kind": self.kind, "command": self.command, "sources": self.sources, "dest": self.dest,
                           "chown": self.chown, "chmod": self.chmod, "add": self.add, "dest_is_dir": self.dest_is_dir,
                           "content": self.content_digest, "env": sorted(self.state.env.items()),
                           "user": self.state.user, "workdir": self.state.workdir}, sort_keys=True)

    def describe(self) -> str:
        text = " ".join(self.text.split())
        return f"line {self.line}: {text[:100]}" + ("..." if len(text) > 100 else "")


@dataclass(frozen=True)
class BuildState:
    env: dict[str, str]
    user: str
    workdir: str
    shell: tuple[str, ...]


@dataclass(frozen=True)
class ImageConfig:
    """What a container of the image starts with: env, working folder, user, labels."""

    env: dict[str, str]
    workdir: str
    user: str
    labels: dict[str, str]


@dataclass(frozen=True)
class BuildPlan:
    """A Dockerfile in the supported subset, resolved: base, layer steps, final config.
    ``digest``: sha256 of the Dockerfile and of every file of its context (the image's identity)."""

    dockerfile: Path
    context: Path
    base: BaseImage
    steps: tuple[Step, ...]
    config: ImageConfig
    digest: str
    notes: tuple[str, ...] = ()


@dataclass
class _Line:
    number: int
    keyword: str
    args: str
    text: str
    heredocs: list[tuple[str, str]] = field(default_factory=list)  # (word, body)


def _refuse(path: Path, line: _Line | None, reason: str) -> DockerfileRefused:
    where = f"{path}" + (f", line {line.number}: {' '.join(line.text.split())[:160]}" if line else "")
    return DockerfileRefused(f"{where}: {reason}")


def logical_lines(text: str, path: Path) -> list[_Line]:
    """The instructions of a Dockerfile: continuations joined, comments dropped, heredoc bodies kept."""
    escape = "\\"
    physical = text.splitlines()
    index = 0
    for index, raw in enumerate(physical):  # parser directives: only at the very top
        match = re.match(r"^#\s*([a-zA-Z]+)\s*=\s*(\S+)\s*$", raw)
        if not match:
            break
        if match.group(1).lower() == "escape":
            escape = match.group(2)
            if escape not in ("\\", "`"):
                raise DockerfileRefused(f"{path}, line {index + 1}: escape directive {escape!r} is not \\ or `")
    else:
        index = len(physical)
    lines: list[_Line] = []
    i = index
    while i < len(physical):
        raw = physical[i]
        start = i
        i += 1
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        parts = [raw]
        while parts[-1].rstrip().endswith(escape) and i < len(physical):
            parts[-1] = parts[-1].rstrip()[:-1]
            while i < len(physical) and (not physical[i].strip() or physical[i].lstrip().startswith("#")):
                i += 1  # comment and empty lines inside a continuation are dropped (Docker's rule)
            if i < len(physical):
                parts.append(physical[i])
                i += 1
        joined = " ".join(p.strip() for p in parts if p.strip())
        if joined.endswith(escape):
            joined = joined[:-1].rstrip()
        keyword, _, args = joined.partition(" ")
        line = _Line(start + 1, keyword.upper(), args.strip(), joined)
        if keyword.upper() in ("RUN", "COPY", "ADD"):
            for match in _HEREDOC.finditer(args):
                body: list[str] = []
                word, strip_tabs = match.group(3), match.group(1) == "-"
                while i < len(physical) and (physical[i].lstrip("\t") if strip_tabs else physical[i]) != word:
                    body.append(physical[i].lstrip("\t") if strip_tabs else physical[i])
                    i += 1
                if i >= len(physical):
                    raise _refuse(path, line, f"heredoc <<{word} is never closed by a line holding only {word}")
                i += 1
                line.heredocs.append((word, "\n".join(body) + "\n"))
        lines.append(line)
    return lines


def expand(text: str, env: dict[str, str]) -> str:
    """Docker's variable expansion outside quotes: ``$X``, ``${X}``, ``${X:-word}``, ``${X:+word}``."""
    def one(match: re.Match) -> str:
        name = match.group(1) or match.group(4)
        value = env.get(name)
        if match.group(2) == "-":
            return value if value else expand(match.group(3), env)
        if match.group(2) == "+":
            return expand(match.group(3), env) if value else ""
        return value or ""
    return _VAR.sub(one, text)


def shell_words(text: str, env: dict[str, str] | None = None) -> list[str]:
    """Words as Docker's lexer makes them: whitespace splits, quotes group and are removed, a
    backslash escapes the next character, variables expand except inside single quotes."""
    env = env or {}
    words: list[str] = []
    current: list[str] = []
    has_word = False
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            if has_word:
                words.append("".join(current))
                current, has_word = [], False
            i += 1
            continue
        has_word = True
        if char == "\\" and i + 1 < len(text):
            current.append(text[i + 1])
            i += 2
        elif char == "'":
            end = text.find("'", i + 1)
            if end < 0:
                raise ValueError(f"unterminated single quote in {text!r}")
            current.append(text[i + 1:end])
            i = end + 1
        elif char == '"':
            j, chunk = i + 1, []
            while j < len(text) and text[j] != '"':
                if text[j] == "\\" and j + 1 < len(text) and text[j + 1] in '"\\$':
                    chunk.append(text[j + 1])
                    j += 2
                    continue
                chunk.append(text[j])
                j += 1
            if j >= len(text):
                raise ValueError(f"unterminated double quote in {text!r}")
            current.append(expand("".join(chunk), env))
            i = j + 1
        elif char == "$":
            match = _VAR.match(text, i)
            if match:
                current.append(expand(match.group(0), env))
                i = match.end()
            else:
                current.append(char)
                i += 1
        else:
            current.append(char)
            i += 1
    if has_word:
        words.append("".join(current))
    return words


def _json_array(args: str) -> list[str] | None:
    if not args.startswith("["):
        return None
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


def _flags(args: str, allowed: dict[str, str], path: Path, line: _Line) -> tuple[dict[str, str], str]:
    """Leading ``--name=value`` flags of an instruction (``allowed``: name -> why it is refused, or ''
    when it is supported), and the rest of the arguments."""
    found: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        token, _, rest = rest.partition(" ")
        rest = rest.lstrip()
        name, _, value = token[2:].partition("=")
        if name not in allowed:
            raise _refuse(path, line, f"flag --{name} is not supported (supported: "
                                      f"{', '.join('--' + k for k, v in allowed.items() if not v) or 'none'})")
        if allowed[name]:
            raise _refuse(path, line, allowed[name])
        found[name] = value
    return found, rest


def resolve_base(reference: str) -> tuple[BaseImage | None, str | None, str]:
    """(base, note, why-not) for a FROM reference: the base, or None with the reason it is refused."""
    ref = reference
    note = None
    if "@" in ref:
        ref, _, digest = ref.partition("@")
        note = f"{reference}: the pinned digest {digest[:19]}... cannot be honoured offline; the base is rebuilt " \
               "from its distribution's archive as of the build"
    for prefix in ("docker.io/library/", "index.docker.io/library/", "library/", "docker.io/"):
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
    name, _, tag = ref.partition(":")
    if name in KNOWN_DERIVED:
        distro, suite, python, packages = KNOWN_DERIVED[name]
        said = (f"{reference}: rebuilt as {'Ubuntu' if distro == 'ubuntu' else 'Debian'} {suite}"
                + (f" with its python3 ({DEBIAN_PYTHON.get(suite, '?')})" if python else "")
                + f" plus {', '.join(packages)} (what its documentation says the image adds; nothing else of it "
                  "is known here)")
        joined = "; ".join(n for n in (note, said) if n)
        return BaseImage(reference, suite, slim=True, python=python, distro=distro, packages=packages), joined, ""
    if "/" in name and "." in name.split("/")[0]:
        return None, None, (f"base image {reference!r} comes from a registry ({name.split('/')[0]}), and no image "
                            "registry is reachable here; supported bases are debian:bookworm|trixie[-slim], "
                            "ubuntu:20.04|22.04|24.04 and python:3.X-slim, rebuilt from their archives")
    if name == "debian":
        match = _DEBIAN_TAG.match(tag or "latest")
        if not match:
            return None, None, (f"base image {reference!r}: the Debian tag {tag!r} is not one this build supports "
                                f"(bookworm, trixie, 12, 13, each optionally -slim)")
        suite = DEBIAN_TAGS[match.group(1)]
        if match.group(1) in ("latest", "stable") and note is None:
            note = f"{reference}: a moving tag, read as Debian {suite}"
        return BaseImage(reference, suite, slim=bool(match.group(3))), note, ""
    if name == "ubuntu":
        match = _UBUNTU_TAG.match(tag or "latest")
        if not match:
            return None, None, (f"base image {reference!r}: the Ubuntu tag {tag!r} is not one this build supports "
                                "(20.04, 22.04, 24.04, focal, jammy, noble)")
        suite = UBUNTU_TAGS[match.group(1)]
        if match.group(1) in ("latest", "rolling") and note is None:
            note = f"{reference}: a moving tag, read as Ubuntu {suite}"
        return BaseImage(reference, suite, slim=True, distro="ubuntu"), note, ""
    if name == "python":
        match = _PYTHON_TAG.match(tag)
        if not match:
            return None, None, (f"base image {reference!r}: only python:3.X-slim[-bookworm|-trixie] maps to Debian's "
                                "python3 (the full python images carry a compiler toolchain this build does not "
                                "recreate); use e.g. python:3.11-slim")
        minor = int(match.group(1))
        suite = match.group(2) or ("bookworm" if minor <= 11 else "trixie")
        shipped = DEBIAN_PYTHON[suite]
        wanted = f"3.{minor}"
        diff = None if wanted == shipped else (f"{reference} asks for Python {wanted}; Debian {suite} ships "
                                               f"Python {shipped}, which is what the image has")
        joined = "; ".join(n for n in (note, diff) if n) or None
        return BaseImage(reference, suite, slim=True, python=wanted), joined, ""
    return None, None, (f"base image {reference!r} is not in the supported subset: no image registry is reachable "
                        "here, and only bases whose distribution's archive is reachable are rebuilt (debian:bookworm"
                        "|trixie[-slim], debian:12|13[-slim], ubuntu:20.04|22.04|24.04, python:3.X-slim, "
                        "Terminal-Bench's ubuntu-24-04 and python-3-13)")


# -- the build context --------------------------------------------------------------------------


def dockerignore(context: Path) -> list[tuple[bool, str]]:
    """The patterns of ``context/.dockerignore``: (negated, pattern) in order."""
    path = context / ".dockerignore"
    if not path.is_file():
        return []
    rules = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line[1:] if negated else line).lstrip("/")
        rules.append((negated, pattern))
    return rules


def _ignored(rel: str, rules: list[tuple[bool, str]]) -> bool:
    ignored = False
    for negated, pattern in rules:
        if _match(pattern, rel) or any(_match(pattern, str(parent)) for parent in PurePosixPath(rel).parents
                                       if str(parent) != "."):
            ignored = not negated
    return ignored


def _match(pattern: str, rel: str) -> bool:
    if "**" in pattern:
        regex = re.escape(pattern).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*").replace(r"\*", "[^/]*") \
            .replace(r"\?", "[^/]")
        return re.fullmatch(regex, rel) is not None
    return fnmatch.fnmatchcase(rel, pattern) and rel.count("/") == pattern.count("/")


def context_files(context: Path) -> list[str]:
    """Every file, link and folder of the build context (relative, sorted), .dockerignore applied."""
    rules = dockerignore(context)
    found = []
    for folder, dirs, files in os.walk(context):
        rel_folder = os.path.relpath(folder, context)
        dirs.sort()
        for name in sorted(dirs) + sorted(files):
            rel = os.path.normpath(os.path.join(rel_folder, name))
            if not _ignored(rel, rules):
                found.append(rel)
    return sorted(found)


def digest_paths(root: Path, rels: list[str]) -> str:
    """sha256 over the relative paths, kinds, modes and contents (link targets) of ``rels`` under ``root``."""
    h = hashlib.sha256()
    for rel in sorted(rels):
        full = root / rel
        st = full.lstat()
        h.update(rel.encode() + b"\0" + oct(stat.S_IMODE(st.st_mode)).encode() + b"\0")
        if stat.S_ISLNK(st.st_mode):
            h.update(b"L" + os.readlink(full).encode())
        elif stat.S_ISREG(st.st_mode):
            h.update(b"F")
            with open(full, "rb") as handle:
                while chunk := handle.read(1 << 20):
                    h.update(chunk)
        else:
            h.update(b"D")
        h.update(b"\0")
    return h.hexdigest()


def _sources(context: Path, patterns: list[str], files: list[str], path: Path, line: _Line) -> list[str]:
    """Context-relative sources of a COPY/ADD (globs expanded), each inside the context."""
    chosen: list[str] = []
    listed = set(files)
    for pattern in patterns:
        rel = os.path.normpath(pattern.lstrip("/")) if pattern not in (".", "./") else "."
        if rel == ".." or rel.startswith("../"):
            raise _refuse(path, line, f"source {pattern!r} is outside the build context ({context})")
        if any(ch in rel for ch in "*?["):
            matches = [f for f in files if fnmatch.fnmatchcase(f, rel) and f.count("/") == rel.count("/")]
            if not matches:
                raise _refuse(path, line, f"source pattern {pattern!r} matches no file of the build context "
                                          f"({context})")
            chosen.extend(matches)
        elif rel == ".":
            chosen.append(".")
        elif rel in listed:
            chosen.append(rel)
        elif (context / rel).exists():
            raise _refuse(path, line, f"source {pattern!r} is excluded by {context / '.dockerignore'}")
        else:
            raise _refuse(path, line, f"source {pattern!r} does not exist in the build context ({context})")
    return chosen


def _under(files: list[str], source: str) -> list[str]:
    if source == ".":
        return list(files)
    return [f for f in files if f == source or f.startswith(source + "/")]


# -- planning -------------------------------------------------------------------------------------


def plan_dockerfile(dockerfile: Path | str, context: Path | str | None = None) -> BuildPlan:
    """Parse ``dockerfile`` (its context: ``context``, else its folder) into a :class:`BuildPlan`, or
    raise :class:`DockerfileRefused` naming the instruction outside the subset. Reads only."""
    dockerfile = Path(dockerfile)
    context = Path(context) if context is not None else dockerfile.parent
    try:
        text = dockerfile.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DockerfileRefused(f"{dockerfile}: missing; a Harbor task's environment/ holds its Dockerfile") from None
    except UnicodeDecodeError:
        raise DockerfileRefused(f"{dockerfile}: not UTF-8 text") from None
    lines = logical_lines(text, dockerfile)
    files = context_files(context)
    notes: list[str] = []
    global_args: dict[str, str] = {}
    base: BaseImage | None = None
    env: dict[str, str] = {"PATH": DEFAULT_PATH}
    args: dict[str, str] = {}
    user, workdir, shell = "root", "/", DEFAULT_SHELL
    labels: dict[str, str] = {}
    steps: list[Step] = []

    def state() -> BuildState:
        return BuildState(env={**args, **env}, user=user, workdir=workdir, shell=shell)

    def scope() -> dict[str, str]:
        return {**args, **env}

    for line in lines:
        kw = line.keyword
        if base is None and kw not in ("FROM", "ARG"):
            raise _refuse(dockerfile, line, f"{kw} before FROM: only ARG may come before the base image")
        if kw == "ARG" and base is None:
            for word in shell_words(line.args, global_args):
                name, eq, value = word.partition("=")
                global_args[name] = value if eq else global_args.get(name, "")
            continue
        if kw == "FROM":
            if base is not None:
                raise _refuse(dockerfile, line, "a second FROM starts another stage: multi-stage builds are not "
                                                "supported (build one image: merge the stages into one)")
            flags, rest = _flags(line.args, {"platform": ""}, dockerfile, line)
            platform = expand(flags.get("platform", "linux/amd64"), global_args)
            if platform not in ("linux/amd64", "linux/x86_64", "$BUILDPLATFORM", "$TARGETPLATFORM", ""):
                raise _refuse(dockerfile, line, f"platform {platform!r}: this machine builds linux/amd64 only")
            words = shell_words(rest, global_args)
            if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
                raise _refuse(dockerfile, line, "expected FROM <image>[:tag] [AS name]")
            resolved, note, why = resolve_base(words[0])
            if resolved is None:
                raise _refuse(dockerfile, line, why)
            base = resolved
            if note:
                notes.append(note)
            if base.python:
                env.update({"LANG": "C.UTF-8"})
            continue
        if kw in REFUSED:
            raise _refuse(dockerfile, line, REFUSED[kw])
        if kw in IGNORED:
            notes.append(f"line {line.number}: {kw} ignored (Harbor starts the container with its own command; "
                         "nothing here listens or restarts)")
            continue
        if kw not in SUPPORTED:
            raise _refuse(dockerfile, line, f"unknown instruction {kw!r} (supported: {', '.join(SUPPORTED)}; "
                                            f"ignored: {', '.join(IGNORED)})")
        try:
            if kw == "ARG":
                for word in shell_words(line.args, scope()):
                    name, eq, value = word.partition("=")
                    args[name] = value if eq else global_args.get(name, args.get(name, ""))
            elif kw == "ENV":
                words = shell_words(line.args, scope())
                if words and "=" not in words[0]:  # legacy ENV key value
                    key, _, value = line.args.partition(" ")
                    env[key] = " ".join(shell_words(value, scope()))
                else:
                    pending = {}
                    for word in words:
                        key, eq, value = word.partition("=")
                        if not eq or not key:
                            raise _refuse(dockerfile, line, f"ENV word {word!r} is not KEY=value")
                        pending[key] = value
                    env.update(pending)
            elif kw == "LABEL":
                for word in shell_words(line.args, scope()):
                    key, eq, value = word.partition("=")
                    if not eq:
                        raise _refuse(dockerfile, line, f"LABEL word {word!r} is not key=value")
                    labels[key] = value
            elif kw == "USER":
                words = shell_words(line.args, scope())
                if len(words) != 1:
                    raise _refuse(dockerfile, line, "expected USER <name|uid>[:<group|gid>]")
                user = words[0]
            elif kw == "SHELL":
                value = _json_array(line.args)
                if not value:
                    raise _refuse(dockerfile, line, 'SHELL takes a JSON array, e.g. SHELL ["/bin/bash", "-c"]')
                shell = tuple(value)
            elif kw == "WORKDIR":
                words = shell_words(line.args, scope())
                if len(words) != 1:
                    raise _refuse(dockerfile, line, "expected WORKDIR <path>")
                workdir = str(PurePosixPath(workdir, words[0]))
                workdir = os.path.normpath(workdir)
                steps.append(Step("workdir", line.number, line.text, state(), dest=workdir))
            elif kw == "RUN":
                steps.append(_run_step(line, dockerfile, state()))
            else:  # COPY, ADD
                steps.append(_copy_step(line, dockerfile, context, files, state(), scope()))
        except ValueError as exc:
            raise _refuse(dockerfile, line, str(exc)) from None
    if base is None:
        raise DockerfileRefused(f"{dockerfile}: no FROM instruction; a Dockerfile starts with FROM <base image>")
    digest = hashlib.sha256(text.encode() + b"\0" + digest_paths(context, files).encode()).hexdigest()
    config = ImageConfig(env=dict(env), workdir=workdir, user=user, labels=labels)
    return BuildPlan(dockerfile, context, base, tuple(steps), config, digest, tuple(notes))


def _run_step(line: _Line, path: Path, state: BuildState) -> Step:
    _, rest = _flags(line.args, {"mount": "RUN --mount (cache, secret, ssh or bind mounts) is not supported: write "
                                          "the step without it", "network": "", "security": "RUN --security is not "
                                          "supported"}, path, line)
    exec_form = _json_array(rest)
    if exec_form is not None:
        if not exec_form:
            raise _refuse(path, line, "RUN with an empty exec form")
        return Step("run", line.number, line.text, state, command=tuple(exec_form))
    script = rest
    if line.heredocs:
        if not _HEREDOC.sub("", rest).strip():  # RUN <<EOF: the body is the script
            script = line.heredocs[0][1]
        else:  # RUN cmd <<EOF: the shell reads the heredoc itself
            script = rest + "\n" + "".join(body + word + "\n" for word, body in line.heredocs)
    if not script.strip():
        raise _refuse(path, line, "RUN with no command")
    return Step("run", line.number, line.text, state, command=(*state.shell, script))


def _copy_step(line: _Line, path: Path, context: Path, files: list[str], state: BuildState,
               scope: dict[str, str]) -> Step:
    add = line.keyword == "ADD"
    allowed = {"chown": "", "chmod": "", "link": "",
               "from": "COPY --from copies out of another build stage or image: multi-stage builds are not supported",
               "checksum": "ADD --checksum verifies a download, and ADD <url> is not supported (no internet here)",
               "keep-git-dir": "ADD of a git repository is not supported (no internet here)",
               "exclude": "", "parents": "COPY --parents is not supported"}
    flags, rest = _flags(line.args, allowed, path, line)
    if line.heredocs:
        raise _refuse(path, line, f"{line.keyword} with a heredoc is not supported: put the file in the build context")
    words = _json_array(rest)
    words = [expand(w, scope) for w in words] if words is not None else shell_words(rest, scope)
    if len(words) < 2:
        raise _refuse(path, line, f"expected {line.keyword} <source>... <destination>")
    *patterns, dest = words
    for pattern in patterns:
        if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", pattern) or pattern.startswith("git@"):
            raise _refuse(path, line, f"{line.keyword} {pattern}: downloading at build time is not supported (no "
                                      "internet here but Debian's archive and PyPI); put the file in the build "
                                      "context and COPY it")
    excluded = [expand(p, scope) for p in flags.get("exclude", "").split(",") if p]
    sources = _sources(context, patterns, files, path, line)
    chosen = sorted({f for s in sources for f in _under(files, s)
                     if not any(fnmatch.fnmatchcase(f, e) for e in excluded)})
    chmod = None
    if "chmod" in flags:
        if not re.fullmatch(r"[0-7]{3,4}", flags["chmod"]):
            raise _refuse(path, line, f"--chmod={flags['chmod']}: only octal modes (e.g. 755) are supported")
        chmod = int(flags["chmod"], 8)
    dest_abs = os.path.normpath(str(PurePosixPath(state.workdir, dest)))
    dest_is_dir = dest.endswith("/") or len(sources) > 1 or any(
        s == "." or (context / s).is_dir() and not (context / s).is_symlink() for s in sources)
    return Step("copy", line.number, line.text, state, sources=tuple(sources), dest=dest_abs,
                chown=expand(flags["chown"], scope) if "chown" in flags else None, chmod=chmod, add=add,
                dest_is_dir=dest_is_dir, content_digest=digest_paths(context, chosen) if chosen else "")


__all__ = ["BaseImage", "BuildPlan", "BuildState", "DockerfileRefused", "ImageConfig", "Step", "DEFAULT_PATH",
           "IGNORED", "REFUSED", "SUPPORTED", "context_files", "digest_paths", "expand", "plan_dockerfile",
           "resolve_base", "shell_words"]
