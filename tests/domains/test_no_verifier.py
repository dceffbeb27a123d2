"""A domain with no verifier (score=None, rewarded by its learned reward alone; issue 31): the
declaration is validated, nothing scores it exactly by accident, and each stage that needs a
verifier says so instead of inventing a score (self-test, attacks, sweeps, rewards, comparisons).
The example domain shipped for the README (examples/open_domains/customer_reply.py) is loaded as
a user's plugin; the lake is real, in a tmp ASSAY_HOME."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from domains import Domain, DomainError, LearnedReward, NoVerifierError
from domains.registry import load_registry
from evaluation.promotion import PromotionError, compare_checkpoints
from evaluation.sweep import run_sweep
from quality.domain_check import CHECK_NAMES, check_domain
from storage.lake import Lake
from storage.preference_pairs import PreferencePair
from tests.conftest import run_cli
from training.config import load_recipe
from training.rewards import RewardComposer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "open_domains"


@pytest.fixture(scope="module")
def open_domain():
    return load_registry(str(EXAMPLES), include_builtins=False).get("customer_reply")


def _samples(split, n, seed):
    for i in range(n):
        yield {"id": f"{split}-{i}", "prompt": f"Write a line about {split} {i}.", "answer": "a line"}


def test_no_verifier_needs_a_learned_reward_that_is_the_whole_reward():
    with pytest.raises(DomainError, match=r"has no reward: pass score=.*learned_reward=LearnedReward\(\).*assay reward "
                                          r"train open_x --pairs FILE"):
        Domain(name="open_x", owner="o", description="d", samples=_samples)
    with pytest.raises(DomainError, match="weight must be 1.0"):
        Domain(name="open_x", owner="o", description="d", samples=_samples, learned_reward=LearnedReward(weight=0.5))
    with pytest.raises(DomainError, match="score_many, episode_task, attacks and equivalents need one"):
        Domain(name="open_x", owner="o", description="d", samples=_samples, learned_reward=LearnedReward(),
               attacks=lambda sample: {})
    with pytest.raises(DomainError, match="equivalents need one"):
        Domain(name="open_x", owner="o", description="d", samples=_samples, learned_reward=LearnedReward(),
               equivalents=lambda sample: {})
    with pytest.raises(DomainError, match="equivalents must be a callable"):
        Domain(name="open_x", owner="o", description="d", samples=_samples, score=lambda c, s: 0.0,
               equivalents=["1,000"])
    with pytest.raises(DomainError, match="score must be a callable"):
        Domain(name="open_x", owner="o", description="d", samples=_samples, score="exact")
    domain = Domain(name="open_x", owner="o", description="d", samples=_samples, learned_reward=LearnedReward())
    assert not domain.has_verifier
    sample = domain.generate("eval", 1)[0]
    # nothing scores it exactly, not even its own reference answer: an error, never a 0 or a 1
    for call in (lambda: domain.safe_score("a line", sample), lambda: domain.safe_score_many(["a line"], [sample])):
        with pytest.raises(NoVerifierError, match="open_x.*no verifier.*assay reward check open_x"):
            call()


def test_its_self_test_checks_its_data_and_says_what_does_not_apply(open_domain):
    result = check_domain(open_domain, n=8)
    assert result["passed"], result
    assert set(result["checks"]) == {"deterministic", "splits_disjoint", "no_verifier", "learned_reward_gate"}
    assert "assay reward check customer_reply" in result["checks"]["no_verifier"]["detail"]
    assert "the gate's defaults" in result["checks"]["learned_reward_gate"]["detail"]
    # a declared bar is shown; one that is no bar fails the self-test with the fields it may use
    barred = dataclasses.replace(open_domain, learned_reward=LearnedReward(gate={"min_accuracy_low": 0.8}))
    assert "min_accuracy_low=0.8" in check_domain(barred, n=4)["checks"]["learned_reward_gate"]["detail"]
    broken_bar = dataclasses.replace(open_domain, learned_reward=LearnedReward(gate={"min_accuracy_low": 1.5}))
    result = check_domain(broken_bar, n=4)
    assert not result["passed"] and not result["checks"]["learned_reward_gate"]["passed"]
    assert "min_accuracy_low must be in [0, 1), got 1.5" in result["checks"]["learned_reward_gate"]["detail"]
    assert "reference_scores_1" in result["checks"]["no_verifier"]["detail"]

    # the data checks can fail: a generator that repeats train items in eval, or is not deterministic
    calls = iter(range(10_000))

    def leaky(split, n, seed):
        for i in range(n):
            yield {"id": f"x-{i}-{next(calls) if split == 'train' else 0}", "prompt": f"item {i}", "answer": "a"}

    broken = Domain(name="leaky", owner="o", description="d", samples=leaky, learned_reward=LearnedReward())
    failed = {name for name, check in check_domain(broken, n=4)["checks"].items() if not check["passed"]}
    assert failed == {"deterministic", "splits_disjoint"}
    assert set(CHECK_NAMES) - {"deterministic", "splits_disjoint"}  # the scorer checks it does not run


def test_rewards_are_the_learned_reward_alone_with_no_score_component(open_domain):
    config = load_recipe("tiny", domains=["customer_reply"])
    calls = []

    def learned(prompts, completions):  # the reward model's interface: (prompts, completions) -> values in (0, 1)
        calls.append(len(completions))
        return [0.9 if "refund" in c else 0.2 for c in completions]

    composer = RewardComposer(config, {"customer_reply": open_domain}, {"customer_reply": learned})
    sample = open_domain.generate("train", 1)[0]
    out = composer.score_many(["customer_reply"] * 2, ["your refund is on its way.", "whatever."], [sample] * 2, [5, 2])
    assert calls == [2]  # one batch
    assert [r.components for r in out] == [{"learned": 0.9}, {"learned": 0.2}]
    assert [r.reward for r in out] == pytest.approx([0.9, 0.2])


def test_sweeps_leave_it_out_and_say_so_without_loading_a_model(open_domain, tmp_path):
    said = []

    def factory():
        raise AssertionError("nothing to generate: the engine must not be built")

    result = run_sweep(Lake(tmp_path / "home"), "ckpt-x", [open_domain], factory, log=said.append, prompt_format="raw")
    assert result.domains == [] and not result.model_loaded
    assert said == ["not swept (no verifier; their learned reward is logged per training step): customer_reply"]


def test_a_checkpoint_with_no_sweep_results_cannot_be_compared(tmp_path):
    with pytest.raises(PromotionError, match="'cand' has no sweep results.*domains with no verifier are not swept"):
        compare_checkpoints(Lake(tmp_path / "home"), "cand", "base")


def test_attacks_skip_it_with_the_reason(tmp_path):
    env = {"ASSAY_DOMAINS_PATH": str(EXAMPLES), "ASSAY_HOME": str(tmp_path / "home")}
    out = run_cli("domains", "attack", "customer_reply", env=env)
    assert out.returncode == 2 and "no verifier to attack" in out.stderr and "assay reward check customer_reply" in \
        out.stderr


def test_the_example_pairs_are_valid_preferences(open_domain):
    import importlib.util

    spec = importlib.util.spec_from_file_location("customer_reply_example", EXAMPLES / "customer_reply.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pairs = module.preference_pairs()
    assert len(pairs) == 480 and len({p["prompt"] for p in pairs}) > 50
    train_prompts = {s["prompt"] for s in open_domain.generate("train", 1000)}
    eval_prompts = {s["prompt"] for s in open_domain.generate("eval", 1000)}
    assert {p["prompt"] for p in pairs} <= train_prompts and not train_prompts & eval_prompts
    for pair in pairs:
        PreferencePair(id="x", prompt=pair["prompt"], chosen=pair["chosen"], rejected=pair["rejected"])
        assert pair["chosen"] != pair["rejected"]
