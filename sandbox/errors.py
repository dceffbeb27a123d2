"""Errors of the sandbox itself (never of the program it runs: those are results)."""

from __future__ import annotations


class SandboxError(RuntimeError):
    """The sandbox could not run a program (setup failed); the program's outcome is unknown."""


class SandboxUnavailable(SandboxError):
    """No isolation is available here, so untrusted code is refused."""
