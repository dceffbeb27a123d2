"""Recipes parse and validate; rewards route to each sample's own domain; the mixture is seeded."""

from __future__ import annotations

from collections import Counter

import pytest

from domains import Domain
from training.config import RECIPES_DIR, GRPOConfig, RecipeError, load_recipe, parse_config
from training.mixture import DomainMixture, mixture_probabilities
from training.rewards import RewardComposer, resolve_reward_spec


@pytest.mark.parametrize("name", ["tiny", "smollm2"])
def test_shipped_recipes_parse(name):
    cfg = load_recipe(name)
    assert cfg.recipe == name and cfg.policy == name and cfg.domains
    assert cfg.resolved_run_name().startswith(f"{name}-")
    params = cfg.flat_params()
    assert params["deepspeed.zero_stage"] == str(cfg.deepspeed.zero_stage)
    assert params["beta"] == str(cfg.beta) and params["run_name"] == cfg.resolved_run_name()


def test_overrides_and_fingerprint():
    a = load_recipe("tiny", max_steps=3, domains=["x"])
    b = load_recipe("tiny", max_steps=4, domains=["x"], seed=9)
    assert a.max_steps == 3 and a.domains == ["x"]
    assert a.resolved_run_name() != b.resolved_run_name()
    # More steps of the same run is the same run (it continues); the schedule ignores max_steps.
    assert load_recipe("tiny", max_steps=50, domains=["x"]).resolved_run_name() == a.resolved_run_name()
    assert load_recipe("tiny", max_steps=3, domains=["x"]).resolved_run_name() == a.resolved_run_name()


@pytest.mark.parametrize("data, message", [
    ({"num_generations": 1}, "num_generations"),
    ({"loss_type": "ppo"}, "loss_type"),
    ({"scale_rewards": "median"}, "scale_rewards"),
    ({"epsilon": 0.2, "epsilon_high": 0.1}, "epsilon_high"),
    ({"reward_weights": {"score": 1.0, "style": 1.0}}, "unknown reward components"),
    ({"reward_weights": {"score": 0.0}}, "all 0"),
    ({"reward_weights": {"score": 1.0, "format": 0.5}}, "needs a format_pattern"),
    ({"rewards": {"domains": {"a": {"reward_weights": {"length": 1.0}}}}}, "rewards.domains.a: reward weight 'length'"),
    ({"deepspeed": {"zero_stage": 4}}, "deepspeed.zero_stage"),
    ({"deepspeed": {"precision": "fp16"}}, "deepspeed.precision"),
    ({"mixture": {"strategy": "weights"}}, "needs mixture.weights"),
    ({"beta_kl": 0.1}, "beta_kl"),
])
def test_bad_configs_fail_at_parse_time_with_the_field(data, message):
    with pytest.raises(RecipeError, match=message.replace(".", r"\.").replace("'", "'")):
        parse_config(data, "test")


def test_loss_and_scaling_choices_are_listed_once():
    # The recipe schema takes its choices from training.losses, so a loss added there is a valid
    # recipe value at once, and the two lists cannot drift apart.
    from training import losses

    fields = GRPOConfig.model_fields
    assert fields["loss_type"].annotation is losses.LossType
    assert fields["scale_rewards"].annotation is losses.ScaleRewards
    for loss in losses.LOSS_TYPES:
        assert parse_config({"loss_type": loss}).loss_type == loss
    with pytest.raises(RecipeError, match="loss_type"):
        parse_config({"loss_type": "ppo"})


def test_recipe_files_and_unknown_names(tmp_path):
    with pytest.raises(RecipeError, match="unknown recipe 'huge'"):
        load_recipe("huge")
    bad = tmp_path / "bad.yaml"
    bad.write_text("max_steps: -1\n")
    with pytest.raises(RecipeError, match="max_steps"):
        load_recipe(str(bad))
    assert {p.stem for p in RECIPES_DIR.glob("*.yaml")} >= {"tiny", "smollm2"}


@pytest.mark.parametrize("name", ["my run", "../x", "runs/../../etc", "/abs", ".", "..", "v1.2", "-x", "",
                                  "a" * 65, "caf\u00e9", "x\n"])
def test_unsafe_run_and_recipe_names_fail_at_parse_time(name, tmp_path):
    # a run name names runs/<name>, checkpoint partitions and MLflow models: reject it before training
    with pytest.raises(RecipeError, match="run name .* (letters, digits|characters long|non-empty)"):
        parse_config({"run_name": name}, "test")
    with pytest.raises(RecipeError, match="recipe name .*rename the file"):
        parse_config({"recipe": name}, "test")


def test_safe_names_parse_and_a_recipe_file_name_is_checked(tmp_path):
    for name in ("run-1", "A_b", "tiny-0f3c2a1b", "a" * 64):
        assert parse_config({"run_name": name, "recipe": name}).resolved_run_name() == name
    spaced = tmp_path / "my recipe.yaml"
    spaced.write_text("max_steps: 2\n")
    with pytest.raises(RecipeError, match="recipe name 'my recipe'.*'my-recipe'"):
        load_recipe(str(spaced))
    assert load_recipe(str(spaced), recipe="my-recipe").recipe == "my-recipe"


def _domain(name, score):
    return Domain(name=name, owner="t", description="d", samples=lambda s, n, seed: [], score=score)


def test_rewards_route_by_domain_and_compose_components():
    cfg = parse_config({
        "reward_weights": {"score": 1.0},
        "rewards": {"length_target": 4, "domains": {
            "b": {"reward_weights": {"score": 2.0, "format": 0.5, "length": 1.0}, "format_pattern": r"^\d+$"}}},
    })
    composer = RewardComposer(cfg, {"a": _domain("a", lambda c, s: 1.0 if c == s["answer"] else 0.0),
                                    "b": _domain("b", lambda c, s: 0.25)})
    assert composer.score("a", "7", {"answer": "7"}, 1).reward == 1.0
    assert composer.score("a", "8", {"answer": "7"}, 1).reward == 0.0
    scored = composer.score("b", "123", {"answer": "7"}, 8)  # 2*0.25 + 0.5*1 + 1*(-(8-4)/4)
    assert scored.components == {"score": 0.25, "format": 1.0, "length": -1.0}
    assert abs(scored.reward - (0.5 + 0.5 - 1.0)) < 1e-12
    assert resolve_reward_spec(cfg, "a").weights == {"score": 1.0}


def test_scores_are_clamped_and_broken_scorers_raise():
    composer = RewardComposer(GRPOConfig(), {"a": _domain("a", lambda c, s: 7.0),
                                             "b": _domain("b", lambda c, s: "yes")})
    assert composer.score("a", "x", {}, 1).reward == 1.0
    with pytest.raises(ValueError, match="score returned 'yes'"):
        composer.score("b", "x", {}, 1)


def test_a_mixed_batch_is_scored_with_one_call_per_domain_and_composed_per_sample():
    cfg = parse_config({"reward_weights": {"score": 1.0},
                        "rewards": {"length_target": 4, "domains": {
                            "b": {"reward_weights": {"score": 2.0, "length": 1.0}}}}})
    batches, singles = [], []

    def score_many(completions, samples):
        batches.append([s["id"] for s in samples])
        return [1.0 if c == s["answer"] else 0.0 for c, s in zip(completions, samples)]

    def score_a(completion, sample):
        singles.append(sample["id"])
        return 0.5

    batchy = Domain(name="b", owner="t", description="d", samples=lambda s, n, seed: [],
                    score=lambda c, s: pytest.fail("score_many must serve the batch"), score_many=score_many)
    composer = RewardComposer(cfg, {"a": _domain("a", score_a), "b": batchy})
    domains = ["b", "a", "b", "a", "b"]
    completions = ["7", "x", "8", "y", "9"]
    samples = [{"id": f"s{i}", "answer": a} for i, a in enumerate(["7", "-", "7", "-", "9"])]
    tokens = [1, 2, 8, 3, 4]
    scored = composer.score_many(domains, completions, samples, tokens)
    assert batches == [["s0", "s2", "s4"]] and singles == ["s1", "s3"]  # one call for b; a maps score
    assert [r.components["score"] for r in scored] == [1.0, 0.5, 0.0, 0.5, 1.0]
    assert [r.reward for r in scored] == [2.0, 0.5, -1.0, 0.5, 2.0]  # b: 2*score + length penalty (8 > 4)
    batches.clear()
    one_at_a_time = [composer.score(*item) for item in zip(domains, completions, samples, tokens)]
    assert [r.reward for r in one_at_a_time] == [r.reward for r in scored] and len(batches) == 3


def test_mixture_probabilities():
    from training.config import MixtureConfig

    sizes = {"a": 100, "b": 25}
    assert mixture_probabilities(sizes, MixtureConfig(temperature=1.0)) == {"a": 0.8, "b": 0.2}
    flat = mixture_probabilities(sizes, MixtureConfig(temperature=2.0))
    assert abs(flat["a"] - 10 / 15) < 1e-12
    assert mixture_probabilities(sizes, MixtureConfig(strategy="uniform")) == {"a": 0.5, "b": 0.5}
    assert mixture_probabilities(sizes, MixtureConfig(strategy="weights", weights={"a": 1, "b": 3}))["b"] == 0.75
    with pytest.raises(ValueError, match="no weight for b"):
        mixture_probabilities(sizes, MixtureConfig(strategy="weights", weights={"a": 1}))


def test_mixture_draws_are_a_pure_function_of_seed_and_step():
    from training.config import MixtureConfig

    rows = {"a": [{"id": f"a{i}"} for i in range(30)], "b": [{"id": f"b{i}"} for i in range(10)]}
    first = DomainMixture(rows, MixtureConfig(temperature=1.0), seed=3)
    picks = [first.draw(s, 4) for s in range(20)]
    fresh = DomainMixture(rows, MixtureConfig(temperature=1.0), seed=3)
    assert [p.row["id"] for p in fresh.draw(13, 4)] == [p.row["id"] for p in picks[13]]  # resume
    counts = Counter(p.domain for step in picks for p in step)
    assert 0.6 < counts["a"] / 80 < 0.9  # p(a) = 0.75
    ids_a = [p.row["id"] for step in picks for p in step if p.domain == "a"][:30]
    assert len(set(ids_a)) == len(ids_a)  # no repeats within an epoch


def test_a_recipes_rope_scaling_is_validated_and_names_another_run_only_when_set():
    from training.config import load_recipe

    plain = load_recipe("tiny", domains=["x"])
    scaled = load_recipe("tiny", domains=["x"], rope_scaling="YaRN:2.0")
    assert scaled.rope_scaling == "yarn:2" and plain.rope_scaling is None
    assert scaled.resolved_run_name() != plain.resolved_run_name()
    assert load_recipe("tiny", domains=["x"], rope_scaling="none").resolved_run_name() == plain.resolved_run_name()
    with pytest.raises(Exception, match="TYPE:FACTOR"):
        load_recipe("tiny", domains=["x"], rope_scaling="ntk:2")


def test_the_long_context_recipe_fits_its_buckets_and_a_recipe_that_would_cut_them_is_refused(tmp_path):
    from domains import get_registry
    from pipelines.settings import open_lake
    from training.trainer import train

    registry = get_registry()
    long = load_recipe("smollm2_long")
    assert long.deepspeed.gradient_checkpointing and long.rope_scaling is None
    assert max(registry.get(d).context_tokens for d in long.domains) == long.max_prompt_length == 4096
    short = load_recipe("tiny", domains=["long_needle_1k", "long_needle_4k"], max_prompt_length=2048)
    with pytest.raises(ValueError, match=r"would cut the prompts of long_needle_4k \(4096 tokens\): set "
                                         r"max_prompt_length to 4096"):
        train(short, open_lake(tmp_path, write=True), allow_generate=True, progress=False)
    assert not (tmp_path / "checkpoints").exists()  # refused before any work
