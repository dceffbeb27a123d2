"""Long-context domains: lengths in the policy's real tokens, the contract, scorers that a policy
dumping everything it read cannot fool, and the length-aware gates (too_long, contamination)."""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains import load_registry
from domains.builtin import _long_text, long_context
from quality.domain_check import check_domain
from quality.ingest import RawRecord, ingest_records
from quality.row_gates import GateContext, TooLongGate
from storage.lake import Lake

FAMILIES = tuple(long_context.FAMILIES)
BUCKETS = tuple(long_context.BUCKETS)


@pytest.fixture(scope="module")
def registry():
    return load_registry(None)


@pytest.fixture(scope="module")
def count_real(tmp_path_factory):
    """SmolLM2's real tokenizer (converted from the shipped GGUF once for this module)."""
    from generation.policy import policy_token_counter

    return policy_token_counter(home=tmp_path_factory.mktemp("home"))


def test_every_family_has_every_bucket_as_a_domain_tagged_long_context(registry):
    names = [d.name for d in registry if "long_context" in d.tags]
    assert sorted(names) == sorted(f"{f}_{b}" for f in FAMILIES for b in BUCKETS)
    for bucket, tokens in long_context.BUCKETS.items():
        domain = registry.get(f"long_needle_{bucket}")
        assert domain.context_tokens == tokens and domain.max_prompt_tokens == tokens
        assert bucket in domain.tags and "long_needle" in domain.tags


@pytest.mark.parametrize("family", FAMILIES)
def test_prompts_are_their_bucket_long_in_smollm2_tokens_counted_exactly(registry, count_real, family):
    for bucket, tokens in long_context.BUCKETS.items():
        domain = registry.get(f"{family}_{bucket}")
        rows = domain.generate("eval", 2, 0) + domain.generate("train", 1, 3)
        real = count_real([r["prompt"] for r in rows])
        for row, n in zip(rows, real):
            assert row["metadata"]["prompt_tokens"] == n  # the generator's own count is exact
            target = tokens - long_context.RESERVE_TOKENS
            # a prompt fills its bucket: at most one filler sentence (or one list word's lines) short
            assert target - 0.05 * tokens <= n <= tokens - 64, (domain.name, n)


def test_the_token_table_refuses_text_it_does_not_cover():
    with pytest.raises(KeyError, match="regenerate it"):
        _long_text.count_tokens(" Zyxwvutsrq")


@pytest.mark.parametrize("name", [f"{f}_1k" for f in FAMILIES] + ["long_multikey_16k", "long_filing_16k"])
def test_self_test_passes(registry, name):
    report = check_domain(registry.get(name), n=6)
    assert report["passed"], report["checks"]


def _one(registry, name, split="eval"):
    return registry.get(name).generate(split, 1, 0)[0]


def test_needle_scorers_refuse_dumped_or_distracting_numbers(registry):
    single = _one(registry, "long_needle_2k")
    value = single["answer"]
    assert long_context.score_numbers(f"The magic number is {value}.\nAnswer: {value}", single) == 1.0
    assert long_context.score_numbers(f"Answer: {int(value):,}", single) == 1.0  # thousands separators
    assert long_context.score_numbers("Answer: 1234567", single) == 0.0
    multi = _one(registry, "long_multikey_2k")
    distractors = multi["metadata"]["distractors"]
    assert len(distractors) == long_context.NEEDLES - 1
    every = ", ".join(map(str, [multi["answer"], *distractors]))
    assert long_context.score_numbers(f"Answer: {every}", multi) == 0.0  # dumping every number read
    assert long_context.score_numbers(f"Answer: {distractors[0]}", multi) == 0.0
    assert long_context.score_numbers(f"Answer: {multi['answer']}", multi) == 1.0
    values = _one(registry, "long_multivalue_2k")
    wanted = values["metadata"]["values"]
    assert long_context.score_numbers("Answer: " + ", ".join(map(str, reversed(wanted))), values) == 1.0
    assert long_context.score_numbers("Answer: " + ", ".join(map(str, wanted[:-1])), values) == 0.0
    assert long_context.score_numbers("Answer: " + ", ".join(map(str, wanted + [1234567])), values) == 0.0


def test_variable_tracking_wants_exactly_the_chain(registry):
    row = _one(registry, "long_vartrack_4k")
    chain, every = row["metadata"]["variables"], row["metadata"]["all_variables"]
    assert len(chain) == long_context.HOPS + 1
    for name in every:  # every variable of the item is really in the prompt
        assert f"VAR {name} = " in row["prompt"]
    assert long_context.score_variables("Answer: " + ", ".join(reversed(chain)), row) == 1.0
    assert long_context.score_variables("Answer: " + ", ".join(every), row) == 0.0
    assert long_context.score_variables("Answer: " + ", ".join(chain[:-1]), row) == 0.0
    decoys = [n for n in every if n not in chain]
    assert long_context.score_variables("Answer: " + ", ".join(decoys), row) == 0.0


def test_aggregation_answer_is_really_the_most_frequent_words(registry):
    row = _one(registry, "long_aggregate_4k")
    listed = [line.split(". ", 1)[1] for line in row["prompt"].split("\n") if line[:1].isdigit()]
    counts = pl.Series(listed).value_counts(sort=True)
    top = set(row["metadata"]["top_words"])
    assert set(counts[counts.columns[0]][:long_context.TOP_WORDS].to_list()) == top
    assert counts["count"][long_context.TOP_WORDS - 1] > counts["count"][long_context.TOP_WORDS]
    assert long_context.score_top_words("Answer: " + row["answer"], row) == 1.0
    assert long_context.score_top_words("Answer: " + ", ".join(sorted(set(listed))), row) == 0.0  # dump
    assert long_context.score_top_words("Answer: " + ", ".join(sorted(top)[:-1]), row) == 0.0


def test_filing_answer_needs_both_distant_tables(registry):
    rows = registry.get("long_filing_4k").generate("eval", 30, 0)
    kinds = {r["metadata"]["question"] for r in rows}
    assert kinds == set(long_context.FILING_ASK)
    for row in rows:
        meta = row["metadata"]
        segment_rows = [line for line in row["prompt"].split("\n") if line.startswith(f"| {meta['segment']} |")]
        assert len(segment_rows) == 3
        first, second, expenses = ([int(x) for x in line.strip("|").split("|")[1:]] for line in segment_rows)
        q = first + second
        expected = {"year_revenue": sum(q), "operating_income": sum(q) - expenses[0],
                    "q4_minus_q1": q[3] - q[0]}[meta["question"]]
        assert row["answer"] == str(expected)
        # the two revenue tables are far apart: a quarter of the report at least
        assert row["prompt"].index("Table 2.") - row["prompt"].index("Table 1.") > len(row["prompt"]) // 8
        assert long_context.score_filing(f"Answer: {expected}", row) == 1.0
        assert long_context.score_filing(f"Answer: {expected + 1}", row) == 0.0


def test_generation_is_deterministic_and_splits_disjoint(registry):
    domain = registry.get("long_needle_8k")
    a, b = domain.generate("eval", 3, 0), domain.generate("eval", 3, 0)
    assert a == b
    train = domain.generate("train", 20, 0)
    assert not {r["id"] for r in train} & {r["id"] for r in domain.generate("eval", 20, 0)}


# -- gates ------------------------------------------------------------------------------------------

def test_too_long_is_measured_in_the_policys_tokens(registry, count_real):
    domain = registry.get("long_needle_16k")
    rows = domain.generate("train", 3, 0)
    over = dict(rows[0], prompt=rows[0]["prompt"] + " The grass is green." * 60)  # ~360 tokens past 16k
    batch = pl.DataFrame({"prompt": [r["prompt"] for r in rows] + [over["prompt"]]})
    measured = TooLongGate().flags(batch, GateContext(domain=domain, count_tokens=count_real)).to_list()
    assert measured == [False, False, False, True]
    # the byte estimate (what a domain without a bucket gets) would have refused every honest prompt
    estimated = TooLongGate().flags(batch, GateContext(domain=domain)).to_list()
    assert estimated == [True] * 4


def _records(rows):
    return [RawRecord(i, json.dumps(r), value=r) for i, r in enumerate(rows, start=1)]


def test_ingest_admits_long_rows_and_quarantines_contamination_by_probe(tmp_path, registry, count_real):
    lake = Lake(tmp_path / "home")
    domain = registry.get("long_needle_4k")
    train = domain.generate("train", 6, 0)
    probe_item = domain.eval_items()[0]
    # the same needle and question in a different haystack: the same item, contaminated
    other = registry.get("long_needle_4k").generate("train", 7, 5)[-1]
    needle = probe_item["metadata"]["probe"].split("\n")[0]
    haystack = other["prompt"].split("\n")[1]
    reused = {"id": "reused", "prompt": long_context.NEEDLE_HEAD + needle + haystack + "\n"
              + probe_item["metadata"]["probe"].split("\n", 1)[1], "answer": probe_item["answer"],
              "metadata": {"probe": probe_item["metadata"]["probe"]}}
    report = ingest_records(lake, domain, _records(train + [reused]), source="test", default_split="train",
                            all_domains=[domain, registry.get("long_needle_1k")], count_tokens=count_real)
    assert report.received == 7
    assert report.admitted == 6, report.reasons
    assert report.reasons == {"contaminated": 1}
    # a short row of another domain that pastes a long eval item's probe is contaminated too
    short_domain = registry.get("long_needle_1k")
    pasted = {"id": "pasted", "prompt": "Remember this. " + probe_item["metadata"]["probe"], "answer": "x"}
    report = ingest_records(lake, short_domain, _records([pasted]), source="test2", default_split="train",
                            all_domains=[domain, short_domain], count_tokens=count_real)
    assert report.reasons == {"contaminated": 1}


def test_demo_core_leaves_the_long_context_buckets_out():
    from pipelines.demo import select_domains

    assert not [n for n in select_domains("core") if n.startswith("long_")]
    assert "long_needle_4k" in select_domains("builtin")


def test_a_sweep_of_every_domain_leaves_the_long_buckets_for_when_they_are_asked_for():
    from domains import get_registry

    registry = get_registry()
    every = {d.name for d in registry.sweep_selection()}
    assert "gsm" in every and not any(name.startswith("long_") for name in every)
    assert {d.name for d in registry.sweep_selection(tags=["long_context"])} == {
        d.name for d in registry.domains.values() if "long_context" in d.tags} and len(
        registry.sweep_selection(tags=["long_context"])) == 30
    assert [d.name for d in registry.sweep_selection(names=["long_needle_16k"])] == ["long_needle_16k"]
    assert len(registry.sweep_selection(exclude_tags=[])) == len(registry.domains)


def test_assay_sweep_without_domains_or_tags_leaves_out_the_long_buckets_unless_told(tmp_path, monkeypatch):
    import argparse

    from pipelines.commands import sweep as command

    parser = argparse.ArgumentParser()
    command.register(parser.add_subparsers())
    seen = {}

    def capture(lake, uri, ref, domains, **kwargs):
        seen["domains"] = [d.name for d in domains]
        raise SystemExit(0)

    monkeypatch.setenv("ASSAY_HOME", str(tmp_path))
    monkeypatch.setattr("evaluation.sweep.sweep_checkpoint", capture)
    for argv, has_long in ((["sweep", "--checkpoint", "base-tiny"], False),
                           (["sweep", "--checkpoint", "base-tiny", "--exclude-tag", "none"], True),
                           (["sweep", "--checkpoint", "base-tiny", "--tag", "long_context"], True)):
        args = parser.parse_args(argv)
        with pytest.raises(SystemExit):
            args.handler(args)
        assert any(n.startswith("long_") for n in seen["domains"]) == has_long, argv


# -- hacks built from the prompt alone (issue 27 item 2): copying or spraying what was read pays nothing --

_SEVEN = __import__("re").compile(r"(?<!\d)\d{7}(?!\d)")
_ASKED = __import__("re").compile(r"special magic numbers? for (\w+ \w+) mentioned")
NEEDLE_FAMILIES = ("long_needle", "long_multikey", "long_multivalue")


def _prompt_hacks(row: dict) -> dict[str, str]:
    """Completions a policy could write from the prompt alone, never the answer."""
    prompt = row["prompt"]
    numbers = list(dict.fromkeys(_SEVEN.findall(prompt)))
    asked = _ASKED.search(prompt).group(1)
    wanted = len(row["metadata"]["values"])
    return {
        "prompt echo": prompt,
        "prompt echo with an answer line": f"{prompt}\nAnswer: {', '.join(numbers)}",
        "every 7-digit number": "Answer: " + ", ".join(numbers),
        "the asked key with every value": " ".join(f"The special magic number for {asked} is {n}." for n in numbers),
        # (the first or last `wanted` numbers are a guess now, right as often as chance: see below)
        "the numbers but the first": "Answer: " + ", ".join(numbers[1:]),
    }


@pytest.mark.parametrize("family", NEEDLE_FAMILIES)
def test_needle_prompts_hold_distractors_of_the_answers_shape(registry, family):
    for bucket in BUCKETS:
        for row in registry.get(f"{family}_{bucket}").generate("eval", 3, 0):
            numbers = set(_SEVEN.findall(row["prompt"]))
            values = {str(v) for v in row["metadata"]["values"]}
            assert values < numbers, (family, bucket)
            assert len(numbers - values) >= 3, (family, bucket, len(numbers))  # other 7-digit values to mistake
            assert {str(v) for v in row["metadata"]["distractors"]} == numbers - values


@pytest.mark.parametrize("family", NEEDLE_FAMILIES)
def test_dumping_or_spraying_the_context_scores_zero_and_the_answer_one(registry, family):
    for bucket in BUCKETS:
        domain = registry.get(f"{family}_{bucket}")
        rows = domain.generate("eval", 4, 0)
        for row in rows:
            assert domain.safe_score(f"Answer: {row['answer']}", row) == 1.0  # the control
            for kind, hack in _prompt_hacks(row).items():
                assert domain.safe_score(hack, row) == 0.0, (domain.name, kind)


# -- the asked needle's position among the numbers of its shape is uniform (issue 41) -------------------

POSITION_ITEMS = 400
CHI2_DF3_P001 = 16.27  # chi-square critical value, 3 degrees of freedom, p = 0.001


def _numbers_in_order(row: dict) -> list[str]:
    return list(dict.fromkeys(_SEVEN.findall(row["prompt"])))


@pytest.mark.parametrize("family", ("long_needle", "long_multikey"))
def test_the_asked_number_sits_anywhere_among_the_four(registry, family):
    domain = registry.get(f"{family}_1k")
    rows = domain.generate("eval", POSITION_ITEMS, 0)
    counts = [0, 0, 0, 0]
    wins = [0, 0, 0, 0]  # "answer the number at this position" for every item
    for row in rows:
        numbers = _numbers_in_order(row)
        assert len(numbers) == 4
        counts[numbers.index(str(row["metadata"]["values"][0]))] += 1
        for position, number in enumerate(numbers):
            wins[position] += domain.safe_score(f"Answer: {number}", row) == 1.0
    expected = len(rows) / 4
    chi2 = sum((c - expected) ** 2 / expected for c in counts)
    assert chi2 < CHI2_DF3_P001, (counts, chi2)
    # picking by position wins what a blind guess wins: a quarter (+- 3 standard deviations)
    for position, won in enumerate(wins):
        assert 0.18 <= won / len(rows) <= 0.32, (position + 1, won, len(rows))


def test_no_run_of_positions_finds_all_the_multivalue_numbers(registry):
    domain = registry.get("long_multivalue_1k")
    rows = domain.generate("eval", POSITION_ITEMS, 0)
    held = [0] * 7
    wins = [0] * 4  # "answer the 4 numbers starting at this position"
    for row in rows:
        numbers = _numbers_in_order(row)
        values = {str(v) for v in row["metadata"]["values"]}
        assert len(numbers) == 7 and len(values) == 4
        for position, number in enumerate(numbers):
            held[position] += number in values
        for start in range(4):
            wins[start] += domain.safe_score("Answer: " + ", ".join(numbers[start:start + 4]), row) == 1.0
    # every position holds an asked number 4 times in 7, the first and the last too
    for position, count in enumerate(held):
        assert 0.47 <= count / len(rows) <= 0.67, (position + 1, count)
    # a block of 4 is the asked set 1 time in 35 (~2.9%); framed by decoys, the middle one was right ~17%
    for start, won in enumerate(wins):
        assert won / len(rows) <= 0.07, (start + 1, won)



def test_an_item_whose_text_changed_gets_a_new_id(registry):
    """Sweeps and pass rates are cached by item id: the needle families' v2 text (uniform order)
    must not inherit v1's ids; a family whose text did not change keeps them."""
    from domains.builtin._common import item_id, seeded_rng, split_of

    for family in ("long_needle", "long_multikey", "long_multivalue", "long_filing"):
        name = f"{family}_1k"
        draws = seeded_rng(name, "draws", 0)
        key = next(k for k in iter(lambda: f"{name}:{draws.getrandbits(48):012x}", None)
                   if split_of(k, long_context.EVAL_SHARE) == "eval")
        version = long_context.ITEM_VERSIONS.get(family, 1)
        expected = item_id(name, key if version == 1 else f"{key}/v{version}")
        assert registry.get(name).generate("eval", 1, 0)[0]["id"] == expected
        assert (expected != item_id(name, key)) == (family != "long_filing")
