"""String manipulation from reasoning-gym: counting a letter in a text, sorting words by
ASCII/Unicode order, and spelling a word backward, interleaved; each item is verified by its
task's own checker (exact for counts and spellings, order-sensitive for sorted lists)."""

from __future__ import annotations

from domains import Domain
from domains.builtin._rg import mixed_samples, mixed_score

TASKS = {"letter_counting": {}, "word_sorting": {}, "spell_backward": {}}

DOMAIN = Domain(
    name="strings",
    owner="nlp-team@assay.dev",
    description="String tasks: letter counting, word sorting and spelling backward (reasoning-gym), "
                "verified by each task's checker",
    tags=("strings", "text"),
    samples=mixed_samples("strings", TASKS),
    score=mixed_score(TASKS),
)
