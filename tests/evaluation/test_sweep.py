"""Sweeps with the real tiny policy (generation.policy 'tiny') through the real torch engine."""

from __future__ import annotations

import dataclasses
import math
from itertools import combinations

import numpy as np
import polars as pl
import pytest

from domains import Domain
from storage.lake import Lake
from generation.prompts import prompt_format_id
from evaluation.sweep import SweepConfig, SweepError, checkpoint_results, pass_at_k, run_sweep, summarize
from generation.tiny_model import CHAT_TEMPLATE


def _domain(name: str, n_items: int = 6, fail_on: set | None = None, clustered: bool = False) -> Domain:
    def samples(split, n, seed):
        for i in range(n):
            meta = {"cluster_id": f"t{i % 3}"} if clustered else {}
            yield {"id": f"{name}-{split}-{i}", "prompt": f"Say something about {i}.", "answer": str(i),
                   "metadata": meta}

    def score(completion, sample):
        if fail_on is not None and sample["id"] in fail_on:
            fail_on.discard(sample["id"])  # fails once, like a crash mid-sweep
            raise RuntimeError("scorer crashed")
        return float(len(completion) % 2 == 0)  # deterministic in the completion text

    return Domain(name=name, owner="t@example.com", description="sweep test domain", samples=samples,
                  score=score, eval_size=n_items, eval_samples_per_item=2)


@pytest.fixture(scope="module")
def tiny_engine_factory(tiny_source):
    """The real tiny policy behind the real torch engine, built once (tests/training/conftest.py)."""
    from generation.factory import make_engine

    home = tiny_source.parent.parent  # tiny_source = <home>/models/tiny
    engine = make_engine("tiny", home=str(home), dtype="float32", max_batch_size=32)
    calls = []

    def factory():
        calls.append(1)
        return engine

    factory.calls = calls
    return factory


CFG = dict(max_new_tokens=8, batch_items=2, progress=False)

# the tiny policy's prompt format (sweep_checkpoint reads it from the model folder)
FMT = prompt_format_id(CHAT_TEMPLATE)


def test_sweep_writes_results_and_summaries_then_reruns_from_cache(assay_home, tiny_engine_factory):
    lake = Lake.at(assay_home)
    domains = [_domain("alpha", clustered=True), _domain("beta", n_items=4)]
    before = len(tiny_engine_factory.calls)
    first = run_sweep(lake, "base-tiny", domains, tiny_engine_factory, SweepConfig(**CFG), prompt_format=FMT)
    assert first.model_loaded and len(tiny_engine_factory.calls) == before + 1  # one load, all domains
    assert first.generated == 6 * 2 + 4 * 2 and first.cached == 0
    rows = lake.read("results", where={"checkpoint": "base-tiny"})
    assert rows.height == 20 and set(rows["sample_idx"]) == {0, 1}
    assert rows.filter(pl.col("domain") == "alpha")["cluster_id"].n_unique() == 3
    assert rows["tokens"].min() >= 1 and rows["latency_s"].min() > 0
    summaries = lake.read("sweep_summary").sort("domain")
    assert summaries["domain"].to_list() == ["alpha", "beta"] and summaries["k"].to_list() == [2, 2]
    alpha = first.domains[0].summary
    assert alpha["n"] == 6 and alpha["clusters"] == 3 and 0 <= alpha["mean"] <= 1 and alpha["tokens_per_s"] > 0

    again = run_sweep(lake, "base-tiny", domains, tiny_engine_factory, SweepConfig(**CFG), prompt_format=FMT)
    assert again.generated == 0 and again.cached == 20 and not again.model_loaded
    assert [d.summary["mean"] for d in again.domains] == [d.summary["mean"] for d in first.domains]

    more = run_sweep(lake, "base-tiny", domains[:1], tiny_engine_factory, SweepConfig(samples=3, **CFG), prompt_format=FMT)
    assert more.generated == 6 and more.cached == 12  # only the third sample of each item
    assert checkpoint_results(lake, "base-tiny", ["alpha"]).height == 18


def test_killed_sweep_resumes_without_redoing_committed_batches(assay_home, tiny_engine_factory):
    lake = Lake.at(assay_home)
    domain = _domain("gamma", n_items=6, fail_on={"gamma-eval-4"})
    with pytest.raises(SweepError, match="gamma-eval-4"):
        run_sweep(lake, "ck-step000001", [domain], tiny_engine_factory, SweepConfig(**CFG), prompt_format=FMT)
    committed = lake.read("results", where={"checkpoint": "ck-step000001"})
    assert committed.height == 8  # two batches of 2 items x K=2 committed before the crash
    resumed = run_sweep(lake, "ck-step000001", [domain], tiny_engine_factory, SweepConfig(**CFG), prompt_format=FMT)
    assert resumed.generated == 4 and resumed.cached == 8
    assert lake.read("results", where={"checkpoint": "ck-step000001"}).height == 12


def test_limit_and_greedy_single_sample(assay_home, tiny_engine_factory):
    lake = Lake.at(assay_home)
    result = run_sweep(lake, "base-tiny", [_domain("delta", n_items=6)], tiny_engine_factory,
                       SweepConfig(samples=1, limit=3, **CFG), prompt_format=FMT)
    assert result.generated == 3 and result.domains[0].summary["k"] == 1
    assert result.domains[0].summary["pass1"] == pytest.approx(result.domains[0].summary["mean"])


def _varied_domain(name: str = "vary", n_items: int = 8) -> Domain:
    """Prompts of different lengths, so batches of several items are left-padded."""
    def samples(split, n, seed):
        for i in range(n):
            yield {"id": f"{name}-{i}", "prompt": "Tell me " + "more " * i + f"about {i}.", "answer": str(i)}

    return Domain(name=name, owner="t@example.com", description="sweep seeding test domain", samples=samples,
                  score=lambda completion, sample: float(len(completion) % 2 == 0), eval_size=n_items,
                  eval_samples_per_item=2)


def _completions(lake: Lake, checkpoint: str = "base-tiny") -> dict[tuple[str, int], str]:
    rows = lake.read("results", where={"checkpoint": checkpoint})
    return {(r["item_id"], r["sample_idx"]): r["completion"] for r in rows.iter_rows(named=True)}


SAMPLED = dict(max_new_tokens=8, temperature=1.0, top_p=1.0, progress=False)


def test_raising_k_draws_new_samples_equal_to_a_fresh_sweep(tmp_path, tiny_engine_factory):
    """K=2 then K=4: samples 2, 3 are new draws, and the very draws a fresh K=4 sweep makes."""
    domain = _varied_domain()
    extended = Lake.at(tmp_path / "extended")
    run_sweep(extended, "base-tiny", [domain], tiny_engine_factory, SweepConfig(samples=2, batch_items=3, **SAMPLED))
    more = run_sweep(extended, "base-tiny", [domain], tiny_engine_factory,
                     SweepConfig(samples=4, batch_items=3, **SAMPLED))
    assert more.generated == 8 * 2 and more.cached == 8 * 2
    got = _completions(extended)
    items = [f"vary-{i}" for i in range(8)]
    copies = [i for i in items if (got[i, 2], got[i, 3]) == (got[i, 0], got[i, 1])]
    assert len(copies) <= 1, f"samples 2, 3 repeat samples 0, 1 for {len(copies)}/8 items: {copies}"
    assert len({got[i, k] for i in items for k in range(4)}) >= 24  # the draws really differ

    fresh = Lake.at(tmp_path / "fresh")
    run_sweep(fresh, "base-tiny", [domain], tiny_engine_factory, SweepConfig(samples=4, batch_items=5, **SAMPLED))
    assert _completions(fresh) == got  # the same 32 draws, whether K was raised or not


def test_sampled_completions_do_not_depend_on_batching(tmp_path, tiny_engine_factory):
    """One item per batch or all of them in one (padded) batch: the same completions (float32)."""
    domain = _varied_domain(n_items=10)
    one = Lake.at(tmp_path / "one")
    many = Lake.at(tmp_path / "many")
    run_sweep(one, "base-tiny", [domain], tiny_engine_factory, SweepConfig(samples=3, batch_items=1, **SAMPLED))
    run_sweep(many, "base-tiny", [domain], tiny_engine_factory, SweepConfig(samples=3, batch_items=16, **SAMPLED))
    by_one, by_many = _completions(one), _completions(many)
    assert len(by_one) == 30 and by_one == by_many


def test_sample_seed_is_stable_and_depends_on_what_the_sample_is():
    from evaluation.sweep import sample_seed

    # a golden value: the seed must not change between processes or Python versions (hash() would)
    assert sample_seed(0, "alpha", "alpha-eval-1", 2, "abc") == 1481136292344490409
    seeds = {sample_seed(s, d, i, k, g) for s in (0, 1) for d in ("a", "b") for i in ("x", "y")
             for k in range(3) for g in ("g1", "g2")}
    assert len(seeds) == 2 * 2 * 2 * 3 * 2
    assert all(0 <= s < 2 ** 63 for s in seeds)


def test_pass_at_k_matches_brute_force():
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                passes = [1] * c + [0] * (n - c)
                brute = np.mean([any(passes[i] for i in combo) for combo in combinations(range(n), k)])
                assert pass_at_k(n, c, k) == pytest.approx(brute)


def test_summarize_uses_cluster_robust_se():
    rng = np.random.default_rng(0)
    rows = []
    for i in range(60):
        cluster = i // 10
        p = 0.2 if cluster % 2 else 0.8  # whole templates are easy or hard
        for s in range(4):
            rows.append({"item_id": f"i{i}", "sample_idx": s, "score": float(rng.random() < p),
                         "cluster_id": f"t{cluster}", "latency_s": 0.1, "tokens": 5})
    frame = pl.DataFrame(rows)
    clustered = summarize(frame)
    independent = summarize(frame.with_columns(pl.lit(None, dtype=pl.Utf8).alias("cluster_id")))
    assert clustered["clusters"] == 6 and independent["clusters"] is None
    assert clustered["stderr"] > 1.5 * independent["stderr"]
    assert clustered["ci_low"] < clustered["mean"] < clustered["ci_high"]
    assert clustered["tokens_per_s"] == pytest.approx(50.0)
    assert math.isclose(clustered["pass1"], clustered["mean"])


def test_sweep_checkpoint_logs_mlflow_and_promotion_moves_the_alias(tiny_home, monkeypatch):
    """Real checkpoints (generation.checkpoints), real MLflow SQLite store, real alias moves."""
    import shutil

    from mlflow.tracking import MlflowClient

    from evaluation.promotion import apply_promotion, compare_checkpoints, decide_promotion
    from storage.tracking import current_champion
    from generation.checkpoints import register_checkpoint
    from evaluation.sweep import sweep_checkpoint

    lake = Lake.at(tiny_home)
    uri = lake.mlflow_uri
    # no MLFLOW_TRACKING_URI here: registering the base pseudo-checkpoint (no run id) must find its
    # LoggedModel in this store although MLflow 3.17 looks it up through the global URI
    # (storage.tracking.global_tracking_uri scopes that)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    copy = tiny_home / "checkpoints" / "copy-step000001"
    shutil.copytree(tiny_home / "models" / "tiny", copy)
    register_checkpoint(lake, uri, checkpoint="copy-step000001", path=copy, run_id=None, step=1,
                        recipe="tiny", base_model="tiny", domains=[])
    domains = [_domain("alpha"), _domain("beta", n_items=4)]
    cfg = SweepConfig(**CFG)
    base, base_run = sweep_checkpoint(lake, uri, "base-tiny", domains, config=cfg, dtype="float32")
    cand, cand_run = sweep_checkpoint(lake, uri, "latest", domains, config=cfg, dtype="float32")
    assert base.checkpoint == "base-tiny" and cand.checkpoint == "copy-step000001"

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(cand_run)
    assert run.data.tags["assay.checkpoint"] == "copy-step000001" and run.data.tags.get("assay.model_id")
    assert run.data.metrics["score/alpha"] == pytest.approx(cand.domains[0].summary["mean"])
    assert "stderr/beta" in run.data.metrics
    assert {a.path for a in client.list_artifacts(cand_run, "items")} == {"items/alpha.parquet", "items/beta.parquet"}

    assert current_champion(uri) is None
    first = decide_promotion("base-tiny", None, {})
    assert first.promoted and "first champion" in first.reason
    apply_promotion(lake, uri, first)
    assert current_champion(uri) == "base-tiny"

    # the same weights with the same seeds: identical completions, no regression -> promoted
    report = compare_checkpoints(lake, "copy-step000001", "base-tiny", protected=["alpha"])
    assert {d.domain for d in report.domains} == {"alpha", "beta"}
    assert all(d.delta == 0 for d in report.domains)
    # beta's 4 items: a sign-flip test cannot go below 1/16, so it cannot see a drop at all
    assert {d.domain: d.verdict for d in report.domains} == {"alpha": "ok", "beta": "underpowered"}
    assert lake.read("regression").height == 2
    decision = decide_promotion("copy-step000001", current_champion(uri), {"champion": report})
    assert decision.promoted
    apply_promotion(lake, uri, decision)
    assert current_champion(uri) == "copy-step000001"
    promotions = lake.read("promotions").sort("created_at")
    assert promotions["candidate"].to_list() == ["base-tiny", "copy-step000001"]
    assert promotions["previous_champion"].to_list() == [None, "base-tiny"]


def test_sweep_records_its_generation_config_readably_and_keys_it_on_the_prompt_format(
        assay_home, tiny_engine_factory, tiny_source):
    import json

    from generation.prompts import prompt_format_of_folder

    lake = Lake.at(assay_home)
    domain = _domain("eps", n_items=3)
    result = run_sweep(lake, "base-tiny", [domain], tiny_engine_factory, SweepConfig(**CFG), prompt_format=FMT)
    rows = lake.read("results", where={"checkpoint": "base-tiny", "domain": "eps"})
    summary = lake.read("sweep_summary", where={"checkpoint": "base-tiny", "domain": "eps"}).row(0, named=True)
    assert rows["gen_params"].n_unique() == 1 and rows["gen_params"][0] == summary["gen_params"]
    assert json.loads(summary["gen_params"]) == {"max_new_tokens": 8, "temperature": 0.7, "top_p": 0.95, "top_k": 0,
                                                 "stop": [], "prompt_format": FMT}
    assert summary["gen_config"] == result.domains[0].summary["gen_config"] == rows["gen_config"][0]
    # the model folder's tokenizer files name the template the engine applies, without a model load
    assert prompt_format_of_folder(tiny_source) == FMT and FMT.startswith("chat:")
    # another prompt format is another config: nothing is reused, and a key that does not match
    # what the engine really does is refused rather than cached under the wrong name
    with pytest.raises(SweepError, match="formats prompts as 'chat:"):
        run_sweep(lake, "base-tiny", [domain], tiny_engine_factory, SweepConfig(**CFG), prompt_format="raw")


def test_each_batch_is_scored_in_one_call_through_the_code_domains_pool(assay_home, tiny_engine_factory):
    """The registered code domain's ``score_many`` (its sandbox pool) gets each sweep batch whole:
    3 items, K=2, 2 items per batch -> calls of 4 and 2 completions, and ``score`` is never used."""
    import shutil

    from domains import get_registry

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (`make install`)")
    code = get_registry().get("code")
    batches = []

    def counted_many(completions, samples):
        scores = code.score_many(completions, samples)
        batches.append(([s["id"] for s in samples], scores))
        return scores

    counted = dataclasses.replace(code, name="code_counted", score_many=counted_many,
                                  score=lambda c, s: pytest.fail("a sweep batch must go to score_many"))
    lake = Lake.at(assay_home)
    result = run_sweep(lake, "base-tiny", [counted], tiny_engine_factory,
                       SweepConfig(samples=2, limit=3, **CFG), prompt_format=FMT)
    assert [len(ids) for ids, _ in batches] == [4, 2] and result.generated == 6
    items = [i["id"] for i in code.eval_items()[:3]]
    assert [sorted(set(ids)) for ids, _ in batches] == [sorted(items[:2]), items[2:]]
    rows = lake.read("results", where={"checkpoint": "base-tiny", "domain": "code_counted"})
    assert sorted(rows["score"].to_list()) == sorted(s for _, scores in batches for s in scores)


@pytest.mark.parametrize("score_many, message", [
    (lambda completions, samples: [1.0], r"domain 'zeta' scorer failed on one of items 'zeta-eval-0', "
                                         r"'zeta-eval-1'.*score_many returned 1 scores for 4 samples"),
    (lambda completions, samples: [0.0, 1.0, "pass", 0.0], r"domain 'zeta' scorer failed on item 'zeta-eval-1'"
                                                           r".*score_many returned 'pass'"),
    (lambda completions, samples: 1 / 0, r"domain 'zeta' scorer failed on one of items 'zeta-eval-0', "
                                         r"'zeta-eval-1': ZeroDivisionError"),
])
def test_a_batch_scorer_that_fails_stops_the_sweep_naming_the_domain_and_items(
        assay_home, tiny_engine_factory, score_many, message):
    domain = dataclasses.replace(_domain("zeta", n_items=2), score_many=score_many)
    lake = Lake.at(assay_home)
    with pytest.raises(SweepError, match=message):
        run_sweep(lake, "base-tiny", [domain], tiny_engine_factory, SweepConfig(**CFG), prompt_format=FMT)
    assert lake.read("results", where={"checkpoint": "base-tiny"}).height == 0  # nothing scored 0 and kept


def test_rescore_replaces_stale_cached_scores_after_a_scorer_fix(assay_home):
    """A scorer fixed after a sweep: the cached completions are scored again, not regenerated."""
    from domains import Domain
    from evaluation.sweep import rescore_cached, run_sweep
    from evaluation.sweep_config import SweepConfig
    from pipelines.settings import open_lake
    from generation.contract import Generation

    def samples(split, n, seed):
        return [{"id": f"{split}-{i}", "prompt": f"q{i}", "answer": "yes"} for i in range(n)]

    class Echo:
        name = "echo"

        def generate(self, prompts, params, seeds=None, *, with_logprobs=False):
            return [[Generation(text="sorry to hear that", completion_tokens=4, prompt_tokens=1,
                                finish_reason="stop", latency_s=0.0)] for _ in prompts]

        def format_prompt(self, text):
            return text

    lenient = Domain(name="polite", owner="t", description="d", samples=samples, score=lambda c, s: 1.0, eval_size=6)
    strict = Domain(name="polite", owner="t", description="d", samples=samples,
                    score=lambda c, s: float(c.strip() == s["answer"]), eval_size=6)
    lake = open_lake(write=True)
    first = run_sweep(lake, "c1", [lenient], Echo, SweepConfig(progress=False, batch_items=4), prompt_format="raw")
    assert first.domains[0].summary["mean"] == 1.0
    assert rescore_cached(lake, "c1", [strict]) == {"polite": {"rows": 6, "changed": 6}}
    built = []
    again = run_sweep(lake, "c1", [strict], lambda: built.append(1) or Echo(), SweepConfig(progress=False),
                      prompt_format="raw")
    assert again.domains[0].summary["mean"] == 0.0 and again.domains[0].generated == 0 and not built
    assert rescore_cached(lake, "c1", [strict]) == {"polite": {"rows": 6, "changed": 0}}
