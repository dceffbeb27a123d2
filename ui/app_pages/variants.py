"""Variants: the faster versions of a checkpoint (quantized, GGUF on llama.cpp, speculative
decoding), each certified against its parent: how much faster, measured in one run, and whether
every domain was shown no worse. A team picks the standard or the fast version per use case here."""

from __future__ import annotations

import polars as pl
import streamlit as st

from ui import charts, components, data
from ui.queries import VARIANT_VERDICTS

MAKE_ONE = "assay variant --from CHECKPOINT --method gguf-q4_0 --domains DOMAIN ... --limit 200"

st.title("Variants")
st.markdown(
    "A **variant** is a faster version of a checkpoint (int8/int4 quantization, GGUF on llama.cpp, speculative "
    "decoding), certified against its **parent**: both are timed in the same run on the same machine, and every "
    "domain is tested for **non-inferiority**: the variant may be at most *margin* points worse (default 2). "
    "It takes the **`fast` alias** only when every domain is shown non-inferior **and** it is at least "
    "*min speedup* times (default 2x) faster at batch 1. An **underpowered** domain (too few items to show "
    "either) is no pass: its table says how many items it would need.")
home = data.current_home()
found = data.variants(home)
latest = found["variants"]
if not latest.height:
    st.info(f"No variant certified yet. Make one with `{MAKE_ONE}` (or materialize the `fast_variant` asset), "
            "then press *Reload data* in the sidebar.")
    st.stop()

parents = sorted(set(latest["parent"].to_list()))
chosen = st.multiselect("Parent checkpoint", parents, key="variants_parents", placeholder="all parents")
shown = latest.filter(pl.col("parent").is_in(chosen)) if chosen else latest
domains = found["domains"].filter(pl.col("decision").is_in(shown["decision"].to_list()))
names = components.filtered_domains(data.registry_frame(), sorted(set(domains["domain"].to_list())))
domains = domains.filter(pl.col("domain").is_in(names))

holder = found["fast"]
cols = st.columns(3)
cols[0].metric("Variants", shown.height, help="each variant's newest certification")
cols[1].metric("Equivalent", shown.filter(pl.col("equivalent")).height,
               help="every domain shown non-inferior to the parent at the margin")
cols[2].metric("Fast enough", shown.filter(pl.col("speedup_batch1") >= pl.col("min_speedup")).height,
               help="at least min speedup times the parent's tokens/s at batch 1")
if holder:
    st.markdown(f"The **`fast` alias** was last moved to **{holder['variant']}** (parent {holder['parent']}) on "
                f"{holder['created_at']}; a later refused certification leaves it there.")
else:
    st.markdown("No certification has moved the **`fast` alias** yet: the standard checkpoints serve every use.")
st.caption("Each row is the variant's newest certification; the speedups are the variant's tokens/s over the "
           "parent's, both measured in that run (the load average says how busy the machine was).")

holder_name = holder["variant"] if holder else None
table = shown.with_columns(
    pl.when(pl.col("variant") == pl.lit(holder_name, dtype=pl.Utf8)).then(pl.lit("holds it"))
    .when(pl.col("fast_alias")).then(pl.lit("certified, moved since"))
    .otherwise(pl.lit("no")).alias("fast alias"),
).select("variant", "parent", "method", "speedup_batch1", "speedup_batch", "batch", "ttft_s", "parent_ttft_s",
         "peak_rss_gib", "parent_peak_rss_gib", "equivalent", "fast alias", "load_average", "reason", "created_at")
st.dataframe(table.to_pandas(), hide_index=True, width="stretch", column_config={
    "speedup_batch1": st.column_config.NumberColumn("speedup @ batch 1", format="%.2fx"),
    "speedup_batch": st.column_config.NumberColumn("speedup @ batch", format="%.2fx",
                                                   help="at the sweep's batch (column 'batch', prompts per call)"),
    "ttft_s": st.column_config.NumberColumn("TTFT (s)", format="%.3f", help="time to first token, median"),
    "parent_ttft_s": st.column_config.NumberColumn("parent TTFT (s)", format="%.3f"),
    "peak_rss_gib": st.column_config.NumberColumn("peak memory (GiB)", format="%.2f",
                                                  help="peak resident memory of the process serving the variant"),
    "parent_peak_rss_gib": st.column_config.NumberColumn("parent peak (GiB)", format="%.2f"),
    "load_average": st.column_config.NumberColumn(
        "load average", format="%.2f", help="1-minute load average while timing: a speedup measured on a busy "
                                            "machine is weak evidence"),
    "created_at": st.column_config.TextColumn("certified at"),
})

st.subheader("Speed vs quality")
st.caption("One point per variant and domain: the variant's speedup at batch 1 against the domain's Δ with its "
           "95% CI. A `fast` variant has every point right of the blue dashed line (speedup required) and every "
           "CI above the red one (-margin).")
if domains.height:
    st.altair_chart(charts.variant_tradeoff(shown, domains), width="stretch")
st.altair_chart(charts.variant_throughput(shown))

st.subheader("Per domain")
st.caption("Δ: the variant's score minus the parent's on the same items, in points, with its 95% CI. "
           "Non-inferior: CI low above -margin; inferior: CI high below it; underpowered: neither, and "
           "'items for power' is how many items the domain's test would need to show non-inferiority.")
for row in shown.iter_rows(named=True):
    mine = domains.filter(pl.col("decision") == row["decision"])
    counts = ", ".join(f"{mine.filter(pl.col('verdict') == v).height} {v}" for v in VARIANT_VERDICTS)
    with st.expander(f"{row['variant']}: {counts}", expanded=not row["equivalent"]):
        if not mine.height:
            st.caption("No domain of this certification matches the sidebar's owner/tag filters.")
        else:
            rows = mine.with_columns(
                (pl.col("delta") * 100).round(2).alias("Δ (pts)"),
                (pl.col("ci_low") * 100).round(2).alias("CI low (pts)"),
                (pl.col("ci_high") * 100).round(2).alias("CI high (pts)"),
                (pl.col("margin") * 100).alias("margin (pts)"),
            ).select("domain", "verdict", "Δ (pts)", "CI low (pts)", "CI high (pts)", "margin (pts)",
                     "items_for_power", "n", "k", "p_noninferior", "p_inferior", "test")
            st.dataframe(rows.to_pandas(), hide_index=True, width="stretch", column_config={
                "items_for_power": st.column_config.NumberColumn("items for power", format="%d"),
                "p_noninferior": st.column_config.NumberColumn("p (non-inferior)", format="%.4f"),
                "p_inferior": st.column_config.NumberColumn("p (inferior)", format="%.4f"),
            })
