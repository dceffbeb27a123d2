"""Harbor task folders as Assay terminal tasks, run offline on the image their Dockerfile describes.

A Harbor task (Terminal-Bench 2.x, SWE-style adapters; read by TRL, verifiers, NeMo Gym, SkyRL)::

    my-task/
      task.toml          schema 1.0-1.4 (:mod:`domains.importers.harbor_config`)
      instruction.md     exactly what the agent sees
      environment/       Dockerfile (or docker-compose.yaml with one service, main) + what it COPYs
      tests/test.sh      run after the agent with tests/ at /tests; writes /logs/verifier/reward.txt
                         (a number) or reward.json (named metrics)
      solution/solve.sh  the oracle (optional in Harbor; without it the task is loaded but reported
                         unchecked by `assay tasks check` and the self-test)

A folder of such folders is a suite: on ``ASSAY_DOMAINS_PATH``, or imported with ``assay tasks
import harbor PATH... [--suite NAME]`` (copied under ``$ASSAY_HOME/tasks/<suite>`` with a digest
of every task folder: a task edited afterwards is refused until it is imported again), it registers
as a terminal domain exactly like a suite of Assay's older format (:mod:`domains.task_folder`):
same rows, episodes, multi-turn GRPO, sweeps, self-test and report card.

How a task runs (:class:`HarborTask`):

- its image: the Dockerfile's supported subset (:mod:`sandbox.dockerfile`) built offline once per
  digest into the image store (:func:`image_store`; progress on stderr), base from Debian's archive;
  anything outside the subset is refused when the task is loaded, before anything runs;
- an episode (:class:`sandbox.image_episode.ImageEpisode`): the agent's commands in that filesystem
  under bubblewrap, as the agent user, with the task's cpus, memory_mb and storage_mb, the agent
  timeout (times the suite's timeout multiplier) for the whole episode, and no network unless the
  task asks for the internet (``network_mode = "public"`` / ``allow_internet = true``), and then only
  what this machine reaches;
- the verifier: ``tests/`` at ``/tests`` only now, ``bash /tests/test.sh`` with the verifier timeout,
  in the episode's final filesystem, or (``[verifier] environment_mode = "separate"``) in a fresh one
  holding only the task's ``artifacts``; the reward is ``reward.json``'s or ``reward.txt``'s, every
  named metric kept, the domain's scalar the suite's declared ``reward_key`` (default ``reward``),
  which must lie in [0, 1];
- the oracle: ``solution/`` appears at ``/solution`` and ``bash /solution/solve.sh`` runs as the agent
  would (with ``[solution] env``); the nop agent runs nothing.

Refused by name when loading (a :class:`TaskFormatError`): multi-step tasks (``[[steps]]``), Windows
tasks, GPUs/TPUs, MCP servers, healthchecks, continuous or collecting verifiers, a verifier
environment of its own, a compose file with several services, ``allowlist`` networking (no per-host
filter here), agent and verifier users that differ in the shared verifier mode, and every Dockerfile
outside the subset.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from domains.base import DomainError
from domains.importers.harbor_config import HarborConfigError, HarborTaskConfig, parse_task_toml

TASK_FILE = "task.toml"
INSTRUCTION_FILE = "instruction.md"
MANIFEST = "assay-import.json"
IMAGE_CACHE_ENV = "ASSAY_IMAGE_CACHE"
DEFAULT_AGENT_TIMEOUT_S = 600.0
DEFAULT_MAX_TURNS = 20
DEFAULT_CPUS, DEFAULT_MEMORY_MB, DEFAULT_STORAGE_MB = 1.0, 2048, 10240
_ENV_TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class HarborTaskError(DomainError):
    """A Harbor task Assay cannot run; the message names the task, what is refused and why."""


def image_store():
    """The image store: ``$ASSAY_IMAGE_CACHE``, else ``$ASSAY_HOME/images`` (a team on the shared
    ``ASSAY_HOME`` of its profile shares it; a path of its own shares it across homes)."""
    from sandbox.images import ImageStore
    from storage.home import resolve_home

    configured = os.environ.get(IMAGE_CACHE_ENV, "").strip()
    return ImageStore(Path(configured).expanduser() if configured else resolve_home() / "images")


def folder_digest(folder: Path) -> str:
    """sha256 of a task folder: every file's relative path, mode and content (links as links)."""
    from sandbox.dockerfile import digest_paths

    rels = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        rel_root = os.path.relpath(root, folder)
        for name in sorted(dirs) + sorted(files):
            rels.append(os.path.normpath(os.path.join(rel_root, name)))
    return digest_paths(folder, rels)


def is_harbor_task(folder: Path) -> bool:
    return (folder / TASK_FILE).is_file()


@dataclass(frozen=True)
class SuiteSettings:
    """What a suite declares for all its tasks (the import manifest, :data:`MANIFEST`): the reward
    metric the domain scores by, the timeout multiplier, and each imported task's digest."""

    reward_key: str = "reward"
    timeout_multiplier: float = 1.0
    digests: dict[str, str] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    imported: bool = False

    @classmethod
    def read(cls, suite: Path) -> "SuiteSettings":
        path = suite / MANIFEST
        if not path.is_file():
            return cls()
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise HarborTaskError(f"{path}: not JSON ({exc}); import the tasks again") from None
        return cls(reward_key=str(data.get("reward_key", "reward")),
                   timeout_multiplier=float(data.get("timeout_multiplier", 1.0)),
                   digests=dict(data.get("digests", {})), sources=dict(data.get("sources", {})), imported=True)


@dataclass
class TaskVerdict:
    """A Harbor task's verdict: ``score`` the domain's scalar (``rewards[reward_key]``), ``passed``
    when it is 1.0, every metric in ``rewards``; ``error`` why there is no reward, else None."""

    passed: bool
    score: float
    rewards: dict[str, float]
    output: str
    exit_code: int | None
    seconds: float
    error: str | None = None

    def to_dict(self) -> dict:
        return {"passed": self.passed, "score": self.score, "rewards": self.rewards, "output": self.output,
                "exit_code": self.exit_code, "seconds": self.seconds, "error": self.error}


def _resolve_env(env: dict[str, str], where: str) -> dict[str, str]:
    """Harbor's ``${VAR}`` / ``${VAR:-default}`` templates, resolved from this machine's environment."""
    out = {}
    for key, value in env.items():
        def one(match: re.Match) -> str:
            name, default = match.group(1), match.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise HarborTaskError(f"{where}: {key} = {value!r} needs ${name} from this machine's environment, "
                                  f"which is unset: export {name} (or give a default, ${{{name}:-value}})")
        out[key] = _ENV_TEMPLATE.sub(one, str(value))
    return out


def _network(mode: str | None, hosts, where: str) -> bool:
    if mode == "allowlist" or hosts:
        raise HarborTaskError(f"{where}: network_mode 'allowlist' cannot be honoured here (no per-host filter): "
                              "use 'no-network', or 'public' (then only what this machine reaches)")
    return mode == "public"


@dataclass(eq=False)
class HarborTask:
    """One loaded Harbor task folder: what the suite domain and the episode loops need (``name``,
    ``spec``, ``solution_text``) and how to run it (``open_terminal``, ``judge``, ``run_script``).
    A dataclass, so ``dataclasses.replace(task, spec=...)`` (the trainer caps ``max_turns``) keeps
    everything else, the built image included. Made by :func:`load_harbor_task`."""

    folder: Path
    config: HarborTaskConfig
    plan: Any
    settings: SuiteSettings
    notes: list[str]
    spec: Any
    limits_spec: dict
    agent_network: bool
    verifier_network: bool
    env: dict[str, str]
    verifier_env: dict[str, str]
    solution_env: dict[str, str]
    built: dict = field(default_factory=dict, repr=False)  # {"image": Image}: shared by replace()d copies
    lock: Any = field(default_factory=threading.Lock, repr=False)
    kind = "harbor"

    @classmethod
    def create(cls, folder: Path, config: HarborTaskConfig, instruction: str, plan, settings: SuiteSettings,
               notes: list[str]) -> "HarborTask":
        from domains.task_folder import TaskSpec

        meta = config.metadata
        tags = [str(t) for t in (meta.get("tags") or (config.task.keywords if config.task else []) or [])]
        if meta.get("category") and str(meta["category"]) not in tags:
            tags.append(str(meta["category"]))
        agent_timeout = config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S
        try:
            spec = TaskSpec(instruction=instruction, max_turns=int(meta.get("max_turns", DEFAULT_MAX_TURNS)),
                            timeout_s=agent_timeout * settings.timeout_multiplier, tags=tags,
                            difficulty=str(meta["difficulty"]) if meta.get("difficulty") else None)
        except Exception as exc:  # noqa: BLE001 - reported with the file
            raise HarborTaskError(f"{folder / INSTRUCTION_FILE}: {exc}") from None
        env = config.environment
        where = f"{folder}/{TASK_FILE}"
        return cls(
            folder=folder, config=config, plan=plan, settings=settings, notes=notes, spec=spec,
            limits_spec=dict(cpus=env.cpus or DEFAULT_CPUS, memory_mb=env.memory_mb or DEFAULT_MEMORY_MB,
                             storage_mb=env.storage_mb or DEFAULT_STORAGE_MB),
            agent_network=_network(config.agent.network_mode or env.network_mode,
                                   config.agent.allowed_hosts or env.allowed_hosts, where),
            verifier_network=_network(config.verifier.network_mode or env.network_mode,
                                      config.verifier.allowed_hosts or env.allowed_hosts, where),
            env=_resolve_env(env.env, f"{where} [environment.env]"),
            verifier_env=_resolve_env(config.verifier.env, f"{where} [verifier.env]"),
            solution_env=_resolve_env(config.solution.env, f"{where} [solution.env]"))

    @property
    def name(self) -> str:
        return self.folder.name

    # -- what the suite domain reads -----------------------------------------------------------------

    @property
    def solution(self) -> Path:
        return self.folder / "solution" / "solve.sh"

    @property
    def tests_dir(self) -> Path:
        return self.folder / "tests"

    @property
    def solution_text(self) -> str:
        """solve.sh, or '' when the task has no oracle (Harbor allows it)."""
        return self.solution.read_text(encoding="utf-8") if self.solution.is_file() else ""

    @property
    def has_oracle(self) -> bool:
        return self.solution.is_file()

    @property
    def timeout_multiplier(self) -> float:
        return self.settings.timeout_multiplier

    def with_timeout_multiplier(self, multiplier: float) -> "HarborTask":
        """This task with its agent and verifier timeouts scaled by ``multiplier`` instead."""
        import dataclasses

        base = self.config.agent.timeout_sec or DEFAULT_AGENT_TIMEOUT_S
        settings = dataclasses.replace(self.settings, timeout_multiplier=multiplier)
        return dataclasses.replace(self, settings=settings,
                                   spec=self.spec.model_copy(update={"timeout_s": base * multiplier}))

    # -- the image ---------------------------------------------------------------------------------

    def image(self, progress: bool = True):
        """The built image (built now, with progress on stderr, when the store lacks it)."""
        with self.lock:
            if "image" not in self.built:
                store = image_store()
                found = store.get(self.plan)
                if found is None:
                    found = build_image(self.plan, store, label=self.name, progress=progress,
                                        timeout_s=self.config.environment.build_timeout_sec)
                self.built["image"] = found
            return self.built["image"]

    # -- running -------------------------------------------------------------------------------------

    def _limits(self):
        from sandbox.image_episode import EpisodeLimits

        return EpisodeLimits(**self.limits_spec)

    def open_terminal(self, timeout_s: float | None = None):
        """A fresh episode of the task (an :class:`~sandbox.image_episode.ImageEpisode`)."""
        from sandbox.image_episode import ImageEpisode

        user = self.config.agent.user
        return ImageEpisode(self.image(), limits=self._limits(), timeout_s=timeout_s or self.spec.timeout_s,
                            user=str(user) if user is not None else None, workdir=self.config.environment.workdir,
                            env=self.env, network=self.agent_network)

    def judge(self, terminal) -> TaskVerdict:
        """The verifier's verdict on the episode ``terminal`` (after its last command)."""
        user = self.config.verifier.user
        result = terminal.verify(self.tests_dir, timeout_s=self.config.verifier.timeout_sec * self.timeout_multiplier,
                                 env=self.verifier_env, user=str(user) if user is not None else None,
                                 separate=self.config.verifier.separate, artifacts=self.config.artifact_sources,
                                 network=self.verifier_network)
        return self.verdict_of(result)

    def verdict_of(self, result) -> TaskVerdict:
        key = self.settings.reward_key
        error = result.error
        score = 0.0
        if result.rewards:
            if key not in result.rewards:
                error = f"the verifier wrote {sorted(result.rewards)} but not {key!r}, the metric this suite scores by"
            else:
                score = result.rewards[key]
                if not 0.0 <= score <= 1.0:
                    raise HarborTaskError(f"task {self.name}: reward {key} = {score:g} is outside [0, 1]; the domain's "
                                          "scalar must be a fraction (declare another metric with "
                                          "`assay tasks import harbor --reward-key NAME`)")
        output = result.output + (f"\n[{error}]" if error and error not in result.output else "")
        return TaskVerdict(passed=score == 1.0, score=score, rewards=dict(result.rewards), output=output,
                           exit_code=result.exit_code, seconds=result.seconds, error=error)

    def run_script(self, script: str, *, oracle: bool = False):
        """``script`` as one command of a fresh episode (``oracle``: with ``solution/`` at /solution and
        the solution's env, as Harbor's oracle agent), then the verifier: ``(CommandResult, TaskVerdict)``."""
        with self.open_terminal() as episode:
            if oracle:
                command = self._with_solution(episode, script)
            else:
                command = episode.run(script)
            verdict = self.judge(episode)
        return command, verdict

    def _with_solution(self, episode, script: str):
        from sandbox.image_episode import ImageEpisode  # noqa: F401 (the episode's type)
        from sandbox.terminal import copy_tree

        target = episode.root / "solution"
        if target.exists() or target.is_symlink():
            return episode.run(script)  # the image has its own /solution: leave it
        copy_tree(self.folder / "solution", target, max_bytes=1 << 30, owner=episode.host_uid)
        target.chmod(0o755)
        episode.extra_env.update(self.solution_env)
        try:
            return episode.run(f"bash /solution/solve.sh" if script == self.solution_text else script)
        finally:
            for key in self.solution_env:
                episode.extra_env.pop(key, None)
            shutil.rmtree(target, ignore_errors=True)

    def describe(self) -> dict[str, Any]:
        env = self.config.environment
        return {"task": self.name, "name": self.config.task.name if self.config.task else None,
                "base": self.plan.base.reference, "image_digest": self.plan.digest, "steps": len(self.plan.steps),
                "cpus": self.limits_spec["cpus"], "memory_mb": self.limits_spec["memory_mb"],
                "storage_mb": self.limits_spec["storage_mb"], "agent_timeout_s": self.spec.timeout_s,
                "verifier_timeout_s": self.config.verifier.timeout_sec * self.timeout_multiplier,
                "network": self.agent_network, "verifier": "separate" if self.config.verifier.separate else "shared",
                "build_timeout_s": env.build_timeout_sec, "notes": list(self.notes)}


def build_image(plan, store, *, label: str, progress: bool = True, timeout_s: float = 600.0):
    """Build ``plan`` into ``store`` with a progress bar on stderr (one tick per layer)."""
    from sandbox.images import BuildError

    bar = None
    if progress:
        from tqdm import tqdm

        layers = len(store.layer_keys(plan))
        bar = tqdm(total=layers, desc=f"image for {label}", unit="layer", file=sys.stderr, dynamic_ncols=True,
                   leave=True)

    def report(event: dict) -> None:
        if bar is None:
            return
        if event["state"] == "building":
            bar.set_postfix_str(event["description"][:60])
        else:
            bar.update(1)

    started = time.monotonic()
    try:
        image = store.build(plan, progress=report, timeout_s=timeout_s)
    except BuildError as exc:
        raise HarborTaskError(f"task {label}: building its image failed: {exc}") from None
    finally:
        if bar is not None:
            bar.close()
    if progress:
        print(f"image for {label}: {len(image.layers)} layers, {image.record['bytes'] / 2**20:.0f} MB, "
              f"{time.monotonic() - started:.1f} s", file=sys.stderr)
    return image


# -- loading -------------------------------------------------------------------------------------------


def _environment_dockerfile(folder: Path, config: HarborTaskConfig) -> tuple[Path, Path | None]:
    """(environment folder, its Dockerfile or None when a docker_image is given), after checking a
    compose file names only the service ``main``."""
    env_dir = folder / "environment"
    compose = next((env_dir / n for n in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml")
                    if (env_dir / n).is_file()), None)
    if compose is not None:
        import yaml

        try:
            data = yaml.safe_load(compose.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise HarborTaskError(f"{compose}: not valid YAML ({' '.join(str(exc).split())[:200]})") from None
        services = sorted((data.get("services") or {}).keys()) if isinstance(data, dict) else []
        if services and services != ["main"]:
            raise HarborTaskError(f"{compose}: compose with several services ({', '.join(services)}) is not "
                                  "supported: nothing runs beside the agent here (one container: 'main')")
        main = (data.get("services") or {}).get("main") or {}
        for key in ("volumes", "entrypoint", "depends_on"):
            if main.get(key):
                raise HarborTaskError(f"{compose}: service main's {key} is not supported offline (only its build "
                                      "of environment/Dockerfile is)")
    dockerfile = env_dir / "Dockerfile"
    if dockerfile.is_file():
        return env_dir, dockerfile
    if config.environment.docker_image:
        return env_dir, None
    raise HarborTaskError(f"{folder}: no environment/Dockerfile and no [environment] docker_image: a Harbor task "
                          "describes its container with one of them")


def _plan(folder: Path, config: HarborTaskConfig):
    from sandbox.dockerfile import DockerfileRefused, plan_dockerfile

    env_dir, dockerfile = _environment_dockerfile(folder, config)
    try:
        if dockerfile is None:
            scratch = Path(tempfile.mkdtemp(prefix="assay-docker-image-"))
            try:
                (scratch / "Dockerfile").write_text(f"FROM {config.environment.docker_image}\n")
                return plan_dockerfile(scratch / "Dockerfile")
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return plan_dockerfile(dockerfile, env_dir)
    except DockerfileRefused as exc:
        raise HarborTaskError(f"task {folder.name}: its image is refused before anything runs: {exc}") from None


def _refusals(folder: Path, config: HarborTaskConfig) -> None:
    where = f"{folder / TASK_FILE}"
    env, verifier = config.environment, config.verifier
    if config.steps:
        names = ", ".join(s.name for s in config.steps)
        raise HarborTaskError(f"{where}: multi-step task ({len(config.steps)} [[steps]]: {names}) is not supported: "
                              "Assay runs one instruction and one verifier per episode; split it into tasks")
    if env.os != "linux":
        raise HarborTaskError(f"{where}: [environment] os = {env.os!r}: only Linux containers run here")
    if env.gpus or env.gpu_types or env.tpu:
        raise HarborTaskError(f"{where}: [environment] asks for GPUs/TPUs ({env.gpus or env.gpu_types or env.tpu}); "
                              "episodes here get none")
    if env.mcp_servers:
        raise HarborTaskError(f"{where}: [environment] mcp_servers are not supported (no server runs beside the agent)")
    if env.healthcheck is not None:
        raise HarborTaskError(f"{where}: [environment.healthcheck] waits for services, and no service outlives a "
                              "command here")
    if verifier.environment is not None:
        raise HarborTaskError(f"{where}: [verifier.environment] defines a verifier container of its own: only "
                              "environment_mode = 'separate' with a fresh copy of the task's environment is supported")
    if verifier.continuous and verifier.continuous.get("enabled"):
        raise HarborTaskError(f"{where}: [verifier.continuous] (verifying while the agent works) is not supported")
    if verifier.collect:
        raise HarborTaskError(f"{where}: [[verifier.collect]] hooks run in compose services, which are not supported")
    if not verifier.separate and verifier.user is not None and config.agent.user is not None \
            and str(verifier.user) != str(config.agent.user):
        raise HarborTaskError(f"{where}: agent user {config.agent.user!r} and verifier user {verifier.user!r} differ "
                              "in the shared verifier mode: one user maps onto an episode's filesystem here (set "
                              "[verifier] environment_mode = 'separate')")


def load_harbor_task(folder: Path | str, settings: SuiteSettings | None = None) -> HarborTask:
    """Load and check one Harbor task folder; :class:`HarborTaskError` (a ``TaskFormatError``) names the
    file, the refused feature or the Dockerfile instruction, and the fix. Reads only: nothing runs."""
    from domains.task_folder import TASK_NAME, TaskFormatError

    folder = Path(folder)
    settings = settings or SuiteSettings()
    if not TASK_NAME.match(folder.name):
        raise TaskFormatError(f"{folder}: task folder name {folder.name!r} must be letters, digits, '_', '-' or '.'")
    try:
        config = parse_task_toml(folder / TASK_FILE)
    except HarborConfigError as exc:
        raise TaskFormatError(str(exc)) from None
    if settings.imported:
        recorded = settings.digests.get(folder.name)
        if recorded is None:
            raise TaskFormatError(f"{folder}: not in the suite's import record ({folder.parent / MANIFEST}): add it "
                                  f"with `assay tasks import harbor {folder} --suite {folder.parent.name}`")
        if folder_digest(folder) != recorded:
            source = settings.sources.get(folder.name, str(folder))
            raise TaskFormatError(f"{folder}: edited since it was imported (its digest changed): refused until it is "
                                  f"imported again (`assay tasks import harbor {source} --suite "
                                  f"{folder.parent.name} --replace`)")
    try:
        _refusals(folder, config)  # what cannot run here is said before what is missing
    except HarborTaskError as exc:
        raise TaskFormatError(str(exc)) from None
    instruction_path = folder / INSTRUCTION_FILE
    if not instruction_path.is_file():
        raise TaskFormatError(f"{instruction_path}: missing; write what the agent must do")
    instruction = instruction_path.read_text(encoding="utf-8")
    if not instruction.strip():
        raise TaskFormatError(f"{instruction_path}: empty; write what the agent must do")
    if not (folder / "tests" / "test.sh").is_file():
        raise TaskFormatError(f"{folder / 'tests' / 'test.sh'}: missing; write the verifier (it writes "
                              "/logs/verifier/reward.txt or reward.json)")
    try:
        plan = _plan(folder, config)
    except HarborTaskError as exc:
        raise TaskFormatError(str(exc)) from None
    notes = [*config.notes, *(f"unknown key {k!r} ignored" for k in config.unknown_keys), *plan.notes]
    if not (folder / "solution" / "solve.sh").is_file():
        notes.append("no oracle (solution/solve.sh, optional in Harbor): the domain's reference answer is empty, and "
                     "`assay tasks check` and the self-test report the task as unchecked until one is written")
    try:
        return HarborTask.create(folder, config, instruction, plan, settings, notes)
    except HarborTaskError as exc:
        raise TaskFormatError(str(exc)) from None


# -- importing ---------------------------------------------------------------------------------------


def task_folders(paths: Sequence[Path | str]) -> list[Path]:
    """Each path is a task folder (it holds task.toml) or a folder of them."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if is_harbor_task(path):
            found.append(path)
        elif path.is_dir():
            inner = sorted(p for p in path.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
                           and is_harbor_task(p))
            if not inner:
                raise HarborTaskError(f"{path}: neither a Harbor task (no {TASK_FILE}) nor a folder of them")
            found.extend(inner)
        else:
            raise HarborTaskError(f"{path}: not a folder")
    names = [p.name for p in found]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise HarborTaskError(f"two tasks share a folder name ({', '.join(dupes)}): a suite names tasks by folder")
    return found


def suite_name_for(paths: Sequence[Path | str]) -> str:
    """A domain name for tasks imported without ``--suite``: the folder they came from."""
    from domains.base import NAME_PATTERN

    first = Path(paths[0]).resolve()
    base = first.parent.name if is_harbor_task(first) else first.name
    name = re.sub(r"[^a-z0-9_]", "_", base.lower()).strip("_")
    if not name or not name[0].isalpha():
        name = f"harbor_{name}".strip("_")
    if not NAME_PATTERN.match(name):
        raise HarborTaskError(f"cannot make a domain name from {base!r}: pass --suite NAME (lower_snake_case)")
    return name


def import_tasks(paths: Sequence[Path | str], *, home: Path, suite: str | None = None, reward_key: str = "reward",
                 timeout_multiplier: float = 1.0, replace: bool = False) -> tuple[Path, list[HarborTask]]:
    """Check every task (refusals before anything is copied or run), then copy them into
    ``home/tasks/<suite>/`` with the import record (digests, reward key, timeout multiplier).
    Tasks already in the suite stay unless ``replace`` (then a task of the same name is replaced)."""
    from domains.base import NAME_PATTERN
    from domains.task_folder import TaskFormatError

    if not timeout_multiplier > 0:
        raise HarborTaskError(f"--timeout-multiplier must be positive, got {timeout_multiplier}")
    if not reward_key.strip():
        raise HarborTaskError("--reward-key must name a metric of the verifier's reward (e.g. reward)")
    folders = task_folders(paths)
    name = suite or suite_name_for(paths)
    if not NAME_PATTERN.match(name):
        raise HarborTaskError(f"--suite {name!r} must be lower_snake_case (letters, digits, '_', starting with a "
                              "letter): it is the domain's name")
    target = Path(home) / "tasks" / name
    settings = SuiteSettings.read(target) if target.is_dir() else SuiteSettings()
    clashes = [f.name for f in folders if (target / f.name).exists()]
    if clashes and not replace:
        raise HarborTaskError(f"suite {name!r} already holds {', '.join(clashes)}: pass --replace to import them again")
    loaded = []
    problems = []
    for folder in folders:
        try:
            loaded.append(load_harbor_task(folder, SuiteSettings(reward_key, timeout_multiplier)))
        except TaskFormatError as exc:
            problems.append(str(exc))
    if problems:
        raise HarborTaskError(f"{len(problems)} of {len(folders)} tasks refused (nothing imported):\n  "
                              + "\n  ".join(problems))
    target.mkdir(parents=True, exist_ok=True)
    digests, sources = dict(settings.digests), dict(settings.sources)
    for task in loaded:
        staging = target / f".import-{task.name}-{os.getpid()}"
        if staging.exists():
            shutil.rmtree(staging)
        shutil.copytree(task.folder, staging, symlinks=True)
        final = target / task.name
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
        digests[task.name] = folder_digest(final)
        sources[task.name] = str(task.folder.resolve())
    record = {"format": 1, "reward_key": reward_key, "timeout_multiplier": timeout_multiplier, "digests": digests,
              "sources": sources, "imported": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    (target / MANIFEST).write_text(json.dumps(record, indent=1, sort_keys=True))
    final_settings = SuiteSettings.read(target)
    return target, [load_harbor_task(target / t.name, final_settings) for t in loaded]


def imported_suites_root(home: Path | None = None) -> Path:
    from storage.home import resolve_home

    return (Path(home) if home else resolve_home()) / "tasks"


# -- migrating Assay's older format --------------------------------------------------------------------

MIGRATED_DOCKERFILE = """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY files/ /app/
"""
MIGRATED_TEST = """\
#!/bin/bash
# The task's hidden tests (tests/run.sh, exit 0 = solved), run on a fresh copy of the image holding only
# the agent's final /app (task.toml: environment_mode = "separate", artifacts = ["/app"]).
cd /app
bash /tests/run.sh
status=$?
if [ "$status" -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
exit "$status"
"""


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def migrate_task(old: Path, new: Path, *, org: str = "assay") -> Path:
    """Write the Harbor folder ``new`` for the older-format task folder ``old`` (task.yaml, files/,
    solution.sh, tests/run.sh): same instruction, files at /app, oracle, hidden tests and limits. The
    verifier runs separately on the image with only the agent's /app copied in, as the older format
    ran the tests on a copy of the final /work."""
    from domains.task_folder import load_task

    task = load_task(old)
    if new.exists():
        raise HarborTaskError(f"{new}: already exists; migrate into a new folder")
    (new / "environment" / "files").mkdir(parents=True)
    if task.files_dir is not None:
        shutil.copytree(task.files_dir, new / "environment" / "files", dirs_exist_ok=True, symlinks=True)
    if not any((new / "environment" / "files").iterdir()):
        (new / "environment" / "files" / ".keep").write_text("")
    (new / "environment" / "Dockerfile").write_text(MIGRATED_DOCKERFILE)
    shutil.copytree(task.tests_dir, new / "tests", symlinks=True)
    (new / "tests" / "test.sh").write_text(MIGRATED_TEST)
    (new / "solution").mkdir()
    (new / "solution" / "solve.sh").write_text(task.solution_text)
    (new / INSTRUCTION_FILE).write_text(task.spec.instruction if task.spec.instruction.endswith("\n")
                                        else task.spec.instruction + "\n")
    spec = task.spec
    slug = re.sub(r"[^a-zA-Z0-9._-]", "-", old.name)
    lines = ['schema_version = "1.4"', 'artifacts = ["/app"]', "", "[task]", f'name = "{org}/{slug}"',
             f"keywords = {json.dumps(list(spec.tags))}", "", "[metadata]", f"max_turns = {spec.max_turns}"]
    if spec.difficulty:
        lines.append(f"difficulty = {_toml_string(spec.difficulty)}")
    lines += ["migrated_from = \"task.yaml\"", "", "[agent]", f"timeout_sec = {float(spec.timeout_s)}", "",
              "[verifier]", "timeout_sec = 60.0", 'environment_mode = "separate"', "", "[environment]",
              "cpus = 1", "memory_mb = 1024", "storage_mb = 256", 'network_mode = "no-network"', ""]
    (new / TASK_FILE).write_text("\n".join(lines))
    return new


__all__ = ["HarborTask", "HarborTaskError", "IMAGE_CACHE_ENV", "MANIFEST", "SuiteSettings", "TaskVerdict",
           "build_image", "folder_digest", "image_store", "import_tasks", "imported_suites_root", "is_harbor_task",
           "load_harbor_task", "migrate_task", "suite_name_for", "task_folders"]
