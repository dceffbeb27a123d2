"""Registry: built-ins, plugins from ASSAY_DOMAINS_PATH, broken plugins, name clashes."""

from __future__ import annotations

import os

import pytest

from domains import Domain, DomainError, UnknownDomainError, load_registry
from tests.conftest import write_plugin


def test_plugin_folder_adds_domains(tmp_path):
    folder = tmp_path / "plugins"
    write_plugin(folder, "unit_convert")
    registry = load_registry(str(folder), include_builtins=False)
    assert registry.names == ["unit_convert"]
    domain = registry.get("unit_convert")
    rows = domain.generate("train", 3, seed=1)
    assert [r["answer"] for r in rows] == ["1001", "1002", "1003"]
    assert domain.safe_score("the answer is 1001", rows[0]) == 1.0
    assert domain.safe_score("1002", rows[0]) == 0.0


def test_several_folders_with_pathsep(tmp_path):
    write_plugin(tmp_path / "a", "alpha")
    write_plugin(tmp_path / "b", "beta")
    registry = load_registry(os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]), include_builtins=False)
    assert sorted(registry.names) == ["alpha", "beta"]


def test_domains_list_pack(tmp_path):
    body = '''
from domains import Domain
def _s(split, n, seed):
    return [{"id": str(i), "prompt": "p", "answer": "a"} for i in range(n)]
DOMAINS = [Domain(name=f"pack_{i}", owner="o", description="d", samples=_s, score=lambda c, s: 0.0)
           for i in range(3)]
'''
    write_plugin(tmp_path, "pack", body)
    assert load_registry(str(tmp_path), include_builtins=False).names == ["pack_0", "pack_1", "pack_2"]


@pytest.mark.parametrize("body, reason", [
    ("def broken(:\n", "SyntaxError"),
    ("raise RuntimeError('no credentials for the data bucket')\n", "no credentials for the data bucket"),
    ("import not_a_real_module_xyz\n", "ModuleNotFoundError"),
    ("DOMAIN = 42\n", "domains.Domain"),
    ("from domains import Domain\nDOMAIN = Domain(name='Bad Name', owner='o', description='d', "
     "samples=lambda s, n, k: [], score=lambda c, s: 0.0)\n", "lower_snake_case"),
    ("DOMAINS = 'nope'\n", "DOMAINS must be a list"),
])
def test_broken_plugin_is_reported_and_others_load(tmp_path, body, reason):
    write_plugin(tmp_path, "good_one")
    write_plugin(tmp_path, "zz_broken", body)
    registry = load_registry(str(tmp_path), include_builtins=False)
    assert registry.names == ["good_one"]
    assert len(registry.errors) == 1
    error = registry.errors[0]
    assert error.source.endswith("zz_broken.py")
    assert reason in error.reason


def test_name_clash_keeps_first_and_reports_second(tmp_path):
    write_plugin(tmp_path / "a", "same")
    write_plugin(tmp_path / "b", "same")
    registry = load_registry(os.pathsep.join([str(tmp_path / "a"), str(tmp_path / "b")]), include_builtins=False)
    assert registry.names == ["same"]
    assert registry.sources["same"].endswith(os.path.join("a", "same.py"))
    assert "already registered" in registry.errors[0].reason


def test_helper_modules_without_domain_are_ignored(tmp_path):
    write_plugin(tmp_path, "shared_helpers", "VALUE = 1\n")
    registry = load_registry(str(tmp_path), include_builtins=False)
    assert registry.names == [] and registry.errors == []


def test_unknown_domain_error_names_the_known_ones(tmp_path):
    write_plugin(tmp_path, "alpha")
    registry = load_registry(str(tmp_path), include_builtins=False)
    with pytest.raises(UnknownDomainError) as info:
        registry.get("alpah")
    assert "'alpah'" in str(info.value) and "alpha" in str(info.value)


def test_builtins_and_plugins_share_one_registry(tmp_path):
    write_plugin(tmp_path, "unit_convert")
    registry = load_registry(str(tmp_path))
    assert "unit_convert" in registry
    assert len(registry) > 1, "built-in domains should load next to the plugin"
    assert not [e for e in registry.errors if e.source.startswith("domains/builtin")], registry.errors


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "x", "owner": "", "description": "d"}, "owner"),
    ({"name": "x", "owner": "o", "description": "d", "tags": "math"}, "tags"),
    ({"name": "x", "owner": "o", "description": "d", "safety_policy": "strict"}, "safety_policy"),
    ({"name": "x", "owner": "o", "description": "d", "eval_size": 0}, "eval_size"),
    ({"name": "x", "owner": "o", "description": "d", "answer_pattern": "("}, "answer_pattern"),
])
def test_domain_rejects_bad_settings_with_a_message(kwargs, message):
    with pytest.raises(DomainError, match=message):
        Domain(samples=lambda s, n, k: [], score=lambda c, s: 0.0, **kwargs)


def test_generate_checks_the_sample_contract():
    bad = Domain(name="bad", owner="o", description="d",
                 samples=lambda s, n, k: [{"id": 1, "prompt": "p", "answer": "a"}], score=lambda c, s: 0.0)
    with pytest.raises(DomainError, match="'id' must be str"):
        bad.generate("train", 1)
    with pytest.raises(DomainError, match="split"):
        bad.generate("test", 1)


def test_safe_score_rejects_non_numbers_and_clamps():
    d = Domain(name="d", owner="o", description="d", samples=lambda s, n, k: [], score=lambda c, s: c)
    assert d.safe_score(1.5, {}) == 1.0
    with pytest.raises(DomainError):
        d.safe_score("yes", {})
