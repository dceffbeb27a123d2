"""RoPE scaling (generation.rope): specs, config rewrites, what each type does to a real model, the
sweep's cache key and the vLLM length it sizes."""

from __future__ import annotations

import json

import pytest

from generation.rope import RopeScaling, RopeScalingError

SMOLLM2_LIKE = {"max_position_embeddings": 8192, "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}}


def test_specs_parse_to_a_canonical_form_and_bad_ones_say_how_to_write_one():
    assert RopeScaling.parse(None) is None and RopeScaling.parse("none") is None and RopeScaling.parse(" ") is None
    assert RopeScaling.parse("YaRN:2.0").spec == "yarn:2"
    assert RopeScaling.parse("linear:2.5:4096").spec == "linear:2.5:4096"
    for bad, message in (("yarn", "TYPE:FACTOR"), ("ntk:2", "TYPE:FACTOR"), ("yarn:two", "must be a number"),
                         ("yarn:1", "above 1"), ("dynamic:0.5", "above 1"), ("yarn:2:8", "at least 16"),
                         ("yarn:2:8192:1", "TYPE:FACTOR")):
        with pytest.raises(RopeScalingError, match=message):
            RopeScaling.parse(bad)


def test_overrides_keep_the_base_and_scale_the_window_the_way_each_engine_reads_it():
    yarn = RopeScaling.parse("yarn:2").overrides(SMOLLM2_LIKE)
    assert yarn == {"rope_parameters": {"rope_type": "yarn", "rope_theta": 100000.0, "factor": 2.0,
                                        "original_max_position_embeddings": 8192},
                    "max_position_embeddings": 16384}  # YaRN's window pre-scaled (vLLM multiplies the others)
    linear = RopeScaling.parse("linear:4").overrides(SMOLLM2_LIKE)
    assert linear == {"rope_parameters": {"rope_type": "linear", "rope_theta": 100000.0, "factor": 4.0}}
    assert RopeScaling.parse("dynamic:2:4096").overrides(SMOLLM2_LIKE)["max_position_embeddings"] == 4096
    assert RopeScaling.parse("linear:2").window(SMOLLM2_LIKE) == 16384
    old_style = {"max_position_embeddings": 2048, "rope_theta": 10000.0}  # transformers 4 config.json
    assert RopeScaling.parse("yarn:2").overrides(old_style)["rope_parameters"]["rope_theta"] == 10000.0
    with pytest.raises(RopeScalingError, match="already scales"):
        RopeScaling.parse("yarn:2").overrides({"max_position_embeddings": 4096,
                                               "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}})
    with pytest.raises(RopeScalingError, match="no rope_theta"):
        RopeScaling.parse("yarn:2").overrides({"max_position_embeddings": 4096})
    with pytest.raises(RopeScalingError, match="trained length in the spec"):
        RopeScaling.parse("linear:2").window({"rope_theta": 1e4})


def _last_logits(model, length: int, start: int = 0):
    import torch

    ids = torch.arange(start, start + length)[None] % 200 + 10
    with torch.inference_mode():
        return model(input_ids=ids).logits[0]


@pytest.fixture(scope="module")
def tiny_models(tiny_source):
    """The tiny policy (trained length 1,024) loaded as trained and with each scaling."""
    from generation.policy import load_policy

    specs = (None, "linear:2", "dynamic:2", "yarn:2")
    return {spec: load_policy(str(tiny_source), dtype="float32", rope_scaling=spec)[0] for spec in specs}


def test_each_scaling_reaches_the_model_and_changes_what_it_computes_where_it_should(tiny_models):
    import torch

    plain = tiny_models[None]
    assert plain.config.rope_parameters["rope_type"] == "default"
    assert tiny_models["yarn:2"].config.rope_parameters["rope_type"] == "yarn"
    assert tiny_models["yarn:2"].config.max_position_embeddings == 2048
    short, long = _last_logits(plain, 64), _last_logits(plain, 1500)
    # dynamic NTK runs as trained within the trained length, and differs past it
    assert torch.equal(_last_logits(tiny_models["dynamic:2"], 64), short)
    assert not torch.allclose(_last_logits(tiny_models["dynamic:2"], 1500)[-1], long[-1], atol=1e-4)
    # linear interpolation and YaRN change every length (positions divided / frequencies and temperature)
    for spec in ("linear:2", "yarn:2"):
        assert not torch.allclose(_last_logits(tiny_models[spec], 64), short, atol=1e-4), spec


def test_a_bad_spec_fails_before_the_model_loads(tiny_source):
    from generation.policy import load_policy

    with pytest.raises(RopeScalingError, match="TYPE:FACTOR"):
        load_policy(str(tiny_source), rope_scaling="ntk-aware:2")


def test_the_sweep_keys_results_by_the_scaling_and_keeps_unscaled_keys_unchanged():
    from evaluation.sweep import generation_config
    from evaluation.sweep_config import SweepConfig
    from generation.contract import SamplingParams

    params = SamplingParams(max_new_tokens=24)
    plain = generation_config(params, "chatml")
    assert generation_config(params, "chatml", None) == plain
    yarn = generation_config(params, "chatml", "yarn:2")
    assert yarn[0] != plain[0] and json.loads(yarn[1])["rope_scaling"] == "yarn:2"
    assert "rope_scaling" not in json.loads(plain[1])
    assert generation_config(params, "chatml", "linear:2")[0] not in (plain[0], yarn[0])
    assert SweepConfig(rope_scaling="YARN:2.0").rope_scaling == "yarn:2"  # one spelling, one key
    with pytest.raises(ValueError, match="TYPE:FACTOR"):
        SweepConfig(rope_scaling="yarn")


def test_vllm_is_sized_for_the_longest_bucket_within_the_models_window(tmp_path):
    from evaluation.sweep import longest_prompt, vllm_length_for
    from domains import get_registry

    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_LIKE))
    registry = get_registry()
    assert longest_prompt(registry.select(names=["gsm"])) is None  # no bucket declared: vLLM's default
    prompt = longest_prompt(registry.select(names=["long_needle_1k", "long_needle_16k"]))
    assert prompt == 16384
    assert vllm_length_for(tmp_path, 1024, 32, None) == 4096  # never below vLLM's usual default
    assert vllm_length_for(tmp_path, 8192, 256, None) == 8192  # prompts fit the window: completions stop there
    assert vllm_length_for(tmp_path, prompt, 24, None) == prompt + 24  # past the window: the engine refuses
    assert vllm_length_for(tmp_path, prompt, 24, "yarn:2") == 16384
    assert vllm_length_for(tmp_path, prompt, 24, "yarn:4") == prompt + 24


def test_pass_rates_and_the_trainer_key_a_scaled_policys_samples_as_the_sweep_does():
    from evaluation.comparability import gen_identity
    from evaluation.pass_rate_config import PassRateConfig
    from evaluation.sweep import generation_config
    from training.config import load_recipe
    from generation.contract import gen_params_of
    from training.learnability import rollout_sampling

    recipe = load_recipe("tiny", domains=["x"], rope_scaling="yarn:2")
    params = rollout_sampling(recipe)
    trainer_key = gen_identity(gen_params_of(params, "chatml", recipe.rope_scaling))
    assert trainer_key == generation_config(params, "chatml", PassRateConfig(rope_scaling="yarn:2").rope_scaling)
    assert trainer_key != generation_config(params, "chatml")
