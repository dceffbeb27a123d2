"""The reward-hacking detectors logged during GRPO (training.hacking_signals): real hedges and
prompt echoes are caught, genuine single answers and short quotes of the prompt are not."""

from __future__ import annotations

import random
import time

import pytest

from training.hacking_signals import (COPY_FRACTION_THRESHOLD, copies_prompt, prompt_copy_fraction,
                                      states_multiple_answers, step_signals)


@pytest.mark.parametrize("completion", [
    "<answer>True</answer>\nFalse",                       # the reasoning-gym best-of-spans hedge
    "<answer>0</answer>\n1",                              # coin_flip
    "Answer: yes\nAnswer: no",
    r"It is \boxed{3} or maybe \boxed{4}",
    "<answer>12</answer> but the answer is 13.",
    "Answer: A is a knight, B is a knave\nAnswer: A is a knave, B is a knight",  # both roles
    "<answer>Na</answer><answer>K</answer><answer>Li</answer>",                # a spray
])
def test_hedges_are_detected(completion):
    assert states_multiple_answers(completion)


@pytest.mark.parametrize("completion", [
    "<answer>42</answer>",
    "Let me think. 6 * 7 = 42.\nAnswer: 42",
    r"So the answer is \boxed{5}. Answer: 5",            # the same answer stated twice
    "Answer: Paris\nANSWER:   paris ",                   # case and whitespace differ only
    r"<answer>\boxed{\frac{1}{2}}</answer>",             # one answer in two wrappers
    "The answer is 3.14. Final answer: 3.14",
    "<answer>5</answer>\nI hope this helps.",            # a closing sentence is not an answer
    "I considered 4 and 6 along the way, but I am not sure.",  # no declared answer at all
    "",
])
def test_single_answers_are_not_hedges(completion):
    assert not states_multiple_answers(completion)


def _haystack(words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    vocab = ["the", "a", "record", "value", "of", "is", "city", "number", "stored", "key", "and", "in"]
    return " ".join(rng.choice(vocab) + (str(rng.randrange(10**7)) if rng.random() < 0.2 else "")
                    for _ in range(words))


def test_a_dumped_prompt_is_a_copy_and_a_short_quote_is_not():
    prompt = _haystack(3000)
    words = prompt.split()
    dump = " ".join(words[200:1400])
    assert prompt_copy_fraction(dump, prompt) == 1.0 and copies_prompt(dump, prompt)
    half = " ".join(words[10:40]) + " " + " ".join(f"mine{i}" for i in range(20))
    assert prompt_copy_fraction(half, prompt) == pytest.approx(30 / 50) and copies_prompt(half, prompt)
    quote = ("The passage says: " + " ".join(words[500:510]) + ". So the magic number asked for is 7731920, "
             "which I read from the sentence about the stored key, and nothing else in the text matches it.")
    fraction = prompt_copy_fraction(quote, prompt)
    assert 0 < fraction < COPY_FRACTION_THRESHOLD and not copies_prompt(quote, prompt)
    # seven shared words in a row are not a stretch; the same words out of order are not either
    assert prompt_copy_fraction(" ".join(words[0:7]), prompt) == 0.0
    assert prompt_copy_fraction(" ".join(reversed(words[0:40])), prompt) < COPY_FRACTION_THRESHOLD
    assert prompt_copy_fraction("", prompt) == 0.0


def test_copy_fraction_is_linear_on_a_16k_token_prompt():
    prompt = _haystack(12_000, seed=1)
    dump = " ".join(prompt.split()[:6000])
    began = time.perf_counter()
    assert prompt_copy_fraction(dump, prompt) == 1.0
    assert time.perf_counter() - began < 0.5  # a quadratic LCS over 12k x 6k words takes minutes


def test_step_signals_are_shares_and_the_copiers_mean_reward():
    prompt = _haystack(200)
    dump = " ".join(prompt.split()[:150])
    signals = step_signals(["<answer>True</answer>\nFalse", dump, "<answer>7</answer>", dump],
                           [prompt] * 4, [1.0, 0.75, 0.0, 0.25])
    assert signals == {"multi_answer_share": 0.25, "prompt_copy_share": 0.5, "prompt_copy_reward": 0.5}
    none_copy = step_signals(["<answer>7</answer>"], [prompt], [1.0])
    assert none_copy["prompt_copy_share"] == 0.0 and none_copy["prompt_copy_reward"] is None  # absent, not 0
    assert step_signals([], [], []) == {"multi_answer_share": None, "prompt_copy_share": None,
                                        "prompt_copy_reward": None}
    with pytest.raises(ValueError, match="one prompt and reward per completion"):
        step_signals(["a"], [], [1.0])
