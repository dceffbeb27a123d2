"""Certifying variants end to end: real variants of the wide tiny checkpoint, real speed processes,
real sweeps into a real lake, the non-inferiority report, the MLflow alias and the records.

Each scenario is one a user meets: a variant that really is its parent (speculative decoding
verifies every token) on an eval set big enough to show it; the same, through the CLI, on one too
small to show anything (underpowered, not a pass); a variant that changes answers (4-bit weights on a model whose
greedy path is fragile) judged by a scorer that only credits the parent's own answers.
"""

from __future__ import annotations

import json

import polars as pl
import pytest

from domains import Domain
from evaluation.variant_config import VariantConfig
from storage import tracking
from storage.lake import Lake

FAST_TIMING = dict(speed_prompts=3, speed_batch1_prompts=2, speed_new_tokens=6)


def _domain(name: str, n_items: int, score=None, answers: dict | None = None) -> Domain:
    def samples(split, n, seed):
        for i in range(n):
            yield {"id": f"{name}-{split}-{i}", "prompt": f"Say something about item {i} of {name}.",
                   "answer": (answers or {}).get(f"{name}-{split}-{i}", str(i)), "metadata": {}}

    return Domain(name=name, owner="t@example.com", description="variant test domain", samples=samples,
                  score=score or (lambda c, s: float(len(c) % 2 == 0)), eval_size=n_items)


@pytest.fixture
def wide_parent(tiny_home, tiny_checkpoint):
    """The wide tiny checkpoint registered as ``wide-step000001`` in a fresh lake and MLflow store."""
    import shutil

    from generation.checkpoints import register_checkpoint

    lake = Lake(tiny_home)
    folder = tiny_home / "checkpoints" / "wide-step000001"
    shutil.copytree(tiny_checkpoint, folder)
    register_checkpoint(lake, lake.mlflow_uri, checkpoint="wide-step000001", path=folder, run_id=None, step=1,
                        recipe="tiny", base_model="tiny", domains=[])
    return lake


def _certify(lake, domains, **config):
    from evaluation.variants import certify_variant

    return certify_variant(lake, lake.mlflow_uri, "wide-step000001", domains,
                           VariantConfig(**{**FAST_TIMING, "max_new_tokens": 8, "progress": False, **config}),
                           log=lambda m: None)


def test_a_variant_that_is_its_parent_is_certified_and_becomes_fast(wide_parent):
    lake = wide_parent
    domains = [_domain("parity", 200)]
    # spec-ngram is not 2x faster on a 0.5M-parameter model: the speed bar is lowered so this test
    # is about the equivalence path; the speed figures are still measured and recorded
    # float32: on a CPU with native bf16 (AVX-512 bf16) the bf16 default really runs in bf16, where
    # verifying several draft tokens in one forward rounds differently from decoding them one by
    # one and flips near-tied argmaxes (5 of 200 items here); token-for-token identity holds in fp32
    cert = _certify(lake, domains, method="spec-ngram", min_speedup=0.01, limit=200, dtype="float32")
    assert cert.variant == "wide-step000001--spec-ngram" and cert.parent == "wide-step000001"
    [domain] = cert.report.domains
    # speculative decoding verified by the parent: the same 200 greedy completions, 0 discordant pairs,
    # and 200 items are enough at a 2-point margin ((1 - 0.02)^200 = 0.018 < 0.025)
    assert (domain.n, domain.items_lost, domain.items_gained, domain.delta) == (200, 0, 0, 0.0)
    assert domain.verdict == "non_inferior" and cert.equivalent and cert.fast_alias
    assert cert.speed.parent["tokens_per_s_batch1"] > 0 and cert.speed.variant["tokens_per_s_batch1"] > 0
    assert cert.speed.variant["engine"].startswith("transformers-assisted") and cert.speed.parent["engine"].startswith("torch")

    from generation.checkpoints import resolve_checkpoint

    assert resolve_checkpoint("fast", lake, lake.mlflow_uri).checkpoint == cert.variant
    # registered after its parent, the variant is still not "latest": that names the newest trained checkpoint
    assert resolve_checkpoint("latest", lake, lake.mlflow_uri).checkpoint == "wide-step000001"
    record = resolve_checkpoint(cert.variant, lake, lake.mlflow_uri)
    assert (record.variant_of, record.variant_method) == ("wide-step000001", "spec-ngram")
    [version] = tracking.checkpoint_versions(lake.mlflow_uri, cert.variant)
    assert version.tags["variant_of"] == "wide-step000001" and version.tags["equivalent"] == "true"

    decisions = lake.read("variants")
    assert decisions.height == 1 and decisions["fast_alias"].to_list() == [True]
    assert decisions["speedup_batch1"][0] == pytest.approx(cert.speed.speedup_batch1)
    rows = lake.read("variant_domains")
    assert rows.select("domain", "verdict", "n").rows() == [("parity", "non_inferior", 200)]

    # the promotion never makes a variant champion, whatever the comparison said
    from evaluation.promotion import PromotionDecision, apply_promotion

    refused = apply_promotion(lake, lake.mlflow_uri, PromotionDecision(cert.variant, None, True, "promoted: test"))
    assert not refused.promoted and "variant" in refused.reason
    assert tracking.current_champion(lake.mlflow_uri) is None


def test_a_variant_that_changes_answers_is_inferior(wide_parent):
    from generation.contract import SamplingParams
    from generation.factory import make_engine
    from generation.variants import unavailable_reason

    if unavailable_reason("gguf-q4_0"):
        pytest.skip(unavailable_reason("gguf-q4_0"))
    lake = wide_parent
    name, n = "parent_answers", 60
    probe = _domain(name, n)
    parent = make_engine(str(lake.home / "checkpoints" / "wide-step000001"), "torch", dtype="float32")
    items = probe.eval_items()
    outs = parent.generate([parent.format_prompt(i["prompt"]) for i in items], SamplingParams(max_new_tokens=8))
    answers = {item["id"]: out[0].text for item, out in zip(items, outs)}
    # credit only the parent's own greedy answer: the parent scores 1 on every item by construction
    domain = _domain(name, n, score=lambda c, s: float(c == s["answer"]), answers=answers)
    cert = _certify(lake, [domain], method="gguf-q4_0", min_speedup=0.01, dtype="float32")
    [result] = cert.report.domains
    assert result.items_gained == 0 and result.items_lost >= 10, result
    assert result.verdict == "inferior" and not cert.equivalent and not cert.fast_alias
    assert "inferior" in " ".join(cert.reasons)


def test_cli_contract_and_refusals(wide_parent, tmp_path):
    from tests.conftest import run_cli

    plugin = tmp_path / "plugins"
    plugin.mkdir()
    (plugin / "small.py").write_text(
        "from domains import Domain\n"
        "def _samples(split, n, seed):\n"
        "    for i in range(n):\n"
        "        yield {'id': f'small-{split}-{i}', 'prompt': f'Count to {i}.', 'answer': str(i)}\n"
        "DOMAIN = Domain(name='small', owner='o@example.com', description='d', samples=_samples,\n"
        "                score=lambda c, s: float(s['answer'] in c), eval_size=12)\n")
    env = {"ASSAY_DOMAINS_PATH": str(plugin)}
    done = run_cli("variant", "--from", "wide-step000001", "--method", "spec-ngram", "--domains", "small",
                   "--speed-prompts", "2", "--speed-batch1-prompts", "1", "--speed-new-tokens", "4",
                   "--max-new-tokens", "6", "--dtype", "float32", "--json", env=env)
    # float32 for the same reason as above: in native bf16 a near-tied argmax of this random-weight
    # model can flip between a k-token verify forward and one-token decoding (CI: 1 of 12 items)
    assert done.returncode == 1, done.stderr[-3000:]  # 12 items cannot show non-inferiority: not equivalent
    payload = json.loads(done.stdout)
    assert {"variant", "parent", "method", "speedup_batch1", "speedup_batch", "domains", "fast_alias"} <= set(payload)
    assert payload["variant"] == "wide-step000001--spec-ngram" and payload["fast_alias"] is False
    # it agreed with its parent on every item (speculative decoding) and still proved nothing:
    # underpowered, not a pass, with the items it would take, and the alias untouched
    [small] = payload["domains"]
    assert (small["domain"], small["verdict"], small["n"], small["delta"]) == ("small", "underpowered", 12, 0.0)
    assert small["items_for_power"] >= 183 and any("underpowered" in r for r in payload["reasons"])
    assert payload["equivalent"] is False
    assert tracking.alias_checkpoint(wide_parent.mlflow_uri, tracking.FAST_ALIAS) is None
    assert Lake(wide_parent.home).read("variants")["fast_alias"].to_list() == [False]
    assert set(payload["domains"][0]) >= {"domain", "delta", "ci_low", "ci_high", "verdict"}

    bad = run_cli("variant", "--from", "wide-step000001", "--method", "int3", env=env)
    assert bad.returncode == 2 and "int3" in bad.stderr
    unknown = run_cli("variant", "--from", "nope", "--method", "spec-ngram", "--domains", "small", env=env)
    assert unknown.returncode == 2 and "unknown checkpoint" in unknown.stderr
    from generation.variants import unavailable_reason

    if unavailable_reason("int4"):  # torchao has no CPU int4 kernel: refused before any work, with why
        refused = run_cli("variant", "--from", "wide-step000001", "--method", "int4", "--domains", "small", env=env)
        assert refused.returncode == 2 and "cannot run on this machine" in refused.stderr
    again = run_cli("variant", "--from", "wide-step000001--spec-ngram", "--method", "spec-ngram", "--domains", "small",
                    env=env)
    assert again.returncode == 2 and "itself a variant" in again.stderr
    assert Lake(wide_parent.home).read("variants").height == 1  # refusals record nothing
    assert pl.Series(Lake(wide_parent.home).read("checkpoints")["checkpoint"]).to_list().count(
        "wide-step000001--spec-ngram") == 1
