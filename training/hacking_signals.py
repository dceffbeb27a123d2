"""Reward-hacking signals of a GRPO step, per domain (pure functions, no torch).

A policy under GRPO finds a scorer's holes within tens of steps. Two generic signs are cheap to
watch on every rollout, whatever the domain's scorer says:

- **hedging**: the completion states more than one distinct candidate answer (``<answer>True</answer>
  False``), hoping a lenient scorer takes the best of them;
- **echoing**: the completion is mostly long verbatim stretches of its own prompt (dumping a
  long context instead of reading it).

The trainer logs, per step and domain, the share of rollouts that hedge, the share that echo and
the mean reward of those that echo (``None`` when none do: computed or absent, never a made-up 0).
A share that rises over a run means the policy is learning the trick (the training page flags it).
"""

from __future__ import annotations

import re
from typing import Sequence

# what counts as a stated answer is the scorers' own grammar (domains.answers), not a copy of it
from domains.answers import answer_candidates

# A word n-gram this long shared with the prompt is a copy, not a coincidence: 8 words in the same
# order almost never recur by chance, while a short quote (a name, a number, a phrase) stays shorter.
COPY_NGRAM_WORDS = 8
# A completion "copies the prompt" when at least half of its words lie in such shared stretches: an
# answer that quotes a sentence of evidence stays well below, a dumped context is near 1.
COPY_FRACTION_THRESHOLD = 0.5

_WORD = re.compile(r"\S+")


def _distinct(candidates: set[str]) -> list[str]:
    """Candidates that differ: one whose words begin another's is the same answer with an
    explanation after it ("42" and "42 because 6*7", "new york" and "new york city")."""
    kept: list[list[str]] = []
    for words in sorted((c.split() for c in candidates), key=len):
        if not any(words[:len(k)] == k for k in kept):
            kept.append(words)
    return [" ".join(k) for k in kept]


def states_multiple_answers(completion: str) -> bool:
    """True when the completion states more than one DISTINCT candidate answer (identical repeats,
    e.g. ``Answer: 5`` and ``\\boxed{5}``, are one answer)."""
    return len(_distinct(answer_candidates(completion))) > 1


def prompt_ngrams(prompt: str, n: int = COPY_NGRAM_WORDS) -> set[int]:
    """Hashes of the prompt's word n-grams (one pass: linear in the prompt's length)."""
    words = _WORD.findall(prompt)
    return {hash(tuple(words[i:i + n])) for i in range(len(words) - n + 1)}


def prompt_copy_fraction(completion: str, prompt: str, *, ngrams: set[int] | None = None,
                         n: int = COPY_NGRAM_WORDS) -> float:
    """The share of the completion's words that lie in a verbatim stretch of at least ``n`` words
    of the prompt (0.0 for an empty completion). Hashed word n-grams keep it linear: prompts may be
    16k tokens. ``ngrams``: :func:`prompt_ngrams` of the prompt, precomputed for a group."""
    words = _WORD.findall(completion)
    if not words:
        return 0.0
    shared = prompt_ngrams(prompt, n) if ngrams is None else ngrams
    covered = [False] * len(words)
    reach = 0  # words before this index are already marked
    for i in range(len(words) - n + 1):
        if hash(tuple(words[i:i + n])) in shared:
            for j in range(max(i, reach), i + n):
                covered[j] = True
            reach = i + n
    return sum(covered) / len(words)


def copies_prompt(completion: str, prompt: str, *, ngrams: set[int] | None = None) -> bool:
    return prompt_copy_fraction(completion, prompt, ngrams=ngrams) >= COPY_FRACTION_THRESHOLD


def step_signals(completions: Sequence[str], prompts: Sequence[str], rewards: Sequence[float]) -> dict:
    """One group of rollouts' (a domain's, in one step) signals: ``multi_answer_share``,
    ``prompt_copy_share`` and ``prompt_copy_reward`` (the mean reward of the copying rollouts;
    None when none copies). Every value is None for no rollouts."""
    if not len(completions) == len(prompts) == len(rewards):
        raise ValueError(f"step_signals needs one prompt and reward per completion, got "
                         f"{len(completions)}, {len(prompts)}, {len(rewards)}")
    if not completions:
        return {"multi_answer_share": None, "prompt_copy_share": None, "prompt_copy_reward": None}
    by_prompt: dict[str, set[int]] = {}  # a group's samples share one prompt: hash it once
    hedges, copied = 0, []
    for completion, prompt, reward in zip(completions, prompts, rewards):
        hedges += states_multiple_answers(completion)
        if prompt not in by_prompt:
            by_prompt[prompt] = prompt_ngrams(prompt)
        if copies_prompt(completion, prompt, ngrams=by_prompt[prompt]):
            copied.append(reward)
    return {"multi_answer_share": hedges / len(completions),
            "prompt_copy_share": len(copied) / len(completions),
            "prompt_copy_reward": sum(copied) / len(copied) if copied else None}
