"""Pieces several pages share: the sidebar filters, empty states, the champion warning, number formatting."""

from __future__ import annotations

import math

import polars as pl
import streamlit as st

from ui import data

OWNERS_KEY, TAGS_KEY = "filter_owners", "filter_tags"


def sidebar(home: str) -> None:
    registry = data.registry_frame()
    with st.sidebar:
        st.caption(f"Data: `{home}`")
        owners = sorted(set(registry["owner"].to_list())) if registry.height else []
        tags = sorted({t for ts in registry["tags"].to_list() for t in ts}) if registry.height else []
        st.multiselect("Owner", owners, key=OWNERS_KEY, placeholder="all owners")
        st.multiselect("Tag", tags, key=TAGS_KEY, placeholder="all tags")
        if st.button("Reload data", help=f"Data is cached for {data.TTL_S} s; reload reads the lake now"):
            data.reload_all()
        errors = data.registry_errors()
        if errors:
            with st.expander(f"{len(errors)} domain plugin(s) failed to load"):
                for line in errors:
                    st.text(line)


def champion_warning(champion: dict) -> None:
    """Warn when the champion alias and Assay's promotion record disagree, or the alias is unreadable."""
    if champion.get("warning"):
        st.warning(champion["warning"], icon=":material/warning:")


def selected_owners() -> tuple[str, ...]:
    return tuple(st.session_state.get(OWNERS_KEY) or ())


def selected_tags() -> tuple[str, ...]:
    return tuple(st.session_state.get(TAGS_KEY) or ())


def empty_state(missing: str, also: str | None = None) -> None:
    """Say what is missing and the command that produces it (``make demo``, or ``also``)."""
    how = "`make demo`" + (f" (or `{also}`)" if also else "")
    st.info(f"{missing} Run {how} to produce it, then press *Reload data* in the sidebar.")


def pts(value: float | None, signed: bool = True) -> str:
    """A score fraction as percentage points: 0.031 -> '+3.1 pts'."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value * 100:+.1f} pts" if signed else f"{value * 100:.1f} pts"


def pct(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value * 100:.1f}%"


def filtered_domains(registry: pl.DataFrame, names: list[str]) -> list[str]:
    """``names`` restricted by the sidebar's owner and tag filters (unregistered names pass only
    when no filter is set)."""
    owners, tags = selected_owners(), selected_tags()
    if not owners and not tags:
        return names
    info = {r["domain"]: r for r in registry.iter_rows(named=True)} if registry.height else {}
    keep = []
    for name in names:
        row = info.get(name)
        if row is None:
            continue
        if owners and row["owner"] not in owners:
            continue
        if tags and not set(tags).intersection(row["tags"] or []):
            continue
        keep.append(name)
    return keep
