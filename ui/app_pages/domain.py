"""Domain: the owner's page. Is my data healthy, did the last model get better or worse here, why."""

from __future__ import annotations

import json

import polars as pl
import streamlit as st

from ui import charts, components, data, queries, transcripts

MAX_TRANSCRIPTS = 20  # expanders drawn below the lost/gained table (each holds two episodes)


def gate_estimate_caption(difficulty: pl.DataFrame) -> str:
    """Which estimate the gate's latest difficulty evaluation used: the policy's pass rate or a stand-in."""
    names = {"policy_pass_rate": "the policy's pass rate", "metadata": "the items' own metadata difficulty",
             "heuristic": "the text heuristic (no policy run)"}
    methods = queries.difficulty_methods(difficulty)
    k = difficulty.filter(pl.col("method") == "policy_pass_rate")["k"].drop_nulls()
    parts = [f"{names.get(m, m)}{f' (K = {int(k.max())})' if m == 'policy_pass_rate' and k.len() else ''}: {n} items"
             for m, n in methods.items()]
    return "Gate's difficulty estimate: " + "; ".join(parts) + "."


def sampling_summary(gen_params: str | None) -> str:
    """The sampling knobs of a generation config's JSON (``evaluation.sweep.generation_config``)."""
    try:
        params = json.loads(gen_params or "")
    except ValueError:
        return gen_params or "—"
    keys = ("temperature", "top_p", "max_new_tokens")
    return ", ".join(f"{k} {params[k]}" for k in keys if k in params) or "—"


home = data.current_home()
registry = data.registry_frame()
with_data = data.domains_in_lake(home)
known = sorted(set(with_data) | set(registry["domain"].to_list() if registry.height else []))
choices = components.filtered_domains(registry, known) or known

st.title("Domain")
if not known:
    components.empty_state("No domains yet: the registry is empty and the lake has no data.")
    st.stop()

wanted = st.query_params.get("domain")
if wanted not in choices:  # no (or an unknown) domain in the URL: the first one that has data
    wanted = next((name for name in choices if name in with_data), choices[0])
index = choices.index(wanted)
domain = st.selectbox("Domain", choices, index=index, key="domain_choice")
st.query_params["domain"] = domain

info = registry.filter(pl.col("domain") == domain) if registry.height else pl.DataFrame()
if info.height:
    row = info.row(0, named=True)
    st.caption(f"Owner **{row['owner']}** · tags {', '.join(row['tags']) or '—'}"
               f"{' · :material/lock: protected' if row['protected'] else ''} · {row['description']}")
else:
    st.caption("This domain has data in the lake but is not in the registry (no owner known).")

detail = data.domain_detail(home, domain)

# -- did the last model get better or worse here ---------------------------------------------------
st.header("Latest regression verdict")
verdict = detail["verdict"]
if verdict is None:
    components.empty_state("No regression report covers this domain yet.")
else:
    cols = st.columns(5)
    label = {"ok": "OK", "warn": "WARN", "regression": "REGRESSION", "underpowered": "UNDERPOWERED",
             "not_comparable": "NOT COMPARABLE"}.get(verdict["verdict"], verdict["verdict"])
    cols[0].metric("Verdict", label)
    cols[1].metric("Δ score", components.pts(verdict["delta"]),
                   help=f"95% CI {components.pts(verdict['ci_low'])} to {components.pts(verdict['ci_high'])}")
    if verdict.get("underpowered"):
        cols[2].metric("MDE", "∞", help="the test cannot reject at alpha whatever the scores (smallest attainable "
                                        f"p {verdict['p_min']:.3g}): no drop is detectable; sweep more items")
    else:
        cols[2].metric("MDE", components.pts(verdict["mde"], signed=False),
                       help="minimum detectable effect of this comparison (80% power)")
    cols[3].metric("q (BH)", f"{verdict['q']:.3f}" if verdict["q"] is not None else "n/a",
                   help=f"p = {verdict['p']:.4f}" if verdict["p"] is not None else None)
    cols[4].metric("Items lost / gained", f"{verdict['items_lost']} / {verdict['items_gained']}")
    if verdict["verdict"] == "not_comparable":
        st.warning(f"**{verdict['candidate']}** and **{verdict['baseline']}** were swept on this domain under "
                   f"different generation configs, so they were not compared: {verdict['detail']} "
                   "(baseline vs candidate).")
    st.caption(f"**{verdict['candidate']}** vs champion **{verdict['baseline']}** · {verdict['test']} test · "
               f"n = {verdict['n']} items × k = {verdict['k']} samples · CI "
               f"{components.pts(verdict['ci_low'])} to {components.pts(verdict['ci_high'])}"
               f"{' · :material/lock: protected: a regression here blocks promotion' if verdict['protected'] else ''}")

trend = detail["trend"]
if trend.height:
    st.altair_chart(charts.score_trend(trend, data.champion(home)["name"]), width="stretch")
else:
    components.empty_state("No benchmark sweep has scored this domain yet.")

buckets = data.length_siblings(registry, domain)
if buckets.height:  # a long-context domain: its family's score by length bucket, per checkpoint
    st.subheader("Score by context length")
    by_length = data.score_by_length(home, tuple(buckets.iter_rows()))
    if by_length.height:
        st.altair_chart(charts.score_vs_length(by_length, data.champion(home)["name"]), width="stretch")
        st.caption(f"{', '.join(buckets['domain'].to_list())}: each checkpoint's latest sweep per bucket; "
                   "a bucket a checkpoint was not swept on is missing from its line.")
    else:
        components.empty_state(f"No sweep has scored the {domain.rsplit('_', 1)[0]} buckets yet.")

st.subheader("Items lost and gained")
items = detail["items"]
if verdict is None or not items.height:
    st.caption("Per-item results of the latest comparison are not in the lake (sweeps write them to `results`).")
else:
    changed = items.filter(pl.col("change") != "same")
    show = st.radio("Show", ("lost", "gained", "all changed"), horizontal=True, key="domain_items_show")
    picked = changed if show == "all changed" else changed.filter(pl.col("change") == show)
    st.caption(f"{items.filter(pl.col('change') == 'lost').height} lost, "
               f"{items.filter(pl.col('change') == 'gained').height} gained of {items.height} items "
               f"(solved = mean score ≥ 50% over the k samples); completions side by side.")
    episodes = picked.height and transcripts.is_transcript_column(
        picked["baseline_completion"].to_list() + picked["candidate_completion"].to_list())
    if episodes:  # a terminal domain: each completion is an episode's transcript (JSON in the lake)
        shown = picked.head(MAX_TRANSCRIPTS)
        picked = picked.with_columns(
            pl.col("baseline_completion").map_elements(transcripts.summary, return_dtype=pl.Utf8),
            pl.col("candidate_completion").map_elements(transcripts.summary, return_dtype=pl.Utf8))
    if picked.height:
        st.dataframe(
            picked.select("item_id", "change", "prompt", "answer", "baseline_completion", "candidate_completion",
                          "baseline_score", "candidate_score").to_pandas(),
            hide_index=True, width="stretch",
            column_config={
                "baseline_completion": st.column_config.TextColumn(f"champion ({verdict['baseline']})", width="large"),
                "candidate_completion": st.column_config.TextColumn(f"candidate ({verdict['candidate']})",
                                                                    width="large"),
                "baseline_score": st.column_config.NumberColumn("champion score", format="%.2f"),
                "candidate_score": st.column_config.NumberColumn("candidate score", format="%.2f"),
            })
    else:
        st.caption(f"No {show} items.")
    if episodes:
        st.caption(f"Transcripts of the first {shown.height} item(s): every command, its exit code and output, "
                   "then the hidden tests' verdict.")
        for row in shown.iter_rows(named=True):
            with st.expander(f"{row['item_id']} ({row['change']})"):
                left, right = st.columns(2)
                left.markdown(f"**champion** ({verdict['baseline']})\n\n" + transcripts.markdown(row["baseline_completion"]))
                right.markdown(f"**candidate** ({verdict['candidate']})\n\n" + transcripts.markdown(row["candidate_completion"]))

# -- is my data healthy ---------------------------------------------------------------------------
st.header("Data quality")
gates, ingest = detail["gates"], detail["ingest"]
if ingest.height:
    admitted, quarantined = int(ingest["admitted"].sum()), int(ingest["quarantined"].sum())
    cols = st.columns(3)
    cols[0].metric("Rows admitted", admitted)
    cols[1].metric("Rows quarantined", quarantined)
    cols[2].metric("Admitted share", components.pct(admitted / max(1, admitted + quarantined)))
if gates.height:
    st.altair_chart(charts.gate_pass_rates(gates), width="stretch")
    failed = detail["failed"]
    if failed.height:
        st.warning(f"{failed.height} expectation(s) failed in the latest gate evaluation")
        st.dataframe(failed.to_pandas(), hide_index=True, width="stretch")
    else:
        st.success("Every expectation passed in the latest gate evaluation.")
else:
    components.empty_state("No gate results for this domain yet.")

left, right = st.columns(2)
with left:
    reasons = detail["reasons"]
    if reasons.height:
        st.altair_chart(charts.quarantine_reasons(reasons), width="stretch")
    else:
        st.caption("No quarantined rows for this domain." if ingest.height
                   else "Nothing ingested for this domain yet (`make demo`).")
with right:
    difficulty = detail["difficulty"]
    if difficulty.height:
        st.altair_chart(charts.difficulty_histogram(difficulty), width="stretch")
        st.caption(gate_estimate_caption(difficulty))
    else:
        st.caption("No difficulty evaluation for this domain yet (the difficulty gate writes it; `make demo`).")

# -- can its reward be earned without the work ----------------------------------------------------
st.subheader("Reward attacks")
attacks = detail["attacks"]
if attacks.height:
    paid = attacks.filter(pl.col("paid") > 0)
    when = attacks["attacked_at"][0][:16].replace("T", " ")
    controls = f"{attacks['controls_ok'][0]}/{attacks['controls'][0]} reference answers scored 1.0"
    if paid.height:
        st.error(f"{paid.height} hack famil{'y' if paid.height == 1 else 'ies'} earned reward without the work "
                 f"(run {attacks['run'][0]}, {when}; {controls}). A policy under RL will find them.")
    elif attacks["controls_ok"][0] < attacks["controls"][0]:
        st.warning(f"Nothing paid, but only {controls}: an item whose reference fails proves nothing.")
    else:
        st.success(f"No hack family earned reward in the latest attack ({attacks.height} families, {when}; {controls}).")
    st.dataframe(attacks.select("family", "paid", "items", "mean_score", "max_score", "example").to_pandas(),
                 hide_index=True, width="stretch")
else:
    st.caption(f"No reward attack recorded for this domain yet: `assay domains attack {domain}` tries generic "
               "hacks (sprays, two-answer hedges, echoes, fig-leaf refusals...) against its scorer.")

# -- a learned reward: gated before GRPO trains on it (issue 31) -----------------------------------
facts = registry.filter(pl.col("domain") == domain) if registry.height else registry
declared = facts["learned_reward"][0] if facts.height else None
has_verifier = bool(facts["verifier"][0]) if facts.height else True
gate = detail["reward_gate"]
if declared is not None or gate.height:
    st.subheader("Learned reward")
    if declared is not None:
        st.caption(f"Declares a learned reward (reward_model={declared})"
                   + ("" if has_verifier else "; no verifier: the reward model is its whole reward, so it is "
                                              "not swept and training logs no accuracy for it") + ".")
    if not gate.height:
        st.warning(f"Its reward model has never been checked: GRPO refuses to train on {domain} until "
                   f"`assay reward check {domain}` passes.")
    else:
        failed = gate.filter(~pl.col("passed"))
        when = gate["checked_at"][0][:16].replace("T", " ")
        what = f"reward model {gate['reward_model'][0]}, check {gate['check'][0]}, {when}, {gate['n'][0]} pairs"
        if failed.height:
            st.error(f"Its learned reward FAILED its gate ({what}): training on {domain} is blocked. Failed: "
                     + ", ".join(failed["criterion"].to_list()) + ". "
                     + "; ".join(f"{r['criterion']}: {r['detail']}" for r in failed.head(2).iter_rows(named=True)))
        elif shortfall := data.reward_bar_shortfall(domain, gate):
            st.error(f"Its learned reward passed a gate laxer than {domain}'s declared bar ({what}): training on "
                     f"{domain} is blocked until `assay reward check {domain}` passes at that bar. Laxer: "
                     + "; ".join(shortfall) + ".")
        else:
            st.success(f"Its learned reward passed its gate at the domain's bar ({what}).")
        st.dataframe(gate.select("criterion", "observed", "ci_low", "ci_high", "threshold", "passed", "detail").to_pandas(),
                     hide_index=True, width="stretch")

# -- difficulty measured on the policy (issue 13) -------------------------------------------------
st.subheader("Difficulty measured on the policy")
champion_name = data.champion(home)["name"]
measured = data.pass_rate_view(home, domain, champion_name)
per_checkpoint = measured["checkpoints"]
low, high = measured["band"]
if not per_checkpoint.height:
    st.info(f"No policy has been measured on the train items of {domain} yet. Run "
            f"`assay difficulty {domain} --policy champion` (K samples per item of the champion, cached in "
            "the lake), then press *Reload data* in the sidebar.")
else:
    st.caption(f"Per train item, the share of K seeded samples of a policy that pass (lake table `pass_rates`). "
               f"Band of this domain: difficulty {low:.2f}-{high:.2f} (pass rate {1 - high:.0%}-{1 - low:.0%}); "
               "items whose K samples all pass or all fail carry no GRPO signal and are out of band. Current "
               f"champion: **{champion_name or 'none (the base policy serves)'}**.")
    if per_checkpoint["gen_config"].n_unique() > 1 or per_checkpoint["samples"].n_unique() > 1:
        st.warning("These checkpoints were measured under different K or generation configs: compare their "
                   "histograms with care (the table says which).")
    minute = lambda c: pl.col(c).str.slice(0, 16).str.replace("T", " ")  # noqa: E731  (UTC timestamps)
    st.table(per_checkpoint.select(
        pl.col("label").alias("checkpoint"), minute("champion_since").fill_null("—").alias("champion since"),
        "items", pl.col("samples").alias("K"),
        *[pl.format("{}%", (pl.col(c) * 100).round(1)).alias(name) for c, name in (
            ("mean_pass_rate", "mean pass rate"), ("in_band_share", "in band"), ("too_easy_share", "too easy"),
            ("too_hard_share", "too hard"))],
        pl.col("gen_config").alias("gen config"),
        pl.col("gen_params").map_elements(sampling_summary, return_dtype=pl.Utf8).fill_null("—").alias("sampling"),
        "engine", minute("measured_at").alias("measured (UTC)"),
    ).to_pandas().set_index("checkpoint"))
    if per_checkpoint.height > 1:
        st.altair_chart(charts.pass_rate_moves(per_checkpoint), width="stretch")
    else:
        st.caption("One checkpoint measured: measure another (e.g. the next champion) to see how it moves.")
    st.altair_chart(charts.pass_rate_histograms(measured["items"], per_checkpoint))

quarantined_rows = detail["quarantined"]
if quarantined_rows.height:
    st.subheader("Quarantined rows (newest)")
    st.dataframe(quarantined_rows.to_pandas(), hide_index=True, width="stretch")
