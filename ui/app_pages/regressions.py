"""Regressions: the latest comparison of a candidate against the champion, domain by domain, and
the promotion policy that decides what blocks."""

from __future__ import annotations

import polars as pl
import streamlit as st

from ui import charts, components, data

st.title("Regressions")
home = data.current_home()
registry = data.registry_frame()
report = data.regressions(home)
listing = report["comparisons"]
if not listing.height:
    components.empty_state("No regression report yet.", "assay regress")
    st.stop()

labels = {(r["candidate"], r["baseline"]): f"{r['candidate']} vs {r['baseline']} · {r['created_at']} · "
          f"{r['regressions']} regression(s)" for r in listing.iter_rows(named=True)}
by_label = {label: key for key, label in labels.items()}
key = by_label[st.selectbox("Comparison (newest first)", list(by_label), key="regressions_pick")]
candidate, baseline = key
rows = report["rows"][key]
names = components.filtered_domains(registry, rows["domain"].to_list())
rows = rows.filter(pl.col("domain").is_in(names))

decision = report["decisions"].get(candidate)
cols = st.columns(6)
cols[0].metric("Domains compared", rows.filter(pl.col("verdict") != "not_comparable").height)
cols[1].metric("Regressions", rows.filter(pl.col("verdict") == "regression").height)
cols[2].metric("Warnings", rows.filter(pl.col("verdict") == "warn").height)
cols[3].metric("Protected regressions", rows.filter((pl.col("verdict") == "regression") & pl.col("protected")).height,
               help="a regression on a protected domain blocks promotion")
cols[4].metric("Underpowered", rows.filter(pl.col("verdict") == "underpowered").height,
               help="the domain's test cannot reject at alpha whatever the scores (too few items or clusters): "
                    "its MDE is infinite; on a protected domain the policy decides whether that blocks")
cols[5].metric("Not comparable", rows.filter(pl.col("verdict") == "not_comparable").height,
               help="swept under different generation configs on the two sides: not compared (see 'detail')")
if decision:
    text = (f"Promotion of **{candidate}**: {'promoted' if decision['promoted'] else 'refused'} — "
            f"{decision['reason']} ({decision['created_at']})")
    (st.success if decision["promoted"] else st.error)(text)
else:
    st.caption(f"No promotion decision recorded for {candidate} yet.")
champion = data.champion(home)
st.caption(f"Champion now: **{champion['name'] or 'none'}**. *protected* marks domains whose regression blocks "
           "promotion. Click a column header to sort.")
components.champion_warning(champion)

policy = data.promotion_policy(home)
with st.expander("Promotion policy", expanded=False):
    if "error" in policy:
        st.error(policy["error"])
    else:
        st.markdown("\n".join(f"- {line}" for line in policy["lines"]))
        st.caption("One file decides: $ASSAY_HOME/promotion.yaml (copy the shipped "
                   "evaluation/promotion_policy.yaml there and edit it).")

VERDICT_CHOICES = ["regression", "warn", "not_comparable", "underpowered", "ok"]
verdicts = st.multiselect("Verdicts", VERDICT_CHOICES, default=VERDICT_CHOICES, key="regressions_verdicts")
rows = rows.filter(pl.col("verdict").is_in(verdicts))
owners = registry.select("domain", "owner") if registry.height else pl.DataFrame(schema={"domain": pl.Utf8, "owner": pl.Utf8})
table = rows.join(owners, on="domain", how="left").with_columns(
    pl.when(pl.col("protected")).then(pl.lit("protected")).otherwise(pl.lit("")).alias("protected"),
    (pl.col("delta") * 100).round(2).alias("Δ (pts)"),
    (pl.col("ci_low") * 100).round(2).alias("CI low (pts)"),
    (pl.col("ci_high") * 100).round(2).alias("CI high (pts)"),
    # an underpowered test detects no drop at all: its MDE is infinite, not unknown
    pl.when(pl.col("underpowered").fill_null(False)).then(float("inf"))
    .otherwise((pl.col("mde") * 100).round(2)).alias("MDE (pts)"),
    pl.col("verdict").replace_strict({v: i for i, v in enumerate(VERDICT_CHOICES)}, default=len(VERDICT_CHOICES))
    .alias("_rank"),
).sort(["_rank", "q", "domain"], nulls_last=True).select(
    "domain", "protected", "verdict", "Δ (pts)", "CI low (pts)", "CI high (pts)", "p", "q", "MDE (pts)",
    "items_lost", "items_gained", "n", "k", "owner", "test", "detail")
st.dataframe(table.to_pandas(), hide_index=True, width="stretch",
             column_config={"p": st.column_config.NumberColumn("p", format="%.4f"),
                            "q": st.column_config.NumberColumn("q (BH)", format="%.4f"),
                            "detail": st.column_config.TextColumn(
                                "detail", help="why a domain is not comparable (baseline vs candidate)")})
if rows.height:
    st.altair_chart(charts.regression_forest(rows), width="stretch")
