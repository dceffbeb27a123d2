"""Reward attacks (quality.reward_attacks, `assay domains attack`): the tool must find a scorer
that pays without the work, leave a sound one alone, never build a hack from the answer, and
report controls that do not score 1 rather than calling the domain safe."""

from __future__ import annotations

import json
import re

import polars as pl

from domains import Domain
from quality.reward_attacks import GENERIC_FAMILIES, attack_domain
from storage.lake import Lake
from tests.conftest import run_cli, write_plugin

SENTINEL = "918273645"


def _samples(split, n, seed):
    base = 0 if split == "train" else 500
    for i in range(n):
        a, b = base + i, 7 + i
        yield {"id": f"sum-{split}-{i}", "prompt": f"What is {a} plus {b}? Options: A) {a + b} B) {a + b + 1}\n"
                                                   "Give your final answer inside <answer></answer> tags.",
               "answer": str(a + b)}


_TAG = re.compile(r"<answer>(.*?)</answer>", re.S)


def _sound(completion, sample):
    """One declared answer, judged once: exactly one tag (or the bare answer alone), equal to it."""
    tags = _TAG.findall(completion)
    if len(tags) > 1 or (tags and _TAG.sub("", completion).strip()):
        return 0.0
    said = tags[0] if tags else completion
    return float(said.strip() == sample["answer"])


def _contains(completion, sample):
    # the classic hole: the answer appears anywhere
    return float(sample["answer"] in completion)


def _best_of_lines(completion, sample):
    # the other classic hole: the best of several spans
    return float(any(line.strip() == sample["answer"] for line in _TAG.sub("\n", completion).splitlines())
                 or sample["answer"] in _TAG.findall(completion))


def _domain(score, **kw) -> Domain:
    return Domain(name="sums", owner="t@example.com", description="attack test", samples=_samples, score=score, **kw)


def test_a_sound_scorer_resists_every_family_and_its_control_scores_1():
    report = attack_domain(_domain(_sound), items=6)
    assert report.controls_ok == 6 and report.items == 6
    assert report.paid == [] and report.passed, report.summary()
    assert {f.family for f in report.families} == set(GENERIC_FAMILIES)
    assert all(f.items == 6 and f.candidates > 0 for f in report.families if f.family != "keyword_stuffing")


def test_containment_and_best_of_spans_scorers_are_caught_with_an_example():
    for score, expected in ((_contains, {"number_spray", "prompt_echo", "two_answer_hedge"}),
                            (_best_of_lines, {"two_answer_hedge", "number_spray"})):
        report = attack_domain(_domain(score), items=6)
        paid = {f.family for f in report.paid}
        assert expected <= paid and not report.passed, (score.__name__, report.summary())
        for family in report.paid:
            assert family.example and score(family.example, {"answer": family.example}) is not None
            assert family.max_score == 1.0 and 0 < family.paid <= family.items == 6


def test_no_family_is_built_from_the_answer():
    sample = {"id": "x", "prompt": "Name the hidden code. Options: A) alpha B) beta", "answer": SENTINEL}
    for name, family in GENERIC_FAMILIES.items():
        assert not any(SENTINEL in c for c in family(sample)), name


def test_a_control_that_does_not_score_1_fails_the_domain_and_counts_nothing():
    report = attack_domain(_domain(lambda c, s: 0.0), items=4)
    assert report.controls_ok == 0 and not report.passed and not report.paid
    assert len(report.control_failures) == 4 and "4 of 4 controls did not score 1.0" in report.summary()


def test_a_domains_own_hack_runs_beside_the_generic_ones():
    def own(sample):
        return {"answer_plus_one": [f"<answer>{int(sample['prompt'].split()[2]) + 1}</answer>"]}

    # a scorer that is sound except that it pays off-by-one answers half: only the domain's own hack sees it
    def off_by_one(completion, sample):
        said = _TAG.findall(completion)
        if len(said) == 1 and not _TAG.sub("", completion).strip() and said[0].strip().lstrip("-").isdigit():
            return 0.5 if abs(int(said[0]) - int(sample["answer"])) == 8 else _sound(completion, sample)
        return _sound(completion, sample)

    report = attack_domain(_domain(off_by_one, attacks=own), items=4)
    assert [f.family for f in report.paid] == ["answer_plus_one"], report.summary()
    assert report.paid[0].max_score == 0.5


def test_a_scorer_that_raises_is_reported_not_counted_safe():
    def raises(completion, sample):
        if len(completion) > 1000:
            raise ValueError("too long")
        return _sound(completion, sample)

    report = attack_domain(_domain(raises), items=2)
    assert not report.passed and "too long" in report.error


HOLE = '''
from domains import Domain

def _samples(split, n, seed):
    base = 0 if split == "train" else 100
    for i in range(n):
        yield {"id": f"hole-{split}-{i}", "prompt": f"What is {base + i} plus 3?", "answer": str(base + i + 3)}

def _score(completion, sample):
    return float(sample["answer"] in completion)

DOMAIN = Domain(name="hole", owner="t@example.com", description="pays containment", tags=("test",),
                samples=_samples, score=_score)
'''


def test_cli_exit_codes_json_and_the_lake_table(tmp_path, assay_home):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "hole", HOLE)
    write_plugin(plugins, "plug_sound")  # tests/conftest.py's template: judges the last word only
    env = {"ASSAY_DOMAINS_PATH": str(plugins)}
    out = run_cli("domains", "attack", "hole", "plug_sound", "--items", "4", "--json", env=env)
    assert out.returncode == 1, out.stderr[-2000:]
    document = json.loads(out.stdout)
    by_name = {d["domain"]: d for d in document["domains"]}
    assert not document["passed"] and not by_name["hole"]["passed"] and by_name["plug_sound"]["passed"]
    # its prompts never hold the answer, but a spray of 0..999 holds every small sum
    assert "number_spray" in by_name["hole"]["paid_families"] and by_name["plug_sound"]["paid_families"] == []
    rows = Lake(assay_home).read("reward_attacks")
    assert set(rows["domain"]) == {"hole", "plug_sound"} and set(rows["run"]) == {document["run"]}
    spray = rows.filter((pl.col("domain") == "hole") & (pl.col("family") == "number_spray"))
    assert spray["paid"][0] == 4 and spray["items"][0] == 4 and spray["example"][0]

    sound = run_cli("domains", "attack", "plug_sound", "--items", "3", "--no-record", env=env)
    assert sound.returncode == 0, sound.stdout + sound.stderr[-2000:]
    assert "PASS  plug_sound" in sound.stdout and "1/1 domains resisted every attack" in sound.stdout
    unknown = run_cli("domains", "attack", "no_such_domain", env=env)
    assert unknown.returncode == 2 and "assay domains list" in unknown.stderr


def test_the_selftest_gate_blocks_a_domain_whose_reward_is_paid_by_a_hack():
    from quality.batch_gates import selftest_outcomes

    hole = {o.expectation: o for o in selftest_outcomes(_domain(_contains), n=4)}
    assert hole["reward_attacks"].severity == "critical" and not hole["reward_attacks"].success
    assert "assay domains attack sums" in hole["reward_attacks"].observed
    sound = {o.expectation: o for o in selftest_outcomes(_domain(_sound), n=4)}
    assert sound["reward_attacks"].success, sound["reward_attacks"].observed
