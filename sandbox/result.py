"""The outcome of one sandboxed execution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["ok", "error", "timeout", "memory", "killed"]
STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "memory", "killed")
# Which limit ended a run, when one did.
# "workdir": a terminal episode's working folder grew past its cap (sandbox.terminal).
LIMIT_NAMES: tuple[str, ...] = ("wall", "cpu", "memory", "output", "workdir")


@dataclass(frozen=True)
class ExecutionResult:
    """``status``: ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (wall or CPU limit),
    ``memory`` (memory limit), ``killed`` (any other signal, or the output limit).

    ``returncode`` is the exit code, or ``-N`` when signal N ended the program (subprocess's
    convention). ``stdout``/``stderr`` are decoded as UTF-8 (invalid bytes replaced) and capped at
    ``Limits.output_bytes`` each; ``truncated`` says whether anything was cut. ``limit`` names the
    limit that ended the run (``wall``, ``cpu``, ``memory``, ``output``) or is None. ``cpu_s`` is
    the CPU time of the program and the children it waited for (plus bwrap's own few ms).
    ``isolation`` is ``bubblewrap`` or ``none`` (only under ASSAY_UNSAFE_LOCAL_EXEC=1).

    ``status`` is ``memory`` when the program died of the address-space limit, recognized by what
    it leaves on stderr (Python's MemoryError, C's "Cannot allocate memory", C++'s bad_alloc);
    an exit code cannot tell. A wall or CPU kill is ``timeout`` whatever the program printed.
    """

    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    duration_s: float
    limit: str | None = None
    truncated: bool = False
    cpu_s: float = 0.0
    isolation: str = "bubblewrap"

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        """The public contract (`assay sandbox run --json`): exactly these five keys."""
        return {"status": self.status, "returncode": self.returncode, "stdout": self.stdout,
                "stderr": self.stderr, "duration_s": round(self.duration_s, 4)}
