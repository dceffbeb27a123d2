"""The labelled audit of real sweep completions (quality.report_card.audit): strata drawn from a
real lake's sweep rows, a person's labels turned into false-positive and false-negative rates with
Wilson intervals, kept in the lake for the report card."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import polars as pl
import pytest

from domains import get_registry
from quality.report_card.audit import (AuditError, draw_audit, latest_audit, read_labels, states_reference,
                                       summarize, wilson, write_audit, write_labelling_file)
from storage.lake import Lake
from storage.tables import RESULTS, conform

DOMAIN = "math_arith_easy"
CHECKPOINT = "ckpt-audit"


def _sweep(lake: Lake, rows: list[dict]) -> None:
    at = datetime.now(timezone.utc).isoformat()
    frame = conform(pl.DataFrame([{"checkpoint": CHECKPOINT, "domain": DOMAIN, "sample_idx": 0, "created_at": at,
                                   "gen_config": "g", **r} for r in rows]), RESULTS)
    lake.write_batch("results", {"checkpoint": CHECKPOINT, "domain": DOMAIN, "batch": "b0"}, {"part": frame})


@pytest.fixture
def swept(assay_home):
    """A lake holding one sweep of 12 eval items: 4 right and paid, 4 right but unpaid (a verifier
    bug the audit must surface), 4 wrong and unpaid."""
    domain = get_registry().get(DOMAIN)
    items = domain.eval_items()[:12]
    rows = []
    for i, item in enumerate(items):
        if i < 4:
            rows.append({"item_id": item["id"], "score": 1.0, "completion": f"Answer: {item['answer']}"})
        elif i < 8:
            rows.append({"item_id": item["id"], "score": 0.0, "completion": f"so it is {item['answer']} i think"})
        else:
            rows.append({"item_id": item["id"], "score": 0.0, "completion": "Answer: 12345"})
    lake = Lake.at(assay_home)
    _sweep(lake, rows)
    return lake, domain, items


def test_states_reference_reads_numbers_and_whole_words():
    assert states_reference("so the total is 1,795 units", "1795")
    assert states_reference("Answer: 7.0", "7")
    assert not states_reference("Answer: 17", "7")
    assert states_reference("The capital is **Paris**.", "Paris")
    assert not states_reference("Parisian food", "Paris")
    assert not states_reference("anything", "")


def test_draw_puts_each_completion_in_one_stratum_and_writes_a_file_to_label(swept, tmp_path):
    lake, domain, items = swept
    rows = draw_audit(lake, domain, CHECKPOINT, per_stratum=3, seed=1)
    by = {}
    for row in rows:
        by.setdefault(row["stratum"], []).append(row)
    assert len(by["unpaid_states_reference"]) == 3 and by["unpaid_states_reference"][0]["stratum_size"] == 4
    assert "paid_without_reference" not in by  # every paid completion states its reference
    assert len(by["random"]) == 3 and by["random"][0]["stratum_size"] == 8
    assert len({(r["item_id"], r["sample_idx"]) for r in rows}) == len(rows)
    assert all(r["label"] == "" and r["reference"] and r["prompt"] for r in rows)
    again = draw_audit(lake, domain, CHECKPOINT, per_stratum=3, seed=1)
    assert [r["item_id"] for r in again] == [r["item_id"] for r in rows]  # the same seed draws the same rows
    other = draw_audit(lake, domain, CHECKPOINT, per_stratum=3, seed=2)
    assert {r["item_id"] for r in other} != {r["item_id"] for r in rows}
    for suffix in ("jsonl", "csv"):
        path = write_labelling_file(rows, tmp_path / f"audit.{suffix}")
        assert [r["item_id"] for r in read_labels(path)] == [r["item_id"] for r in rows]


def test_labels_give_both_rates_with_wilson_intervals_and_reach_the_card(swept, tmp_path):
    lake, domain, items = swept
    rows = draw_audit(lake, domain, CHECKPOINT, per_stratum=10)
    for row in rows:  # the person: a completion that states the reference is right, "12345" is wrong
        row["label"] = "correct" if states_reference(row["completion"], row["reference"]) else "incorrect"
    path = write_labelling_file(rows, tmp_path / "labelled.jsonl")
    summary = summarize(read_labels(path))
    assert (summary.paid_labelled, summary.false_positives) == (4, 0)
    assert (summary.unpaid_labelled, summary.false_negatives) == (8, 4)
    assert summary.fp_rate == 0.0 and summary.fn_rate == 0.5
    assert summary.fn_interval == pytest.approx(wilson(4, 8))
    low, high = summary.fn_interval
    assert 0.2 < low < 0.5 < high < 0.8
    assert summary.weighted_fn_rate == pytest.approx(0.5)
    write_audit(lake, read_labels(path))
    assert latest_audit(lake, DOMAIN).fn_rate == 0.5
    assert latest_audit(lake, "strings") is None


def test_wilson_matches_known_values():
    low, high = wilson(0, 10)
    assert low == 0.0 and high == pytest.approx(0.2775, abs=1e-4)
    low, high = wilson(5, 10)
    assert (low, high) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson(0, 0) is None


def test_bad_labels_and_missing_sweeps_say_what_to_do(swept, tmp_path):
    lake, domain, _ = swept
    with pytest.raises(AuditError, match="no sweep results.*assay sweep --checkpoint never-swept"):
        draw_audit(lake, domain, "never-swept")
    rows = draw_audit(lake, domain, CHECKPOINT, per_stratum=2)
    rows[0]["label"] = "kinda"
    path = write_labelling_file(rows, tmp_path / "bad.jsonl")
    with pytest.raises(AuditError, match=r"bad.jsonl:1: label 'kinda' is not one of correct, incorrect"):
        read_labels(path)
    rows[0]["label"] = ""
    with pytest.raises(AuditError, match="no row is labelled"):
        summarize(read_labels(write_labelling_file(rows, tmp_path / "empty.jsonl")))
    (tmp_path / "junk.jsonl").write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(AuditError, match="missing audit"):
        read_labels(tmp_path / "junk.jsonl")
    with pytest.raises(AuditError, match="no labelling file"):
        read_labels(tmp_path / "absent.jsonl")
