"""The long-context families' "score vs context length" curve on the domain page: sweep summaries
written through the real Lake, the page run with AppTest, the chart's data checked against them."""

from __future__ import annotations

import polars as pl

from storage import tables as T
from storage.lake import Lake
from tests.ui.test_app import _open
from tests.ui.test_pass_rate_view import _chart_frames

BUCKETS = {"1k": 1024, "2k": 2048, "4k": 4096, "8k": 8192, "16k": 16384}


def _summary(lake, checkpoint, domain, mean, at):
    row = {"checkpoint": checkpoint, "domain": domain, "gen_config": "greedy", "n": 50, "k": 1, "mean": mean,
           "ci_low": max(0.0, mean - 0.1), "ci_high": min(1.0, mean + 0.1), "created_at": at}
    lake.write_batch("sweep_summary", {"checkpoint": checkpoint, "domain": domain},
                     {"part": T.conform(pl.DataFrame([row]), T.SWEEP_SUMMARY)})


def test_domain_page_plots_each_checkpoints_score_by_length_bucket(assay_home):
    lake = Lake.at(assay_home)
    base = {"1k": 0.9, "2k": 0.8, "4k": 0.6, "8k": 0.3, "16k": 0.05}
    for bucket, mean in base.items():
        _summary(lake, "base-smollm2", f"long_needle_{bucket}", mean, "2026-12-01T00:00:00")
    _summary(lake, "base-smollm2", "long_needle_16k", 0.12, "2026-12-01T01:00:00")  # a re-sweep: newest wins
    for bucket in ("1k", "2k", "4k"):
        _summary(lake, "ck-1", f"long_needle_{bucket}", base[bucket] + 0.05, "2026-12-01T02:00:00")
    _summary(lake, "base-smollm2", "long_multikey_4k", 0.5, "2026-12-01T00:00:00")  # another family: not on this curve

    at = _open("domain", domain="long_needle_4k")
    assert "Score by context length" in [s.value for s in at.subheader]
    curve = next(v for k, v in _chart_frames(at).items() if k and k.startswith("Score vs context length"))[0]
    got = {(r.checkpoint, r.context_tokens): round(r.score_pct, 3) for r in curve.itertuples()}
    expected = {("base-smollm2", BUCKETS[b]): round(100 * m, 3) for b, m in base.items()}
    expected[("base-smollm2", 16384)] = 12.0
    expected.update({("ck-1", BUCKETS[b]): round(100 * (base[b] + 0.05), 3) for b in ("1k", "2k", "4k")})
    assert got == expected

    plain = _open("domain", domain="math_arith_easy")  # a domain without a length bucket: no curve
    assert "Score by context length" not in [s.value for s in plain.subheader]
