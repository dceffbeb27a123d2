"""Resource limits of one sandboxed execution, validated when built."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Limits:
    """What one execution may use. Every field is enforced; none is advisory.

    - ``cpu_s``: CPU seconds (RLIMIT_CPU; SIGXCPU then SIGKILL) -> status ``timeout``.
    - ``wall_s``: wall-clock seconds; the whole sandbox is killed -> status ``timeout``.
    - ``memory_mb``: address space per process (RLIMIT_AS) -> status ``memory``.
    - ``file_size_mb``: largest file the program may write (RLIMIT_FSIZE).
    - ``nproc``: processes and threads the program may run at once, itself included (RLIMIT_NPROC,
      counted on the sandbox's own uid).
    - ``output_bytes``: stdout and stderr are each kept up to this size; a program that writes more
      than this in total is killed -> status ``killed``, ``limit="output"``.
    - ``scratch_mb``: size of the private writable scratch folder (a tmpfs at ``/tmp``).
    """

    cpu_s: float = field(default=10.0, metadata={"help": "CPU seconds"})
    wall_s: float = field(default=20.0, metadata={"help": "wall-clock seconds"})
    memory_mb: int = field(default=512, metadata={"help": "address space per process, MB"})
    file_size_mb: int = field(default=16, metadata={"help": "largest writable file, MB"})
    nproc: int = field(default=32, metadata={"help": "processes/threads at once"})
    output_bytes: int = field(default=1_000_000, metadata={"help": "stdout+stderr bytes kept"})
    scratch_mb: int = field(default=64, metadata={"help": "size of the scratch tmpfs, MB"})

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"Limits.{name} must be a positive number of seconds, got {value!r}")
        for name in ("memory_mb", "file_size_mb", "nproc", "output_bytes", "scratch_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be a positive int, got {value!r}")
        if self.memory_mb < 32:
            # bubblewrap and the interpreter themselves need ~20 MB of address space to start.
            raise ValueError(f"Limits.memory_mb={self.memory_mb} is too small to start a program; use >= 32")

    def replace(self, **changes) -> "Limits":
        return Limits(**{**asdict(self), **{k: v for k, v in changes.items() if v is not None}})
