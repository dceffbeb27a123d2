"""Text for the long-context domains, built to an exact length in SmolLM2's tokens.

A long-context item is "4k" when its prompt is ~4,096 tokens of the policy's tokenizer, not 4,096
characters. Generators must be deterministic and cheap, and must not need the tokenizer (which
exists only after the policy has been converted), so every piece of text they write comes from
fixed vocabularies whose token counts are known: SmolLM2's tokenizer splits text into
pre-tokens first (each digit alone, then GPT-2's byte-level regex: a word with its leading space,
a punctuation run, a whitespace run) and BPE never merges across pre-tokens, so the count of a
text is the sum of its pre-tokens' counts. ``long_context_tokens.json`` holds the count of every
pre-token these vocabularies can produce, made from the real tokenizer by::

    python -m domains.builtin._long_text --write-table <models>/smollm2/tokenizer.json

``tests/domains/test_long_context.py`` checks :func:`count_tokens` against the real tokenizer on
generated prompts of every long-context domain, so an edit to a vocabulary that the table does
not cover fails there (and :func:`count_tokens` raises on an unknown pre-token rather than guess).
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from pathlib import Path

TABLE_PATH = Path(__file__).with_name("long_context_tokens.json")

# GPT-2's pre-tokenizer on ASCII text, after SmolLM2's individual-digit split
_PRETOKEN = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
_DIGIT = re.compile(r"[0-9]")


def pretokens(text: str) -> list[str]:
    """SmolLM2's pre-tokens of ``text`` (ASCII): digits one by one, the rest GPT-2's regex."""
    out: list[str] = []
    pos = 0
    for m in _DIGIT.finditer(text):
        if m.start() > pos:
            out += _PRETOKEN.findall(text[pos:m.start()])
        out.append(m.group(0))
        pos = m.end()
    if pos < len(text):
        out += _PRETOKEN.findall(text[pos:])
    return out


@lru_cache(maxsize=1)
def _table() -> dict[str, int]:
    return json.loads(TABLE_PATH.read_text())


def count_tokens(text: str) -> int:
    """SmolLM2 tokens of ``text`` (no special tokens), for text made of this module's vocabularies."""
    table = _table()
    total = 0
    for piece in pretokens(text):
        if piece.isdigit():
            total += 1
            continue
        try:
            total += table[piece]
        except KeyError:
            raise KeyError(f"pre-token {piece!r} is not in {TABLE_PATH.name}: a vocabulary changed; regenerate it "
                           "with `python -m domains.builtin._long_text --write-table <smollm2>/tokenizer.json`") from None
    return total


# -- vocabularies ---------------------------------------------------------------------------------

# Filler ("haystack") sentences: plain, number-free, name-free statements, RULER's "noise" widened
# so that consecutive items do not share one repeated paragraph.
FILLER = (
    "The grass is green and the sky is blue.", "The sun rises in the east and sets in the west.",
    "A quiet river runs past the old mill.", "The market opens early on most days.",
    "Birds gather on the roof when the weather turns cold.", "The library keeps its doors open late.",
    "A light rain fell over the valley during the night.", "The bakery on the corner sells fresh bread.",
    "Children walk to school along the narrow path.", "The train was a few minutes late this morning.",
    "Leaves cover the road after a windy afternoon.", "The garden needs water before the heat of noon.",
    "A small boat drifts slowly across the lake.", "The museum added a new room for paintings.",
    "Most of the shops close before the evening meal.", "The hills look soft and gray in the fog.",
    "A cat sleeps in the window of the bookshop.", "The bridge was painted a bright shade of red.",
    "Farmers bring their vegetables to town each week.", "The wind carries the smell of salt from the sea.",
    "An old clock stands in the hall of the station.", "The kitchen smells of coffee and warm butter.",
    "The students read quietly in the large hall.", "A long line of trees follows the edge of the field.",
    "The moon was bright enough to read by.", "Snow stays on the mountain tops until late spring.",
    "The workers finished the new road before the rains.", "A dog waits patiently by the garden gate.",
    "The fountain in the square was cleaned last week.", "Clouds moved quickly across the open sky.",
    "The painter mixed colors on a wooden board.", "The village hall hosts a dance every season.",
    "Fresh flowers stand in a jar on the table.", "The path through the forest is soft with moss.",
    "The harbor is busy when the fishing boats return.", "A warm fire burns in the stone fireplace.",
    "The orchard gives more apples than anyone can eat.", "The old road winds between the farms.",
    "People sit on the steps and watch the street.", "The teacher wrote a short poem on the board.",
    "Rain drums softly on the tin roof of the shed.", "The bell in the tower rings at noon.",
    "A field of wheat bends in the summer wind.", "The shopkeeper sweeps the floor every morning.",
    "The stars are clear on a cold and dry night.", "A narrow stream crosses the meadow.",
    "The guests talked late into the night.", "Ships wait outside the port for the tide.",
)

ADJECTIVES = (
    "amber", "brave", "calm", "silent", "golden", "hidden", "lucky", "misty", "noble", "quick",
    "rapid", "royal", "rustic", "scarlet", "shiny", "silver", "smooth", "solar", "steady", "stormy",
    "sunny", "swift", "tender", "tidy", "velvet", "vivid", "wild", "wise", "young", "zesty",
    "ancient", "bold", "bright", "clever", "crimson", "eager", "fancy", "gentle", "happy", "icy",
)
NOUNS = (
    "anchor", "badger", "banner", "beacon", "canyon", "castle", "comet", "falcon", "feather", "garden",
    "harbor", "island", "jacket", "kettle", "lantern", "meadow", "mirror", "needle", "orchid", "pebble",
    "pepper", "pillow", "planet", "pocket", "puzzle", "rabbit", "ribbon", "rocket", "saddle", "shadow",
    "signal", "spider", "summit", "thunder", "tiger", "tunnel", "violin", "wagon", "window", "zephyr",
)
# variable names (variable tracking) and list words (aggregation): none of them appears in the
# instructions or the filler, so a scorer can read them off a completion unambiguously
WORDS = (
    "acorn", "alpaca", "anvil", "apricot", "arrow", "atlas", "avocado", "bamboo", "banjo", "barley",
    "basil", "beetle", "biscuit", "blanket", "blossom", "bonnet", "bramble", "breeze", "brick", "bucket",
    "buffalo", "butter", "button", "cabin", "cactus", "camel", "candle", "carrot", "cedar", "cherry",
    "chimney", "cinnamon", "clover", "cobalt", "coconut", "copper", "coral", "cotton", "crayon", "cricket",
    "crystal", "cucumber", "cushion", "daisy", "dolphin", "donkey", "dragon", "eagle", "ember", "engine",
    "fabric", "fennel", "fiddle", "flannel", "flute", "fossil", "galaxy", "garlic", "gazelle", "ginger",
    "glacier", "goblet", "granite", "grape", "guitar", "hammer", "hazel", "helmet", "honey", "iris",
    "ivory", "jasmine", "jelly", "jungle", "kayak", "kernel", "koala", "ladder", "lemon", "lily",
    "lobster", "magnet", "mango", "maple", "marble", "melon", "mint", "mitten", "monkey", "mustard",
    "nectar", "nutmeg", "oak", "olive", "onion", "otter", "oyster", "paddle", "panda", "parrot",
    "peach", "peanut", "pelican", "penguin", "pickle", "pigeon", "pine", "plum", "pony", "poppy",
    "potato", "pumpkin", "quail", "quartz", "radish", "raisin", "raven", "reindeer", "robin", "saffron",
    "salmon", "sandal", "sapphire", "sardine", "scarf", "seal", "sesame", "shovel", "spinach", "sponge",
    "squirrel", "starfish", "straw", "sugar", "sunflower", "tomato", "topaz", "trumpet", "tulip", "turnip",
    "turtle", "umbrella", "vanilla", "walnut", "walrus", "wheel", "willow", "wizard", "yogurt", "zebra",
)

# the filing family: companies, segments, narrative
COMPANY_FIRST = ("Northwind", "Bluecrest", "Redwood", "Silverline", "Harborview", "Ironbridge", "Clearwater",
                 "Stonegate", "Brightfield", "Oakridge", "Westmark", "Eastpoint")
COMPANY_LAST = ("Holdings", "Industries", "Group", "Systems", "Partners", "Technologies")
SEGMENTS = ("Cloud Services", "Retail Banking", "Industrial Equipment", "Consumer Electronics", "Health Care",
            "Energy Storage", "Logistics", "Software Licenses", "Advertising", "Insurance", "Semiconductors",
            "Medical Devices")
QUARTERS = ("first", "second", "third", "fourth")
FILING_FILLER = (
    "Management believes that the company is well positioned for the coming year.",
    "The company continues to invest in research and in its people.",
    "Competition in our markets remains intense and may increase.",
    "Our results may vary from period to period for many reasons.",
    "We rely on a small number of suppliers for certain parts.",
    "Changes in interest rates could affect the cost of our debt.",
    "The board reviews the risk management program each year.",
    "We may not be able to retain key members of our staff.",
    "Demand for our products depends on general economic conditions.",
    "The company is subject to laws and rules in many countries.",
    "We expect capital spending to remain steady over the next year.",
    "Customers may delay orders when budgets are under pressure.",
    "Our information systems could be disrupted by attacks or failures.",
    "The company has a long history of paying its bills on time.",
    "Currency movements can change the reported value of foreign sales.",
    "We believe our cash on hand is enough to meet our needs.",
    "New products may not be accepted by the market as we expect.",
    "Pricing pressure may reduce the margins of some product lines.",
    "The company leases most of its offices and warehouses.",
    "Legal claims arise from time to time in the normal course of business.",
    "We continue to review our costs and to simplify our operations.",
    "Weather and natural events may disrupt our supply chain.",
    "Our growth depends on our ability to hire and train staff.",
    "The audit committee meets with the auditors each quarter.",
)


def filler_sentences(rng: random.Random, budget: int, sentences: tuple[str, ...] = FILLER) -> list[str]:
    """Sentences (each with a leading space) drawn from ``sentences`` until ``budget`` tokens are
    nearly used: the result never exceeds the budget and falls short of it by less than the
    shortest sentence."""
    counted = _sentence_counts(sentences)
    shortest = min(n for _, n in counted)
    out, used = [], 0
    while budget - used >= shortest:
        text, n = counted[rng.randrange(len(counted))]
        if used + n > budget:  # too long for what is left: take the longest that fits
            fitting = [c for c in counted if used + c[1] <= budget]
            text, n = max(fitting, key=lambda c: c[1])
        out.append(text)
        used += n
    return out


@lru_cache(maxsize=8)
def _sentence_counts(sentences: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    return tuple((" " + s, count_tokens(" " + s)) for s in sentences)


def _table_pretokens() -> set[str]:
    """Every pre-token the vocabularies and the long-context templates can produce."""
    from domains.builtin import long_context

    texts = [" " + s for s in FILLER + FILING_FILLER]
    for vocab in (ADJECTIVES, NOUNS, WORDS, COMPANY_FIRST, COMPANY_LAST, SEGMENTS, QUARTERS):
        for word in vocab:
            texts += [" " + word, word, "\n" + word, " " + word.capitalize(), word.capitalize(), "-" + word,
                      " " + word + ".", " " + word + ",", " " + word + "?", " " + word + ":"]
    texts += long_context.template_texts()
    texts += ["\n" * k for k in range(1, 5)]  # whitespace runs where an empty section meets a heading
    pieces: set[str] = set()
    for text in texts:
        pieces.update(p for p in pretokens(text) if not p.isdigit())
    return pieces


def write_table(tokenizer_json: str) -> int:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(tokenizer_json)
    table = {p: len(tokenizer.encode(p, add_special_tokens=False).ids) for p in sorted(_table_pretokens())}
    TABLE_PATH.write_text(json.dumps(table, indent=0, sort_keys=True) + "\n")
    print(f"{len(table)} pre-tokens written to {TABLE_PATH}")
    return 0


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Regenerate the long-context token table from SmolLM2's tokenizer.")
    parser.add_argument("--write-table", metavar="TOKENIZER_JSON", required=True,
                        help="path of SmolLM2's tokenizer.json (e.g. $ASSAY_HOME/models/smollm2/tokenizer.json)")
    raise SystemExit(write_table(parser.parse_args().write_table))
