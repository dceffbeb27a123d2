"""A separable toy preference set for reward-model tests: the chosen answer holds one word of a
'good' list, the rejected one a word of a 'bad' list, among shared filler words in random order.
A tiny reward model learns it in seconds; a label-shuffled one cannot."""

from __future__ import annotations

import random

from storage.preference_pairs import PreferencePair

GOOD = ("blue", "green", "calm", "bright", "gentle", "clear")
BAD = ("red", "black", "loud", "dark", "harsh", "muddy")
NEUTRAL = ("the", "river", "stone", "table", "window", "paper", "garden", "little")


def toy_pairs(n: int = 120, seed: int = 0) -> list[PreferencePair]:
    rng = random.Random(seed)

    def answer(words) -> str:
        tokens = [rng.choice(NEUTRAL) for _ in range(rng.randint(2, 4))] + [rng.choice(words)]
        rng.shuffle(tokens)
        return " ".join(tokens) + "."

    return [PreferencePair(id=f"toy-{i}", prompt=f"Describe item {i} in a few words.", chosen=answer(GOOD),
                           rejected=answer(BAD)) for i in range(n)]
