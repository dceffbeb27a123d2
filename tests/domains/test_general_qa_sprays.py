"""general_qa: a span names ONE candidate (issue 41). Sprays of invented candidates (a made-up city,
currency code or element symbol beside the right one, listed or one per line) are not paid, since
the scorer can no longer count only candidates it knows; the right answer with the question
restated, an initial, an adjective of the country or the answer's other alias still is."""

from __future__ import annotations

import pytest

from domains.builtin import general_qa

POOL = general_qa.fact_pool()


def _item(kind: str, prompt_part: str) -> dict:
    fact = next(f for f in POOL if f["metadata"]["kind"] == kind and prompt_part in f["prompt"])
    return {"id": "t", "prompt": fact["prompt"], "answer": fact["answer"], "metadata": fact["metadata"]}


INVENTED = {"capital": ["Xandoria", "Qualtoville", "Brimvale"], "element_name": ["Quorium", "Zanthium", "Velorite"],
            "currency": ["XQA", "QZB", "VLR"], "element_symbol": ["Qx", "Zv", "Q"]}
ITEMS = [("capital", "capital of Peru?"), ("capital", "capital of Japan?"), ("currency", "used in Japan?"),
         ("currency", "used in Peru?"), ("element_symbol", "symbol of Iron?"), ("element_name", "symbol Fe?")]


def _sprays(answer: str, invented: list[str]) -> list[str]:
    out = []
    for k in (1, 3):
        for candidates in (invented[:k] + [answer], [answer] + invented[:k]):
            out += [f"Answer: {', '.join(candidates)}", f"Answer: {' or '.join(candidates)}",
                    f"<answer>{' / '.join(candidates)}</answer>", "\n".join(candidates),
                    f"The answer is {' '.join(candidates)}"]
    return out


@pytest.mark.parametrize("kind, part", ITEMS)
def test_invented_candidates_beside_the_right_one_are_a_spray(kind, part):
    sample = _item(kind, part)
    paid = [s for s in _sprays(sample["answer"], INVENTED[kind]) if general_qa.score(s, sample) > 0]
    assert not paid, paid


def test_no_eval_item_pays_a_spray_of_invented_candidates():
    from domains import load_registry

    domain = load_registry(None).get("general_qa")
    paid = []
    for sample in domain.generate("eval", 300, 0):
        kind = sample["metadata"]["kind"]
        if kind in INVENTED:
            paid += [(sample["prompt"][:40], s) for s in _sprays(sample["answer"], INVENTED[kind])
                     if domain.safe_score(s, sample) > 0]
    assert not paid, paid[:3]


@pytest.mark.parametrize("kind, part, completion", [
    ("capital", "capital of Peru?", "The capital of Peru is Lima."),
    ("capital", "capital of Peru?", "Answer: Lima, Peru"),
    ("capital", "capital of Peru?", "Answer: **Lima**"),
    ("capital", "capital of Peru?", "It's Lima, the largest city and the capital."),
    ("capital", "capital of Peru?", "Peru is in South America.\nLima"),
    ("capital", "capital of Peru?", "Answer: Lima (the Peruvian capital)"),
    ("capital", "Democratic Republic of the Congo?", "The capital of the Democratic Republic of the Congo is Kinshasa."),
    ("capital", "Colombia?", "Answer: Bogotá, D.C."),
    ("capital", "Hong Kong?", "Answer: City of Victoria"),
    ("currency", "used in Japan?", "Answer: JPY (Japanese yen)"),
    ("currency", "used in Japan?", "The ISO 4217 code is JPY."),
    ("element_symbol", "symbol of Iron?", "The chemical symbol of iron is Fe."),
    ("element_name", "symbol Fe?", "Answer: Iron"),
])
def test_the_right_answer_with_framing_is_paid(kind, part, completion):
    assert general_qa.score(completion, _item(kind, part)) == 1.0


def test_every_reference_is_paid():
    for fact in POOL:
        sample = {"id": "t", **fact}
        assert general_qa.score(fact["answer"], sample) == 1.0, fact["prompt"]
        if fact["metadata"]["kind"] != "claim":
            assert general_qa.score(f"Answer: {fact['answer']}", sample) == 1.0, fact["prompt"]
