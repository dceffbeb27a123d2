"""Training: how a GRPO run learned, per domain, with a link to its MLflow run."""

from __future__ import annotations

import polars as pl
import streamlit as st

from storage import tracking
from ui import charts, components, data
from ui import queries as Q

st.title("Training")
home = data.current_home()
runs_view = data.training(home)
runs = runs_view["runs"]
if not runs.height:
    components.empty_state("No training history in the lake yet.", "assay train")
    st.stop()

labels = {r["run_id"]: f"{r['run_id'][:12]} · {r['steps']} steps · last {r['last_at']}"
          for r in runs.iter_rows(named=True)}
run_id = st.selectbox("Run", list(labels), format_func=labels.get, key="training_run")
curves = runs_view["curves"][run_id]

run = data.mlflow_run(home, run_id)
if "error" in run:
    st.warning(run["error"])
else:
    st.markdown(f"MLflow run **{run['name']}** ({run['status'].lower()}, started {run['start']}): "
                f"[open in MLflow]({run['url']})")
    st.caption(f"Link target: `mlflow ui --backend-store-uri {data.mlflow_ui_store(home)}` serving at "
               f"{run['url'].split('/#')[0]} (set {tracking.MLFLOW_UI_ENV} to change it)")

domains = sorted(d for d in curves["domain"].unique().to_list() if d != "_all")
batch = curves.filter(pl.col("domain") == "_all").with_columns(pl.lit("all domains").alias("domain"))
if not batch.height:  # no batch-level rows: average the domains
    batch = (curves.group_by("step").agg(pl.col("kl", "zero_var_frac", "tokens_per_s").mean())
             .with_columns(pl.lit("mean of domains").alias("domain")).sort("step"))

cols = st.columns(5)
cols[0].metric("Steps", int(curves["step"].max()))
last = batch.drop_nulls("zero_var_frac").tail(1)
cols[1].metric("Zero-variance groups (last step)",
               components.pct(last["zero_var_frac"][0]) if last.height else "n/a",
               help="share of prompt groups whose samples all got the same reward (no GRPO signal)")
speed = batch["tokens_per_s"].drop_nulls()
cols[2].metric("Tokens/s (median)", f"{speed.median():.1f}" if speed.len() else "n/a")
trained_domains = curves.filter((pl.col("domain") != "_all") & pl.col("reward_mean").is_not_null())["domain"].unique()
cols[3].metric("Domains trained", trained_domains.len())
validated_domains = curves.filter((pl.col("domain") != "_all") & pl.col("val_score").is_not_null())["domain"].unique()
cols[4].metric("Domains validated", validated_domains.len() if validated_domains.len() else "none",
               help="trained and watched domains whose held-out items the policy answered during training "
                    "(recipe validation: section; none in runs recorded before it)")

chosen = st.multiselect("Domains", domains, default=domains[:8], key="training_domains")
per_domain = curves.filter(pl.col("domain").is_in(chosen)) if chosen else curves.filter(pl.col("domain") != "_all")
trained = per_domain.filter(pl.col("reward_mean").is_not_null())  # rows of steps a domain was drawn at
validated = per_domain.filter(pl.col("val_score").is_not_null())  # rows of the in-loop validations


def with_total(metric: str) -> pl.DataFrame:
    """The chosen domains' curves of ``metric`` plus the batch total as one more line ("all domains")."""
    mine = per_domain.filter(pl.col(metric).is_not_null())
    total = batch.filter(pl.col(metric).is_not_null())
    return pl.concat([mine.select("step", "domain", metric), total.select("step", "domain", metric)])


# the train reward and, beside it, the held-out validation (what the sweep will measure), then the rest
panels = [charts.training_curve(trained, "reward_mean", "Mean reward per domain (train)", "reward (0-1)")]
if validated.height:
    panels.append(charts.training_curve(validated, "val_score", "Held-out validation score",
                                        "score (0-1)", points=True))
panels.append(charts.training_curve(trained, "accuracy", "Accuracy per domain", "correct (fraction)"))
kl = with_total("kl")
if kl.height:
    panels.append(charts.training_curve(kl, "kl", "KL to reference per domain", "KL (nats/token)"))
zero_var = with_total("zero_var_frac")
if zero_var.height:
    panels.append(charts.training_curve(zero_var, "zero_var_frac", "Zero-variance groups per domain",
                                        "groups (fraction)"))
for start in range(0, len(panels), 2):
    for column, chart in zip(st.columns(2), panels[start:start + 2]):
        column.altair_chart(chart, width="stretch")
if speed.len():
    st.altair_chart(charts.training_curve(batch, "tokens_per_s", "Throughput of completion tokens", "throughput (tokens/s)"),
                    width="stretch")

tags = run.get("tags", {}) if "error" not in run else {}
stopped_for = set(tags.get("assay.stopped", "").split(","))
if validated.height:
    st.subheader("Forgetting")
    st.caption("At step 0 and every validation.eval_every steps the policy answers a fixed slice of held-out items of "
               "every trained and watched domain (the protected ones unless the recipe lists them), greedy, through "
               "the rollout engine; each domain is tested against its step-0 score on the same items (one-sided "
               "paired test, exact McNemar for pass/fail scores, Benjamini-Hochberg across the validated domains). "
               "A domain significantly below step 0 is flagged: validation.forgetting warns, stops the run or "
               "reweights the mixture (training.validation).")
    if "forgetting" in stopped_for:
        st.error(f"This run was stopped after step {tags.get('assay.stopped_step', '?')} for forgetting "
                 "(validation.forgetting: stop); that step's checkpoint is saved. "
                 f"{tags.get('assay.stop_reason', '')}")
    forgotten = Q.forgotten_domains(curves)
    for row in forgotten.iter_rows(named=True):
        now = "still flagged at the last validation" if row["flagged_now"] else "recovered by the last validation"
        st.warning(f"{row['domain']}: forgetting flagged at {row['flagged_steps']} of {row['judged_steps']} "
                   f"validations, first at step {row['first_step']}, last at step {row['last_step']} ({now}): "
                   f"held-out score {row['start']:.3f} at step 0, {row['latest']:.3f} at the last validation "
                   f"(change {row['delta']:+.3f} at its last flag, BH q {row['q']:.3g}); sweep the checkpoints and "
                   "run the regression report before using them.")
    if not forgotten.height:
        st.caption("No validated domain fell significantly below its step-0 score in this run.")

st.subheader("Reward-hacking signals")
signals = per_domain.filter(pl.col("multi_answer_share").is_not_null() | pl.col("prompt_copy_share").is_not_null())
if not signals.height:
    st.info("This run recorded no reward-hacking signals (trained before they were logged): "
            "retrain with `assay train` to see them.")
else:
    st.caption("Per domain and step: the share of rollouts that state more than one distinct candidate answer "
               "(answer tags, \\boxed{}, 'Answer:' lines), the share that copy long verbatim stretches of their "
               "prompt (at least half of the completion in shared runs of 8+ words), and the mean reward those "
               "copies earned (absent where none copied). Flagged: a domain whose share's mean over the last "
               f"third of steps exceeds its mean over the first third by more than "
               f"{Q.RISING_SHARE_THRESHOLD * 100:.0f} percentage points.")
    for metric, what in (("multi_answer_share", "rollouts stating more than one answer"),
                         ("prompt_copy_share", "rollouts copying the prompt")):
        rising = Q.rising_shares(curves, metric)
        for row in rising.iter_rows(named=True):
            st.warning(f"{row['domain']}: {what} rose from {components.pct(row['first'])} (first third of "
                       f"{row['steps']} steps) to {components.pct(row['last'])} (last third): the policy may be "
                       "learning to game this domain's reward.")
    left, right = st.columns(2)
    left.altair_chart(charts.training_curve(signals, "multi_answer_share", "Multiple-answer rollouts",
                                            "rollouts (fraction)"), width="stretch")
    right.altair_chart(charts.training_curve(signals, "prompt_copy_share", "Prompt-copying rollouts",
                                             "rollouts (fraction)"), width="stretch")
    copy_reward = signals.filter(pl.col("prompt_copy_reward").is_not_null())
    if copy_reward.height:
        st.altair_chart(charts.training_curve(copy_reward, "prompt_copy_reward", "Reward of prompt copies",
                                              "mean reward (0-1)"), width="stretch")
    else:
        st.caption("No rollout copied its prompt in the chosen domains: no copy reward to show.")

learned = per_domain.filter(pl.col("learned_mean").is_not_null())
if learned.height:
    st.markdown("**Learned reward against the verifier**")
    st.caption("Per domain rewarded by a reward model and step: the reward model's mean reward (sigmoid, 0-1) "
               "and the verifier's mean score on the same rollouts, the gold signal. The trainer flags proxy "
               "over-optimisation when, over its trailing window of steps (recipe reward_hacking_window), the "
               "least-squares slope of the learned reward rises and the verifier's falls, or when, since the run's "
               "first window, the learned reward's mean rose and the verifier's fell, each by at least "
               "reward_hacking_min_change with |t| >= 2 (training.overoptimisation); reward_hacking: stop ends "
               "the run there.")
    if "reward_hacking" in stopped_for:
        st.error(f"This run was stopped after step {tags.get('assay.stopped_step', '?')} for reward hacking "
                 "(reward_hacking: stop); that step's checkpoint is saved. "
                 f"{tags.get('assay.stop_reason', '')}")
    for row in Q.overoptimised_domains(curves).iter_rows(named=True):
        st.warning(f"{row['domain']}: the learned reward rose while the verifier fell (proxy over-optimisation), "
                   f"flagged at {row['flagged_steps']} of {row['judged_steps']} judged steps, first at step "
                   f"{row['first_step']}, last at step {row['last_step']}: the policy may be gaming its reward "
                   "model; sweep the checkpoints before the first flag.")
    pairs = pl.concat([learned.select("step", pl.concat_str(pl.col("domain"), pl.lit(" · learned")).alias("domain"),
                                      pl.col("learned_mean").alias("mean")),
                       learned.filter(pl.col("score_mean").is_not_null())
                       .select("step", pl.concat_str(pl.col("domain"), pl.lit(" · verifier")).alias("domain"),
                               pl.col("score_mean").alias("mean"))])
    st.altair_chart(charts.training_curve(pairs, "mean", "Learned reward and verifier", "mean reward (0-1)"),
                    width="stretch")
