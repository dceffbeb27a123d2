"""Domain: the owner's page. Is my data healthy, did the last model get better or worse here, why."""

from __future__ import annotations

import polars as pl
import streamlit as st

from ui import charts, components, data

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
    else:
        st.caption("No difficulty evaluation for this domain yet (the difficulty gate writes it; `make demo`).")

quarantined_rows = detail["quarantined"]
if quarantined_rows.height:
    st.subheader("Quarantined rows (newest)")
    st.dataframe(quarantined_rows.to_pandas(), hide_index=True, width="stretch")
