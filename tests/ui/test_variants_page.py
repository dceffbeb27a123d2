"""The Variants page and its queries: each variant's newest certification, the variant holding the
``fast`` alias, per-domain verdicts (underpowered shown as such), the parent filter, and the empty
state of a lake older than the variant tables. Values are checked against the lake read directly."""

from __future__ import annotations

import polars as pl
import pytest

from storage import tables as T
from storage.lake import Lake
from tests.ui.conftest import fresh_app
from ui import charts
from ui import queries as Q

PAGE = "app_pages/variants.py"


def _open():
    at = fresh_app()
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _metrics(at) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _variants_table(at):
    return next(df.value for df in at.dataframe if "fast alias" in df.value.columns).set_index("variant")


def _expander(at, variant: str):
    return next(e for e in at.expander if e.label.startswith(variant + ":"))


def _decision(lake: Lake, decision: str, variant: str, parent: str, at: str, *, fast: bool, speedup: float,
              verdicts: dict[str, str], drop: tuple[str, ...] = ()) -> None:
    """One certification written as ``evaluation.variants`` writes it; ``drop``: columns an older
    writer did not have."""
    row = {"decision": decision, "variant": variant, "parent": parent, "method": variant.rsplit(".", 1)[-1],
           "created_at": at, "speedup_batch1": speedup, "tokens_per_s_batch1": 10.0 * speedup,
           "parent_tokens_per_s_batch1": 10.0, "speedup_batch": 1.0, "tokens_per_s_batch": 50.0,
           "parent_tokens_per_s_batch": 50.0, "batch": 8, "margin": 0.02, "min_speedup": 2.0,
           "equivalent": set(verdicts.values()) == {"non_inferior"}, "fast_alias": fast,
           "reason": "certified" if fast else "refused", "load_average": 0.5}
    frame = T.conform(pl.DataFrame([row]), T.VARIANTS).drop(list(drop))
    domains = T.conform(pl.DataFrame([
        {"decision": decision, "variant": variant, "parent": parent, "domain": d, "n": 200, "k": 1, "margin": 0.02,
         "delta": -0.001, "ci_low": -0.01, "ci_high": 0.008, "verdict": v, "created_at": at}
        for d, v in verdicts.items()]), T.VARIANT_DOMAINS)
    lake.write_batch("variant_domains", {"decision": decision}, {"part": domains})
    lake.write_batch("variants", {"decision": decision}, {"part": frame})


@pytest.fixture
def two_parents(assay_home) -> Lake:
    """Parent ``a``'s variant certified fast, then refused on a re-run (the alias stays on it);
    parent ``b``'s variant refused. d1 and d3 lack ``load_average`` (an older writer), and d1's file
    is the one the views bind by first."""
    lake = Lake.at(assay_home)
    ok = {"x": "non_inferior", "y": "non_inferior"}
    _decision(lake, "d1", "a--gguf-q4_0", "a", "2026-11-01T00:00:00+00:00", fast=True, speedup=3.0, verdicts=ok,
              drop=("load_average",))
    _decision(lake, "d2", "a--gguf-q4_0", "a", "2026-11-02T00:00:00+00:00", fast=False, speedup=1.5,
              verdicts={"x": "non_inferior", "y": "underpowered"})
    _decision(lake, "d3", "b--int8", "b", "2026-11-01T12:00:00+00:00", fast=False, speedup=1.2, verdicts=ok,
              drop=("load_average",))
    return lake


# -- queries -------------------------------------------------------------------------------------

def test_missing_variant_tables_give_empty_frames_with_their_columns(assay_home):
    lake = Lake.at(assay_home)
    frame = T.conform(pl.DataFrame([{"decision": "p1", "candidate": "c1", "promoted": True}]), T.PROMOTIONS)
    lake.write_batch("promotions", {"decision": "p1"}, {"part": frame})  # a lake older than variants
    con = Q.open_views(lake, ["variants", "variant_domains"])
    latest = Q.latest_variants(con)
    assert latest.height == 0 and latest.schema == pl.Schema(T.VARIANTS)
    rows = Q.variant_domain_rows(con, ["d1"])
    assert rows.height == 0 and rows.schema == pl.Schema(T.VARIANT_DOMAINS)
    assert Q.fast_alias_holder(con) is None


def test_latest_decision_per_variant_wins_and_the_alias_stays_where_it_was_moved(two_parents):
    con = Q.open_views(two_parents, ["variants", "variant_domains"])
    latest = Q.latest_variants(con)
    assert latest.schema == pl.Schema(T.VARIANTS)
    assert latest.select("variant", "decision", "speedup_batch1").rows() == [
        ("a--gguf-q4_0", "d2", 1.5), ("b--int8", "d3", 1.2)]  # by parent; d1 (3.0x) is superseded
    # d1 and d3 come from a writer without load_average: d2's value is kept, d3's is null
    assert latest["load_average"].to_list() == [0.5, None]
    holder = Q.fast_alias_holder(con)
    assert (holder["variant"], holder["decision"]) == ("a--gguf-q4_0", "d1")  # a refusal does not move it back
    rows = Q.variant_domain_rows(con, ["d2"])
    assert set(rows["decision"]) == {"d2"}
    assert rows.select("domain", "verdict").rows() == [("y", "underpowered"), ("x", "non_inferior")]  # worst first
    assert Q.variant_domain_rows(con, []).height == 0


def test_tradeoff_chart_draws_the_required_speedup_and_the_margin(two_parents):
    con = Q.open_views(two_parents, ["variants", "variant_domains"])
    latest = Q.latest_variants(con)
    spec = charts.variant_tradeoff(latest, Q.variant_domain_rows(con, latest["decision"].to_list())).to_dict()
    datasets = spec["datasets"].values()
    assert [r["min_speedup"] for d in datasets for r in d if set(r) == {"min_speedup"}] == [2.0]
    assert [r["floor_pts"] for d in datasets for r in d if set(r) == {"floor_pts"}] == [-2.0]
    points = next(d for d in datasets if d and "delta_pts" in d[0] and "domain" in d[0])
    assert sorted((r["variant"], r["domain"], r["verdict"]) for r in points) == [
        ("a--gguf-q4_0", "x", "non_inferior"), ("a--gguf-q4_0", "y", "underpowered"),
        ("b--int8", "x", "non_inferior"), ("b--int8", "y", "non_inferior")]
    assert {r["speedup_batch1"] for r in points} == {1.5, 1.2}


# -- the page ------------------------------------------------------------------------------------

def test_page_shows_each_variant_and_marks_the_fast_one(lake_env):
    lake = Lake.at(lake_env["home"])
    written = lake.read("variants")
    newest = written.sort("created_at").group_by("variant").last()
    at = _open()
    assert at.title[0].value == "Variants"
    table = _variants_table(at)
    assert sorted(table.index) == sorted(newest["variant"])
    fast = f"{lake_env['champion']}--gguf-q4_0"
    for row in newest.iter_rows(named=True):
        shown = table.loc[row["variant"]]
        assert shown["speedup_batch1"] == pytest.approx(row["speedup_batch1"])
        assert shown["speedup_batch"] == pytest.approx(row["speedup_batch"])
        assert shown["equivalent"] == row["equivalent"] and shown["reason"] == row["reason"]
        assert shown["fast alias"] == ("holds it" if row["variant"] == fast else "no")
    assert table.loc[fast, "speedup_batch1"] == pytest.approx(2.8)  # the newer certification, not the 2.7x one
    assert "1.30x tokens/s at batch 1, below the 2x required" in table.loc[f"{lake_env['champion']}--int8", "reason"]
    metrics = _metrics(at)
    assert (metrics["Variants"], metrics["Equivalent"], metrics["Fast enough"]) == ("3", "2", "2")
    assert any(f"The **`fast` alias** was last moved to **{fast}**" in m.value for m in at.markdown)
    assert len(at.get("vega_lite_chart")) == 2  # speed vs quality, throughput


def test_page_lists_per_domain_verdicts_with_the_underpowered_one(lake_env):
    lake = Lake.at(lake_env["home"])
    spec_ngram = f"{lake_env['champion']}--spec-ngram"
    decision = lake.read("variants").filter(pl.col("variant") == spec_ngram)["decision"][0]
    written = lake.read("variant_domains").filter(pl.col("decision") == decision)
    at = _open()
    box = _expander(at, spec_ngram)
    assert box.label == f"{spec_ngram}: 1 inferior, 1 underpowered, {len(lake_env['domains']) - 2} non_inferior"
    rows = box.dataframe[0].value.set_index("domain")
    first, second = lake_env["domains"][:2]
    assert list(rows.index[:2]) == [first, second]  # worst verdict first
    assert rows.loc[first, "verdict"] == "inferior" and rows.loc[second, "verdict"] == "underpowered"
    needed = written.filter(pl.col("domain") == second)["items_for_power"][0]
    assert rows.loc[second, "items_for_power"] == needed > rows.loc[second, "n"]
    mine = written.filter(pl.col("domain") == first).row(0, named=True)
    assert rows.loc[first, "Δ (pts)"] == pytest.approx(mine["delta"] * 100)
    assert rows.loc[first, "CI high (pts)"] < -rows.loc[first, "margin (pts)"]
    assert set(rows["verdict"].iloc[2:]) == {"non_inferior"}
    gguf = _expander(at, f"{lake_env['champion']}--gguf-q4_0")
    assert set(gguf.dataframe[0].value["verdict"]) == {"non_inferior"}
    assert set(gguf.dataframe[0].value["n"]) == {200}  # the 40-item certification is superseded


def test_page_filters_by_parent_and_keeps_the_alias_on_a_refused_rerun(two_parents, monkeypatch):
    monkeypatch.setenv("ASSAY_HOME", str(two_parents.home))
    at = _open()
    table = _variants_table(at)
    assert table.loc["a--gguf-q4_0", "fast alias"] == "holds it" and table.loc["a--gguf-q4_0", "reason"] == "refused"
    assert table.loc["b--int8", "fast alias"] == "no"
    at.multiselect(key="variants_parents").set_value(["b"]).run()
    assert not at.exception
    assert list(_variants_table(at).index) == ["b--int8"]
    assert [e.label.split(":")[0] for e in at.expander] == ["b--int8"]
    assert _metrics(at)["Variants"] == "1"


def test_empty_state_on_a_lake_without_variant_tables(tmp_path, monkeypatch):
    home = tmp_path / "older"
    Lake.at(home).write_batch("promotions", {"decision": "p1"}, {"part": T.conform(
        pl.DataFrame([{"decision": "p1", "candidate": "c1", "promoted": True}]), T.PROMOTIONS)})
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.delenv("ASSAY_DOMAINS_PATH", raising=False)
    at = _open()
    texts = " ".join(i.value for i in at.info)
    assert "No variant certified yet" in texts and "assay variant --from CHECKPOINT --method gguf-q4_0" in texts
    assert not at.dataframe and not at.get("vega_lite_chart")
