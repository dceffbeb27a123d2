"""Which folder the default policy resolves to: the home's own copy, else the one `make install`
converted into the shipped-data folder, else a conversion into the home (tested here up to the
point of converting: the real conversion is what `make install` and the demo run)."""

from __future__ import annotations

import json

import pytest

from generation import policy


@pytest.fixture()
def shipped(tmp_path, monkeypatch):
    root = tmp_path / "shipped"
    monkeypatch.setenv("ASSAY_SHIPPED_DATA_DIR", str(root))
    return root


def _model_folder(path):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (path / "tokenizer.json").write_text("{}")
    return path


def test_a_new_home_uses_the_installed_copy_and_converts_nothing(tmp_path, shipped, monkeypatch):
    installed = _model_folder(shipped / "models" / policy.SMOLLM2)
    monkeypatch.setattr(policy, "_convert_smollm2", lambda *a: pytest.fail("converted although installed"))
    home = tmp_path / "home"
    assert policy.ensure_smollm2(home) == installed == policy.installed_smollm2()
    assert policy.policy_path("base-smollm2", home) == installed
    assert policy.smollm2_folder(home) == installed
    assert not (home / "models" / policy.SMOLLM2).exists()  # nothing written into the home


def test_a_home_with_its_own_copy_keeps_it(tmp_path, shipped):
    _model_folder(shipped / "models" / policy.SMOLLM2)
    own = _model_folder(tmp_path / "home" / "models" / policy.SMOLLM2)
    assert policy.ensure_smollm2(tmp_path / "home") == own == policy.smollm2_folder(tmp_path / "home")


def test_without_an_installed_copy_the_home_converts_its_own(tmp_path, shipped, monkeypatch):
    calls = []
    monkeypatch.setattr(policy, "_smollm2_gguf", lambda: tmp_path / "model.gguf")
    monkeypatch.setattr(policy, "_convert_smollm2", lambda gguf, final: calls.append((gguf, final)) or final)
    home = tmp_path / "home"
    assert policy.ensure_smollm2(home) == home / "models" / policy.SMOLLM2
    assert calls == [(tmp_path / "model.gguf", home / "models" / policy.SMOLLM2)]


def test_install_converts_once_into_the_shipped_folder(shipped, monkeypatch, tmp_path):
    calls = []

    def convert(gguf, final):
        calls.append(final)
        return _model_folder(final)

    monkeypatch.setattr(policy, "_smollm2_gguf", lambda: tmp_path / "model.gguf")
    monkeypatch.setattr(policy, "_convert_smollm2", convert)
    assert policy.install_smollm2() == shipped / "models" / policy.SMOLLM2
    assert policy.install_smollm2() == shipped / "models" / policy.SMOLLM2
    assert calls == [shipped / "models" / policy.SMOLLM2]


def test_a_missing_gguf_says_how_to_fix_it(shipped):
    with pytest.raises(policy.PolicyError, match="make install"):
        policy.install_smollm2()


def test_the_tiny_policy_is_built_whole_even_while_this_process_skips_initialisation(tmp_path, tiny_source):
    """transformers' no_init_weights (what a from_pretrained in another thread holds) patches weight
    initialisation away process-wide: a model constructed meanwhile is uninitialised memory. Built
    here it is refused; ensure_tiny builds in a fresh process and gets the same files as ever."""
    import hashlib

    from transformers.initialization import no_init_weights

    from generation.tiny_model import build_tiny_policy

    with no_init_weights():
        with pytest.raises(RuntimeError, match="was not initialised"):
            build_tiny_policy(tmp_path / "in_process")
        built = policy.ensure_tiny(tmp_path / "home")

    def digest(folder):
        return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()

    assert digest(built) == digest(tiny_source)
