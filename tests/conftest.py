"""Shared fixtures: every test gets its own ASSAY_HOME and no plugin path unless it sets one."""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the suite runs on the local profile unless a test asks for the team one (team_env): a
# developer's shell sourced from `make team-up` must not send every test to their services
for _name in ("ASSAY_PROFILE", "ASSAY_PROFILE_FILE", "ASSAY_POSTGRES_URL", "ASSAY_S3_ENDPOINT", "ASSAY_S3_BUCKET",
              "ASSAY_LAKE_CATALOG", "MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
    os.environ.pop(_name, None)
# Harbor tasks' images (domains.importers.harbor) take a minute or more to build: every test, whatever
# its ASSAY_HOME, shares one store that outlives the session (and CI runs on the same machine), keyed
# by each Dockerfile's digest, so a machine builds each image once. Set ASSAY_IMAGE_CACHE to move it.
os.environ.setdefault("ASSAY_IMAGE_CACHE", str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
                                               / "assay" / "images"))

PLUGIN_TEMPLATE = '''
from domains import Domain

def _samples(split, n, seed):
    base = 0 if split == "train" else 10_000
    for i in range(n):
        k = base + seed * 1000 + i
        yield {{"id": f"{name}-{{split}}-{{k}}", "prompt": f"What is {{k}} plus 1?", "answer": str(k + 1)}}

def _score(completion, sample):
    return 1.0 if completion.strip().split()[-1:] == [sample["answer"]] else 0.0

DOMAIN = Domain(name="{name}", owner="plugins@example.com", description="plugin test domain",
                tags=("test",), samples=_samples, score=_score)
'''


def write_plugin(folder: Path, name: str, body: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(body if body is not None else PLUGIN_TEMPLATE.format(name=name))
    return path


@pytest.fixture
def assay_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "assay_home"
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.delenv("ASSAY_DOMAINS_PATH", raising=False)
    (home / "dagster").mkdir(parents=True)
    monkeypatch.setenv("DAGSTER_HOME", str(home / "dagster"))
    return home


def run_cli(*args: str, env: dict | None = None, cwd: Path | None = None, timeout: int = 300,
            unset: tuple[str, ...] = ()):
    """Run the real `assay` CLI in a subprocess (as a user would); ``unset`` drops variables that
    this test process may have set for itself (e.g. DS_ACCELERATOR, set once torch training ran)."""
    import subprocess

    full_env = {k: v for k, v in os.environ.items() if k not in unset}
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True,
                          text=True, env=full_env, cwd=cwd or REPO, timeout=timeout)


def kill_when_stalled(module: str, *args: str, env: dict | None = None) -> None:
    """Run ``python -m module args...`` until it prints ``stalled`` (it holds work it has not
    committed), then SIGKILL it: a writer that dies before its commit, as an OOM kill does."""
    import signal
    import subprocess

    child = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, env=env or dict(os.environ),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = child.stdout.readline().strip()
        assert line == "stalled", (line, child.stderr.read() if child.poll() is not None else "")
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert child.returncode == -signal.SIGKILL


# The README's smoke run, exactly as README.md writes it (run from the repository root).
SMOKE_RUN = ".venv/bin/assay demo --recipe tiny --domains math_arith_easy --steps 2 --sweep-items 3"



def readme_block(marker: str) -> list[str]:
    """The commands of the README's one bash block that holds ``marker`` (continuations joined, comments and
    blank lines left out), as a reader pastes them; a README with none or several such blocks fails."""
    from pytest_codeblocks import extract_from_file

    blocks = [b for b in extract_from_file(REPO / "README.md") if b.syntax == "bash" and marker in b.code]
    assert len(blocks) == 1, f"README.md must hold exactly one bash block marked {marker!r}, found {len(blocks)}"
    return [line for line in blocks[0].code.replace("\\\n", " ").splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def user_shell(home: Path) -> dict:
    """The environment of a user's shell: `assay` on PATH, ``home`` as ASSAY_HOME, nothing this
    test process set for itself (ASSAY_/DAGSTER_/MLFLOW_ variables, DS_ACCELERATOR) but the
    machine's image store (ASSAY_IMAGE_CACHE: images are built once per machine)."""
    env = {k: v for k, v in os.environ.items() if (not k.startswith(("ASSAY_", "DAGSTER_", "MLFLOW_"))
                                                   or k == "ASSAY_IMAGE_CACHE") and k != "DS_ACCELERATOR"}
    env.update(ASSAY_HOME=str(home), PATH=f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return env


@dataclass(frozen=True)
class SmokeRun:
    """The README's smoke run, done once per test session in its own ASSAY_HOME: what it printed,
    and the Dagster runs its instance held right after it (later tests may add more)."""

    home: Path
    env: dict
    returncode: int
    stdout: str
    stderr: str
    runs: tuple[tuple[str, str], ...]  # (job name, status name) of each run in the instance
    snapshot: Path  # a copy of ``home`` taken right after the run, that nothing runs in: copy it to add to it

    def copy_home(self, dest: Path) -> Path:
        """A home of one's own in the state the smoke run left (its registry still names the
        checkpoints under ``home``, which stay there): for tests that add to it, e.g. train."""
        shutil.copytree(self.snapshot, dest, symlinks=True)
        return dest


def _run_smoke(home: Path) -> dict:
    import subprocess

    import dagster as dg

    out = subprocess.run(["bash", "-c", SMOKE_RUN], cwd=REPO, env=user_shell(home), capture_output=True, text=True,
                         timeout=900)
    runs = []
    if (home / "dagster").is_dir():
        with dg.DagsterInstance.from_config(str(home / "dagster")) as instance:
            runs = [(r.job_name, r.status.name) for r in instance.get_runs()]
    return {"returncode": out.returncode, "stdout": out.stdout, "stderr": out.stderr, "runs": runs}


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory, worker_id) -> SmokeRun:
    """The README's smoke run, shared by every test that checks it (the README's commands, the
    --help examples, the demo's console and event log): one run per session, not one per test
    module, whichever xdist worker gets there first (the others wait for it under a file lock).
    Tests only read its home; one that adds to it (the --help examples) works in a copy of its
    snapshot (SmokeRun.copy_home), so tests on both workers may run in any order."""
    import filelock

    # xdist's workers share the parent of their basetemp; without xdist the basetemp is ours
    root = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    home, record, snapshot = root / "smoke_home", root / "smoke_run.json", root / "smoke_home_snapshot"
    with filelock.FileLock(str(root / "smoke_run.lock")):
        if not record.exists():
            result = _run_smoke(home)
            if home.is_dir():  # before any test runs a command in it
                shutil.copytree(home, snapshot, symlinks=True)
            record.write_text(json.dumps(result))
    done = json.loads(record.read_text())
    return SmokeRun(home=home, env=user_shell(home), returncode=done["returncode"], stdout=done["stdout"],
                    stderr=done["stderr"], runs=tuple(tuple(r) for r in done["runs"]), snapshot=snapshot)


@pytest.fixture(autouse=True)
def _no_leaked_dagster_state_storage():
    """Dagster keeps the current instance's defs-state storage in a ContextVar; an instance made
    in one test (and its tmp DAGSTER_HOME, deleted afterwards) must not leak into the next one's
    definitions loading ("unable to open database file")."""
    yield
    if "dagster" in sys.modules:
        from dagster._core.definitions.definitions_load_context import DefinitionsLoadContext
        from dagster._core.storage.defs_state import base

        base._current_storage.set(None)
        DefinitionsLoadContext._instance = None


@pytest.fixture(scope="session")
def empty_mlflow_db(tmp_path_factory) -> Path:
    """A migrated, empty MLflow SQLite store to copy into a test's ASSAY_HOME (migrating one
    costs ~8 s of schema migrations)."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow_store") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture(scope="session")
def tiny_source(tmp_path_factory) -> Path:
    """The tiny policy, built once per session: building it takes seconds, copying it milliseconds."""
    from generation.policy import ensure_tiny

    return ensure_tiny(tmp_path_factory.mktemp("tiny_home"))


WIDTH = 8.0  # x the init std (0.02) of the tiny policy's matrices


@pytest.fixture(scope="session")
def tiny_checkpoint(tiny_source, tmp_path_factory):
    """A Hugging Face folder: the tiny policy with its matrices redrawn 8x wider than the
    initialisation (std 0.16, seeded). The untrained tiny model's near-uniform logits make every
    greedy completion one repeated token, which would let two engines (or a model and its variant)
    "agree" without computing the same thing; these weights give varied completions and a real
    argmax at every step."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = tmp_path_factory.mktemp("tiny_checkpoint") / "wide-step000001"
    shutil.copytree(tiny_source, folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    generator = torch.Generator().manual_seed(2026)
    with torch.no_grad():
        for param in model.parameters():
            if param.dim() == 2:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02 * WIDTH)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


@pytest.fixture
def tiny_home(assay_home, tiny_source, empty_mlflow_db) -> Path:
    """An ASSAY_HOME whose models/tiny is already built and whose MLflow store exists."""
    target = assay_home / "models" / "tiny"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tiny_source, target)
    shutil.copy(empty_mlflow_db, assay_home / "mlflow.db")
    return assay_home


def write_task(suite: Path, name: str, *, instruction: str = "Write HELLO to out.txt.",
               solution: str = "echo HELLO > out.txt\n",
               run_sh: str = 'set -e\ntest "$(cat out.txt)" = HELLO\n',
               files: dict[str, str] | None = None, tests: dict[str, str] | None = None,
               task_yaml: str | None = None) -> Path:
    """A terminal task folder (issue 14's format) under ``suite``: task.yaml, files/, solution.sh,
    tests/run.sh (+ ``tests`` extra files). Defaults: a task solved by writing HELLO to out.txt."""
    folder = suite / name
    (folder / "tests").mkdir(parents=True)
    (folder / "task.yaml").write_text(task_yaml if task_yaml is not None else f"instruction: {instruction}\n")
    (folder / "solution.sh").write_text(solution)
    (folder / "tests" / "run.sh").write_text(run_sh)
    for rel, text in (tests or {}).items():
        (folder / "tests" / rel).write_text(text)
    if files is not None:
        (folder / "files").mkdir()
        for rel, text in files.items():
            (folder / "files" / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / "files" / rel).write_text(text)
    return folder


def write_task_suite(root: Path, name: str = "shell_tasks") -> Path:
    """A suite of three small tasks (text, counting with a python3 check, a file to create)."""
    suite = root / name
    write_task(suite, "upper", instruction="Write the contents of a.txt in upper case to out.txt.",
               files={"a.txt": "hello\n"}, solution="tr a-z A-Z < a.txt > out.txt\n",
               task_yaml="instruction: Write the contents of a.txt in upper case to out.txt.\ntags: [text, easy]\n"
                         "difficulty: easy\n")
    write_task(suite, "count", instruction="Write the number of lines of data.txt to count.txt.",
               files={"data.txt": "a\nb\nc\n"}, solution="wc -l < data.txt > count.txt\n",
               run_sh='python3 "$(dirname "$0")/check.py"\n',
               tests={"check.py": "import sys\nsys.exit(0 if open('count.txt').read().strip() == '3' else 1)\n"},
               task_yaml="instruction: Write the number of lines of data.txt to count.txt.\ntimeout_s: 30\n"
                         "tags: [data]\n")
    write_task(suite, "hello")
    return suite


@pytest.fixture(scope="session")
def team_services():
    """A real PostgreSQL (the system's package) and moto's S3 server for the whole session
    (storage.team_services). Skipped where PostgreSQL is not installed, except in CI, where
    `make test` installs it and a missing server is a failure."""
    import tempfile

    from storage.team_services import ServiceError, TeamServices

    folder = Path(tempfile.mkdtemp(prefix="assay-team-"))  # under /tmp: the postgres user must reach it
    try:
        services = TeamServices.start(folder)
    except ServiceError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        if os.environ.get("CI"):
            raise
        pytest.skip(f"team services unavailable: {exc}")
    yield services
    services.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def team_env(team_services, monkeypatch) -> dict:
    """The team profile pointed at the session's services, with a lake catalog of this test's own
    (one PostgreSQL database holds many catalogs; Dagster and MLflow share theirs)."""
    import uuid

    env = {**team_services.env(), "ASSAY_LAKE_CATALOG": f"test-{uuid.uuid4().hex[:10]}"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env
