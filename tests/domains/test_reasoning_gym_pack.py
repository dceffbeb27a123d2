"""The reasoning-gym pack: its static task list matches the installed package, exclusions carry
a reason, names never clash with other built-ins, and every registered task passes the
environment self-test (slow: the whole pack)."""

from __future__ import annotations

import pytest

from domains import load_registry
from domains.builtin import reasoning_gym_pack as pack
from quality.domain_check import check_domain

SPOT_CHECK = ("rg_chain_sum", "rg_list_functions", "rg_graph_color",
              "rg_propositional_logic", "rg_tower_of_hanoi")


def test_static_task_list_matches_installed_reasoning_gym():
    from reasoning_gym.factory import DATASETS

    installed = {name: cls.__module__.split(".")[1] for name, (cls, _config) in DATASETS.items()}
    assert pack.TASKS == installed, "update TASKS in domains/builtin/reasoning_gym_pack.py"


def test_every_task_is_a_domain_or_excluded_with_a_reason():
    names = {d.name for d in pack.DOMAINS}
    for task in pack.TASKS:
        assert (f"rg_{task}" in names) != (task in pack.EXCLUDED), task
    for task, reason in pack.EXCLUDED.items():
        assert task in pack.TASKS and len(reason) > 30, task
    assert len(names) >= 100
    assert set(pack.EVAL_SIZES) <= set(pack.TASKS)


def test_pack_names_do_not_clash_with_other_builtins():
    registry = load_registry(None)
    assert not [e for e in registry.errors if "already registered" in e.reason], registry.errors
    assert all(d.name.startswith("rg_") for d in pack.DOMAINS)
    others = {name for name, source in registry.sources.items() if not source.endswith("reasoning_gym_pack.py")}
    assert not {d.name for d in pack.DOMAINS} & others
    assert len(registry) >= len(pack.DOMAINS) + 9


def test_pack_prompts_ask_for_tagged_answers_and_metadata_survives_json():
    domain = next(d for d in pack.DOMAINS if d.name == "rg_arc_agi")
    sample = domain.generate("eval", 2, 0)[0]
    assert sample["prompt"].endswith("<answer></answer> tags.")
    import json

    lake_row = {**sample, "metadata": json.loads(json.dumps(sample["metadata"], default=str))}
    assert domain.score(f"<answer>{sample['answer']}</answer>", lake_row) == 1.0


@pytest.mark.parametrize("name", SPOT_CHECK)
def test_spot_check_tasks_with_verifier_quirks(name):
    registry = load_registry(None)
    result = check_domain(registry.get(name), n=6)
    failed = {k: v["detail"] for k, v in result["checks"].items() if not v["passed"]}
    assert result["passed"], failed


@pytest.mark.slow
def test_every_pack_domain_passes_the_self_test():
    failures = {}
    for domain in pack.DOMAINS:
        result = check_domain(domain, n=4)
        if not result["passed"]:
            failures[domain.name] = {k: v["detail"][:200] for k, v in result["checks"].items() if not v["passed"]}
    assert not failures, failures


def test_items_are_the_same_in_processes_with_different_str_hashing():
    """Eval sets must not change between processes: tasks that iterate sets of strings are
    generated under PYTHONHASHSEED=0 (HASH_SENSITIVE_TASKS)."""
    import os
    import subprocess
    import sys

    from domains.builtin import _rg
    from tests.conftest import REPO

    assert _rg.HASH_SENSITIVE_TASKS <= set(pack.TASKS)
    code = ("import json; from domains import load_registry; r = load_registry(None); "
            "print(json.dumps({n: r.get(n).generate('eval', 6, 0) for n in "
            "('rg_ransom_note', 'rg_word_ladder', 'rg_chain_sum')}, sort_keys=True))")
    outputs = []
    for hash_seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=hash_seed)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stderr
        outputs.append(out.stdout)
    assert outputs[0] == outputs[1]
