"""Variants: folders, the method catalogue, and each method's engine against the parent's.

The speculative and quantized engines are checked against the project's torch engine on the wide
tiny checkpoint (tests/training/conftest.py: varied greedy completions, so agreement means the
same computation, not the same repeated token).
"""

from __future__ import annotations

import json

import pytest

from generation.contract import SamplingParams
from generation.factory import make_engine
from generation.variants import (MANIFEST, METHODS, VariantError, check_draft_vocabulary, make_variant, read_manifest,
                               unavailable_reason, variant_id)

PROMPTS = ["What is 12 + 30?", "Say something about lists and tuples.", "What is 7 + 8? The answer is",
           "The json module parses text. The json module"]


def _greedy_ids(engine, tokens: int = 16) -> list[list[int]]:
    prompts = [engine.format_prompt(p) for p in PROMPTS]
    return [out[0].token_ids for out in engine.generate(prompts, SamplingParams(max_new_tokens=tokens))]


@pytest.fixture(scope="module")
def parent_ids(tiny_checkpoint):
    return _greedy_ids(make_engine(str(tiny_checkpoint), "torch", dtype="float32"))


def test_catalogue_names_the_issue_methods():
    assert set(METHODS) == {"int8", "int4", "gguf-q8_0", "gguf-q4_0", "spec-ngram", "spec-draft"}
    from evaluation.variant_config import METHOD_NAMES

    assert set(METHOD_NAMES) == set(METHODS)  # the pydantic-only copy for --help stays in step
    with pytest.raises(VariantError, match="unknown variant method"):
        unavailable_reason("int3")
    assert variant_id("base-tiny", "int8") == "base-tiny--int8"


@pytest.mark.parametrize("method", ["spec-ngram", "spec-draft"])
def test_speculative_variant_is_the_parent_under_greedy(method, tiny_checkpoint, tmp_path, parent_ids):
    folder = make_variant("wide", tiny_checkpoint, method, tmp_path / "checkpoints")
    manifest = read_manifest(folder)
    assert manifest.parent == "wide" and manifest.method == method and folder.name == f"wide--{method}"
    assert not list(folder.glob("*.safetensors"))  # no second copy of the parent's weights
    engine = make_engine(str(folder), "auto", dtype="float32")  # the manifest decides the engine, not the backend
    assert method in engine.identity and engine.name == "speculative"
    assert _greedy_ids(engine) == parent_ids  # verified by the target: its own greedy tokens
    again = make_variant("wide", tiny_checkpoint, method, tmp_path / "checkpoints")
    assert again == folder and json.loads((folder / MANIFEST).read_text())["created_at"] == manifest.created_at


def test_default_draft_is_a_quarter_of_the_parent(tiny_checkpoint, tmp_path):
    folder = make_variant("wide", tiny_checkpoint, "spec-draft", tmp_path / "checkpoints")
    parent_layers = json.loads((tiny_checkpoint / "config.json").read_text())["num_hidden_layers"]
    draft = json.loads((folder / "draft" / "config.json").read_text())
    assert draft["num_hidden_layers"] == max(1, parent_layers // 4) < parent_layers
    assert read_manifest(folder).options["draft_layers"] == draft["num_hidden_layers"]


def test_speculative_sampling_is_seeded(tiny_checkpoint, tmp_path):
    engine = make_engine(str(make_variant("wide", tiny_checkpoint, "spec-ngram", tmp_path / "c")), "torch",
                         dtype="float32")
    prompt = [engine.format_prompt(PROMPTS[1])]
    params = SamplingParams(max_new_tokens=12, temperature=1.0, n=3)
    first = engine.generate(prompt, params, seeds=[[1, 2, 3]])[0]
    second = engine.generate(prompt, params, seeds=[[1, 2, 3]])[0]
    assert [g.text for g in first] == [g.text for g in second]
    assert len({g.text for g in first}) > 1  # three seeds, three draws
    with pytest.raises(ValueError, match="log-probs"):
        engine.generate(prompt, SamplingParams(max_new_tokens=2), with_logprobs=True)


def test_a_draft_with_another_vocabulary_is_refused(tiny_checkpoint, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    vocab = json.loads((tiny_checkpoint / "tokenizer.json").read_text())
    vocab["model"]["vocab"] = {f"x{t}": i for t, i in vocab["model"]["vocab"].items()}
    (other / "tokenizer.json").write_text(json.dumps(vocab))
    with pytest.raises(VariantError, match="different vocabulary"):
        check_draft_vocabulary(tiny_checkpoint, other)
    with pytest.raises(VariantError, match="only applies"):
        make_variant("wide", tiny_checkpoint, "spec-ngram", tmp_path / "c", draft=str(other))


@pytest.mark.parametrize("method", ["int8", "int4"])
def test_torchao_variant_stays_close_to_the_parent(method, tiny_checkpoint, tmp_path, parent_ids):
    problem = unavailable_reason(method)
    if problem:
        pytest.skip(problem)
    folder = make_variant("wide", tiny_checkpoint, method, tmp_path / "checkpoints")
    engine = make_engine(str(folder), "torch", dtype="float32")
    assert engine.identity.endswith(f"/{method}")
    import torch

    from generation.policy import load_policy

    parent, tokenizer = load_policy(str(tiny_checkpoint), dtype="float32")
    batch = [engine.encode([engine.format_prompt(p)])[0] for p in PROMPTS]
    with torch.inference_mode():
        for ids in batch:
            want = parent(torch.tensor([ids])).logits[0, -1]
            got = engine.model(torch.tensor([ids])).logits[0, -1]
            cosine = torch.nn.functional.cosine_similarity(want, got, dim=0).item()
            # quantized weights: the same function up to rounding, and not the identical computation
            assert cosine > 0.99 and not torch.equal(want, got), (method, cosine)
    assert "Int8" in type(engine.model.model.layers[0].self_attn.q_proj.weight).__name__ or method != "int8"


def test_gguf_variant_is_served_by_llama_cpp(tiny_checkpoint, tmp_path):
    problem = unavailable_reason("gguf-q8_0")
    if problem:
        pytest.skip(problem)
    from generation.gguf_export import gguf_quant_of

    folder = make_variant("wide", tiny_checkpoint, "gguf-q8_0", tmp_path / "checkpoints")
    manifest = read_manifest(folder)
    assert manifest.artifact == "model.q8_0.gguf" and gguf_quant_of(folder / manifest.artifact) == "q8_0"
    assert manifest.library.startswith("ik-llama-cpp-python")
    engine = make_engine(str(folder), "vllm", dtype="float32", home=str(tmp_path))  # the manifest decides
    assert engine.name == "llama.cpp" and engine.identity.endswith("/q8_0")
    texts = [g[0].text for g in engine.generate([engine.format_prompt(p) for p in PROMPTS],
                                                SamplingParams(max_new_tokens=8))]
    assert len(texts) == len(PROMPTS) and any(texts)
    engine.close()
