"""An open-answer domain with no verifier: replies to customers, rewarded by a learned reward model.

No exact checker can say whether a reply to an unhappy customer is good, so the domain declares
``score=None`` and ``learned_reward=LearnedReward()``: GRPO rewards it with the reward model that
``assay reward train customer_reply --pairs FILE`` fits on preference pairs, and refuses to train
on it until ``assay reward check customer_reply`` passed (README, "A domain with no verifier").

The prompts are templated (product x complaint); ``answer`` is a reference reply, kept for the
row gates (answer leaks, contamination) and for people, never for scoring. Splits: an item is in
eval when sha256 of its id falls in the lower fifth of the hash range, stable as the lists grow.

``preference_pairs(n, seed)`` writes demonstration preferences for the train prompts: a kind reply
that offers a remedy chosen over a dismissive one, sympathy with no remedy, or no reply at all
(the message echoed, a refusal, a list of numbers or options), as raters' data holds all kinds.
With only dismissive replies rejected the reward model learns "curt words are bad" and its gate
refuses it, rightly: it then pays echoes, refusals and sprays (and "I'm sorry to hear that"
followed by anything). Synthetic, so that the README's walk-through runs in a minute
on the tiny policy; a real team exports its raters' choices in the same JSONL shape (``prompt``,
``chosen``, ``rejected``).
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from pathlib import Path

from domains import Domain, LearnedReward

PRODUCTS = ("kettle", "headphones", "backpack", "desk lamp", "blender", "keyboard", "tent", "camera",
            "phone case", "coffee grinder", "bicycle light", "rice cooker", "monitor", "yoga mat", "drill")
COMPLAINTS = ("arrived broken", "stopped working after a week", "is missing a part", "was delivered late",
              "is not the colour I ordered", "makes a loud noise", "was charged twice", "has no manual")
WARM = ("sorry", "gladly", "thank you", "happy to help", "apologies", "of course")
REMEDIES = ("we will send a new {product} today", "your refund is on its way", "a courier will collect the {product} "
            "for repair", "we have shipped the missing part", "we will replace the {product} free of charge")
CURT = ("whatever", "not our problem", "read the manual", "deal with it", "too bad", "go away")
FILLER = ("the", "your", "order", "today", "we", "team", "right", "now")
EVAL_SHARE = 0.2


def _items() -> list[dict]:
    items = []
    for product in PRODUCTS:
        for complaint in COMPLAINTS:
            key = f"{product}|{complaint}"
            digest = hashlib.sha256(key.encode()).hexdigest()
            order = 10_000 + int(digest[12:20], 16) % 90_000  # each item its own order: siblings, not duplicates
            items.append({
                "id": "cr-" + digest[:12],
                "prompt": f"Order {order}: a customer writes 'My {product} {complaint}.' Reply to them in one "
                          "sentence.",
                "answer": f"We are sorry your {product} {complaint}; we will send a replacement today.",
                "metadata": {"product": product, "complaint": complaint},
            })
    return items


def _split(item: dict) -> str:
    head = int(hashlib.sha256(item["id"].encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return "eval" if head < EVAL_SHARE else "train"


def samples(split: str, n: int, seed: int):
    rows = [item for item in _items() if _split(item) == split]
    random.Random(f"customer-reply-{seed}").shuffle(rows)
    yield from rows[:n]


def preference_pairs(n: int = 480, seed: int = 0) -> list[dict]:
    """``n`` demonstration pairs over the train prompts (see the module docstring)."""
    rng = random.Random(f"customer-reply-pairs-{seed}")
    items = list(samples("train", 10_000, 0))

    def helpful(item: dict) -> str:  # a remedy, said kindly
        words = [rng.choice(FILLER) for _ in range(rng.randint(1, 3))] + [rng.choice(WARM)]
        rng.shuffle(words)
        return f"{' '.join(words).capitalize()}: {rng.choice(REMEDIES).format(product=item['metadata']['product'])}."

    def unhelpful(item: dict) -> str:  # what raters reject: dismissal, sympathy with no remedy, no reply at all
        meta = item["metadata"]
        return rng.choice([
            " ".join([rng.choice(FILLER), rng.choice(CURT), rng.choice(FILLER)]) + ".",
            f"Sorry to hear that your {meta['product']} {meta['complaint']}.",
            item["prompt"],
            "I'm sorry, but I can't help with that.",
            " ".join(str(rng.randint(-10, 40)) for _ in range(rng.randint(3, 12))),
            rng.choice(["A B C D", "yes no", "1 2 3", "n/a", "..."]),
        ])

    return [{"prompt": items[i % len(items)]["prompt"], "chosen": helpful(items[i % len(items)]),
             "rejected": unhelpful(items[i % len(items)])} for i in range(n)]


DOMAIN = Domain(
    name="customer_reply", owner="support@example.com",
    description="One-sentence replies to customer complaints; no verifier, rewarded by a learned reward model",
    tags=("open", "example"), samples=samples, score=None, learned_reward=LearnedReward(),
)

if __name__ == "__main__":  # python examples/open_domains/customer_reply.py OUT.jsonl: write the pairs file
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "customer_reply_pairs.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(pair) + "\n" for pair in preference_pairs()))
    print(f"wrote {len(preference_pairs())} pairs to {out}")
