"""Preference pairs from verifiable domains (training.verified_pairs): every pair's chosen answer
scores 1.0 and its rejected one 0.0 under the domain's own scorer; items where that cannot be shown
are skipped and counted, never passed off as pairs."""

from __future__ import annotations

from domains import Domain, get_registry
from training.reward_config import VerifiedPairsConfig
from training.verified_pairs import build_verified_pairs


def test_math_pairs_are_near_misses_the_verifier_confirms():
    domain = get_registry().get("math_arith_easy")
    built = build_verified_pairs(domain, VerifiedPairsConfig(items=30, wrong_per_item=3))
    assert built.summary()["pairs"] == 3 * built.items and not built.skipped
    samples = {s["id"]: s for s in domain.generate("train", 30, seed=0)}
    for pair in built.pairs:
        sample = samples[pair.metadata["item_id"]]
        assert domain.safe_score(pair.chosen, sample) == 1.0
        assert domain.safe_score(pair.rejected, sample) == 0.0
        assert pair.chosen == f"Answer: {sample['answer']}" and pair.rejected.startswith("Answer: ")
        assert abs(int(pair.rejected.split()[-1]) - int(sample["answer"])) <= max(10, 2 * abs(int(sample["answer"])))


def test_a_text_domain_gets_sibling_answers_in_its_own_format():
    domain = get_registry().get("logic")
    built = build_verified_pairs(domain, VerifiedPairsConfig(items=12, wrong_per_item=2))
    assert len(built.pairs) == 24
    answers = {s["answer"] for s in domain.generate("train", 12, seed=0)}
    texts = 0
    for pair in built.pairs:
        chosen = pair.chosen.removeprefix("Answer: ")
        rejected = pair.rejected.removeprefix("Answer: ")
        if chosen.lstrip("-").isdigit():
            continue  # logic's counting puzzles have numbers: near misses, as for arithmetic
        texts += 1
        assert rejected in answers and rejected != chosen
    assert texts >= 10


def test_items_the_verifier_cannot_confirm_are_skipped_and_counted():
    def samples(split, n, seed):
        for i in range(n):
            yield {"id": f"{split}-{i}", "prompt": f"Say {i}", "answer": str(i)}

    never = Domain(name="never_right", owner="t@example.com", description="scores nothing", tags=("test",),
                   samples=samples, score=lambda completion, sample: 0.0)
    built = build_verified_pairs(never, VerifiedPairsConfig(items=5))
    assert built.pairs == [] and built.skipped == {"reference_not_scored_1": 5}

    always = Domain(name="always_right", owner="t@example.com", description="scores everything", tags=("test",),
                    samples=samples, score=lambda completion, sample: 1.0)
    built = build_verified_pairs(always, VerifiedPairsConfig(items=5))
    assert built.pairs == [] and built.skipped == {"too_few_wrong_answers": 5}
