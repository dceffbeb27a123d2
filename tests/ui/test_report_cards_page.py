"""The Report cards page on the fixture lake: the newest card of every domain, worst first, the
counts a reader relies on, and the evidence of the domain opened by ``?domain=``."""

from __future__ import annotations

import polars as pl

from storage.lake import Lake
from tests.ui.conftest import fresh_app

PAGE = "app_pages/report_cards.py"


def _open(**query):
    at = fresh_app()
    for key, value in query.items():
        at.query_params[key] = value
    at.run()
    at.switch_page(PAGE).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _newest(home) -> pl.DataFrame:
    cards = Lake.at(home).read("report_cards")
    return cards.sort("created_at", descending=True).unique("domain", keep="first")


def test_lists_the_newest_card_of_every_domain_worst_first(lake_env):
    at = _open()
    assert at.title[0].value == "Environment report cards"
    newest = _newest(lake_env["home"])
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Domains carded"] == str(newest.height) == str(len(lake_env["domains"]))
    assert metrics["Failed"] == str(newest.filter(~pl.col("passed")).height) == "2"
    assert metrics["Below recall bar"] == "1" and metrics["Hackable"] == "1"
    table = at.dataframe[0].value
    assert list(table["verdict"][:2]) == ["FAIL", "FAIL"] and set(table["verdict"][2:]) == {"pass"}
    assert table["domain"][0] == lake_env["domains"][0]  # the lowest recall first
    assert len(table) == len(lake_env["domains"])  # the older card of each domain is not listed


def test_evidence_of_the_opened_domain(lake_env):
    worst = lake_env["domains"][0]
    at = _open(domain=worst)
    assert at.selectbox(key="report_card_domain").value == worst
    assert any("recall 0.900 below the bar 0.990" in e.value for e in at.error)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Recall"] == "90.0%"
    misses = at.dataframe[1].value  # the refused correct answers, as recorded
    assert list(misses["completion"]) == ["Answer: 1,200", "Answer: 1,300"]
    at.selectbox(key="report_card_domain").set_value(lake_env["domains"][1]).run()
    assert not at.exception
    assert any("hack search: 2 paid" in e.value for e in at.error)


def test_empty_lake_says_what_to_run(empty_env):
    at = _open()
    assert any("assay domains report --all" in i.value for i in at.info)
