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


def training_command(recipe: str, output: str, *, domains: Sequence[str] = (), steps: int | None = None,
                     seed: int | None = None, nproc: int = 1, require_train_set: bool = True,
                     backend: str = "") -> list[str]:
    """The command line that trains ``recipe`` and writes its result JSON to ``output``
    (``backend``: the rollout engine, empty for the recipe's)."""
    args = ["--recipe", recipe, "--output", output]
    if require_train_set:
        args.insert(2, "--require-train-set")
    if domains:
        args += ["--domains", ",".join(domains)]
    if steps is not None:
        args += ["--steps", str(steps)]
    if seed is not None:
        args += ["--seed", str(seed)]
    if backend:
        args += ["--set", f"rollout.backend={backend}"]
    if nproc > 1:
        torchrun = str(Path(sys.executable).with_name("torchrun"))
        return [torchrun, "--standalone", "--nproc_per_node", str(nproc), "-m", "training.run_grpo", *args]
    return [sys.executable, "-m", "training.run_grpo", *args]


def train_in_subprocess(home: str | os.PathLike, recipe: str, *, domains: Sequence[str] = (),
                        steps: int | None = None, seed: int | None = None, nproc: int = 1, backend: str = "",
                        threads_per_process: int = 2, log: Callable[[str], None] = lambda line: None) -> dict:
    """Train in a child process on ASSAY_HOME ``home`` (gated train sets required) and return
    its result (``training.trainer.TrainResult`` as JSON). Raises :class:`TrainingProcessError`."""
    with tempfile.TemporaryDirectory() as tmp:
        output = str(Path(tmp) / "result.json")
        command = training_command(recipe, output, domains=domains, steps=steps, seed=seed, nproc=nproc,
                                   backend=backend)
        env = {**{k: v for k, v in os.environ.items() if k not in INHERITED_DIST_ENV}, "ASSAY_HOME": str(home),
               # without a thread limit CPU training runs 10-50x slower (threads fight over cores)
               "OMP_NUM_THREADS": str(threads_per_process), "TOKENIZERS_PARALLELISM": "false"}
        log(f"training: {' '.join(command)}")
        proc = subprocess.Popen(command, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        tail: list[str] = []
        for line in proc.stderr:  # the trainer's notes (resume, generated rows) reach the caller's log
            line = line.rstrip()
            if line and "[WARNING]" not in line:
                tail = (tail + [line])[-TAIL_LINES:]
                if not line.startswith(("[rank", " ")):
                    log(line)
        if proc.wait() != 0 or not Path(output).exists():
            reason = next((line[len("error: "):] for line in reversed(tail) if line.startswith("error: ")), None)
            raise TrainingProcessError(reason or f"training exited with code {proc.returncode}", tail)
        return json.loads(Path(output).read_text())
