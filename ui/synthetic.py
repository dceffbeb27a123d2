"""A synthetic but internally consistent lake, for the dashboard's tests, benchmark and screenshots.

Every table is written with :meth:`storage.lake.Lake.write_batch` and conformed to the column
contracts in :mod:`storage.tables`, so the dashboard reads it exactly as it reads a lake that
``make demo`` filled. The numbers are simulated, not invented per table: each checkpoint has a true
accuracy per domain, ``results`` are sampled from it, and ``sweep_summary``, ``regression`` (paired
test, Benjamini-Hochberg q, MDE) and ``promotions`` are computed from those results, so the items a
domain page lists as lost or gained agree with the deltas on the overview. The certifications of
fast variants (``variants``, ``variant_domains``) are planted figures, consistent among themselves.

Preview the dashboard without running the pipeline::

    python -m ui.synthetic --home /tmp/assay-synth --domains 40 --checkpoints 8
    ASSAY_HOME=/tmp/assay-synth ASSAY_DOMAINS_PATH=/tmp/assay-synth/plugins streamlit run ui/app.py
"""

from __future__ import annotations

import argparse
import json
import math
import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl

from storage import tables as T
from storage.lake import Lake

OWNERS = ("math-team@acme", "code-team@acme", "safety@acme", "knowledge@acme")
TAGS = (("math", "procedural"), ("code",), ("safety", "refusal"), ("knowledge", "qa"))
REASONS = ("duplicate", "near_duplicate", "pii", "too_long", "contaminated", "answer_leak")
GATES = ("format", "safety", "difficulty", "selftest")
PASS_THRESHOLD = 0.5  # an item "passes" when its mean score over the K samples reaches this


@dataclass(frozen=True)
class SyntheticSpec:
    domains: int = 6
    checkpoints: int = 4          # trained checkpoints, besides the base pseudo-checkpoint
    items: int = 16               # eval items per domain
    k: int = 1                    # samples per item
    train_items: int = 24         # admitted train items per domain (ingest + difficulty)
    training_steps: int = 12
    seed: int = 0
    with_mlflow: bool = True
    prefix: str = "dom"

    def __post_init__(self) -> None:
        for name in ("domains", "checkpoints", "items", "k", "train_items", "training_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"SyntheticSpec.{name} must be >= 1, got {getattr(self, name)}")


def domain_names(spec: SyntheticSpec) -> list[str]:
    return [f"{spec.prefix}_{i:03d}" for i in range(spec.domains)]


def write_registry_plugin(folder: Path, spec: SyntheticSpec) -> Path:
    """A plugin file registering the synthetic domains (owners, tags, protected) for ASSAY_DOMAINS_PATH."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for i, name in enumerate(domain_names(spec)):
        owner, tags = OWNERS[i % len(OWNERS)], TAGS[i % len(TAGS)]
        entries.append(f"    _make({name!r}, {owner!r}, {tags!r}, {i % 4 == 2}),")
    body = (
        "from domains import Domain\n\n"
        "def _samples(split, n, seed):\n"
        "    for i in range(n):\n"
        "        yield {'id': f'{split}-{i}', 'prompt': f'What is {i} + 1?', 'answer': str(i + 1)}\n\n"
        "def _score(completion, sample):\n"
        "    return float(completion.strip() == sample['answer'])\n\n"
        "def _make(name, owner, tags, protected):\n"
        "    return Domain(name=name, owner=owner, description='synthetic dashboard domain', tags=tags,\n"
        "                  samples=_samples, score=_score, protected=protected)\n\n"
        "DOMAINS = [\n" + "\n".join(entries) + "\n]\n"
    )
    path = folder / f"synthetic_{spec.prefix}.py"
    path.write_text(body)
    return path


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S+00:00")


def _frame(rows: list[dict], schema: dict) -> pl.DataFrame:
    return T.conform(pl.DataFrame(rows, schema_overrides=schema, infer_schema_length=None), schema) \
        if rows else T.empty(schema)


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _bh(pvalues: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted q-values, in input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    q = [0.0] * m
    running = 1.0
    for rank in range(m, 0, -1):
        i = order[rank - 1]
        running = min(running, pvalues[i] * m / rank)
        q[i] = running
    return q


def _holm(pvalues: list[float]) -> list[float]:
    """Holm step-down adjusted p-values, in input order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def paired_comparison(base: list[float], cand: list[float]) -> dict:
    """One-sided paired test for a drop in per-item means (normal approximation), with the
    fields the regression stage reports (``evaluation.regression`` uses exact tests; the dashboard
    only needs the same columns and verdict rule)."""
    diffs = [c - b for b, c in zip(base, cand)]
    n = len(diffs)
    delta = sum(diffs) / n
    var = sum((d - delta) ** 2 for d in diffs) / max(1, n - 1)
    se = math.sqrt(var / n) if var > 0 else 1.0 / n
    z = delta / se
    return {
        "delta": delta, "ci_low": delta - 1.96 * se, "ci_high": delta + 1.96 * se,
        "p": 1.0 - _normal_sf(z), "mde": 2.5 * se,
        "items_lost": sum(1 for b, c in zip(base, cand) if b >= PASS_THRESHOLD > c),
        "items_gained": sum(1 for b, c in zip(base, cand) if c >= PASS_THRESHOLD > b),
    }


def write_synthetic_lake(home: Path, spec: SyntheticSpec = SyntheticSpec(), now: datetime | None = None) -> dict:
    """Fill ``home`` with every lake table the dashboard reads (plus, with ``spec.with_mlflow``, an
    MLflow training run and the registered checkpoints with the champion alias). Returns a summary:
    domains, checkpoints, champion, run_id."""
    rng = random.Random(spec.seed)
    lake = Lake.at(home)
    now = now or datetime.now(timezone.utc)
    names = domain_names(spec)
    start = now - timedelta(hours=2 * (spec.checkpoints + 2))

    run_id = _write_training_run(lake, spec, names, rng, start) if spec.with_mlflow else f"synthetic-{spec.seed}"
    _write_quality(lake, spec, names, rng, now)

    # checkpoints: the base pseudo-checkpoint, then one per training stage
    ckpts = ["base-tiny"] + [f"synth-step{(i + 1) * 100:06d}" for i in range(spec.checkpoints)]
    created = {c: _iso(start + timedelta(hours=2 * i)) for i, c in enumerate(ckpts)}
    for i, c in enumerate(ckpts):
        row = {"checkpoint": c, "run_id": None if i == 0 else run_id, "step": i * 100,
               "path": str(lake.checkpoints_dir / c), "recipe": "tiny", "base_model": "tiny",
               "domains": names, "mlflow_model_id": None, "created_at": created[c]}
        lake.write_batch("checkpoints", {"checkpoint": c}, {"part": _frame([row], T.CHECKPOINTS)})

    # true accuracy per (checkpoint, domain): a random walk with a few planted drops
    truth: dict[str, dict[str, float]] = {}
    level = {d: rng.uniform(0.2, 0.8) for d in names}
    for i, c in enumerate(ckpts):
        for d in names:
            if i:
                level[d] = min(0.97, max(0.03, level[d] + rng.gauss(0.02, 0.05)))
                if rng.random() < 0.08:
                    level[d] = max(0.02, level[d] - 0.3)  # a planted regression
        truth[c] = dict(level)

    scores: dict[tuple[str, str], list[float]] = {}
    for c in ckpts:
        for d in names:
            rows, per_item = [], []
            for j in range(spec.items):
                ease = (j - spec.items / 2) / spec.items  # items differ in difficulty, fixed across checkpoints
                p = min(0.99, max(0.01, truth[c][d] + ease))
                item_scores = []
                for s in range(spec.k):
                    score = 1.0 if rng.random() < p else 0.0
                    item_scores.append(score)
                    answer = str(j + 1) if score else str(j + 2)
                    rows.append({"checkpoint": c, "domain": d, "item_id": f"eval-{j}", "sample_idx": s,
                                 "score": score, "completion": f"The answer is {answer}.",
                                 "latency_s": 0.05, "tokens": 6, "cluster_id": f"tmpl-{j % 4}",
                                 "gen_config": "greedy", "created_at": created[c]})
                per_item.append(sum(item_scores) / spec.k)
            scores[(c, d)] = per_item
            lake.write_batch("results", {"checkpoint": c, "domain": d, "batch": "b0"},
                             {"part": _frame(rows, T.RESULTS)})
            mean = sum(per_item) / len(per_item)
            se = math.sqrt(max(mean * (1 - mean), 1e-6) / len(per_item))
            summary = {"checkpoint": c, "domain": d, "n": spec.items, "k": spec.k, "mean": mean,
                       "pass1": mean, "passk": sum(1 for v in per_item if v > 0) / len(per_item),
                       "stderr": se, "ci_low": max(0.0, mean - 1.96 * se), "ci_high": min(1.0, mean + 1.96 * se),
                       "tokens_per_s": 120.0, "gen_config": "greedy", "created_at": created[c]}
            lake.write_batch("sweep_summary", {"checkpoint": c, "domain": d},
                             {"part": _frame([summary], T.SWEEP_SUMMARY)})

    # regression of every checkpoint against the champion of its day, then the promotion decision
    protected = {d for i, d in enumerate(names) if i % 4 == 2}
    champion = ckpts[0]
    promoted_at: dict[str, str] = {}
    for i, cand in enumerate(ckpts[1:], start=1):
        stats = {d: paired_comparison(scores[(champion, d)], scores[(cand, d)]) for d in names}
        qs = _bh([stats[d]["p"] for d in names])
        guarded = [d for d in names if d in protected]
        holm = dict(zip(guarded, _holm([stats[d]["p"] for d in guarded])))
        rows = []
        for d, q in zip(names, qs):
            s = stats[d]
            # the verdict rule of evaluation.regression: Holm over protected domains -> regression,
            # BH over all domains -> warn
            verdict = "ok"
            if d in protected and holm[d] <= 0.05:
                verdict = "regression"
            elif q <= 0.05:
                verdict = "warn"
            rows.append({"candidate": cand, "baseline": champion, "domain": d, "n": spec.items, "k": spec.k,
                         **s, "q": q, "verdict": verdict, "protected": d in protected,
                         "test": "paired_z", "created_at": created[cand]})
        lake.write_batch("regression", {"candidate": cand, "baseline": champion},
                         {"part": _frame(rows, T.REGRESSION)})
        blocked = sorted(r["domain"] for r in rows if r["verdict"] == "regression" and r["protected"])
        promoted = not blocked
        reason = "no protected domain regressed" if promoted else f"regression on protected {', '.join(blocked)}"
        decision = {"decision": f"d{i:04d}", "candidate": cand, "previous_champion": champion,
                    "promoted": promoted, "reason": reason, "created_at": created[cand]}
        lake.write_batch("promotions", {"decision": decision["decision"]},
                         {"part": _frame([decision], T.PROMOTIONS)})
        if promoted:
            champion = cand
            promoted_at[cand] = created[cand]
    _write_pass_rates(lake, spec, names, ckpts, truth, promoted_at, created)
    _write_variants(lake, spec, names, champion, now)
    _write_report_cards(lake, names, now)
    if spec.with_mlflow:
        _register_champion(lake, ckpts, champion, run_id)
    return {"domains": names, "checkpoints": ckpts, "champion": champion, "run_id": run_id}


def _report_card_row(domain: str, run: str, at: str, *, recall: float, candidates: int, fixed_paid: int = 0,
                     search_paid: int = 0, bar: float = 0.99, misses: list | None = None) -> dict:
    failures = []
    if recall < bar:
        failures.append(f"recall {recall:.3f} below the bar {bar:.3f}: {round((1 - recall) * candidates)} correct "
                        "answers refused, worst family thousands_separator")
    if fixed_paid:
        failures.append("fixed hack families paid: number_spray")
    if search_paid:
        failures.append(f"hack search: {search_paid} paid completions (e.g. nan_value on {domain}-eval-1)")
    half = 1.96 * math.sqrt(max(recall * (1 - recall), 1e-4) / candidates)
    evidence = {"recall_misses": misses or [], "recall_families": [
        {"family": "thousands_separator", "tried": 16, "paid": 16 - len(misses or []), "example_miss": None,
         "example_item": None}],
        "hack_search_paid": [{"item": f"{domain}-eval-1", "shape": "nan_value", "completion": "<answer>nan</answer>",
                              "score": 1.0}] * min(search_paid, 1)}
    return {"run": run, "source": "cli", "domain": domain, "passed": not failures, "failures": failures,
            "warnings": [], "skipped": None, "items": 8, "oracle_pass": 1.0, "nop_paid": 0.0, "recall": recall,
            "recall_low": max(0.0, recall - half), "recall_high": min(1.0, recall + half),
            "recall_candidates": candidates, "recall_bar": bar, "worst_family": "thousands_separator",
            "worst_family_recall": recall, "fixed_families": 9, "fixed_families_paid": fixed_paid,
            "hack_search_tried": 400, "hack_search_paid": search_paid, "evidence": json.dumps(evidence),
            "seconds": 2.5, "created_at": at, "difficulty_band": "[0.05, 0.95]"}


def _write_report_cards(lake: Lake, names: list[str], now: datetime) -> None:
    """Report cards: an older passing card of every domain, then the newest: the first domain below
    its recall bar (two refused answers as evidence), the second paid by the hack search, the rest
    passing."""
    old, new = _iso(now - timedelta(days=1)), _iso(now - timedelta(hours=1))
    for i, d in enumerate(names):
        lake.write_batch("report_cards", {"domain": d, "run": "card-old"},
                         {"part": _frame([_report_card_row(d, "card-old", old, recall=1.0, candidates=120)],
                                         T.REPORT_CARDS)})
        misses = [{"item": f"{d}-eval-{j}", "family": "thousands_separator", "completion": f"Answer: 1,{j}00",
                   "score": 0.0} for j in (2, 3)]
        row = (_report_card_row(d, "card-new", new, recall=0.9, candidates=120, misses=misses) if i == 0 else
               _report_card_row(d, "card-new", new, recall=1.0, candidates=120, search_paid=2) if i == 1 else
               _report_card_row(d, "card-new", new, recall=1.0, candidates=120))
        lake.write_batch("report_cards", {"domain": d, "run": "card-new"}, {"part": _frame([row], T.REPORT_CARDS)})


PASS_RATE_K = 8
PASS_RATE_GEN_CONFIG = "synthetic-t1.0"


def _write_pass_rates(lake: Lake, spec: SyntheticSpec, names: list[str], ckpts: list[str],
                      truth: dict[str, dict[str, float]], promoted_at: dict[str, str], created: dict[str, str]) -> None:
    """``pass_rates`` of the base policy and of every champion on each domain's train items
    (K = 8 samples drawn from the checkpoint's true accuracy, items differing in ease), measured
    when the checkpoint became champion, as the difficulty asset does. The last domain has none:
    its gate fell back to the heuristic, and its page shows the empty state."""
    rng = random.Random(spec.seed * 7919 + 13)  # its own stream: the other tables stay as they were
    measured = [ckpts[0], *[c for c in ckpts[1:] if c in promoted_at]]
    params = json.dumps({"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 64, "prompt_format": "plain"})
    for c in measured:
        at = promoted_at.get(c, created[c])
        for d in names[:-1] if len(names) > 1 else names:
            rows = []
            for j in range(spec.train_items):
                ease = (j - spec.train_items / 2) / spec.train_items
                p = min(1.0, max(0.0, truth[c][d] + ease))
                passes = sum(1 for _ in range(PASS_RATE_K) if rng.random() < p)
                rows.append({"checkpoint": c, "domain": d, "item_id": f"train-0-{j}", "samples": PASS_RATE_K,
                             "passes": passes, "pass_rate": passes / PASS_RATE_K, "mean_score": passes / PASS_RATE_K,
                             "gen_config": PASS_RATE_GEN_CONFIG, "gen_params": params, "engine": "torch:synthetic",
                             "created_at": at})
            lake.write_batch("pass_rates", {"checkpoint": c, "domain": d, "batch": f"{PASS_RATE_GEN_CONFIG}-k8"},
                             {"part": _frame(rows, T.PASS_RATES)})


VARIANT_MARGIN, VARIANT_MIN_SPEEDUP, VARIANT_Z = 0.02, 2.0, 1.96  # evaluation.variant_config defaults
# the parent measured on its standard engine: tokens/s at batch 1 and at the sweep batch, TTFT, peak GiB
PARENT_SPEED = {"engine": "torch:bfloat16", "batch1": 42.0, "batch": 320.0, "ttft": 0.21, "rss": 2.1}
# (method, engine, speedup at batch 1, at the sweep batch, TTFT s, peak GiB, items per domain, planted
# verdicts by domain index, minutes before now), oldest first; the first gguf-q4_0 certification, on too
# few items, is underpowered everywhere and superseded by the second
VARIANT_PLANS = (
    ("gguf-q4_0", "llama.cpp:gguf-q4_0", 2.7, 1.4, 0.09, 0.62, 40, {}, 240),
    ("int8", "torch:int8", 1.3, 0.9, 0.17, 1.15, 200, {}, 180),
    ("gguf-q4_0", "llama.cpp:gguf-q4_0", 2.8, 1.4, 0.09, 0.62, 200, {}, 120),
    ("spec-ngram", "speculative:ngram", 2.2, 0.85, 0.22, 2.2, 200, {0: "inferior", 1: "underpowered"}, 60),
)


def _noninferiority_row(n: int, delta: float, se: float) -> dict:
    """Test statistics of one domain at the default margin, by the rule of the non-inferiority
    test: CI low above -margin is non-inferior, CI high below it inferior, neither underpowered
    (with the items that would show non-inferiority at this Δ and spread)."""
    low, high = delta - VARIANT_Z * se, delta + VARIANT_Z * se
    z = (delta + VARIANT_MARGIN) / se
    verdict = "non_inferior" if low > -VARIANT_MARGIN else "inferior" if high < -VARIANT_MARGIN else "underpowered"
    needed = (math.ceil(n * (VARIANT_Z * se / (delta + VARIANT_MARGIN)) ** 2)
              if verdict == "underpowered" and delta > -VARIANT_MARGIN else None)
    return {"n": n, "k": 1, "margin": VARIANT_MARGIN, "delta": delta, "ci_low": low, "ci_high": high,
            "p_noninferior": _normal_sf(z), "p_inferior": _normal_sf(-z), "verdict": verdict, "test": "paired_z",
            "items_for_power": needed}


def _write_variants(lake: Lake, spec: SyntheticSpec, names: list[str], parent: str, now: datetime) -> None:
    """Certifications of fast variants of the champion (``variants``, ``variant_domains``), planted
    rather than simulated (their sweeps' results are not written): a gguf-q4_0 variant first
    underpowered on 40 items, then equivalent on 200 and 2.8x faster (it takes the ``fast`` alias);
    an equivalent int8 variant only 1.3x faster; a spec-ngram variant 2.2x faster at batch 1 but
    slower at the sweep batch, inferior on the first domain and underpowered on the second."""
    rng = random.Random(spec.seed * 6271 + 5)  # its own stream: the other tables stay as they were
    for i, (method, engine, speedup1, speedup, ttft, rss, items, planted, minutes) in enumerate(VARIANT_PLANS):
        variant, at = f"{parent}--{method}", _iso(now - timedelta(minutes=minutes))
        decision = f"v{i:04d}-{variant}"
        domains = []
        for j, d in enumerate(names):
            plant = planted.get(j)
            if plant == "inferior":
                stats = _noninferiority_row(items, -0.06, 0.01)
            elif plant == "underpowered":
                stats = _noninferiority_row(items, -0.012, 0.006)  # answers differ often: a wide CI
            elif items < 100:
                stats = _noninferiority_row(items, rng.uniform(-0.006, 0.004), rng.uniform(0.015, 0.02))
            else:
                stats = _noninferiority_row(items, rng.uniform(-0.006, 0.004), rng.uniform(0.003, 0.0055))
            domains.append({"decision": decision, "variant": variant, "parent": parent, "domain": d, **stats,
                            "created_at": at})
        failing = [r for r in domains if r["verdict"] != "non_inferior"]
        reasons = [f"{speedup1:.2f}x tokens/s at batch 1, below the {VARIANT_MIN_SPEEDUP:g}x required"] \
            if speedup1 < VARIANT_MIN_SPEEDUP else []
        reasons += [f"{r['domain']} {r['verdict']}" + (f" (needs {r['items_for_power']} items)"
                                                      if r["items_for_power"] else "") for r in failing]
        fast = not reasons
        base = PARENT_SPEED
        row = {"decision": decision, "variant": variant, "parent": parent, "method": method, "created_at": at,
               "engine": engine, "parent_engine": base["engine"], "batch": 16, "new_tokens": 64,
               "tokens_per_s_batch1": base["batch1"] * speedup1, "parent_tokens_per_s_batch1": base["batch1"],
               "speedup_batch1": speedup1, "tokens_per_s_batch": base["batch"] * speedup,
               "parent_tokens_per_s_batch": base["batch"], "speedup_batch": speedup, "ttft_s": ttft,
               "parent_ttft_s": base["ttft"], "peak_rss_gib": rss, "parent_peak_rss_gib": base["rss"],
               "margin": VARIANT_MARGIN, "min_speedup": VARIANT_MIN_SPEEDUP, "equivalent": not failing,
               "fast_alias": fast,
               "reason": (f"certified: equivalent on every domain and {speedup1:.2f}x at batch 1" if fast
                          else "refused: " + "; ".join(reasons)),
               "load_average": round(0.4 + 0.3 * i, 2)}
        lake.write_batch("variant_domains", {"decision": decision}, {"part": _frame(domains, T.VARIANT_DOMAINS)})
        lake.write_batch("variants", {"decision": decision}, {"part": _frame([row], T.VARIANTS)})


def _register_champion(lake: Lake, ckpts: list[str], champion: str, run_id: str) -> None:
    """A model version per checkpoint and the alias ``champion`` on the last one promoted, as the
    promotion step leaves them (the dashboard reads the champion from the alias)."""
    from storage import tracking

    versions = {}
    for c in ckpts:
        tracking.register_model_version(lake.mlflow_uri, c, (lake.checkpoints_dir / c).as_uri(),
                                        run_id=None if c.startswith("base-") else run_id,
                                        model_tags={"assay.checkpoint": c}, model_params={}, version_tags={},
                                        artifact_root=str(lake.mlflow_artifacts))
        versions[c] = tracking.checkpoint_versions(lake.mlflow_uri, c)[-1].version
    tracking.set_champion_alias(lake.mlflow_uri, versions[champion])


def _write_quality(lake: Lake, spec: SyntheticSpec, names: list[str], rng: random.Random, now: datetime) -> None:
    """Ingest batches with quarantine, gate results over three evaluations, difficulty, train set."""
    for di, d in enumerate(names):
        for b in range(2):
            at = _iso(now - timedelta(days=2 - b, hours=di % 5))
            batch = f"b{b}"
            samples, quarantined = [], []
            for j in range(spec.train_items):
                sid = f"train-{b}-{j}"
                reasons = [REASONS[(j + di) % len(REASONS)]] if rng.random() < 0.15 else []
                prompt = f"What is {j} + {b}?"
                if reasons:
                    quarantined.append({"domain": d, "split": "train", "id": sid, "source": f"{batch}.jsonl",
                                        "line": j + 1, "reasons": reasons,
                                        "raw": json.dumps({"prompt": prompt, "answer": str(j + b)}),
                                        "prompt": prompt, "answer": str(j + b), "metadata": "{}",
                                        "batch": batch, "ingested_at": at})
                else:
                    samples.append({"domain": d, "split": "train", "id": sid, "prompt": prompt,
                                    "answer": str(j + b), "metadata": "{}", "source": f"{batch}.jsonl",
                                    "line": j + 1, "batch": batch, "content_hash": f"h{di}-{b}-{j}",
                                    "ingested_at": at})
            if b == 0:  # the eval split, so the domain page can show prompts next to completions
                for j in range(spec.items):
                    samples.append({"domain": d, "split": "eval", "id": f"eval-{j}",
                                    "prompt": f"Compute {j} + 1.", "answer": str(j + 1), "metadata": "{}",
                                    "source": "generated", "line": j + 1, "batch": batch,
                                    "content_hash": f"e{di}-{j}", "ingested_at": at})
            lake.write_batch("ingest", {"domain": d, "batch": batch},
                             {"samples": _frame(samples, T.SAMPLES), "quarantine": _frame(quarantined, T.QUARANTINE)})

        for e in range(3):
            at = _iso(now - timedelta(hours=30 - 12 * e, minutes=di % 50))
            evaluation = f"ev{e}"
            rows = []
            for gate in GATES:
                checked = spec.train_items * 2
                failed = rng.randint(0, 3) if rng.random() < 0.3 else 0
                severity = "critical" if gate in ("format", "safety") else "warning"
                success = failed == 0 or severity != "critical"
                rows.append({"domain": d, "evaluation": evaluation, "gate": gate,
                             "expectation": f"expect_{gate}_ok", "severity": severity, "success": success,
                             "observed": str(failed), "threshold": "0", "rows_checked": checked,
                             "rows_failed": failed, "evaluated_at": at, "mlflow_run_id": None})
            lake.write_batch("gate_results", {"domain": d, "evaluation": evaluation},
                             {"part": _frame(rows, T.GATE_RESULTS)})

        diff_rows, train_rows = [], []
        for j in range(spec.train_items):
            pass_rate = rng.betavariate(2, 2)
            in_band = 0.1 <= pass_rate <= 0.9
            heuristic = di == len(names) - 1 and len(names) > 1  # no policy measured this domain
            diff_rows.append({"domain": d, "id": f"train-0-{j}", "difficulty": 1 - pass_rate,
                              "pass_rate": None if heuristic else pass_rate, "k": None if heuristic else 8,
                              "method": "heuristic" if heuristic else "policy_pass_rate",
                              "in_band": in_band, "evaluated_at": _iso(now)})
            if in_band:
                train_rows.append({"domain": d, "id": f"train-0-{j}", "prompt": f"What is {j} + 0?",
                                   "answer": str(j), "metadata": "{}", "difficulty": 1 - pass_rate,
                                   "evaluation": "ev2", "gated_at": _iso(now)})
        lake.write_batch("difficulty", {"domain": d, "evaluation": "ev2"}, {"part": _frame(diff_rows, T.DIFFICULTY)})
        lake.write_batch("train_set", {"domain": d}, {"part": _frame(train_rows, T.TRAIN_SET)})


def _write_training_run(lake: Lake, spec: SyntheticSpec, names: list[str], rng: random.Random,
                        start: datetime) -> str:
    """A real MLflow run (SQLite store under ASSAY_HOME) with metrics, and its training_history."""
    from storage import tracking

    tracker = tracking.Tracker(lake.mlflow_uri, str(lake.mlflow_artifacts))
    run_id = tracker.start("synth-grpo", params={"recipe": "tiny", "steps": spec.training_steps},
                           tags={"assay.recipe": "tiny"})
    trained = names[: min(4, len(names))]
    rows = []
    for step in range(1, spec.training_steps + 1):
        at = start + timedelta(minutes=step)
        for d in ["_all", *trained]:
            acc = min(1.0, 0.2 + 0.05 * step + rng.uniform(-0.05, 0.05))
            row = {"run_id": run_id, "step": step, "domain": d, "reward_mean": acc,
                   "reward_std": 0.3, "accuracy": acc, "kl": 0.002 * step * (1 + rng.random()),
                   "loss": 0.5 / step, "clip_frac": 0.01, "entropy": 1.5 - 0.03 * step,
                   # per domain too, as the trainer logs it (no rng draw: the other tables stay as they were)
                   "zero_var_frac": max(0.0, 0.6 - 0.04 * step + (0.0 if d == "_all" else 0.05 * trained.index(d))),
                   "tokens_per_s": 40.0 + rng.uniform(-3, 3) if d == "_all" else None,
                   "created_at": _iso(at),
                   # reward-hacking signals, invented figures (no rng draw): the first trained domain's
                   # hedging share climbs (so the training page flags it), the others' stays flat;
                   # only the second domain has prompt copies, paid a little
                   "multi_answer_share": (0.05 * step if d == trained[0] else 0.02),
                   "prompt_copy_share": (0.1 if len(trained) > 1 and d == trained[1] else 0.0),
                   "prompt_copy_reward": (0.25 if len(trained) > 1 and d == trained[1] else None),
                   # a learned reward on the third trained domain, invented figures: it rises while
                   # the verifier falls; the watch judges from step 4 and flags from step 5
                   **({"learned_mean": 0.5 + 0.04 * step, "score_mean": 0.6 - 0.04 * step,
                       "reward_hacking": None if step < 4 else float(step >= 5)}
                      if len(trained) > 2 and d == trained[2] else {})}
            rows.append(row)
            if d == "_all":
                tracker.log_metrics(step, {k: row[k] for k in ("reward_mean", "kl", "accuracy", "zero_var_frac",
                                                                "tokens_per_s")},
                                    timestamp_ms=int(at.timestamp() * 1000))
    _add_validation(rows, run_id, trained, names[len(trained)] if len(names) > len(trained) else None,
                    spec.training_steps, start)
    tracker.finish()
    lake.write_batch("training_history", {"run": run_id}, {"part": _frame(rows, T.TRAINING_HISTORY)})
    return run_id


def _add_validation(rows: list[dict], run_id: str, trained: list[str], watched: str | None, steps: int,
                    start: datetime) -> None:
    """The in-loop validation (training.validation), invented figures, no rng draw: at step 0 and every
    2 steps, the trained domains' held-out scores rise; the one watched domain falls and is flagged for
    forgetting from step 6. A validated domain's row of that step gets the columns; a watched domain,
    and step 0, have rows of their own with only them, as the trainer writes them."""
    by_key = {(row["step"], row["domain"]): row for row in rows}
    for step in range(0, steps + 1, 2):
        for index, domain in enumerate([*trained, *([watched] if watched else [])]):
            is_watched = domain == watched
            first = 0.6 if is_watched else 0.3 + 0.01 * index
            score = first - 0.03 * step if is_watched else first + 0.02 * step
            q = (0.004 if step >= 6 else 0.2) if is_watched else 1.0
            row = by_key.get((step, domain))
            if row is None:
                row = {"run_id": run_id, "step": step, "domain": domain, "created_at": _iso(start + timedelta(minutes=step))}
                rows.append(row)
            row.update({"val_score": score, "val_n": 50.0,
                        **({} if step == 0 else {"val_delta": score - first, "val_p": q / 2, "val_q": q,
                                                  "forgetting": float(is_watched and step >= 6)})})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", required=True, help="ASSAY_HOME to fill (use a scratch folder)")
    parser.add_argument("--domains", type=int, default=SyntheticSpec.domains)
    parser.add_argument("--checkpoints", type=int, default=SyntheticSpec.checkpoints)
    parser.add_argument("--items", type=int, default=SyntheticSpec.items)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    spec = SyntheticSpec(domains=args.domains, checkpoints=args.checkpoints, items=args.items, seed=args.seed)
    home = Path(args.home)
    summary = write_synthetic_lake(home, spec)
    plugin = write_registry_plugin(home / "plugins", spec)
    print(json.dumps({"home": str(home.resolve()), "plugin_folder": str(plugin.parent.resolve()),
                      "champion": summary["champion"], "run_id": summary["run_id"]}))


if __name__ == "__main__":
    main()
