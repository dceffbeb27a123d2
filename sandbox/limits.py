"""Resource limits of one sandboxed execution, validated when built.

A pydantic model like every other knob in Assay: ``assay sandbox run``'s limit flags are built
from these fields and their descriptions (:mod:`pipelines.config_flags`). pydantic is the
sandbox's only non-stdlib import; the code that runs *inside* the sandbox stays stdlib-only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

# bubblewrap and the interpreter themselves need ~20 MB of address space to start.
MIN_MEMORY_MB = 32


class Limits(BaseModel):
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

    # strict: a bool or a string is not a number of seconds or megabytes.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    cpu_s: float = Field(10.0, description="CPU seconds the program may use (then it ends with status timeout)")
    wall_s: float = Field(20.0, description="wall-clock seconds before the whole sandbox is killed (status timeout)")
    memory_mb: int = Field(512, description="address space per process in MB (exceeding it: status memory)")
    file_size_mb: int = Field(16, description="largest file the program may write, in MB")
    nproc: int = Field(32, description="processes and threads the program may run at once, itself included")
    output_bytes: int = Field(
        1_000_000, description="bytes of stdout and of stderr kept; a program writing more is killed (status killed)")
    scratch_mb: int = Field(64, description="size in MB of the private writable scratch folder (a tmpfs at /tmp)")

    @field_validator("cpu_s", "wall_s")
    @classmethod
    def _positive_seconds(cls, value, info):
        if not value > 0:
            raise ValueError(f"Limits.{info.field_name} must be a positive number of seconds, got {value!r}")
        return value

    @field_validator("memory_mb", "file_size_mb", "nproc", "output_bytes", "scratch_mb")
    @classmethod
    def _positive_int(cls, value, info):
        if value < 1:
            raise ValueError(f"Limits.{info.field_name} must be a positive int, got {value!r}")
        if info.field_name == "memory_mb" and value < MIN_MEMORY_MB:
            raise ValueError(f"Limits.memory_mb={value} is too small to start a program; use >= {MIN_MEMORY_MB}")
        return value

    def replace(self, **changes) -> "Limits":
        """A copy with the non-None ``changes`` applied (validated like a new one)."""
        return Limits(**{**self.model_dump(), **{k: v for k, v in changes.items() if v is not None}})
