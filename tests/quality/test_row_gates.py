"""The row-gate list and the plain-frame API (no lake)."""

from __future__ import annotations

import polars as pl

from quality import reasons
from quality.row_gates import default_row_gates, gate_flags, rule_based_gates


def test_default_gates_cover_every_row_level_reason():
    codes = {g.codes[0] for g in default_row_gates()}
    assert codes == {reasons.TOO_LONG, reasons.ANSWER_LEAK, reasons.PII, reasons.SECRET,
                     reasons.PROMPT_INJECTION, reasons.DUPLICATE, reasons.NEAR_DUPLICATE,
                     reasons.CONTAMINATED, reasons.TOXIC, reasons.HARMFUL}
    assert all(g.codes[0] not in (reasons.TOXIC, reasons.HARMFUL) for g in rule_based_gates())


def test_gate_flags_on_a_plain_frame():
    frame = pl.DataFrame({"prompt": ["What is 2 plus 3?", "what is 2 PLUS 3?", "Mail a@b.com", "x" * 30_000],
                          "answer": ["5", "5", "ok", "1"]})
    flags = gate_flags(frame, gates=rule_based_gates())
    assert flags.height == 4
    assert flags["duplicate"].to_list() == [False, True, False, False]
    assert flags["pii"].to_list() == [False, False, True, False]
    assert flags["too_long"].to_list() == [False, False, False, True]
