"""Ingest: every structural reason, the count invariant, nothing lost, atomic batches."""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains import Domain
from quality.ingest import ingest_file, ingest_generated, quarantine_listing
from storage.lake import Lake
from storage.readers import UnsupportedFormat

DOMAIN = Domain(
    name="toy", owner="o", description="d", max_prompt_tokens=50,
    samples=lambda split, n, seed: ({"id": f"{split}-{i}", "prompt": f"{split} q {seed} {i}?", "answer": str(i)}
                                    for i in range(n)),
    score=lambda c, s: float(c.strip() == s["answer"]),
)

BAD_LINES = [
    (json.dumps({"prompt": "What is 2+2?", "answer": "4"}), []),
    ("{not json", ["malformed"]),
    (json.dumps([1, 2, 3]), ["malformed"]),
    (json.dumps({"prompt": "What is 3+3?", "answer": 6}), ["malformed"]),
    (json.dumps({"answer": "5"}), ["missing_field"]),
    (json.dumps({"prompt": "   ", "answer": "5"}), ["empty_field"]),
    (json.dumps({"prompt": "x " * 400, "answer": "5"}), ["too_long"]),
    (json.dumps({"prompt": "What is 2+2?", "answer": "4"}), ["duplicate"]),
    (json.dumps({"prompt": "what is  2+2?", "answer": "4 "}), ["duplicate"]),
    (json.dumps({"id": "q9", "prompt": "What is 9+9?", "answer": "18", "metadata": {"src": "hand"}}), []),
    (json.dumps({"prompt": "", "metadata": "nope"}), ["missing_field", "empty_field", "malformed"]),
]


def write_jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n")
    return path


def test_every_structural_reason_and_the_invariant(assay_home, tmp_path):
    src = write_jsonl(tmp_path / "rows.jsonl", [line for line, _ in BAD_LINES])
    lake = Lake.at()
    report = ingest_file(lake, DOMAIN, src)
    assert report.received == len(BAD_LINES) == report.admitted + report.quarantined
    assert report.admitted == 2
    listing = {row["line"]: row for row in quarantine_listing(lake, "toy")}
    for number, (_, expected) in enumerate(BAD_LINES, start=1):
        if expected:
            assert sorted(listing[number]["reasons"]) == sorted(expected), (number, listing[number])
            assert listing[number]["source"] == str(src.resolve())
        else:
            assert number not in listing
    quarantined = lake.read("ingest", "quarantine")
    raw_by_line = dict(zip(quarantined["line"].to_list(), quarantined["raw"].to_list()))
    assert raw_by_line[2] == "{not json", "the original text of a bad row is kept"
    samples = lake.read("ingest", "samples")
    assert set(samples["id"].to_list()) >= {"q9"}
    assert json.loads(samples.filter(pl.col("id") == "q9")["metadata"][0]) == {"src": "hand"}


def test_reingesting_the_same_file_quarantines_everything_as_duplicate(assay_home, tmp_path):
    src = write_jsonl(tmp_path / "rows.jsonl", [json.dumps({"prompt": f"q{i}", "answer": "a"}) for i in range(5)])
    lake = Lake.at()
    assert ingest_file(lake, DOMAIN, src).admitted == 5
    again = ingest_file(lake, DOMAIN, src)
    assert (again.admitted, again.quarantined, again.reasons) == (0, 5, {"duplicate": 5})
    assert lake.read("ingest", "samples").height == 5


def test_csv_and_parquet_keep_line_numbers(assay_home, tmp_path):
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text('prompt,answer,metadata\n"multi\nline prompt",1,\nq2,,\nq3,3,"{""k"": 1}"\n')
    lake = Lake.at()
    report = ingest_file(lake, DOMAIN, csv_path)
    assert (report.received, report.admitted) == (3, 2)
    assert quarantine_listing(lake, "toy")[0]["line"] == 4  # the multi-line row spans lines 2-3

    pq_path = tmp_path / "rows.parquet"
    pl.DataFrame({"prompt": ["p1", None, "p3"], "answer": ["1", "2", "3"]}).write_parquet(pq_path)
    report = ingest_file(lake, DOMAIN, pq_path)
    assert (report.received, report.admitted, report.reasons) == (3, 2, {"missing_field": 1})
    rows = [r for r in quarantine_listing(lake, "toy") if r["source"].endswith("rows.parquet")]
    assert rows[0]["line"] == 2


def test_undecodable_bytes_are_quarantined_not_fatal(assay_home, tmp_path):
    src = tmp_path / "rows.jsonl"
    src.write_bytes(b'{"prompt": "ok", "answer": "1"}\n\xff\xfe garbage\n')
    report = ingest_file(Lake.at(), DOMAIN, src)
    assert (report.received, report.admitted, report.reasons) == (2, 1, {"malformed": 1})


def test_unsupported_format_and_missing_file_write_nothing(assay_home, tmp_path):
    lake = Lake.at()
    (tmp_path / "rows.txt").write_text("hello")
    with pytest.raises(UnsupportedFormat):
        ingest_file(lake, DOMAIN, tmp_path / "rows.txt")
    with pytest.raises(FileNotFoundError):
        ingest_file(lake, DOMAIN, tmp_path / "absent.jsonl")
    assert lake.tables() == []


def test_generated_batches_are_idempotent(assay_home):
    lake = Lake.at()
    first = ingest_generated(lake, DOMAIN, train_n=20)
    second = ingest_generated(lake, DOMAIN, train_n=20)
    assert first["train"].admitted == second["train"].admitted == 20
    assert second["train"].reasons == {}, "re-materializing must not flag its own previous batch"
    samples = lake.read("ingest", "samples")
    assert samples.group_by("split").len().sort("split").to_dicts() == [
        {"split": "eval", "len": DOMAIN.eval_size}, {"split": "train", "len": 20}]


def test_an_explicit_id_reused_across_batches_is_quarantined_as_duplicate(assay_home, tmp_path):
    lake = Lake.at()
    first = write_jsonl(tmp_path / "first.jsonl", [
        json.dumps({"id": f"u{i}", "prompt": f"What is {i} plus 1?", "answer": str(i + 1)}) for i in range(3)])
    assert ingest_file(lake, DOMAIN, first).admitted == 3
    second = write_jsonl(tmp_path / "second.jsonl", [
        json.dumps({"id": "u0", "prompt": "What is 40 plus 2?", "answer": "42"}),  # reused id, new content
        json.dumps({"id": "u1", "prompt": "What is 1 plus 1?", "answer": "2"}),    # reused id, same content
        json.dumps({"id": "u9", "prompt": "What is 9 plus 1?", "answer": "10"}),   # a new item
    ])
    report = ingest_file(lake, DOMAIN, second)
    assert (report.received, report.admitted, report.quarantined) == (3, 1, 2)
    assert report.reasons == {"duplicate": 2}
    samples = lake.read("ingest", "samples")
    assert samples.height == 4 and samples["id"].n_unique() == 4, "a domain's ids stay unique across batches"
    mine = {r["id"]: r for r in quarantine_listing(lake, "toy") if r["source"].endswith("second.jsonl")}
    assert mine["u0"]["reasons"] == ["duplicate"] and "different content" in mine["u0"]["detail"]
    assert mine["u1"]["reasons"] == ["duplicate"] and "same content" in mine["u1"]["detail"]
    first_batch = samples.filter(pl.col("id") == "u0")["batch"][0]
    assert first_batch in mine["u0"]["detail"], "the detail names the batch that holds the id"
    kept = lake.read("ingest", "quarantine").filter(pl.col("id") == "u0")
    assert kept["prompt"].to_list() == ["What is 40 plus 2?"], "the quarantined row keeps its own content"

    # the very same file again: every row is a duplicate, nothing is admitted, nothing is lost
    again = ingest_file(lake, DOMAIN, second)
    assert (again.received, again.admitted, again.quarantined, again.reasons) == (3, 0, 3, {"duplicate": 3})
    assert lake.read("ingest", "samples").height == 4


def test_the_same_id_in_another_domain_is_not_a_duplicate(assay_home, tmp_path):
    other = Domain(name="toy_other", owner="o", description="d", samples=DOMAIN.samples, score=DOMAIN.score)
    lake = Lake.at()
    src = write_jsonl(tmp_path / "a.jsonl", [json.dumps({"id": "shared-1", "prompt": "What is 5 plus 5?", "answer": "10"})])
    assert ingest_file(lake, DOMAIN, src).admitted == 1
    src = write_jsonl(tmp_path / "b.jsonl", [json.dumps({"id": "shared-1", "prompt": "Spell cat backwards.", "answer": "tac"})])
    assert ingest_file(lake, other, src).admitted == 1, "ids are unique per domain, not across domains"
