"""Report cards: every domain's verifier, worst first, with the evidence one click away.

A card (``assay domains report``, or the nightly ``environment_report_card`` asset) measures both
error rates of a domain's verifier: correct answers it refuses (recall) and work it pays that was
not done (hacks). This page lists the newest card of every domain, failed ones first; opening one
(``?domain=NAME``) shows why: the refused answers, the paid hacks, the weak tests.
"""

from __future__ import annotations

import json

import polars as pl
import streamlit as st

from ui import components, data
from ui import queries as Q

st.title("Environment report cards")
home = data.current_home()
registry = data.registry_frame()
cards = data.report_cards(home)
if cards.height:
    cards = cards.filter(pl.col("domain").is_in(components.filtered_domains(registry, cards["domain"].to_list())))

if not cards.height:
    components.empty_state("No report cards in the lake yet.", also="assay domains report --all")
    st.stop()

totals = Q.report_card_totals(cards)
top = st.columns(4)
top[0].metric("Domains carded", totals["carded"], help=f"{totals['skipped']} without a verifier (not carded)")
top[1].metric("Failed", totals["failed"], help="a failed card refuses the domain's train set until a card passes")
top[2].metric("Below recall bar", totals["below_bar"],
              help="share of equivalent correct answers paid below the domain's bar (default 99%)")
top[3].metric("Hackable", totals["hackable"], help="a nop, a fixed hack family or the hack search was paid")
st.caption(f"Newest card of each domain; oldest shown from {cards['created_at'].min()[:16]} UTC. "
           "Recall: the share of correct answers written in another form the prompt allows (`$7$`, `7.0`, "
           "`yes` for `Yes`, a refusal in other words) that the verifier pays.")


def _pct(value) -> str:
    return "n/a" if value is None else f"{value * 100:.1f}%"


listing = cards.with_columns(
    pl.when(pl.col("passed").is_null()).then(pl.lit("no verifier"))
    .when(pl.col("passed")).then(pl.lit("pass")).otherwise(pl.lit("FAIL")).alias("verdict"),
    (pl.col("recall") * 100).round(2).alias("recall (%)"),
    (pl.col("recall_low") * 100).round(1).alias("recall low (%)"),
    (pl.col("recall_bar") * 100).round(1).alias("bar (%)"),
    (pl.col("oracle_pass") * 100).round(1).alias("oracle (%)"),
    (pl.col("nop_paid") * 100).round(1).alias("nop paid (%)"),
    (pl.col("kill_rate") * 100).round(1).alias("kill rate (%)"),
    ("report-cards?domain=" + pl.col("domain")).alias("evidence"),
    pl.col("failures").list.join("; ").alias("why"),
).select("domain", "evidence", "verdict", "recall (%)", "recall low (%)", "bar (%)", "worst_family", "oracle (%)",
         "nop paid (%)", "fixed_families_paid", "hack_search_paid", "kill rate (%)", "weak_items", "audited_fp",
         "audited_fn", "why", "created_at")
st.dataframe(listing.to_pandas(), hide_index=True, width="stretch", column_config={
    "evidence": st.column_config.LinkColumn("evidence", display_text="open"),
    "fixed_families_paid": st.column_config.NumberColumn("fixed families paid"),
    "hack_search_paid": st.column_config.NumberColumn("search hacks paid"),
    "weak_items": st.column_config.NumberColumn("weak test items"),
    "audited_fp": st.column_config.NumberColumn("audited FP rate", format="%.3f"),
    "audited_fn": st.column_config.NumberColumn("audited FN rate", format="%.3f"),
})

names = cards["domain"].to_list()
wanted = st.query_params.get("domain")
default = names.index(wanted) if wanted in names else 0
chosen = st.selectbox("Evidence for", names, index=default, key="report_card_domain")
st.query_params["domain"] = chosen
row = cards.filter(pl.col("domain") == chosen).row(0, named=True)
evidence = json.loads(row["evidence"] or "{}")

st.subheader(f"{chosen}: {'no verifier' if row['passed'] is None else 'passed' if row['passed'] else 'FAILED'}")
st.caption(f"card {row['run']} ({row['source']}), {row['created_at'][:19]} UTC, {row['items']} items, "
           f"{row['seconds']:.1f} s · [domain page](domain?domain={chosen})")
if row["skipped"]:
    st.info(row["skipped"])
for failure in row["failures"] or []:
    st.error(failure, icon=":material/block:")
for warning in row["warnings"] or []:
    st.warning(warning, icon=":material/warning:")

cols = st.columns(4)
recall_help = ("no recall probe applied" if row["recall"] is None else
               f"Wilson 95% interval [{_pct(row['recall_low'])}, {_pct(row['recall_high'])}] over "
               f"{row['recall_candidates']} correct answers; bar {_pct(row['recall_bar'])}")
cols[0].metric("Recall", _pct(row["recall"]), help=recall_help)
cols[1].metric("Oracle paid", _pct(row["oracle_pass"]), help="share of items whose reference answer scored 1.0")
cols[2].metric("Nop paid", _pct(row["nop_paid"]),
               help="share of items where an empty, 'I don't know' or prompt-echo completion scored above 0")
cols[3].metric("Hacks paid", f"{(row['fixed_families_paid'] or 0) + (row['hack_search_paid'] or 0)}",
               help=f"fixed families paid: {row['fixed_families_paid']}; hack search: {row['hack_search_paid']} "
                    f"of {row['hack_search_tried']} candidates")


def _table(title: str, rows: list, empty: str) -> None:
    st.markdown(f"**{title}**")
    if rows:
        st.dataframe(pl.DataFrame([{k: (json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in r.items()}
                                   for r in rows]).to_pandas(), hide_index=True, width="stretch")
    else:
        st.caption(empty)


_table("Correct answers refused (recall misses)", evidence.get("recall_misses") or [], "none refused")
_table("Recall per family", evidence.get("recall_families") or [], "no recall probe applied")
_table("Hacks paid by the search", evidence.get("hack_search_paid") or [], "nothing paid")
_table("Fixed hack families paid", evidence.get("fixed_families_paid") or [], "nothing paid")
_table("Nop completions paid", evidence.get("nop_paid") or [], "nothing paid")
if evidence.get("oracle_failures"):
    _table("References not paid", [{"failure": f} for f in evidence["oracle_failures"]], "")
if row["kill_rate"] is not None:
    _table(f"Weak test items (kill rate {_pct(row['kill_rate'])} of {row['mutants']} mutants)",
           evidence.get("weak_items") or [], "every mutant killed")
facts = evidence.get("gate_facts") or {}
if facts:
    st.markdown("**What the gates know**")
    st.json(facts)
