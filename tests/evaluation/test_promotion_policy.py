"""The promotion policy: one typed file, found in one place, validated with messages that say how to fix it."""

from __future__ import annotations

import pytest

from evaluation.promotion_policy import (SHIPPED_POLICY, PolicyError, PromotionPolicy, load_policy, parse_policy)


def test_the_shipped_file_is_the_default_policy(tmp_path):
    active = load_policy(tmp_path)  # no $ASSAY_HOME/promotion.yaml: the shipped default
    assert active.source == str(SHIPPED_POLICY) and active.policy == PromotionPolicy()
    assert active.policy.block_on == "protected" and active.policy.on_underpowered == "refuse"


def test_the_team_file_under_assay_home_rules_and_a_given_path_wins(tmp_path):
    (tmp_path / "promotion.yaml").write_text("protected: [math, code]\nblock_on: any\nmargins: {math: 0.02}\n")
    active = load_policy(tmp_path)
    assert active.source == str(tmp_path / "promotion.yaml")
    p = active.policy
    assert p.protected == ["math", "code"] and p.block_on == "any" and p.margins == {"math": 0.02}
    assert p.alpha == 0.05  # fields left out take the defaults
    # the registry's protected=True domains are the default source; the file's list replaces them
    assert p.protected_domains({"safety_refusal"}, {"math", "code", "safety_refusal"}) == {"math", "code"}
    assert PromotionPolicy().protected_domains({"safety_refusal"}, {"math"}) == {"safety_refusal"}
    assert PromotionPolicy(protected="all").protected_domains({"safety_refusal"}, {"math", "x"}) == {"math", "x"}
    other = tmp_path / "strict.yaml"
    other.write_text("on_underpowered: allow\n")
    assert load_policy(tmp_path, other).policy.on_underpowered == "allow"
    assert "protected: math, code" in "\n".join(active.describe())


@pytest.mark.parametrize("text, message", [
    ("block_on: al", "block_on: Input should be 'protected' or 'any' (got 'al')"),
    ("protect: [math]", "unknown field 'protect' (known: protected, default_margin"),
    ("margins: {math: 2}", "margin 2.0 for 'math' is outside [0, 1): use score units"),
    ("alpha: 0", "alpha: Input should be greater than 0"),
    ("protected: math", "write a list of domain names (e.g. [math]), 'all', or leave it unset"),
    ("block_on: [", "not valid YAML at line"),
    ("- math", "expected a mapping of fields"),
])
def test_a_bad_policy_file_says_which_field_and_how_to_fix_it(text, message):
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "/team/promotion.yaml")
    assert str(err.value).startswith("promotion policy /team/promotion.yaml: ") and message in str(err.value)


def test_unknown_domain_names_are_refused_not_ignored(tmp_path):
    policy = PromotionPolicy(protected=["mathh"], margins={"code": 0.02})
    with pytest.raises(PolicyError, match=r"unknown domain\(s\) 'mathh' in protected/margins \(known: code, math\)"):
        policy.check_domains({"math", "code"}, "p.yaml")
    with pytest.raises(PolicyError, match="no such file"):
        load_policy(tmp_path, tmp_path / "missing.yaml")
