"""The promotion rule: refuse on regression or a missing protected domain, otherwise promote."""

from __future__ import annotations

import numpy as np
import polars as pl

from quality.promotion import decide_promotion
from quality.regression import compare_results


def _rows(domain, p, rng, k=4):
    return pl.DataFrame([{"domain": domain, "item_id": f"i{i}", "sample_idx": s, "score": float(rng.random() < pi)}
                         for i, pi in enumerate(p) for s in range(k)])


def _report(shift_math: float, protected=("math",), drop_code_domain: bool = False):
    rng = np.random.default_rng(0)
    p = np.linspace(0.3, 0.7, 200)
    base = pl.concat([_rows("math", p, rng), _rows("code", p, rng)])
    cand_parts = [_rows("math", p + shift_math, rng)] + ([] if drop_code_domain else [_rows("code", p, rng)])
    return compare_results(base, pl.concat(cand_parts), protected=protected, baseline_name="champ",
                           candidate_name="cand")


def test_regression_in_a_protected_domain_refuses():
    decision = decide_promotion("cand", "champ", {"champion": _report(-0.2)})
    assert not decision.promoted and decision.blocking == ["math"]
    assert "regression vs champion (champ): math" in decision.reason


def test_missing_protected_domain_refuses():
    decision = decide_promotion("cand", "champ", {"champion": _report(0.0, protected=("code",), drop_code_domain=True)})
    assert not decision.promoted and decision.blocking == ["missing:code"]


def test_no_regression_promotes_and_names_improvements():
    decision = decide_promotion("cand", "champ", {"champion": _report(+0.2), "anchor": _report(0.0)})
    assert decision.promoted and "improved: math" in decision.reason


def test_anchor_regression_also_refuses_and_champion_is_not_repromoted():
    assert not decide_promotion("cand", "champ", {"champion": _report(0.0), "anchor": _report(-0.2)}).promoted
    assert not decide_promotion("champ", "champ", {}).promoted
