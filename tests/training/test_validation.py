"""In-loop validation on real GRPO runs of the tiny policy (training.validation, training.forgetting):
a validation score equals a sweep of that step's checkpoint item by item; a scripted forgetting fires
the flag and the recipe's warn / stop / reweight is obeyed; solved items leave the pool and a plateau
re-measures pass rates. Real lake, MLflow and trainer; the domains are test domains whose scorers say
what the truth is (one changes it at a chosen validation, as a policy update that wrecks a domain would)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains import Domain
from domains.registry import Registry
from pipelines.settings import open_lake
from training.config import load_recipe


def _train(config, registry, notes: list[str] | None = None, **options):
    from training.trainer import train

    return train(config, open_lake(), allow_generate=True, registry=registry, progress=False,
                 log=(notes.append if notes is not None else lambda m: None), **options)


def _registry(*domains: Domain) -> Registry:
    registry = Registry()
    registry.add_module(type("M", (), {"DOMAINS": list(domains)}), "test")
    return registry


def _samples(name: str):
    def samples(split, n, seed):
        for i in range(n):
            yield {"id": f"{name}-{split}-{seed}-{i}", "prompt": f"Write something about {i}:", "answer": "x"}
    return samples


def _digit_share(completion: str, sample: dict) -> float:
    text = completion.strip()
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


def _text_hash(completion: str, sample: dict) -> float:
    """A score that moves with every character of the completion: equal scores mean equal text."""
    return (sum(ord(c) * (i + 1) for i, c in enumerate(completion)) % 97) / 96


# -- an in-loop score is a sweep of that checkpoint --------------------------------------------------


def test_an_in_loop_validation_equals_a_sweep_of_that_steps_checkpoint_item_by_item(tiny_home, tiny_checkpoint):
    """Step 3's in-loop scores (bf16 rollout copy, synced after the update) and step 0's equal a sweep
    of the step-3 checkpoint and of the starting policy on the same items, same sampling, per item.
    The policy is the wide tiny checkpoint: its greedy completions differ from prompt to prompt."""
    from evaluation.sweep import SweepConfig, engine_factory_for, run_sweep
    from generation.prompts import prompt_format_of_folder

    registry = _registry(Domain(name="texty", owner="t", description="text-sensitive", samples=_samples("texty"),
                                score=_text_hash))
    items, tokens = 12, 12
    config = load_recipe("tiny", policy=str(tiny_checkpoint), domains=["texty"], max_steps=3, run_name="equal",
                         rollout_dtype="bfloat16",
                         validation={"eval_every": 3, "items": items, "max_new_tokens": tokens, "watch": []})
    result = _train(config, registry)
    lake = open_lake()
    state = json.loads((lake.home / "runs" / "equal" / "state.json").read_text())
    in_loop = {0: state["validation"]["start"]["texty"], 3: state["validation"]["latest"]["scores"]["texty"]}
    assert state["validation"]["latest"]["step"] == 3 and len(in_loop[3]) == items

    swept = {}
    for step, name, folder in ((0, "wide-start", tiny_checkpoint),
                               (3, result.checkpoint, lake.checkpoints_dir / result.checkpoint)):
        factory = engine_factory_for(str(folder), lake, backend="torch", dtype="bfloat16")
        sweep = run_sweep(lake, name, [registry.get("texty")], factory,
                          SweepConfig(samples=1, limit=items, max_new_tokens=tokens, progress=False),
                          prompt_format=prompt_format_of_folder(folder))
        rows = sweep.domains[0].items
        swept[step] = dict(zip(rows["item_id"].to_list(), rows["score"].to_list()))
    assert in_loop[0] == swept[0]
    assert in_loop[3] == swept[3]
    assert in_loop[3] != in_loop[0]  # the policy moved: equal to the right checkpoint, not to any
    history = {h["step"]: h["val_score"] for h in result.history if h["domain"] == "texty" and h["val_score"] is not None}
    assert history == pytest.approx({s: sum(v.values()) / items for s, v in swept.items()})
