"""Learnability sampling: rows drawn ~ p(1-p) of their measured pass rate, domains by summed p(1-p)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from domains import Domain
from domains.registry import Registry
from pipelines.settings import open_lake
from training.config import MixtureConfig, load_recipe
from training.mixture import DomainMixture, mixture_probabilities


def _rows(domain: str, n: int) -> list[dict]:
    return [{"id": f"{domain}{i}", "prompt": "p", "answer": "a"} for i in range(n)]


def test_rows_are_drawn_in_proportion_to_p_times_one_minus_p_and_never_without_signal():
    rows = {"a": _rows("a", 4)}
    weights = {"a": [0.0, 0.25, 0.09, 0.0]}  # p = 0 or 1 -> 0; p = 0.5 -> 0.25; p = 0.1 -> 0.09
    mixture = DomainMixture(rows, MixtureConfig(items="learnability"), seed=1, item_weights=weights)
    counts = Counter(p.row["id"] for s in range(3000) for p in mixture.draw(s, 2))
    assert counts["a0"] == 0 and counts["a3"] == 0
    share = counts["a1"] / (counts["a1"] + counts["a2"])
    assert abs(share - 0.25 / 0.34) < 0.03, share
    again = DomainMixture(rows, MixtureConfig(items="learnability"), seed=1, item_weights=weights)
    assert [p.row["id"] for p in again.draw(777, 2)] == [p.row["id"] for p in mixture.draw(777, 2)]  # resume


def test_learnability_strategy_weighs_domains_by_summed_variance_with_a_temperature():
    sizes = {"a": 100, "b": 10}
    learnable = {"a": 1.0, "b": 3.0}  # a is bigger but mostly solved; b is small and at the frontier
    probs = mixture_probabilities(sizes, MixtureConfig(strategy="learnability"), learnable)
    assert probs == {"a": 0.25, "b": 0.75}
    flat = mixture_probabilities(sizes, MixtureConfig(strategy="learnability", temperature=2.0), learnable)
    assert abs(flat["b"] - 3 ** 0.5 / (1 + 3 ** 0.5)) < 1e-12
    with pytest.raises(ValueError, match="needs every domain's pass rates"):
        mixture_probabilities(sizes, MixtureConfig(strategy="learnability"))


def test_learnability_without_weights_or_signal_is_refused():
    rows = {"a": _rows("a", 2), "b": _rows("b", 2)}
    with pytest.raises(ValueError, match="one weight per train row"):
        DomainMixture(rows, MixtureConfig(items="learnability"), seed=0, item_weights={"a": [0.1, 0.2]})
    with pytest.raises(ValueError, match="no row of b can teach"):
        DomainMixture(rows, MixtureConfig(items="learnability"), seed=0, item_weights={"a": [0.1, 0.2], "b": [0, 0]})


def test_new_mixture_fields_leave_existing_run_names_alone():
    tiny = load_recipe("tiny")
    assert tiny.fingerprint() == load_recipe("tiny", mixture={"strategy": "temperature"}).fingerprint()
    assert load_recipe("tiny", mixture={"items": "learnability"}).fingerprint() != tiny.fingerprint()
    assert load_recipe("tiny", mixture={"items": "learnability", "pass_rate_samples": 4}).fingerprint() != \
        load_recipe("tiny", mixture={"items": "learnability"}).fingerprint()


def test_rollout_gen_params_are_the_ones_pass_rate_measurement_records():
    """The trainer looks its pass rates up by the fields evaluation.sweep hashes: the two must agree."""
    from evaluation.sweep import generation_config
    from training.learnability import gen_params_of, rollout_sampling

    config = load_recipe("tiny", top_k=5, stop=["\n\n"], temperature=0.9)
    params = rollout_sampling(config)
    _, recorded = generation_config(params, "chatml-abc")
    assert json.loads(recorded) == gen_params_of(params, "chatml-abc")
    assert gen_params_of(params, "chatml-abc")["top_k"] == 5


# -- measured on a real (tiny) policy, then trained on ---------------------------------------------

def _coin_samples(split, n, seed):
    kinds = ("always", "never", "coin")
    for i in range(n):
        yield {"id": f"coin-{split}-{i:03d}", "prompt": f"Say something {i}:", "answer": "x",
               "metadata": {"kind": kinds[i % 3]}}


def _coin_score(completion: str, sample: dict) -> float:
    """always: 1; never: 0; coin: 1 on an even-length completion (about half of a random policy's)."""
    kind = sample["metadata"]["kind"]
    if kind == "always":
        return 1.0
    if kind == "never":
        return 0.0
    return 1.0 if len(completion) % 2 == 0 else 0.0


@pytest.fixture
def coin_registry() -> Registry:
    registry = Registry()
    registry.add_module(type("M", (), {"DOMAIN": Domain(
        name="coin", owner="tests", description="items of known difficulty", samples=_coin_samples,
        score=_coin_score)}), "test")
    return registry


@pytest.mark.slow
def test_measured_pass_rates_steer_training_to_items_with_signal(tiny_home, coin_registry):
    from evaluation.pass_rates import measure_for_training
    from training.learnability import LearnabilityError
    from training.trainer import train

    lake = open_lake(write=True)
    common = dict(domains=["coin"], max_steps=4, train_samples_per_domain=30, num_generations=8,
                  prompts_per_step=3, max_completion_length=8)
    learn = load_recipe("tiny", **common, mixture={"items": "learnability"}, run_name="learn")
    with pytest.raises(LearnabilityError, match="30 of 30 train items of 'coin' have no pass rate"):
        train(learn, lake, allow_generate=True, registry=coin_registry, progress=False, log=lambda m: None)

    measured = measure_for_training(lake, lake.mlflow_uri, learn, registry=coin_registry, allow_generate=True,
                                    backend="torch", progress=False)["coin"]
    by_kind = {}
    for row in measured.items.iter_rows(named=True):
        by_kind.setdefault(row["id"], row["pass_rate"])
    kinds = {f"coin-train-{i:03d}": ("always", "never", "coin")[i % 3] for i in range(30)}
    assert all(p == 1.0 for i, p in by_kind.items() if kinds[i] == "always")
    assert all(p == 0.0 for i, p in by_kind.items() if kinds[i] == "never")
    assert sum(0 < p < 1 for i, p in by_kind.items() if kinds[i] == "coin") >= 8  # a coin is rarely 8/8
    again = measure_for_training(lake, lake.mlflow_uri, learn, registry=coin_registry, allow_generate=True,
                                 backend="torch", progress=False)["coin"]
    assert again.computed == 0 and again.cached == 30  # cached: nothing generated twice

    steered = train(learn, lake, allow_generate=True, registry=coin_registry, progress=False, log=lambda m: None)
    uniform = train(load_recipe("tiny", **common, run_name="uniform"), lake, allow_generate=True,
                    registry=coin_registry, progress=False, log=lambda m: None)

    def zero_variance(result) -> float:
        rows = [h["zero_var_frac"] for h in result.history if h["domain"] == "_all"]
        return sum(rows) / len(rows)

    # uniform draws: 2 of 3 items are always/never solved, so most groups teach nothing;
    # learnability draws only coin items, whose groups almost always have both outcomes
    assert zero_variance(uniform) > 0.4
    assert zero_variance(steered) < 0.15


COIN_PLUGIN = '''
from domains import Domain

def samples(split, n, seed):
    kinds = ("always", "never", "coin")
    for i in range(n):
        yield {"id": f"coin-{split}-{i:03d}", "prompt": f"Say something {i}:", "answer": "x",
               "metadata": {"kind": kinds[i % 3]}}

def score(completion, sample):
    kind = sample["metadata"]["kind"]
    return 1.0 if kind == "always" or (kind == "coin" and len(completion) % 2 == 0) else 0.0

DOMAIN = Domain(name="coin", owner="tests", description="items of known difficulty", samples=samples, score=score)
'''


@pytest.mark.slow
def test_assay_train_measures_missing_pass_rates_then_samples_by_learnability(tiny_home, tmp_path):
    from tests.conftest import run_cli

    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "coin.py").write_text(COIN_PLUGIN)
    recipe = tmp_path / "coin_joint.yaml"
    recipe.write_text("policy: tiny\ndomains: [coin]\nmax_steps: 2\nprompts_per_step: 2\nnum_generations: 4\n"
                      "max_completion_length: 8\ntrain_samples_per_domain: 12\nrollout: {backend: torch}\n"
                      "mixture: {strategy: learnability, items: learnability, pass_rate_samples: 4}\n")
    env = {"ASSAY_HOME": str(tiny_home), "ASSAY_DOMAINS_PATH": str(plugins)}
    first = run_cli("train", "--recipe", str(recipe), "--json", env=env, timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    payload = json.loads(first.stdout)
    notes = "\n".join(payload["notes"])
    assert "pass rates of base-tiny on coin (K=4" in notes and "12 measured, 0 cached" in notes
    assert "learnability sampling on pass rates of base-tiny (K=4)" in notes
    assert payload["steps"] == 2
    again = run_cli("train", "--recipe", str(recipe), "--json", env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 measured, 12 cached" in "\n".join(json.loads(again.stdout)["notes"])
    assert json.loads(again.stdout)["run_name"] == payload["run_name"]  # same rates, same run: nothing to do


def test_the_joint_recipe_samples_by_learnability_on_five_domains():
    joint = load_recipe("smollm2_joint")
    assert joint.policy == "smollm2" and len(joint.domains) == 5
    assert joint.mixture.items == "learnability" and joint.mixture.strategy == "learnability"
