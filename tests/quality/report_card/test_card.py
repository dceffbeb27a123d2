"""The report card (quality.report_card.card): each row computed through the domain's own scorer,
the verdict against the domain's bar, the lake table, and the block it puts on the train set."""

from __future__ import annotations

import re

import polars as pl
import pytest

from domains import Domain, get_registry
from quality.batch_gates import TrainSetError, write_train_set
from quality.gate_history import train_set_problem
from quality.report_card.card import (CardConfig, build_card, card_problem, latest_card_rows, oracle_and_nop,
                                      worst_first, write_cards)
from storage.lake import Lake

QUICK = CardConfig(items=6, hack_search=False, mutation=False, workers=1, record=False)


def _samples(split, n, seed):
    base = 0 if split == "train" else 5_000
    for i in range(n):
        k = base + 37 * i + 1_003
        yield {"id": f"toy-{split}-{k}", "prompt": f"What is {k} + 1? Finish with a line 'Answer: <number>'.",
               "answer": str(k + 1)}


def _strict_score(completion, sample):
    """Pays only the reference written exactly as stored, bare or after 'Answer: ' on the last line:
    refuses '1,004', '1004.0', '**Answer:** 1004'."""
    match = re.search(r"(?:^|Answer:)[ \t]*(\S+)\s*$", completion or "")
    return 1.0 if match and match.group(1) == sample["answer"] else 0.0


def _lenient_to_dont_know(completion, sample):
    """A scorer that pays 'I don't know.' half: a nop is paid."""
    if "don't know" in (completion or ""):
        return 0.5
    return _strict_score(completion, sample)


def toy(name: str, score, **extra) -> Domain:
    return Domain(name=name, owner="test@example.com", description="toy", samples=_samples, score=score, **extra)


def test_a_verifier_that_refuses_right_answers_fails_its_card_on_recall():
    card = build_card(toy("toy_strict", _strict_score), QUICK)
    assert card.oracle.oracle_pass == 1.0 and card.oracle.nop_paid == 0.0
    assert card.recall.recall is not None and card.recall.recall < card.min_recall
    assert card.passed is False
    assert any(f.startswith("recall ") and "below the bar" in f for f in card.failures)
    assert card.recall.misses and all(m["score"] < 1.0 for m in card.recall.misses)
    row = card.row(run="r", source="test", created_at="t")
    assert row["recall"] == card.recall.recall and row["recall_low"] <= row["recall"] <= row["recall_high"]


def test_the_domain_declares_its_own_recall_bar():
    lax = toy("toy_strict_lax", _strict_score, gate_thresholds={"min_recall": 0.0})
    card = build_card(lax, QUICK)
    assert card.min_recall == 0.0 and card.passed is True, card.failures


def test_a_paid_nop_fails_the_card():
    card = build_card(toy("toy_nop", _lenient_to_dont_know, gate_thresholds={"min_recall": 0.0}), QUICK)
    assert card.oracle.nop_paid == 1.0
    assert card.passed is False and any(f.startswith("nop:") and "i_dont_know" in f for f in card.failures)


def test_oracle_and_nop_on_every_item_in_one_batch():
    domain = get_registry().get("math_arith_easy")
    samples = domain.generate("eval", 5, seed=0)
    result = oracle_and_nop(domain, samples)
    assert (result.items, result.oracle_paid, result.nop_paid_items) == (5, 5, 0)


def test_a_domain_with_no_verifier_is_skipped_not_passed():
    from domains.base import LearnedReward

    blind = Domain(name="toy_blind", owner="t@e.com", description="no verifier", samples=_samples,
                   learned_reward=LearnedReward())
    card = build_card(blind, QUICK)
    assert card.passed is None and "no verifier" in card.skipped and not card.failures


def test_a_raising_scorer_is_a_failed_card_never_a_pass():
    def broken(completion, sample):
        raise RuntimeError("boom")

    card = build_card(toy("toy_broken", broken), QUICK)
    assert card.passed is False and "boom" in " ".join(card.failures)


def test_cards_round_trip_the_lake_and_a_failed_one_blocks_the_train_set(assay_home):
    lake = Lake.at(assay_home)
    strict = build_card(toy("math_arith_easy", _strict_score), QUICK)  # recorded under a real domain's name
    good = build_card(toy("strings", _strict_score, gate_thresholds={"min_recall": 0.0}), QUICK)
    run = write_cards(lake, [strict, good], source="test")
    rows = latest_card_rows(lake)
    assert set(rows["domain"]) == {"math_arith_easy", "strings"} and set(rows["run"]) == {run}
    assert rows.filter(pl.col("domain") == "math_arith_easy")["passed"][0] is False
    problem = card_problem(lake, "math_arith_easy")
    assert problem and "report card" in problem and "assay domains report math_arith_easy" in problem
    assert card_problem(lake, "strings") is None and card_problem(lake, "gsm") is None
    assert train_set_problem(lake, "math_arith_easy", ["ev1"]) == problem
    with pytest.raises(TrainSetError, match="report card"):
        write_train_set(lake, "math_arith_easy")
    # a newer card that passes lifts the block
    write_cards(lake, [build_card(toy("math_arith_easy", _strict_score, gate_thresholds={"min_recall": 0.0}),
                                  QUICK)], source="test")
    assert card_problem(lake, "math_arith_easy") is None


def test_worst_first_orders_failed_then_lowest_recall():
    cards = [build_card(toy(f"toy_{n}", _strict_score, gate_thresholds={"min_recall": bar}), QUICK)
             for n, bar in (("a", 0.0), ("b", 0.99))]
    assert [c.domain for c in worst_first(cards)] == ["toy_b", "toy_a"]
