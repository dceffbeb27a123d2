"""Spatial reasoning over procedurally generated 3D scenes, with exact verifiers.

A scene holds 3-7 objects, each a unique colour + shape with an integer centre (x, y, z) in
0..9 and an integer size 1..4. Questions: counts (by colour, by shape, larger than an object),
pairwise relations (left/right of, in front of/behind, above/below), the Euclidean distance
between two centres (two decimals, within 0.01), the object closest to another, and the highest
object. Generation rejects ties (equal coordinates on the asked axis, two objects equally close),
so every question has exactly one right answer. Name answers must mention exactly one object of
the scene besides the one the question is about (a reply naming several hedges and scores 0).
"""

from __future__ import annotations

import math
import random
import re

from domains import Domain
from domains.builtin._common import ANSWER_HINT, declared_answer, declared_number, draws_from, stream_split

OWNER = "spatial-team@assay.dev"
COLORS = ("red", "blue", "green", "yellow", "purple", "orange", "gray", "white")
SHAPES = ("cube", "sphere", "cylinder", "cone", "pyramid")
RELATIONS = {  # phrase -> (axis, sign): "A is <phrase> B" when sign * (A[axis] - B[axis]) > 0
    "to the left of": (0, -1), "to the right of": (0, 1), "in front of": (1, -1),
    "behind": (1, 1), "above": (2, 1), "below": (2, -1),
}
KINDS = ("count_color", "count_shape", "count_larger", "relation", "distance", "closest", "highest")
DISTANCE_TOL = 0.01 + 1e-9
HEADER = ("A 3D scene contains these objects (x grows to the right, y grows away from the viewer, "
          "z grows upward; positions are centres, size is the edge length or diameter):")


def _scene(rng: random.Random) -> list[dict]:
    count = rng.randint(3, 7)
    kinds = rng.sample([(c, s) for c in COLORS for s in SHAPES], count)
    positions = rng.sample([(x, y, z) for x in range(10) for y in range(10) for z in range(10)], count)
    return [{"name": f"{c} {s}", "color": c, "shape": s, "pos": p, "size": rng.randint(1, 4)}
            for (c, s), p in zip(kinds, positions)]


def _dist(a: dict, b: dict) -> float:
    return math.dist(a["pos"], b["pos"])


def make_item(rng: random.Random) -> dict | None:
    objects = _scene(rng)
    kind = rng.choice(KINDS)
    a, b = rng.sample(objects, 2)
    if kind == "count_color":
        color = rng.choice(COLORS)
        question, answer, form = f"How many {color} objects are there?", str(sum(o["color"] == color for o in objects)), "number"
    elif kind == "count_shape":
        shape = rng.choice(SHAPES)
        question, answer, form = f"How many {shape}s are there?", str(sum(o["shape"] == shape for o in objects)), "number"
    elif kind == "count_larger":
        question = f"How many objects are larger than the {a['name']}?"
        answer, form = str(sum(o["size"] > a["size"] for o in objects)), "number"
    elif kind == "relation":
        phrase = rng.choice(list(RELATIONS))
        axis, sign = RELATIONS[phrase]
        if a["pos"][axis] == b["pos"][axis]:
            return None
        question = f"Is the {a['name']} {phrase} the {b['name']}?"
        answer, form = ("yes" if sign * (a["pos"][axis] - b["pos"][axis]) > 0 else "no"), "yes_no"
    elif kind == "distance":
        question = f"What is the distance between the centres of the {a['name']} and the {b['name']}? Round to two decimals."
        answer, form = f"{_dist(a, b):.2f}", "number"
    elif kind == "closest":
        ranked = sorted((o for o in objects if o is not a), key=lambda o: _dist(a, o))
        if len(ranked) > 1 and math.isclose(_dist(a, ranked[0]), _dist(a, ranked[1])):
            return None
        question, answer, form = f"Which object is closest to the {a['name']}?", ranked[0]["name"], "object"
    else:  # highest
        ranked = sorted(objects, key=lambda o: -o["pos"][2])
        if ranked[0]["pos"][2] == ranked[1]["pos"][2]:
            return None
        question, answer, form = "Which object is highest (largest z)?", ranked[0]["name"], "object"
    lines = [f"- {o['name']} at ({o['pos'][0]}, {o['pos'][1]}, {o['pos'][2]}), size {o['size']}" for o in objects]
    hint = {"number": "Answer with a number.", "yes_no": "Answer yes or no.", "object": "Answer with the object's colour and shape."}[form]
    prompt = "\n".join([HEADER, *lines, f"Question: {question}", f"{hint} {ANSWER_HINT}"])
    asked_about = [a["name"]] if kind == "closest" else []  # restating the question names it
    return {"prompt": prompt, "answer": answer,
            "metadata": {"kind": kind, "form": form, "objects": [o["name"] for o in objects],
                         "asked_about": asked_about}}


def _draws(split: str, seed: int):
    for item in draws_from(make_item, "scene3d", split, seed):
        if item is not None:
            yield item


def samples(split: str, n: int, seed: int):
    yield from stream_split("scene3d", split, n, seed, _draws(split, seed), eval_share=0.5)


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.casefold())


def _mentioned(span: str, names: list[str]) -> set[str]:
    words = _words(span)
    found = set()
    for name in names:
        target = name.split()
        if any(words[i:i + 2] == target for i in range(len(words) - 1)):
            found.add(name)
    return found


def score(completion: str, sample: dict) -> float:
    if not isinstance(completion, str) or not completion.strip():
        return 0.0
    meta = sample.get("metadata") or {}
    meta = meta if isinstance(meta, dict) else {}
    answer = str(sample.get("answer", ""))
    form = meta.get("form")
    if form == "number":
        value = declared_number(completion)
        try:
            reference = float(answer)
        except ValueError:
            return 0.0
        tol = DISTANCE_TOL if meta.get("kind") == "distance" else 1e-9
        return 1.0 if value is not None and abs(value - reference) <= tol else 0.0
    if form == "yes_no":
        span = declared_answer(completion, fallback="whole")  # undeclared "Yes\nNo" names both
        return 1.0 if span is not None and set(_words(span)) & {"yes", "no"} == {answer} else 0.0
    asked = set(meta.get("asked_about") or []) - {answer}
    names = [n for n in meta.get("objects") or [] if isinstance(n, str) and n not in asked] or [answer]
    span = declared_answer(completion)
    return 1.0 if span is not None and _mentioned(span, names) == {answer} else 0.0


DOMAIN = Domain(
    name="scene3d",
    owner=OWNER,
    description="Procedurally generated 3D scenes: counts, spatial relations, distances, closest "
                "and highest objects, each verified exactly against the scene",
    tags=("spatial", "reasoning", "3d"),
    samples=samples,
    score=score,
)
