"""Preference-pair files (storage.preference_pairs): every bad line is named, nothing is dropped
silently, and the held-out split never puts one prompt on both sides."""

from __future__ import annotations

import json

import pytest

from storage.preference_pairs import (PairsFileError, PreferencePair, pairs_fingerprint, read_pairs, split_pairs,
                                      write_pairs)


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def good(i, **extra):
    return json.dumps({"prompt": f"q{i}", "chosen": f"good {i}", "rejected": f"bad {i}", **extra})


def test_a_good_file_reads_every_pair_with_its_line_and_a_stable_id(tmp_path):
    path = write_lines(tmp_path / "pairs.jsonl", [good(1), "", good(2, id="mine", metadata={"src": "x"})])
    pairs = read_pairs(path)
    assert [(p.line, p.prompt) for p in pairs] == [(1, "q1"), (3, "q2")]
    assert pairs[1].id == "mine" and pairs[1].metadata == {"src": "x"}
    assert pairs[0].id == read_pairs(path)[0].id and len(pairs[0].id) == 16


def test_every_bad_line_is_reported_by_number_and_nothing_is_used(tmp_path):
    lines = [good(1),
             "not json",
             json.dumps(["a", "list"]),
             json.dumps({"prompt": "q", "chosen": "a"}),
             json.dumps({"prompt": "q", "chosen": 3, "rejected": "b"}),
             json.dumps({"prompt": "q", "chosen": "  ", "rejected": "b"}),
             json.dumps({"prompt": "q", "chosen": "same", "rejected": " same "}),
             good(1),
             good(9, id="p1"), good(10, id="p1")]
    with pytest.raises(PairsFileError) as caught:
        read_pairs(write_lines(tmp_path / "bad.jsonl", lines))
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == [f"line {n}" for n in (2, 3, 4, 5, 6, 7, 8, 10)]
    assert "invalid JSON" in problems[0] and "expected a JSON object" in problems[1]
    assert "missing field 'rejected'" in problems[2]
    assert "'chosen' must be a string, got int" in problems[3]
    assert "'chosen' is empty" in problems[4]
    assert "the same text" in problems[5]
    assert "the same pair as line 1" in problems[6]
    assert "id 'p1' is already used on line 9" in problems[7]
    assert "8 problem(s), nothing was used" in str(caught.value)


def test_an_empty_or_missing_file_is_refused(tmp_path):
    with pytest.raises(PairsFileError, match="no pairs"):
        read_pairs(write_lines(tmp_path / "empty.jsonl", [""]))
    with pytest.raises(PairsFileError, match="no such file"):
        read_pairs(tmp_path / "absent.jsonl")
    with pytest.raises(PairsFileError, match="unsupported file format"):
        read_pairs(write_lines(tmp_path / "pairs.txt", [good(1)]))


def test_write_then_read_round_trips(tmp_path):
    pairs = [PreferencePair(id=f"i{i}", prompt=f"p{i}", chosen="yes", rejected="no", metadata={"k": i})
             for i in range(3)]
    back = read_pairs(write_pairs(pairs, tmp_path / "out.jsonl"))
    assert [(p.id, p.prompt, p.chosen, p.rejected, p.metadata) for p in back] == \
        [(p.id, p.prompt, p.chosen, p.rejected, p.metadata) for p in pairs]
    assert pairs_fingerprint(back) == pairs_fingerprint(pairs)
    assert pairs_fingerprint(back[::-1]) != pairs_fingerprint(pairs)


def test_the_split_is_by_prompt_deterministic_and_near_the_fraction():
    pairs = [PreferencePair(id=f"{i}-{j}", prompt=f"prompt {i}", chosen=f"c{j}", rejected=f"r{j}")
             for i in range(200) for j in range(2)]
    train, heldout = split_pairs(pairs, 0.25, seed=1)
    assert not {p.prompt for p in train} & {p.prompt for p in heldout}
    assert len(train) + len(heldout) == len(pairs)
    assert 0.15 < len(heldout) / len(pairs) < 0.35
    assert split_pairs(pairs, 0.25, seed=1) == (train, heldout)
    assert split_pairs(pairs, 0.25, seed=2) != (train, heldout)


def test_a_split_that_leaves_a_side_empty_says_what_to_do():
    pairs = [PreferencePair(id=str(j), prompt="one prompt", chosen=f"c{j}", rejected=f"r{j}") for j in range(5)]
    with pytest.raises(ValueError, match="1 distinct prompts.*add pairs with more distinct prompts"):
        split_pairs(pairs, 0.5, seed=0)


def test_repeated_pairs_are_refused_with_the_way_on_or_dropped_and_counted_when_asked(tmp_path):
    lines = [good(1), good(2), good(1), good(3), good(2), good(1)]
    path = write_lines(tmp_path / "repeats.jsonl", lines)
    with pytest.raises(PairsFileError) as caught:
        read_pairs(path)
    assert caught.value.duplicates == 3
    message = str(caught.value)
    assert "--drop-duplicates" in message and "3 line(s) repeat an earlier pair" in message
    assert "must be a JSON object" not in message  # only the hint that applies

    dropped: list[int] = []
    pairs = read_pairs(path, drop_duplicates=True, dropped=dropped)
    assert [p.line for p in pairs] == [1, 2, 4] and dropped == [3, 5, 6]


def test_dropping_duplicates_still_refuses_every_other_problem(tmp_path):
    lines = [good(1, id="a"), good(1, id="a"), good(2, id="a"), '{"prompt": "p"}']
    with pytest.raises(PairsFileError) as caught:
        read_pairs(write_lines(tmp_path / "mixed.jsonl", lines), drop_duplicates=True)
    problems = caught.value.problems
    assert [p.split(":")[0] for p in problems] == ["line 3", "line 4"]  # the id reused for other texts, the bad line
    assert "id 'a' is already used on line 1" in problems[0] and caught.value.duplicates == 0
