"""Policy pass rates with the real tiny policy through the real torch engine, cached in the lake."""

from __future__ import annotations

import polars as pl
import pytest

from domains import Domain
from evaluation.pass_rate_config import PassRateConfig
from evaluation.pass_rates import PassRateError, measure_pass_rates, train_items
from evaluation.sweep import SweepConfig, run_sweep
from storage.lake import Lake
from generation.prompts import prompt_format_id
from generation.tiny_model import CHAT_TEMPLATE

FMT = prompt_format_id(CHAT_TEMPLATE)
CFG = dict(max_new_tokens=8, batch_items=2, progress=False)


def _items(prefix: str, n: int) -> list[dict]:
    return [{"id": f"{prefix}-{i}", "prompt": f"Say something about {i}.", "answer": str(i), "metadata": {}}
            for i in range(n)]


def _domain(name: str = "pr", score=None, n: int = 6) -> Domain:
    def samples(split, count, seed):
        yield from _items(f"{name}-{split}", min(count, n))

    return Domain(name=name, owner="t@example.com", description="pass-rate test domain", samples=samples,
                  score=score or (lambda completion, sample: float(len(completion) % 2 == 0)), eval_size=n)


@pytest.fixture(scope="module")
def tiny_engine(tiny_source):
    from generation.factory import make_engine

    return make_engine("tiny", home=str(tiny_source.parent.parent), dtype="float32", max_batch_size=32)


class Factory:
    """Counts engine builds; ``refuse`` makes a build fail the test."""

    def __init__(self, engine, refuse: bool = False):
        self.engine, self.refuse, self.calls = engine, refuse, 0

    def __call__(self):
        self.calls += 1
        if self.refuse:
            raise AssertionError("the engine was built although every item was cached")
        return self.engine


def test_pass_rates_are_cached_per_policy_item_k_and_generation_config(assay_home, tiny_engine):
    lake = Lake.at(assay_home)
    domain = _domain()
    items = _items("pr-train", 4)
    config = PassRateConfig(samples=4, **CFG)
    first = measure_pass_rates(lake, "base-tiny", domain, items, Factory(tiny_engine), config, prompt_format=FMT)
    assert (first.computed, first.cached) == (4, 0) and first.engine
    assert first.items["samples"].to_list() == [4] * 4
    assert first.items["pass_rate"].to_list() == [p / 4 for p in first.items["passes"].to_list()]
    stored = lake.read("pass_rates")
    assert stored.height == 4 and set(stored["item_id"]) == {i["id"] for i in items}
    assert len(list((assay_home / "lake" / "pass_rates").rglob("part.parquet"))) == 1  # one batch per computation

    # everything cached: the engine factory is not even called, the numbers are the same
    again = measure_pass_rates(lake, "base-tiny", domain, items, Factory(tiny_engine, refuse=True), config,
                               prompt_format=FMT)
    assert (again.computed, again.cached, again.engine) == (0, 4, None)
    assert again.items.drop("cached").equals(first.items.drop("cached"))
    assert again.items["cached"].all()

    # new items are computed, the old ones come from the cache
    grown = measure_pass_rates(lake, "base-tiny", domain, _items("pr-train", 6), Factory(tiny_engine), config,
                               prompt_format=FMT)
    assert (grown.computed, grown.cached) == (2, 4)
    assert grown.items.filter(pl.col("cached"))["id"].to_list() == [i["id"] for i in items]

    # another K, another generation config, another policy: another key, all computed again
    for checkpoint, other in (("base-tiny", PassRateConfig(samples=2, **CFG)),
                              ("base-tiny", PassRateConfig(samples=4, **{**CFG, "max_new_tokens": 6})),
                              ("other-policy", config)):
        factory = Factory(tiny_engine)
        result = measure_pass_rates(lake, checkpoint, domain, items, factory, other, prompt_format=FMT)
        assert (result.computed, result.cached, factory.calls) == (4, 0, 1), (checkpoint, other)
    # a different prompt format is a different generation config too
    with pytest.raises(Exception, match="formats prompts"):
        measure_pass_rates(lake, "base-tiny", domain, items, Factory(tiny_engine), config, prompt_format="raw")


def test_samples_are_the_sweeps_samples(assay_home, tiny_engine):
    """Same seeds, sampling parameters and prompt format as a sweep: on the same items, a sweep's
    per-item pass counts equal the pass rates'."""
    lake = Lake.at(assay_home)
    domain = _domain("same", n=3)
    items = domain.eval_items()
    sweep = run_sweep(lake, "base-tiny", [domain], Factory(tiny_engine),
                      SweepConfig(samples=4, **CFG), prompt_format=FMT)
    per_item = sweep.domains[0].items.group_by("item_id").agg((pl.col("score") >= 1).sum().alias("passes"))
    rates = measure_pass_rates(lake, "base-tiny", domain, items, Factory(tiny_engine),
                               PassRateConfig(samples=4, **CFG), prompt_format=FMT)
    assert dict(rates.items.select("id", "passes").iter_rows()) == dict(per_item.iter_rows())
    assert rates.gen_config == sweep.domains[0].summary["gen_config"]


def test_verdicts_follow_the_pass_pattern(assay_home, tiny_engine):
    calls = {"pr-train-2": 0}

    def score(completion, sample):
        if sample["id"] == "pr-train-0":
            return 1.0
        if sample["id"] == "pr-train-1":
            return 0.0
        calls["pr-train-2"] += 1  # alternates: 2 of 4 pass
        return float(calls["pr-train-2"] % 2)

    result = measure_pass_rates(Lake.at(assay_home), "base-tiny", _domain(score=score), _items("pr-train", 3),
                                Factory(tiny_engine), PassRateConfig(samples=4, **CFG), prompt_format=FMT)
    assert result.per_item() == [
        {"id": "pr-train-0", "pass_rate": 1.0, "samples": 4, "verdict": "too_easy"},
        {"id": "pr-train-1", "pass_rate": 0.0, "samples": 4, "verdict": "too_hard"},
        {"id": "pr-train-2", "pass_rate": 0.5, "samples": 4, "verdict": "in_band"}]
    summary = result.summary()
    assert summary["in_band_share"] == pytest.approx(1 / 3) and summary["mean_pass_rate"] == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [lambda c, s: float("nan"), lambda c, s: 1 / 0, lambda c, s: True])
def test_a_scorer_that_returns_nan_or_raises_is_never_a_pass(assay_home, tiny_engine, bad):
    lake = Lake.at(assay_home)
    with pytest.raises(PassRateError, match="scorer failed on"):
        measure_pass_rates(lake, "base-tiny", _domain(score=bad), _items("pr-train", 2), Factory(tiny_engine),
                           PassRateConfig(samples=2, **CFG), prompt_format=FMT)
    assert lake.read("pass_rates").height == 0  # nothing cached for a failed computation


def test_items_come_from_the_lake_when_ingested_else_from_the_domain(assay_home):
    from quality.ingest import ingest_generated

    def samples(split, n, seed):  # disjoint splits, as the ingest gates require
        base = 0 if split == "train" else 10_000
        yield from ({"id": f"src-{split}-{i}", "prompt": f"What is {base + i} plus 1?", "answer": str(base + i + 1)}
                    for i in range(n))

    lake = Lake.at(assay_home)
    domain = Domain(name="src", owner="t@example.com", description="d", samples=samples,
                    score=lambda c, s: 0.0, eval_size=12)
    items, source = train_items(lake, domain, 3)
    assert source == "generated" and [i["id"] for i in items] == ["src-train-0", "src-train-1", "src-train-2"]

    reports = ingest_generated(lake, domain, train_n=12)
    assert reports["train"].admitted >= 4, reports["train"]
    admitted = sorted(lake.read("ingest", "samples").filter(pl.col("split") == "train")["id"].to_list())
    items, source = train_items(lake, domain, 4)
    assert source == "lake" and [i["id"] for i in items] == admitted[:4]
    assert all(isinstance(i["metadata"], dict) and i["answer"] for i in items)


def test_the_gate_hook_measures_difficulty_on_the_policy(tiny_home):
    """register_pass_rate_estimator(pass_rate_estimator(...)): the batch gates' difficulty comes from
    the policy's cached pass rates, judged by the same verdict."""
    from evaluation.pass_rates import pass_rate_estimator
    from quality import difficulty

    lake = Lake.at(tiny_home)
    domain = _domain("hook")
    rows = pl.DataFrame([{**item, "metadata": "{}"} for item in _items("hook-train", 3)])
    difficulty.register_pass_rate_estimator(
        pass_rate_estimator(lake, lake.mlflow_uri, "base-tiny", config=PassRateConfig(**CFG), backend="torch",
                            dtype="float32"), k=2)
    try:
        frame = difficulty.estimate_difficulty(domain, rows)
    finally:
        difficulty.register_pass_rate_estimator(None)
    stored = lake.read("pass_rates").sort("item_id")
    assert stored["checkpoint"].unique().to_list() == ["base-tiny"] and stored["samples"].to_list() == [2, 2, 2]
    assert frame["method"].to_list() == ["policy_pass_rate"] * 3 and frame["k"].to_list() == [2] * 3
    assert frame.sort("id")["pass_rate"].to_list() == stored["pass_rate"].to_list()
    band = difficulty.Band.for_domain(domain)
    assert frame.sort("id")["in_band"].to_list() == [
        difficulty.pass_rate_verdict(p, 2, band) == "in_band" for p in stored["passes"].to_list()]
