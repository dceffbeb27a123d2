"""A judge (generation.judge): a policy prompted with a rubric, its reward log P(Yes) - log P(No),
saved and registered like a reward model, loaded by the same RewardScorer.load the gate and GRPO use,
and gated like one. The tiny policy (random weights) is the judge here: its verdicts mean nothing,
so the test checks the arithmetic against the model's own softmax and that the gate refuses it;
the SmolLM2 judge's figures are in bench/RESULTS.md."""

from __future__ import annotations

import math

import pytest

from generation.judge import JudgeScorer, judge_text
from generation.reward_models import resolve_reward_model
from generation.reward_scorer import RewardModelError, RewardScorer
from quality.reward_gate import check_reward
from storage.lake import Lake
from storage.preference_pairs import PreferencePair


@pytest.fixture
def judge(tiny_home):
    from generation.judge import create_judge

    lake = Lake.at(tiny_home)
    record = create_judge(lake, lake.mlflow_uri, "customer_reply", "tiny", "The reply offers a concrete remedy.",
                          max_length=256)
    return lake, record


def test_a_judge_is_registered_and_loaded_like_a_reward_model(judge):
    lake, record = judge
    assert resolve_reward_model(lake, "customer_reply", "latest").reward_model == record.reward_model
    scorer = RewardScorer.load(record.path)
    assert isinstance(scorer, JudgeScorer) and scorer.rubric == "The reply offers a concrete remedy."
    prompts, answers = ["My kettle broke.", "My lamp is late."], ["We will send a new kettle today.", "Whatever."]
    raw = scorer(prompts, answers)
    # the raw score is the log-odds of Yes against No at the judge's next token, read independently here
    import torch

    yes = scorer.tokenizer("Yes", add_special_tokens=False)["input_ids"][0]
    no = scorer.tokenizer("No", add_special_tokens=False)["input_ids"][0]
    for prompt, answer, value in zip(prompts, answers, raw):
        ids = scorer.tokenizer(judge_text(scorer.tokenizer, scorer.rubric, prompt, answer), return_tensors="pt",
                               add_special_tokens=False)
        with torch.no_grad():
            probs = torch.softmax(scorer.model(**ids).logits[0, -1].double(), dim=-1)
        assert 1 / (1 + math.exp(-value)) == pytest.approx(float(probs[yes] / (probs[yes] + probs[no])), abs=1e-4)
    assert raw[0] != raw[1]  # the answer is read


def test_a_judge_that_knows_nothing_fails_its_gate(judge):
    lake, record = judge
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "customer_reply_example", Path(__file__).resolve().parents[2] / "examples/open_domains/customer_reply.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pairs = [PreferencePair(id=f"p{i}", **p) for i, p in enumerate(module.preference_pairs(40, seed=3))]
    result = check_reward(RewardScorer.load(record.path), pairs)
    assert not result.passed
    assert {"accuracy", "kappa"} & {c.name for c in result.criteria if not c.passed}


def test_an_empty_rubric_is_refused(tiny_home):
    from generation.judge import create_judge

    lake = Lake.at(tiny_home)
    with pytest.raises(RewardModelError, match="rubric is empty"):
        create_judge(lake, lake.mlflow_uri, "customer_reply", "tiny", "  ")


def test_a_long_answer_loses_its_start_never_the_question_the_verdict_follows(judge):
    from generation.judge import fitted_text

    lake, record = judge
    scorer = RewardScorer.load(record.path)
    tokenizer = scorer.tokenizer
    answer = "padding words " * 300 + "FINAL-CLAIM"
    text = fitted_text(tokenizer, scorer.rubric, "My kettle broke.", answer, 256)
    assert len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= 256 + 2
    assert "Reply with one word, Yes or No." in text and "FINAL-CLAIM" in text and "[...]" in text
    assert "Rubric: The reply offers a concrete remedy." in text  # the rubric is kept while the answer can give way
    short = fitted_text(tokenizer, scorer.rubric, "My kettle broke.", "We refund you.", 256)
    assert short == judge_text(tokenizer, scorer.rubric, "My kettle broke.", "We refund you.")
