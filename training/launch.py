"""GRPO in its own process: ``python -m training.run_grpo`` (or ``torchrun`` for several ranks).

The Dagster training asset calls :func:`train_in_subprocess`. A separate process keeps
DeepSpeed's process group and torch's thread pools out of the caller (a Dagster worker), and a
killed run is resumed by launching again. The trainer's notes on stderr reach ``log`` line by line;
its result JSON (rank 0) is read back from a temporary file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Sequence

from storage.lake import HOME_ENV

REPO_ROOT = Path(__file__).resolve().parents[1]
TAIL_LINES = 40
# A rank/port inherited from a caller that already initialised torch.distributed would collide
# with the trainer's own process group (EADDRINUSE).
INHERITED_DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


class TrainingProcessError(RuntimeError):
    """The training process failed: ``reason`` is its last ``error: ...`` line (or the exit code),
    ``tail`` its last stderr lines."""

    def __init__(self, reason: str, tail: list[str]):
        super().__init__(reason)
        self.reason = reason
        self.tail = tail


RUN_GRPO = ("-m", "training.run_grpo")


def torchrun_executable() -> str:
    """The ``torchrun`` of this interpreter's environment (next to ``sys.executable``)."""
    return str(Path(sys.executable).with_name("torchrun"))


def run_grpo_args(recipe: str, output: str | None = None, *, domains: Sequence[str] = (), steps: int | None = None,
                  seed: int | None = None, run_name: str | None = None, require_train_set: bool = True,
                  backend: str = "", reward_hacking: str = "", forgetting: str = "") -> list[str]:
    """The arguments of ``training.run_grpo`` (after ``-m training.run_grpo``), whatever launches it:
    one process, torchrun on one machine (:func:`training_command`) or on several
    (:mod:`training.multinode`). ``output``: where rank 0 writes the result JSON (None: stdout only);
    ``backend``: the rollout engine, empty for the recipe's; ``reward_hacking``: warn | stop, and
    ``forgetting`` (``validation.forgetting``): warn | stop | reweight, empty for the recipe's."""
    args = ["--recipe", recipe]
    if require_train_set:
        args.append("--require-train-set")
    if output is not None:
        args += ["--output", output]
    if domains:
        args += ["--domains", ",".join(domains)]
    if steps is not None:
        args += ["--steps", str(steps)]
    if seed is not None:
        args += ["--seed", str(seed)]
    if run_name is not None:
        args += ["--run-name", run_name]
    if backend:
        args += ["--set", f"rollout.backend={backend}"]
    if reward_hacking:
        args += ["--set", f"reward_hacking={reward_hacking}"]
    if forgetting:
        args += ["--set", f"validation.forgetting={forgetting}"]
    return args


def training_command(recipe: str, output: str, *, domains: Sequence[str] = (), steps: int | None = None,
                     seed: int | None = None, nproc: int = 1, require_train_set: bool = True,
                     backend: str = "", run_name: str | None = None, reward_hacking: str = "",
                     forgetting: str = "") -> list[str]:
    """The command line that trains ``recipe`` on this machine and writes its result JSON to
    ``output``: one process, or ``torchrun --standalone`` with ``nproc`` ranks."""
    args = run_grpo_args(recipe, output, domains=domains, steps=steps, seed=seed, run_name=run_name,
                         require_train_set=require_train_set, backend=backend, reward_hacking=reward_hacking,
                         forgetting=forgetting)
    if nproc > 1:
        return [torchrun_executable(), "--standalone", "--nproc_per_node", str(nproc), *RUN_GRPO, *args]
    return [sys.executable, *RUN_GRPO, *args]


def training_env(home: str | os.PathLike, threads_per_process: int | None = 2) -> dict[str, str]:
    """The environment of a training process: this one's, less an inherited rank/port, with
    ASSAY_HOME ``home`` and ``threads_per_process`` OMP threads (None: keep this environment's)."""
    env = {**{k: v for k, v in os.environ.items() if k not in INHERITED_DIST_ENV}, HOME_ENV: str(home),
           "TOKENIZERS_PARALLELISM": "false"}
    if threads_per_process is not None:
        # without a thread limit CPU training runs 10-50x slower (threads fight over cores)
        env["OMP_NUM_THREADS"] = str(threads_per_process)
    return env


def run_training_process(command: Sequence[str], env: dict[str, str], output: str | os.PathLike | None, *,
                         log: Callable[[str], None] = lambda line: None, require_result: bool = True) -> dict | None:
    """Run a training command from the repository root; its stderr notes reach ``log`` line by
    line. Returns the result JSON that rank 0 wrote to ``output``. Raises
    :class:`TrainingProcessError` when the command fails, or wrote no result and ``require_result``
    (without it: None, e.g. on a node of a multi-node run whose ranks did not include rank 0)."""
    proc = subprocess.Popen(list(command), cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    tail: list[str] = []
    for line in proc.stderr:  # the trainer's notes (resume, generated rows) reach the caller's log
        line = line.rstrip()
        if line and "[WARNING]" not in line:
            tail = (tail + [line])[-TAIL_LINES:]
            if not line.startswith(("[rank", " ")):
                log(line)
    code = proc.wait()
    missing = output is None or not Path(output).exists()
    if code != 0 or (missing and require_result):
        reason = next((line[len("error: "):] for line in reversed(tail) if line.startswith("error: ")), None)
        raise TrainingProcessError(reason or f"training exited with code {proc.returncode}", tail)
    if missing:
        return None
    return json.loads(Path(output).read_text())


def train_in_subprocess(home: str | os.PathLike, recipe: str, *, domains: Sequence[str] = (),
                        steps: int | None = None, seed: int | None = None, nproc: int = 1, backend: str = "",
                        threads_per_process: int = 2, log: Callable[[str], None] = lambda line: None,
                        reward_hacking: str = "", forgetting: str = "") -> dict:
    """Train in a child process on ASSAY_HOME ``home`` (gated train sets required) and return
    its result (``training.trainer.TrainResult`` as JSON). Raises :class:`TrainingProcessError`."""
    with tempfile.TemporaryDirectory() as tmp:
        output = str(Path(tmp) / "result.json")
        command = training_command(recipe, output, domains=domains, steps=steps, seed=seed, nproc=nproc,
                                   backend=backend, reward_hacking=reward_hacking, forgetting=forgetting)
        log(f"training: {' '.join(command)}")
        return run_training_process(command, training_env(home, threads_per_process), output, log=log)
