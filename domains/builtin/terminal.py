"""The built-in terminal task suite (``terminal_tasks/``, 28 tasks in Harbor's format: files, text,
CSV/JSON, logs, fixing Python programs, small scripts; see its README) as the domain ``terminal``.
Its tasks run on a debian:bookworm-slim image with python3, built offline once per machine
(:mod:`domains.importers.harbor`).

Sweeps run its items as multi-turn episodes of the policy in a sandboxed terminal
(:mod:`generation.agent_loop`), scored by each task's hidden tests; its single-turn ``score`` runs a
completion as one script. Left out of ``assay demo``'s default ``core`` selection: episodes of up
to 20 turns cost minutes per checkpoint on a CPU (``--domains core,terminal`` adds it)."""

from pathlib import Path

from domains.task_folder import task_suite_domain

DOMAIN = task_suite_domain(Path(__file__).parent / "terminal_tasks", name="terminal", owner="agents-team@assay.dev")
