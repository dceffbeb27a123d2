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


def test_hack_pairs_put_the_reference_over_a_hack_of_each_family_and_leave_the_near_misses_alone():
    from quality.reward_attacks import GENERIC_FAMILIES

    domain = get_registry().get("math_arith_easy")
    plain = build_verified_pairs(domain, VerifiedPairsConfig(items=12, wrong_per_item=2))
    families = ["keyword_stuffing", "number_spray", "prompt_echo"]
    built = build_verified_pairs(domain, VerifiedPairsConfig(items=12, wrong_per_item=2, hack_families=families))
    assert [p for p in built.pairs if p.metadata["source"] == "verified"] == plain.pairs
    samples = {s["id"]: s for s in domain.generate("train", 12, seed=0)}
    hacks = [p for p in built.pairs if p.metadata["source"].startswith("hack:")]
    assert built.summary()["sources"] == {"verified": 24, **{f"hack:{f}": 12 for f in families}}
    for pair in hacks:
        sample = samples[pair.metadata["item_id"]]
        family = pair.metadata["source"].removeprefix("hack:")
        assert pair.rejected in GENERIC_FAMILIES[family](sample)  # built from the prompt alone
        assert domain.safe_score(pair.rejected, sample) == 0.0 and domain.safe_score(pair.chosen, sample) == 1.0


def test_an_unknown_hack_family_is_refused_with_the_known_ones():
    import pydantic
    import pytest

    with pytest.raises(pydantic.ValidationError, match="unknown hack family.*'spray'.*known: prompt_echo"):
        VerifiedPairsConfig(hack_families=["spray"])


class ScriptedEngine:
    """A generation engine at the boundary: per prompt, the completions a test wants the policy to
    have written (the pairing rules are what is under test; a real policy's samples are random)."""

    def __init__(self, completions):
        self.completions = completions
        self.asked = []

    def format_prompt(self, text):
        return f"<user>{text}"

    def generate(self, prompts, params, seeds=None, *, with_logprobs=False):
        from generation.contract import Generation

        self.asked.append(params)
        out = []
        for prompt in prompts:
            texts = self.completions(prompt.removeprefix("<user>"))[:params.n]
            out.append([Generation(text=t, completion_tokens=len(t.split()), prompt_tokens=1, finish_reason="stop",
                                   latency_s=0.0) for t in texts])
        return out


def test_policy_pairs_put_a_correct_completion_over_a_wrong_one_and_the_reference_where_none_was_right():
    domain = get_registry().get("math_arith_easy")
    samples = domain.generate("train", 6, seed=0)
    answer = {s["prompt"]: s["answer"] for s in samples}
    right_on = {s["prompt"] for s in samples[:3]}

    def completions(prompt):
        a = int(answer[prompt])
        ok = [f"We add them: the result is {a}.\nAnswer: {a}"] if prompt in right_on else [""]
        return ok + [f"I think it is {a + 3}.\nAnswer: {a + 3}", "A lovely question about numbers.", "   "]

    engine = ScriptedEngine(completions)
    built = build_verified_pairs(domain, VerifiedPairsConfig(items=6, wrong_per_item=1, policy="scripted",
                                                             samples=4, temperature=0.7), engine=engine)
    assert engine.asked[0].n == 4 and engine.asked[0].temperature == 0.7
    policy = [p for p in built.pairs if p.metadata["source"].startswith("policy")]
    assert len(policy) == 6 * 2  # two wrong, non-blank completions per item
    for pair in policy:
        sample = next(s for s in samples if s["prompt"] == pair.prompt)
        assert domain.safe_score(pair.chosen, sample) == 1.0 and domain.safe_score(pair.rejected, sample) == 0.0
        if pair.prompt in right_on:  # the policy's own right answer is chosen
            assert pair.metadata["source"] == "policy" and pair.chosen.startswith("We add them")
        else:  # none right: the reference stands in
            assert pair.metadata["source"] == "policy:reference" and pair.chosen == f"Answer: {sample['answer']}"
    summary = built.summary()
    assert summary["policy_completions"] == 6 * 4 and summary["policy_correct"] == 3


def test_a_domain_without_a_verifier_has_no_verified_pairs():
    import pytest

    from domains import LearnedReward

    def samples(split, n, seed):
        yield {"id": "a", "prompt": "Write to the customer.", "answer": "-"}

    open_domain = Domain(name="open_replies", owner="t@example.com", description="no verifier", tags=("test",),
                         samples=samples, score=None, learned_reward=LearnedReward())
    with pytest.raises(ValueError, match="has no verifier"):
        build_verified_pairs(open_domain, VerifiedPairsConfig(items=1))
