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


def _tracker(rates: dict[str, list[float]], samples: int = 8, decay: float = 0.5, floor: float = 0.01):
    from training.learnability import PassRateTracker

    return PassRateTracker(rates, samples, decay=decay, floor=floor)


def _static(**fields) -> MixtureConfig:
    return MixtureConfig(items="learnability", pass_rate_updates="static", **fields)


def test_rows_are_drawn_in_proportion_to_p_times_one_minus_p_and_rarely_without_signal():
    rows = {"a": _rows("a", 4)}
    rates = {"a": [0.0, 0.5, 0.1, 1.0]}  # p(1-p): 0 -> the floor 0.01; 0.25; 0.09; 0 -> 0.01
    mixture = DomainMixture(rows, _static(), seed=1, pass_rates=_tracker(rates))
    counts = Counter(p.row["id"] for s in range(3000) for p in mixture.draw(s, 1))
    # an epoch ends once both learnable rows were drawn: the dead ones get in only before that
    assert counts["a1"] == counts["a2"] or abs(counts["a1"] - counts["a2"]) <= 1
    dead = counts["a0"] + counts["a3"]
    assert 0 < dead < 0.12 * sum(counts.values()), counts


def test_within_an_epoch_no_row_is_drawn_twice():
    rows = {"a": _rows("a", 6)}
    mixture = DomainMixture(rows, _static(), seed=3, pass_rates=_tracker({"a": [0.5, 0.5, 0.5, 0.5, 0.25, 0.75]}))
    first = [p.row["id"] for s in range(3) for p in mixture.draw(s, 2)]
    assert sorted(first) == [f"a{i}" for i in range(6)]  # six learnable rows: six draws, each once
    assert mixture.draw(3, 1)[0].row["id"] in first  # then a new epoch


def test_online_estimates_follow_the_policy_mastered_rows_fade_and_learned_ones_come_back():
    from training.mixture import Pick

    rows = {"a": _rows("a", 3)}
    tracker = _tracker({"a": [0.5, 0.0, 0.5]})
    mixture = DomainMixture(rows, MixtureConfig(items="learnability"), seed=0, pass_rates=tracker)
    mastered, hopeless = Pick("a", rows["a"][0], 0), Pick("a", rows["a"][1], 1)
    for _ in range(5):  # the policy now passes row 0 every time...
        mixture.observe([mastered], [8], 8)
    assert tracker.rate("a", 0) > 0.99 and not tracker.learnable("a", 0)
    assert tracker.weight("a", 0) < 0.05
    mixture.observe([hopeless], [4], 8)  # ...and half-solves the row it never passed before
    assert tracker.rate("a", 1) == 4 / 12 and tracker.learnable("a", 1)
    counts = Counter(p.row["id"] for s in range(600) for p in mixture.draw(s, 1))
    assert counts["a1"] > 5 * counts["a0"] and counts["a2"] > 5 * counts["a0"], counts
    with pytest.raises(ValueError, match="cannot have 9 passes"):
        mixture.observe([mastered], [9], 8)


def test_static_estimates_ignore_the_rollouts():
    rows = {"a": _rows("a", 2)}
    tracker = _tracker({"a": [0.5, 0.5]})
    mixture = DomainMixture(rows, _static(), seed=0, pass_rates=tracker)
    mixture.observe(mixture.draw(0, 2), [8, 0], 8)
    assert tracker.rate("a", 0) == tracker.rate("a", 1) == 0.5


def test_a_restored_sampler_draws_what_the_original_would_have():
    rows = {"a": _rows("a", 20), "b": _rows("b", 20)}
    rates = {d: [(i % 9) / 8 for i in range(20)] for d in rows}
    config = MixtureConfig(items="learnability", strategy="learnability")
    original = DomainMixture(rows, config, seed=7, pass_rates=_tracker(rates))
    for step in range(15):
        picks = original.draw(step, 2)
        original.observe(picks, [(step + i) % 9 for i in range(2)], 8)
    saved = json.loads(json.dumps(original.state_dict()))  # as the trainer's state.json holds it
    resumed = DomainMixture(rows, config, seed=7, pass_rates=_tracker(rates))
    resumed.load_state_dict(saved)
    ahead = [[p.row["id"] for p in original.draw(s, 2)] for s in range(15, 40)]
    assert [[p.row["id"] for p in resumed.draw(s, 2)] for s in range(15, 40)] == ahead
    fresh = DomainMixture(rows, config, seed=7, pass_rates=_tracker(rates))  # without the state: other draws
    assert [[p.row["id"] for p in fresh.draw(s, 2)] for s in range(15, 40)] != ahead
    with pytest.raises(ValueError, match="other train rows"):
        DomainMixture({"a": rows["a"], "b": rows["b"][:5]}, config, seed=7,
                      pass_rates=_tracker({"a": rates["a"], "b": rates["b"][:5]})).load_state_dict(saved)


def test_learnability_strategy_weighs_domains_by_summed_variance_with_a_temperature():
    sizes = {"a": 100, "b": 10}
    learnable = {"a": 1.0, "b": 3.0}  # a is bigger but mostly solved; b is small and at the frontier
    probs = mixture_probabilities(sizes, MixtureConfig(strategy="learnability"), learnable)
    assert probs == {"a": 0.25, "b": 0.75}
    flat = mixture_probabilities(sizes, MixtureConfig(strategy="learnability", temperature=2.0), learnable)
    assert abs(flat["b"] - 3 ** 0.5 / (1 + 3 ** 0.5)) < 1e-12
    with pytest.raises(ValueError, match="needs every domain's pass rates"):
        mixture_probabilities(sizes, MixtureConfig(strategy="learnability"))


def test_learnability_without_rates_or_signal_is_refused():
    rows = {"a": _rows("a", 2), "b": _rows("b", 2)}
    with pytest.raises(ValueError, match="a pass rate for every train row"):
        DomainMixture(rows, MixtureConfig(items="learnability"), seed=0, pass_rates=_tracker({"a": [0.1, 0.2]}))
    with pytest.raises(ValueError, match="no row of b can teach"):
        DomainMixture(rows, MixtureConfig(items="learnability"), seed=0,
                      pass_rates=_tracker({"a": [0.1, 0.2], "b": [0.0, 1.0]}))


def test_new_mixture_fields_leave_existing_run_names_alone():
    tiny = load_recipe("tiny")
    assert tiny.fingerprint() == load_recipe("tiny", mixture={"strategy": "temperature"}).fingerprint()
    assert load_recipe("tiny", mixture={"items": "learnability"}).fingerprint() != tiny.fingerprint()
    assert load_recipe("tiny", mixture={"items": "learnability", "pass_rate_samples": 4}).fingerprint() != \
        load_recipe("tiny", mixture={"items": "learnability"}).fingerprint()
    assert load_recipe("tiny", mixture={"items": "learnability", "pass_rate_updates": "static"}).fingerprint() != \
        load_recipe("tiny", mixture={"items": "learnability"}).fingerprint()


def test_rollout_gen_params_are_the_ones_pass_rate_measurement_records():
    """The trainer looks its pass rates up by the fields evaluation.sweep hashes: the two must agree."""
    from evaluation.sweep import generation_config
    from generation.contract import gen_params_of
    from training.learnability import rollout_sampling

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
    from assets.learnability_rates import measure_for_training
    from training.learnability import LearnabilityError
    from training.trainer import train

    lake = open_lake(write=True)
    common = dict(domains=["coin"], max_steps=4, train_samples_per_domain=30, num_generations=8,
                  prompts_per_step=3, max_completion_length=8)
    # explore_weight 0: the rows always or never passed are never drawn (the steering, measured exactly)
    learn = load_recipe("tiny", **common, mixture={"items": "learnability", "explore_weight": 0}, run_name="learn")
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
    # the estimates it drew by moved with the rollouts and were saved with the checkpoint (resume)
    state = json.loads((lake.home / "runs" / steered.run_name / "state.json").read_text())
    passes = state["sampler"]["estimates"]["passes"]["coin"]
    assert any(abs(x - round(x)) > 1e-9 for x in passes)  # decayed: some group updated it
    assert len(passes) == 30 and sum(len(u) for u in state["sampler"]["used"].values()) > 0


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
    assert "learnability sampling (online pass rates), starting from those of base-tiny (K=4)" in notes
    assert payload["steps"] == 2
    again = run_cli("train", "--recipe", str(recipe), "--json", env=env, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "0 measured, 12 cached" in "\n".join(json.loads(again.stdout)["notes"])
    assert json.loads(again.stdout)["run_name"] == payload["run_name"]  # same rates, same run: nothing to do


def test_the_joint_recipe_samples_by_learnability_on_five_domains():
    joint = load_recipe("smollm2_joint")
    assert joint.policy == "smollm2" and len(joint.domains) == 5
    assert joint.mixture.items == "learnability" and joint.mixture.strategy == "learnability"
