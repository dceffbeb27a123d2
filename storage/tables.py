"""Column contracts of the lake's tables: writers produce exactly these, readers rely on them.

Each table lives at ``lake/<table>/<partition keys>/<file>.parquet`` and is written with
:meth:`storage.lake.Lake.write_batch` (one atomic folder per batch). The DuckDB view name is the
file stem (``part`` -> the table name). Times are ISO-8601 UTC strings. A column that a stage
cannot compute is null, never a made-up number.
"""

from __future__ import annotations

import polars as pl

# ingest/domain=<d>/batch=<b>/{samples,quarantine}.parquet  -- written by quality.ingest
SAMPLES = {
    "domain": pl.Utf8, "split": pl.Utf8, "id": pl.Utf8, "prompt": pl.Utf8, "answer": pl.Utf8,
    "metadata": pl.Utf8, "source": pl.Utf8, "line": pl.Int64, "batch": pl.Utf8,
    "content_hash": pl.Utf8, "ingested_at": pl.Utf8,
}
# ``detail``: why, in words, where a code alone does not say it (e.g. which earlier batch already
# holds a reused id); null otherwise and in batches written before the column existed.
QUARANTINE = {
    "domain": pl.Utf8, "split": pl.Utf8, "id": pl.Utf8, "source": pl.Utf8, "line": pl.Int64,
    "reasons": pl.List(pl.Utf8), "raw": pl.Utf8, "prompt": pl.Utf8, "answer": pl.Utf8,
    "metadata": pl.Utf8, "batch": pl.Utf8, "ingested_at": pl.Utf8, "detail": pl.Utf8,
}

# gate_results/domain=<d>/evaluation=<id>/part.parquet  -- one row per expectation of a gate run
# gate: format | safety | difficulty | selftest; severity: critical | warning | info; message: what
# to do about a failed expectation, in words (null when it passed, has no advice, or in results
# written before the column existed)
GATE_RESULTS = {
    "domain": pl.Utf8, "evaluation": pl.Utf8, "gate": pl.Utf8, "expectation": pl.Utf8,
    "severity": pl.Utf8, "success": pl.Boolean, "observed": pl.Utf8, "threshold": pl.Utf8,
    "rows_checked": pl.Int64, "rows_failed": pl.Int64, "evaluated_at": pl.Utf8,
    "mlflow_run_id": pl.Utf8, "message": pl.Utf8,
}

# gate_batches/domain=<d>/evaluation=<id>/part.parquet  -- the ingest batches (name + ingested_at:
# a batch replaced in place is a new version) one gate evaluation judged; see quality.gate_history
GATE_BATCHES = {
    "domain": pl.Utf8, "evaluation": pl.Utf8, "batch": pl.Utf8, "ingested_at": pl.Utf8,
    "admitted": pl.Int64, "quarantined": pl.Int64, "evaluated_at": pl.Utf8,
}

# difficulty/domain=<d>/evaluation=<id>/part.parquet  -- per admitted train item of the judged batch;
# policy: the checkpoint whose pass rates judged it (null: not a measured pass rate, or written
# before the column existed)
DIFFICULTY = {
    "domain": pl.Utf8, "id": pl.Utf8, "difficulty": pl.Float64, "pass_rate": pl.Float64,
    "k": pl.Int64, "method": pl.Utf8, "in_band": pl.Boolean, "evaluated_at": pl.Utf8, "policy": pl.Utf8,
}

# train_set/domain=<d>/part.parquet  -- the in-band train rows of a domain's accepted batches
# (written by the per-domain `domain_train_set` asset; what GRPO reads). ``evaluation``: the gate
# evaluation it was built after; training uses it only while that is still the domain's latest
# evaluation and it passed (quality.gate_history.train_set_problem). ``difficulty``: from the
# evaluation that accepted the row's batch.
TRAIN_SET = {
    "domain": pl.Utf8, "id": pl.Utf8, "prompt": pl.Utf8, "answer": pl.Utf8, "metadata": pl.Utf8,
    "difficulty": pl.Float64, "evaluation": pl.Utf8, "gated_at": pl.Utf8,
}

# checkpoints/checkpoint=<id>/part.parquet  -- one row per saved policy checkpoint;
# data_fingerprint: the rows its run trained on (training.data; null for base models and rows
# written before the column existed)
CHECKPOINTS = {
    "checkpoint": pl.Utf8, "run_id": pl.Utf8, "step": pl.Int64, "path": pl.Utf8,
    "recipe": pl.Utf8, "base_model": pl.Utf8, "domains": pl.List(pl.Utf8),
    "mlflow_model_id": pl.Utf8, "created_at": pl.Utf8, "data_fingerprint": pl.Utf8,
    "variant_of": pl.Utf8, "variant_method": pl.Utf8,
}

# training_history/run=<mlflow_run_id>/part.parquet  -- one row per (step, domain); domain "_all"
# holds the batch-level numbers. generation_s / sync_s / step_s: seconds of the step's rollouts,
# of loading the policy's weights into the rollout engine, and of the whole step ("_all" rows;
# null on domain rows and in runs written before the columns existed). multi_answer_share /
# prompt_copy_share / prompt_copy_reward: reward-hacking signals (training.hacking_signals): the
# share of rollouts stating more than one candidate answer, the share copying long stretches of
# the prompt and those copiers' mean reward (null when none copied, and in runs written before).
# learned_mean / score_mean: a domain with a learned reward (training.learned_rewards): the reward
# model's mean (sigmoid) reward and the verifier's mean score, the gold signal, on the same rollouts;
# reward_hacking: the proxy over-optimisation watch (training.overoptimisation) at that step, 1.0
# fired (learned rising, verifier falling over the trailing window), 0.0 judged and did not; all
# three null for other domains, before a full window (reward_hacking) and in runs written before.
# In-loop validation (training.validation), at the steps it ran (step 0: the starting policy; a
# validated domain not drawn at that step, or only watched, has a row with these columns alone):
# val_score: the greedy mean score on the domain's held-out validation items; val_delta: its change
# since step 0 on the same items; val_p: the one-sided paired test's p of "below step 0" (exact
# McNemar for binary scores); val_q: its Benjamini-Hochberg q across the validated domains of that
# validation; val_n: the items; forgetting: 1.0 flagged (q <= validation.forgetting_q and a drop), 0.0
# tested and not (val_delta/p/q/forgetting null at step 0). validation_s / remeasure_s ("_all" rows):
# seconds of the validation after this step (step 1's includes step 0's) and of the pass-rate re-measure
# it triggered. All null at steps without a validation and in runs written before the columns existed.
TRAINING_HISTORY = {
    "run_id": pl.Utf8, "step": pl.Int64, "domain": pl.Utf8, "reward_mean": pl.Float64,
    "reward_std": pl.Float64, "accuracy": pl.Float64, "kl": pl.Float64, "loss": pl.Float64,
    "clip_frac": pl.Float64, "entropy": pl.Float64, "zero_var_frac": pl.Float64,
    "tokens_per_s": pl.Float64, "created_at": pl.Utf8, "generation_s": pl.Float64, "sync_s": pl.Float64,
    "step_s": pl.Float64, "multi_answer_share": pl.Float64, "prompt_copy_share": pl.Float64,
    "prompt_copy_reward": pl.Float64, "learned_mean": pl.Float64, "score_mean": pl.Float64,
    "reward_hacking": pl.Float64, "val_score": pl.Float64, "val_delta": pl.Float64, "val_p": pl.Float64,
    "val_q": pl.Float64, "val_n": pl.Float64, "forgetting": pl.Float64, "validation_s": pl.Float64,
    "remeasure_s": pl.Float64,
}

# results/checkpoint=<c>/domain=<d>/batch=<b>/part.parquet  -- one row per scored sample
# gen_config: hash of the generation config; gen_params: the same config as readable JSON
# (sampling parameters and prompt format; null in data written before it was recorded);
# engine: what generated the sample, e.g. "vllm-0.32.0/bfloat16" (provenance only, not part of
# gen_config: evaluation.sweep says why; null in data written before it was recorded)
RESULTS = {
    "checkpoint": pl.Utf8, "domain": pl.Utf8, "item_id": pl.Utf8, "sample_idx": pl.Int64,
    "score": pl.Float64, "completion": pl.Utf8, "latency_s": pl.Float64, "tokens": pl.Int64,
    "cluster_id": pl.Utf8, "gen_config": pl.Utf8, "created_at": pl.Utf8, "gen_params": pl.Utf8,
    "engine": pl.Utf8,
}

# sweep_summary/checkpoint=<c>/domain=<d>/part.parquet  -- one row per (checkpoint, domain): the
# latest sweep (gen_params as in RESULTS)
SWEEP_SUMMARY = {
    "checkpoint": pl.Utf8, "domain": pl.Utf8, "n": pl.Int64, "k": pl.Int64, "mean": pl.Float64,
    "pass1": pl.Float64, "passk": pl.Float64, "stderr": pl.Float64, "ci_low": pl.Float64,
    "ci_high": pl.Float64, "tokens_per_s": pl.Float64, "gen_config": pl.Utf8, "created_at": pl.Utf8,
    "gen_params": pl.Utf8,
}

# pass_rates/checkpoint=<c>/domain=<d>/batch=<b>/part.parquet  -- one row per (policy checkpoint,
# train item, K, generation config): how many of the policy's K seeded samples passed (score == 1,
# as in sweeps). The cache key is (checkpoint, domain, item_id, samples, gen_config); gen_params and
# engine as in RESULTS. Written by evaluation.pass_rates, one batch per computation.
PASS_RATES = {
    "checkpoint": pl.Utf8, "domain": pl.Utf8, "item_id": pl.Utf8, "samples": pl.Int64, "passes": pl.Int64,
    "pass_rate": pl.Float64, "mean_score": pl.Float64, "gen_config": pl.Utf8, "gen_params": pl.Utf8,
    "engine": pl.Utf8, "created_at": pl.Utf8,
}

# policy_difficulty/domain=<d>/part.parquet  -- the domain's current difficulty measurement, replaced
# by each `policy_pass_rates` materialization (evaluation.policy_difficulty): one row per admitted
# train item. estimate: policy | heuristic (then checkpoint, samples, passes, pass_rate, verdict
# and gen_config are null: no policy ran). policy_ref: the policy the settings named (null: follow
# the champion); checkpoint: the policy measured; champion: the champion when measured (null: none);
# verdict: in_band | too_easy | too_hard; settings: the DifficultySettings as JSON.
POLICY_DIFFICULTY = {
    "domain": pl.Utf8, "id": pl.Utf8, "estimate": pl.Utf8, "policy_ref": pl.Utf8, "checkpoint": pl.Utf8,
    "samples": pl.Int64, "passes": pl.Int64, "pass_rate": pl.Float64, "verdict": pl.Utf8, "gen_config": pl.Utf8,
    "champion": pl.Utf8, "settings": pl.Utf8, "measured_at": pl.Utf8,
}

# regression/candidate=<c>/baseline=<b>/part.parquet  -- one row per domain of one comparison
# verdict: ok | warn | regression | underpowered | not_comparable. underpowered: the domain's test
# cannot reject at alpha (mde is then null: infinite); p_min: the smallest p it can produce.
# not_comparable: swept under different generation configs, not tested (statistics null, the
# difference in ``detail``). gen_config: the config both sides were compared on (null: unrecorded).
REGRESSION = {
    "candidate": pl.Utf8, "baseline": pl.Utf8, "domain": pl.Utf8, "n": pl.Int64, "k": pl.Int64,
    "delta": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64, "p": pl.Float64,
    "q": pl.Float64, "mde": pl.Float64, "verdict": pl.Utf8, "protected": pl.Boolean,
    "items_lost": pl.Int64, "items_gained": pl.Int64, "test": pl.Utf8, "created_at": pl.Utf8,
    "underpowered": pl.Boolean, "p_min": pl.Float64, "gen_config": pl.Utf8, "detail": pl.Utf8,
}

# promotions/decision=<id>/part.parquet  -- every promote/refuse decision and why; previous_champion
# is the champion the candidate was compared with; policy: the promotion policy applied (JSON)
PROMOTIONS = {
    "decision": pl.Utf8, "candidate": pl.Utf8, "previous_champion": pl.Utf8, "promoted": pl.Boolean,
    "reason": pl.Utf8, "created_at": pl.Utf8, "policy": pl.Utf8,
}


# variants/decision=<id>/part.parquet  -- every certification of a variant (generation.variants) against
# its parent: speed measured in one run on one machine (tokens/s at batch 1 and at the sweep's batch,
# time to first token, peak resident memory of each side's process), whether every domain was shown
# non-inferior (equivalent), and whether the variant became the ``fast`` alias, with the reasons
VARIANTS = {
    "decision": pl.Utf8, "variant": pl.Utf8, "parent": pl.Utf8, "method": pl.Utf8, "created_at": pl.Utf8,
    "engine": pl.Utf8, "parent_engine": pl.Utf8, "batch": pl.Int64, "new_tokens": pl.Int64,
    "tokens_per_s_batch1": pl.Float64, "parent_tokens_per_s_batch1": pl.Float64, "speedup_batch1": pl.Float64,
    "tokens_per_s_batch": pl.Float64, "parent_tokens_per_s_batch": pl.Float64, "speedup_batch": pl.Float64,
    "ttft_s": pl.Float64, "parent_ttft_s": pl.Float64, "peak_rss_gib": pl.Float64, "parent_peak_rss_gib": pl.Float64,
    "margin": pl.Float64, "min_speedup": pl.Float64, "equivalent": pl.Boolean, "fast_alias": pl.Boolean,
    "reason": pl.Utf8, "load_average": pl.Float64,
}

# variant_domains/decision=<id>/part.parquet  -- one row per domain of a certification: the paired
# non-inferiority test of variant vs parent (evaluation.noninferiority)
VARIANT_DOMAINS = {
    "decision": pl.Utf8, "variant": pl.Utf8, "parent": pl.Utf8, "domain": pl.Utf8, "n": pl.Int64, "k": pl.Int64,
    "margin": pl.Float64, "delta": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
    "p_noninferior": pl.Float64, "p_inferior": pl.Float64, "verdict": pl.Utf8, "test": pl.Utf8,
    "items_for_power": pl.Int64, "created_at": pl.Utf8,
}


# reward_attacks/domain=<d>/run=<r>/part.parquet  -- written by quality.reward_attacks (`assay domains
# attack`, source "cli"; the self-test gate, source "selftest"): one row per (run, domain, hack family).
# paid: items (whose control scored 1.0) where any of the family's candidates scored > 0; mean_score
# over every candidate tried, max_score and example null when nothing was tried / nothing paid.
REWARD_ATTACKS = {
    "run": pl.Utf8, "source": pl.Utf8, "domain": pl.Utf8, "family": pl.Utf8, "items": pl.Int64, "paid": pl.Int64,
    "candidates": pl.Int64, "mean_score": pl.Float64, "max_score": pl.Float64, "example": pl.Utf8,
    "controls_ok": pl.Int64, "controls": pl.Int64, "error": pl.Utf8, "attacked_at": pl.Utf8,
}

# hack_corpus/domain=<d>/run=<r>/part.parquet  -- written by quality.report_card.hack_corpus: one row per
# completion the budgeted hack search (quality.report_card.hack_search) found paid, kept so the self-test
# replays it from then on (check ``hack_corpus``). sample: the item as JSON (id, prompt, answer, metadata),
# re-scored as stored; shape: the chain of hack shapes that built the completion; score: what it was paid
# when found. A hack already kept (same item_id and completion) is not written again.
HACK_CORPUS = {
    "run": pl.Utf8, "source": pl.Utf8, "domain": pl.Utf8, "item_id": pl.Utf8, "sample": pl.Utf8,
    "completion": pl.Utf8, "shape": pl.Utf8, "score": pl.Float64, "found_at": pl.Utf8,
}

# reward_models/reward_model=<id>/part.parquet  -- written by training.reward_model: one row per trained
# learned reward model (a causal LM with a scalar head, Bradley-Terry on preference pairs). path: its
# folder; pairs_fingerprint: the pairs file's content (storage.preference_pairs); shuffled_labels: a
# control run trained on label-shuffled pairs (it must fail its gate); heldout_accuracy: share of
# held-out pairs whose chosen answer it scored higher (ties count as wrong); config: the
# RewardTrainConfig as JSON
REWARD_MODELS = {
    "reward_model": pl.Utf8, "domain": pl.Utf8, "base_model": pl.Utf8, "path": pl.Utf8, "pairs_source": pl.Utf8,
    "pairs_fingerprint": pl.Utf8, "train_pairs": pl.Int64, "heldout_pairs": pl.Int64, "shuffled_labels": pl.Boolean,
    "steps": pl.Int64, "final_loss": pl.Float64, "train_accuracy": pl.Float64, "heldout_accuracy": pl.Float64,
    "train_seconds": pl.Float64, "mlflow_run_id": pl.Utf8, "mlflow_model_id": pl.Utf8, "config": pl.Utf8,
    "created_at": pl.Utf8,
}

# reward_gates/domain=<d>/check=<id>/part.parquet  -- written by quality.reward_gate: one row per criterion
# of one gate check of a learned reward model on labelled pairs. criterion: accuracy | kappa | enough_pairs
# | probe:<family>; observed with its interval (ci_low, ci_high; null where none applies), threshold: the
# bar, passed: whether it held; the check passed when every criterion did. detail: why, in words.
# gate_config: the whole bar the check ran under (JSON of RewardGateConfig; null in checks made before it
# was recorded), what GRPO compares with the domain's declared bar.
REWARD_GATES = {
    "check": pl.Utf8, "domain": pl.Utf8, "reward_model": pl.Utf8, "criterion": pl.Utf8, "observed": pl.Float64,
    "ci_low": pl.Float64, "ci_high": pl.Float64, "threshold": pl.Float64, "passed": pl.Boolean, "n": pl.Int64,
    "detail": pl.Utf8, "pairs_source": pl.Utf8, "pairs_fingerprint": pl.Utf8, "mlflow_run_id": pl.Utf8,
    "checked_at": pl.Utf8, "gate_config": pl.Utf8,
}

# reward_sweeps/domain=<d>/check=<id>/part.parquet  -- written with each reward_gates check: one row per
# labelled pair, the reward model's scores of its chosen and rejected answers; correct = 1.0 when it
# preferred the chosen one (a tie is no preference: 0.0). What a reward model's regression test pairs on.
REWARD_SWEEPS = {
    "check": pl.Utf8, "domain": pl.Utf8, "reward_model": pl.Utf8, "pair_id": pl.Utf8, "chosen_score": pl.Float64,
    "rejected_score": pl.Float64, "correct": pl.Float64, "pairs_fingerprint": pl.Utf8, "checked_at": pl.Utf8,
}

# reward_promotions/domain=<d>/decision=<id>/part.parquet  -- one row per `assay reward promote`: the
# candidate, the champion it was compared with, whether it became the domain's champion, and why.
REWARD_PROMOTIONS = {
    "decision": pl.Utf8, "domain": pl.Utf8, "candidate": pl.Utf8, "previous_champion": pl.Utf8,
    "promoted": pl.Boolean, "reason": pl.Utf8, "delta": pl.Float64, "ci_low": pl.Float64, "ci_high": pl.Float64,
    "p": pl.Float64, "pairs": pl.Int64, "decided_at": pl.Utf8,
}

# report_cards/domain=<d>/run=<r>/part.parquet  -- written by quality.report_card.card (`assay domains
# report`, source "cli"; the nightly asset, source "dagster"): one row per (run, domain), the environment
# report card. passed: null for a domain with no verifier (``skipped`` says why). oracle_pass: share of
# items whose reference scored 1.0; nop_paid: share where a do-nothing completion scored > 0; recall with
# its Wilson interval over recall_candidates equivalent correct answers, recall_bar the domain's bar;
# fixed_families(_paid): reward_attacks families tried (paid); hack_search_tried/_paid: candidates the
# budgeted search scored / paid completions it found; mutants/kill_rate/weak_items: hidden-test strength
# (null: the domain has no hidden tests); audited_*: the newest labelled audit's rates (null: none);
# difficulty_band .. contaminated: what the gates know (null: not in the lake). failures block the
# domain's train set, warnings do not; evidence: JSON of the examples behind each figure.
REPORT_CARDS = {
    "run": pl.Utf8, "source": pl.Utf8, "domain": pl.Utf8, "passed": pl.Boolean, "failures": pl.List(pl.Utf8),
    "warnings": pl.List(pl.Utf8), "skipped": pl.Utf8, "items": pl.Int64, "oracle_pass": pl.Float64,
    "nop_paid": pl.Float64, "recall": pl.Float64, "recall_low": pl.Float64, "recall_high": pl.Float64,
    "recall_candidates": pl.Int64, "recall_bar": pl.Float64, "worst_family": pl.Utf8,
    "worst_family_recall": pl.Float64, "fixed_families": pl.Int64, "fixed_families_paid": pl.Int64,
    "hack_search_tried": pl.Int64, "hack_search_paid": pl.Int64, "mutants": pl.Int64, "kill_rate": pl.Float64,
    "weak_items": pl.Int64, "audited_labels": pl.Int64, "audited_fp": pl.Float64, "audited_fp_low": pl.Float64,
    "audited_fp_high": pl.Float64, "audited_fn": pl.Float64, "audited_fn_low": pl.Float64,
    "audited_fn_high": pl.Float64, "difficulty_band": pl.Utf8, "in_band_share": pl.Float64,
    "quarantine_share": pl.Float64, "contaminated": pl.Int64, "evidence": pl.Utf8, "seconds": pl.Float64,
    "created_at": pl.Utf8,
}

# verifier_audits/domain=<d>/audit=<a>/part.parquet  -- written by quality.report_card.audit (`assay domains
# audit DOMAIN --labels FILE`): one row per completion a person labelled. stratum: unpaid_states_reference |
# paid_without_reference | random; stratum_size: how many of the sweep's completions that stratum held;
# paid: score >= the pass score; label: correct | incorrect | unsure.
VERIFIER_AUDITS = {
    "audit": pl.Utf8, "domain": pl.Utf8, "checkpoint": pl.Utf8, "item_id": pl.Utf8, "sample_idx": pl.Int64,
    "stratum": pl.Utf8, "stratum_size": pl.Int64, "score": pl.Float64, "paid": pl.Boolean, "label": pl.Utf8,
    "note": pl.Utf8, "completion": pl.Utf8, "reference": pl.Utf8, "labelled_at": pl.Utf8,
}


def empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def conform(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """Select and cast ``frame`` to ``schema``; a missing column becomes nulls of its type."""
    if not frame.columns:  # (selecting literals alone from a frame with no columns would make one null row)
        return pl.DataFrame(schema=schema)
    return frame.select([
        (pl.col(name).cast(dtype) if name in frame.columns else pl.lit(None, dtype=dtype)).alias(name)
        for name, dtype in schema.items()
    ])
