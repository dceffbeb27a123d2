"""Calibration of the per-domain regression detector by simulation (evaluation.regression).

300 domains x 300 items x K=8 samples per item, two scenarios:

- ``independent``: items move independently (item-level noise only);
- ``clustered``: items come from 30 templates of 10, and whole templates move together between
  checkpoints (a random template shift with mean 0), the case where a naive SE is too small.

In each replicate, per scenario: 270 null domains (200 with no change, 70 exactly at the margin,
the hardest null), 10 drops at 1x and 10 at 2x the MDE the detector reports for that design
(median over a pilot of null domains), and 10 gains of 2x MDE. Scores are Bernoulli draws; item
success probabilities stay inside [0, 1] with no clipping, so each domain's true delta is exact.

Methods, all on the same simulated results, all through ``compare_results`` (the product path):
  K=8 paired test + BH      the detector (cluster-robust SE when cluster_id is given)
  K=8 naive SE + BH         the same without cluster_id (ablation: why clustering matters)
  K=1 McNemar + BH          sample 0 only, exact McNemar at margin 0 (the usual baseline)
  K=1 paired test + BH      sample 0 only, the detector with the margin (exact unconditional)

A flag is q <= 0.05 (BH across the 300 domains). A false discovery is a flagged domain whose true
drop is within the margin (delta >= -margin). FDR = mean over replicates of V / max(R, 1).

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_regression [--reps 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import polars as pl

from evaluation.regression import DEFAULT_MARGIN, compare_results

N_DOMAINS, N_ITEMS, K = 300, 300, 8
TEMPLATES = 30
N_ZERO, N_BOUNDARY, N_DROP1, N_DROP2, N_GAIN = 200, 70, 10, 10, 10


def _frame(scores: np.ndarray, templates: np.ndarray | None) -> pl.DataFrame:
    """(domains, items, K) 0/1 scores -> per-sample rows."""
    d, n, k = scores.shape
    dom = np.repeat(np.arange(d), n * k)
    item = np.tile(np.repeat(np.arange(n), k), d)
    frame = pl.DataFrame({"d": dom, "i": item, "sample_idx": np.tile(np.arange(k), d * n),
                          "score": scores.reshape(-1).astype(float)})
    exprs = [pl.format("d{}", pl.col("d")).alias("domain"), pl.format("i{}", pl.col("i")).alias("item_id"),
             "sample_idx", "score"]
    if templates is not None:
        frame = frame.with_columns(pl.Series("t", np.tile(np.repeat(templates, k), d)))
        exprs.append(pl.format("t{}", pl.col("t")).alias("cluster_id"))
    return frame.select(exprs)


def simulate(rng, deltas: np.ndarray, clustered: bool, k: int = K):
    """Baseline and candidate 0/1 scores (domains, items, K) with the given true deltas."""
    d = deltas.size
    p = rng.uniform(0.3, 0.7, (d, N_ITEMS))
    templates = np.repeat(np.arange(TEMPLATES), N_ITEMS // TEMPLATES)
    if clustered:
        shift = rng.uniform(-0.12, 0.12, (d, TEMPLATES))[:, templates]
    else:
        shift = rng.uniform(-0.05, 0.05, (d, N_ITEMS))
    # centre the noise on its *population* mean (0), not its sample mean: the true delta of the
    # domain (the population the items are drawn from) is exactly `deltas`.
    q = p + deltas[:, None] + shift
    assert q.min() >= 0 and q.max() <= 1, "simulation design would clip probabilities"
    base = rng.random((d, N_ITEMS, k)) < p[:, :, None]
    cand = rng.random((d, N_ITEMS, k)) < q[:, :, None]
    return base, cand, (templates if clustered else None)


def pilot_mde(rng, clustered: bool) -> float:
    base, cand, templates = simulate(rng, np.zeros(40), clustered)
    report = compare_results(_frame(base, templates), _frame(cand, templates), margin=DEFAULT_MARGIN)
    return float(np.median([d.mde for d in report.domains]))


def evaluate(report, truth: np.ndarray, kinds: np.ndarray, margin: float) -> dict:
    flagged = np.zeros(truth.size, bool)
    p_unadj = np.ones(truth.size)
    for d in report.domains:
        idx = int(d.domain[1:])
        flagged[idx] = d.q <= report.q_level
        p_unadj[idx] = d.p
    false = flagged & (truth >= -margin - 1e-12)
    r = int(flagged.sum())
    return {"flagged": r, "false": int(false.sum()), "fdp": false.sum() / max(r, 1),
            "power1": flagged[kinds == "drop1"].mean(), "power2": flagged[kinds == "drop2"].mean(),
            "power1_unadjusted": (p_unadj[kinds == "drop1"] <= 0.05).mean(),
            "gains_flagged": int(flagged[kinds == "gain"].sum()),
            # domains whose test cannot reject at alpha (none expected at 300 items)
            "underpowered": sum(d.underpowered for d in report.domains),
            "mde_drop1": float(np.median([d.mde for d in report.domains if kinds[int(d.domain[1:])] == "drop1"]))}


def run(reps: int, seed: int, k1_reps: int) -> dict:
    rng = np.random.default_rng(seed)
    out = {}
    for scenario in ("independent", "clustered"):
        clustered = scenario == "clustered"
        mde = pilot_mde(rng, clustered)
        kinds = np.array(["zero"] * N_ZERO + ["boundary"] * N_BOUNDARY + ["drop1"] * N_DROP1
                         + ["drop2"] * N_DROP2 + ["gain"] * N_GAIN)
        truth = np.select([kinds == "boundary", kinds == "drop1", kinds == "drop2", kinds == "gain"],
                          [-DEFAULT_MARGIN, -mde, -2 * mde, 2 * mde], 0.0)
        methods: dict[str, list[dict]] = {m: [] for m in ("K=8 paired test + BH", "K=8 naive SE + BH",
                                                          "K=1 McNemar + BH", "K=1 paired test + BH")}
        seconds = {m: 0.0 for m in methods}
        for rep in range(reps):
            base, cand, templates = simulate(rng, truth, clustered)
            runs = [("K=8 paired test + BH", base, cand, templates, DEFAULT_MARGIN),
                    ("K=8 naive SE + BH", base, cand, None, DEFAULT_MARGIN),
                    ("K=1 McNemar + BH", base[:, :, :1], cand[:, :, :1], None, 0.0)]
            if rep < k1_reps:  # the exact unconditional test is the slow one: fewer replicates
                runs.append(("K=1 paired test + BH", base[:, :, :1], cand[:, :, :1], templates, DEFAULT_MARGIN))
            for name, b, c, t, margin in runs:
                start = time.perf_counter()
                report = compare_results(_frame(b, t), _frame(c, t), margin=margin)
                seconds[name] += time.perf_counter() - start
                # false discoveries always judged against the 1-point margin (what a flag claims)
                methods[name].append(evaluate(report, truth, kinds, DEFAULT_MARGIN))
        out[scenario] = {"pilot_mde": mde, "methods": {
            name: {"reps": len(rows), "fdr": float(np.mean([r["fdp"] for r in rows])),
                   "mean_flagged": float(np.mean([r["flagged"] for r in rows])),
                   "power_1x_mde": float(np.mean([r["power1"] for r in rows])),
                   "power_2x_mde": float(np.mean([r["power2"] for r in rows])),
                   "power_1x_mde_unadjusted": float(np.mean([r["power1_unadjusted"] for r in rows])),
                   "gains_flagged": int(sum(r["gains_flagged"] for r in rows)),
                   "underpowered": int(sum(r["underpowered"] for r in rows)),
                   "seconds_per_report": seconds[name] / max(len(rows), 1)}
            for name, rows in methods.items() if rows}}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reps", type=int, default=10, help="replicates per scenario (default 10)")
    parser.add_argument("--k1-reps", type=int, default=3, help="replicates for the slow K=1 exact test")
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    start = time.perf_counter()
    result = run(args.reps, args.seed, args.k1_reps)
    print(f"regression detector calibration: {N_DOMAINS} domains x {N_ITEMS} items x K={K}, "
          f"margin {DEFAULT_MARGIN}, BH q=0.05, {args.reps} replicates per scenario")
    for scenario, block in result.items():
        print(f"\n[{scenario}] reported MDE (median, K=8) = {100 * block['pilot_mde']:.2f} points; "
              f"drops at 1x and 2x of it, gains at +2x")
        print(f"{'method':<22} {'reps':>4} {'FDR':>6} {'flagged':>7} {'pow@1x':>7} {'pow@2x':>7} "
              f"{'pow@1x unadj':>12} {'gains flagged':>13} {'underpowered':>12} {'s/report':>8}")
        for name, m in block["methods"].items():
            print(f"{name:<22} {m['reps']:>4} {m['fdr']:>6.3f} {m['mean_flagged']:>7.1f} {m['power_1x_mde']:>7.2f} "
                  f"{m['power_2x_mde']:>7.2f} {m['power_1x_mde_unadjusted']:>12.2f} {m['gains_flagged']:>13} "
                  f"{m['underpowered']:>12} {m['seconds_per_report']:>8.2f}")
        ours, mcnemar = block["methods"]["K=8 paired test + BH"], block["methods"]["K=1 McNemar + BH"]
        print(f"power at 2x MDE, K=8 detector vs K=1 McNemar baseline: {ours['power_2x_mde']:.2f} vs "
              f"{mcnemar['power_2x_mde']:.2f} (ratio {ours['power_2x_mde'] / max(mcnemar['power_2x_mde'], 1e-9):.1f}x)")
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
