"""Overview: every domain against the champion, at a glance, for hundreds of domains."""

from __future__ import annotations

import polars as pl
import streamlit as st

from ui import charts, components, data
from ui import queries as Q

st.title("Assay quality overview")
home = data.current_home()
registry = data.registry_frame()

top = st.columns([1, 1, 1, 1, 1])
recent = st.sidebar.slider("Recent checkpoints on the heatmap", 2, 20, 10, key="overview_recent")
view = data.overview(home, recent)
cells, failures = view["cells"], view["failures"]

latest = pl.DataFrame()
if cells.height:
    newest = cells["position"].max()
    latest = cells.filter(pl.col("position") == newest)
lake_names = data.domains_in_lake(home)
table = Q.domain_table(latest, registry, failures, lake_names)

search_col, sort_col, size_col, page_col = st.columns([3, 2, 1, 1])
search = search_col.text_input("Search domains or owners", key="overview_search", placeholder="e.g. math")
sort = sort_col.selectbox("Sort", Q.OverviewQuery.SORTS, key="overview_sort")
page_size = size_col.selectbox("Per page", (25, 50, 100), key="overview_page_size")
query = Q.OverviewQuery(search=search, owners=components.selected_owners(), tags=components.selected_tags(),
                        sort=sort, page_size=page_size)
matching, _, pages = Q.filter_sort_page(table, query)
page_no = page_col.number_input(f"Page (of {pages})", min_value=1, max_value=pages, value=1, step=1,
                                key="overview_page")
matching, shown, pages = Q.filter_sort_page(table, Q.OverviewQuery(
    search=search, owners=query.owners, tags=query.tags, sort=sort, page=int(page_no), page_size=page_size))

counts = Q.status_counts(latest, matching["domain"].to_list())
failures_in_view = int(matching["gate_failures_24h"].sum()) if matching.height else 0
candidate = latest["candidate"][0] if latest.height else None
top[0].metric("Domains", f"{matching.height}", help=f"{table.height} in all; filters in the sidebar")
top[1].metric("Improved", counts["improved"], help="delta CI above zero vs the champion")
top[2].metric("Regressed", counts["regressed"] + counts["warn"],
              help=f"significant drop vs the champion (verdict warn or regression); {counts['regressed']} of "
                   "them on protected domains (verdict regression), which blocks promotion")
top[3].metric("Unchanged", counts["unchanged"], help="no significant drop and no CI above zero")
top[4].metric("Gate failures (24 h)", failures_in_view,
              help="failed gate expectations evaluated in the last 24 hours, in the domains shown")

unchecked = {"underpowered": counts["underpowered"], "not comparable": counts["not_comparable"]}
if any(unchecked.values()):
    st.caption(" · ".join(f"{n} {what}" for what, n in unchecked.items() if n) + " (no verdict either way: too few "
               "items for the test to flag a drop, or swept under different generation configs)")
champion = data.champion(home)
if champion["name"]:
    st.caption(f"Champion: **{champion['name']}** · latest candidate: **{candidate or 'none'}** · "
               f"counts are for the latest candidate against the champion it was compared with")
components.champion_warning(champion)

if not table.height:
    components.empty_state("No domains yet: the registry is empty and the lake has no data.")
    st.stop()

if not cells.height:
    components.empty_state("No regression reports yet, so there is nothing to compare against the champion.")
else:
    names = shown["domain"].to_list()
    st.altair_chart(charts.verdict_heatmap(cells, names), width="stretch")
    st.caption(f"Page {int(page_no)} of {pages}: {len(names)} of {matching.height} matching domains; "
               "hover a cell for the CI, q and MDE; open a domain below.")

if not view["has_gates"]:
    st.caption("No gate results in the lake yet (`make demo` runs the quality gates).")

st.subheader("Domains on this page")
listing = shown.with_columns(
    (pl.col("delta") * 100).round(1).alias("Δ (pts)"),
    (pl.col("ci_low") * 100).round(1).alias("CI low (pts)"),
    (pl.col("ci_high") * 100).round(1).alias("CI high (pts)"),
    pl.col("tags").list.join(", ").alias("tags"),
    ("domain?domain=" + pl.col("domain")).alias("open"),
).select("domain", "open", "owner", "tags", "status", "Δ (pts)", "CI low (pts)", "CI high (pts)", "q",
         "protected", "gate_failures_24h")
st.dataframe(
    listing.to_pandas(), hide_index=True, width="stretch",
    column_config={
        "open": st.column_config.LinkColumn("page", display_text="open"),
        "gate_failures_24h": st.column_config.NumberColumn("gate failures (24 h)"),
        "q": st.column_config.NumberColumn("q (BH)", format="%.3f"),
    },
)
