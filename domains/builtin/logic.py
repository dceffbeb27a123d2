"""Logic puzzles from reasoning-gym: knights and knaves (who tells the truth?), categorical
syllogisms (does the conclusion follow? Yes/No) and self-referential truth puzzles (how many
statements can be true?), interleaved; each item is verified by its task's own checker."""

from __future__ import annotations

from domains import Domain
from domains.builtin._rg import mixed_samples, mixed_score
from domains.builtin._rg_equivalents import mixed_equivalents

TASKS = {"knights_knaves": {}, "syllogism": {}, "self_reference": {}}

DOMAIN = Domain(
    name="logic",
    owner="reasoning-team@assay.dev",
    description="Logic puzzles: knights and knaves, syllogisms and self-reference (reasoning-gym), "
                "verified by each task's checker",
    tags=("logic", "reasoning"),
    samples=mixed_samples("logic", TASKS),
    score=mixed_score(TASKS),
    equivalents=mixed_equivalents(TASKS),
)
