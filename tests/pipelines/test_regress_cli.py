"""`assay regress` as a user runs it: real files, real subprocess, exit codes and JSON."""

from __future__ import annotations

import json

import numpy as np
import polars as pl

from tests.conftest import run_cli


def _write(path, domains: dict[str, float], rng, k=4, n=200):
    rows = []
    for domain, shift in domains.items():
        p = np.clip(np.linspace(0.3, 0.7, n) + shift, 0, 1)
        for i in range(n):
            for s in range(k):
                rows.append({"domain": domain, "item_id": f"i{i}", "sample_idx": s,
                             "score": float(rng.random() < p[i]), "cluster_id": f"t{i % 25}"})
    pl.DataFrame(rows).write_parquet(path)
    return path


def test_regress_cli_json_and_exit_codes(tmp_path, assay_home):
    rng = np.random.default_rng(0)
    base = _write(tmp_path / "b.parquet", {"math": 0.0, "code": 0.0}, rng)
    cand = _write(tmp_path / "c.parquet", {"math": -0.25, "code": 0.0}, rng)
    proc = run_cli("regress", "--baseline", str(base), "--candidate", str(cand), "--protected", "math", "--json")
    assert proc.returncode == 1, proc.stderr
    payload = json.loads(proc.stdout)
    by = {d["domain"]: d for d in payload["domains"]}
    assert set(by) == {"math", "code"}
    for d in by.values():
        assert {"domain", "n", "k", "delta", "ci_low", "ci_high", "p", "q", "mde", "verdict"} <= set(d)
    assert by["math"]["verdict"] == "regression" and by["code"]["verdict"] == "ok"
    assert by["math"]["n"] == 200 and by["math"]["k"] == 4 and by["math"]["clusters"] == 25
    assert payload["missing"]["count"] == 0

    # without --protected nothing errors: the drop is a warning, exit 0
    proc = run_cli("regress", "--baseline", str(base), "--candidate", str(cand), "--margin", "0.02")
    assert proc.returncode == 0, proc.stderr
    assert "WARN" in proc.stdout and "math" in proc.stdout


def test_regress_cli_bad_input_exits_2(tmp_path, assay_home):
    good = _write(tmp_path / "b.parquet", {"math": 0.0}, np.random.default_rng(1), n=10)
    pl.DataFrame({"domain": ["math"], "item_id": ["i0"], "sample_idx": [0], "score": [3.0]}).write_parquet(
        tmp_path / "bad.parquet")
    proc = run_cli("regress", "--baseline", str(good), "--candidate", str(tmp_path / "bad.parquet"))
    assert proc.returncode == 2 and "outside [0, 1]" in proc.stderr
    proc = run_cli("regress", "--baseline", str(good), "--candidate", str(tmp_path / "nope.parquet"))
    assert proc.returncode == 2 and "no such file" in proc.stderr
    proc = run_cli("regress", "--baseline", str(good), "--candidate", str(good), "--margin", "x=abc")
    assert proc.returncode == 2 and "--margin" in proc.stderr


def _tag(path, params: dict | None):
    """Record a generation config in a results file, as the lake's results table does."""
    from evaluation.comparability import gen_identity

    frame = pl.read_parquet(path)
    config, text = gen_identity(params) if params else (None, None)
    frame.with_columns(pl.lit(config, dtype=pl.Utf8).alias("gen_config"),
                       pl.lit(text, dtype=pl.Utf8).alias("gen_params")).write_parquet(path)
    return path


def test_regress_cli_refuses_files_with_different_generation_configs(tmp_path, assay_home):
    rng = np.random.default_rng(3)
    greedy = {"max_new_tokens": 64, "temperature": 0.0, "prompt_format": "raw"}
    base = _tag(_write(tmp_path / "b.parquet", {"math": 0.0}, rng, n=30), greedy)
    cand = _tag(_write(tmp_path / "c.parquet", {"math": 0.0}, rng, n=30),
                {**greedy, "max_new_tokens": 256, "temperature": 0.7})
    proc = run_cli("regress", "--baseline", str(base), "--candidate", str(cand), "--json")
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert lines == ["assay: error: not comparable: domain 'math': max_new_tokens: 64 vs 256; temperature: 0.0 vs 0.7 "
                     "(baseline vs candidate); compare results generated with the same config"]
    # the same config on both sides compares as usual
    same = _tag(_write(tmp_path / "s.parquet", {"math": 0.0}, rng, n=30), greedy)
    assert run_cli("regress", "--baseline", str(base), "--candidate", str(same)).returncode == 0


def test_regress_cli_shows_underpowered_and_follows_the_policy(tmp_path, assay_home):
    rng = np.random.default_rng(4)
    base = _write(tmp_path / "b.parquet", {"tiny": 0.0, "math": 0.0}, rng, n=4)  # 4 items per domain
    cand = _write(tmp_path / "c.parquet", {"tiny": -0.3, "math": 0.0}, rng, n=4)
    args = ("regress", "--baseline", str(base), "--candidate", str(cand), "--protected", "tiny")
    proc = run_cli(*args, "--json")
    payload = json.loads(proc.stdout)
    tiny = next(d for d in payload["domains"] if d["domain"] == "tiny")
    assert tiny["verdict"] == "underpowered" and tiny["underpowered"] is True and tiny["mde"] is None
    # a protected domain that cannot show it did not regress blocks under the shipped policy
    assert proc.returncode == 1 and any("tiny is underpowered" in b for b in payload["blocking"])
    text = run_cli(*args).stdout
    assert "UNDERPOWERED (smallest attainable p 0.062 > alpha 0.05)" in text and "  inf  " in text
    # the team's policy file decides: allow lets it through
    (assay_home / "promotion.yaml").write_text("on_underpowered: allow\n")
    proc = run_cli(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["policy"]["source"] == str(assay_home / "promotion.yaml")
    (assay_home / "promotion.yaml").write_text("on_underpowered: maybe\n")
    proc = run_cli(*args)
    assert proc.returncode == 2 and "on_underpowered: Input should be 'refuse' or 'allow'" in proc.stderr
