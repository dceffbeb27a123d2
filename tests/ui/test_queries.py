"""The dashboard's query layer on small lakes written through the real Lake: champion resolution,
per-page views, classification, filtering and paging."""

from __future__ import annotations

import polars as pl
import pytest

from storage import tables as T
from storage.lake import Lake
from ui import queries as Q


def _regression(lake, candidate, baseline, at, rows):
    frame = T.conform(pl.DataFrame([{"candidate": candidate, "baseline": baseline, "created_at": at, **r}
                                    for r in rows]), T.REGRESSION)
    lake.write_batch("regression", {"candidate": candidate, "baseline": baseline}, {"part": frame})


def _promotion(lake, decision, candidate, promoted, at):
    frame = T.conform(pl.DataFrame([{"decision": decision, "candidate": candidate, "promoted": promoted,
                                     "reason": "test", "created_at": at}]), T.PROMOTIONS)
    lake.write_batch("promotions", {"decision": decision}, {"part": frame})


def test_last_promotion_is_the_newest_decision_that_promoted(assay_home):
    lake = Lake.at(assay_home)
    con = Q.open_views(lake, ["promotions"])
    assert Q.last_promotion(con) is None
    _regression(lake, "c1", "base", "2026-11-01T00:00:00+00:00", [{"domain": "a", "verdict": "ok", "delta": 0.1}])
    _promotion(lake, "d1", "c1", True, "2026-11-01T00:00:00+00:00")
    _promotion(lake, "d2", "c2", False, "2026-11-02T00:00:00+00:00")  # refused: champion unchanged
    con = Q.open_views(lake, ["regression", "promotions"])
    assert Q.last_promotion(con)["candidate"] == "c1"  # a comparison's baseline is no record of a promotion


def test_reconcile_champion_trusts_the_alias_and_flags_a_move_outside_assay():
    record = {"candidate": "c1", "created_at": "2026-11-01T00:00:00+00:00"}
    agreed = Q.reconcile_champion("c1", record)
    assert agreed == {"name": "c1", "source": "mlflow", "recorded": "c1", "warning": None}
    moved = Q.reconcile_champion("c9", record)
    assert moved["name"] == "c9" and moved["recorded"] == "c1"
    assert "points at c9" in moved["warning"] and "made c1 champion" in moved["warning"]
    assert "outside Assay" in moved["warning"]
    removed = Q.reconcile_champion(None, record)  # alias deleted by hand
    assert removed["name"] is None and "no model version" in removed["warning"]
    no_store = Q.reconcile_champion(None, record, store_error="no MLflow store at /x/mlflow.db")
    assert no_store["name"] == "c1" and no_store["source"] == "lake"
    assert no_store["warning"].startswith("no MLflow store at /x/mlflow.db")
    assert Q.reconcile_champion(None, None) == {"name": None, "source": "mlflow", "recorded": None, "warning": None}


def test_open_views_reads_only_the_named_partitions(assay_home):
    lake = Lake.at(assay_home)
    for domain in ("a", "b"):
        frame = T.conform(pl.DataFrame([{"checkpoint": "c1", "domain": domain, "mean": 0.5}]), T.SWEEP_SUMMARY)
        lake.write_batch("sweep_summary", {"checkpoint": "c1", "domain": domain}, {"part": frame})
    con = Q.open_views(lake, {"sweep_summary": [{"domain": "b"}], "results": None})
    assert con.rows("SELECT DISTINCT domain FROM sweep_summary") == [("b",)]
    assert not Q.has_view(con, "results")  # absent table: no view, the page shows its empty state
    with pytest.raises(ValueError, match="unknown lake view 'sweeps'"):
        Q.open_views(lake, ["sweeps"])


@pytest.mark.parametrize("verdict,ci_low,status", [
    ("regression", -0.2, "regressed"), ("warn", -0.1, "warn"), ("ok", 0.01, "improved"),
    ("ok", -0.01, "unchanged"), ("ok", None, "unchanged"),
])
def test_status(verdict, ci_low, status):
    frame = pl.DataFrame({"verdict": [verdict], "ci_low": [ci_low]}, schema={"verdict": pl.Utf8, "ci_low": pl.Float64})
    assert frame.select(Q.status_expr())["status"][0] == status


def test_filter_sort_page_handles_hundreds_of_domains():
    n = 300
    table = pl.DataFrame({
        "domain": [f"d{i:03d}" for i in range(n)],
        "owner": [f"owner{i % 3}" for i in range(n)],
        "tags": [["math"] if i % 2 else ["code"] for i in range(n)],
        "status": ["regressed" if i % 50 == 0 else "unchanged" for i in range(n)],
        "delta": [((i * 37) % 101 - 50) / 1000 for i in range(n)],
        "gate_failures_24h": [i % 7 for i in range(n)],
    })
    rows, page, pages = Q.filter_sort_page(table, Q.OverviewQuery(page=3, page_size=25))
    assert rows.height == n and pages == 12 and page.height == 25
    assert page["delta"].to_list() == sorted(table["delta"].to_list())[50:75]
    rows, page, pages = Q.filter_sort_page(table, Q.OverviewQuery(owners=("owner1",), tags=("math",),
                                                                   search="d1", sort="name", page=99))
    assert pages == 1 and page["domain"].to_list() == rows["domain"].to_list()  # past the end: last page
    assert all(d.startswith("d1") and int(d[1:]) % 3 == 1 and int(d[1:]) % 2 for d in rows["domain"])
    rows, _, _ = Q.filter_sort_page(table, Q.OverviewQuery(sort="regressions first"))
    assert rows["status"][:6].to_list() == ["regressed"] * 6
    with pytest.raises(ValueError, match="sort 'fastest'"):
        Q.OverviewQuery(sort="fastest")


def test_gate_failures_of_the_last_day_skip_old_files(assay_home):
    import os
    from datetime import datetime, timedelta, timezone

    lake = Lake.at(assay_home)
    now = datetime.now(timezone.utc)

    def gate_file(domain, evaluation, evaluated_at):
        frame = T.conform(pl.DataFrame([{"domain": domain, "evaluation": evaluation, "gate": "format",
                                         "severity": "critical", "success": False,
                                         "evaluated_at": evaluated_at.isoformat()}]), T.GATE_RESULTS)
        return lake.write_batch("gate_results", {"domain": domain, "evaluation": evaluation}, {"part": frame})

    old = gate_file("a", "e_old", now - timedelta(days=3))
    stamp = (now - timedelta(days=3)).timestamp()
    os.utime(old / "part.parquet", (stamp, stamp))  # written three days ago
    gate_file("b", "e_rewritten", now - timedelta(days=2))  # old evaluation, rewritten today
    gate_file("c", "e_new", now - timedelta(hours=1))
    since = Q.last_day(now)
    pruned = Q.open_views(lake, ["gate_results"], modified_since={"gate_results": since.timestamp()})
    full = Q.open_views(lake, ["gate_results"])
    assert len(Q.view_files(lake, "gate_results", modified_since=since.timestamp())) == 2
    for con in (pruned, full):  # same answer with and without pruning
        assert Q.gate_failures_since(con, since)["domain"].to_list() == ["c"]


def test_views_rebind_by_name_when_an_old_file_lacks_a_column(assay_home):
    lake = Lake.at(assay_home)
    new = T.conform(pl.DataFrame([{"candidate": "c2", "domain": "a", "created_at": "2026-11-02", "reason": "x",
                                   "decision": "d2", "promoted": True}]), T.PROMOTIONS)
    lake.write_batch("promotions", {"decision": "d1"}, {"part": new.drop("reason")})  # an older contract
    lake.write_batch("promotions", {"decision": "d2"}, {"part": new})
    views = Q.open_views(lake, ["promotions"])
    rows = views.rows("SELECT decision, reason FROM promotions ORDER BY decision")
    assert rows == [("d1", None), ("d2", "x")] and views.by_name
    with pytest.raises(Exception, match="no_such_column"):  # a real error still surfaces
        views.rows("SELECT no_such_column FROM promotions")


def test_item_changes_show_the_compared_config_and_the_newest_rows(assay_home):
    lake = Lake.at(assay_home)

    def results(checkpoint, batch, config, at, scores):
        rows = [{"checkpoint": checkpoint, "domain": "a", "item_id": f"i{j}", "sample_idx": 0, "score": s,
                 "completion": f"{checkpoint}-{config}-{j}", "gen_config": config, "created_at": at}
                for j, s in enumerate(scores)]
        lake.write_batch("results", {"checkpoint": checkpoint, "domain": "a", "batch": batch},
                         {"part": T.conform(pl.DataFrame(rows), T.RESULTS)})

    def summary(checkpoint, config, at):
        row = {"checkpoint": checkpoint, "domain": "a", "gen_config": config, "created_at": at}
        lake.write_batch("sweep_summary", {"checkpoint": checkpoint, "domain": "a"},
                         {"part": T.conform(pl.DataFrame([row]), T.SWEEP_SUMMARY)})

    results("base", "b1", "greedy", "2026-11-01", [1.0, 1.0, 0.0])
    results("cand", "b1", "sampled", "2026-11-01", [1.0, 1.0, 1.0])  # another config: ignored
    results("cand", "b2", "greedy", "2026-11-02", [0.0, 1.0, 0.0])
    results("cand", "b3", "greedy", "2026-11-03", [0.0, 1.0, 1.0])  # a re-run of the same samples: newest wins
    summary("base", "greedy", "2026-11-01")
    summary("cand", "greedy", "2026-11-03")
    from evaluation.results import compared_rows

    con = Q.open_views(lake, ["samples"])
    for gen_config in (None, "greedy"):  # as pair_results pairs them, or on the regression row's config
        cand_rows, base_rows = compared_rows(lake, "cand", "base", "a", gen_config)
        items = Q.item_changes(con, "a", base_rows, cand_rows).sort("item_id")
        assert items["change"].to_list() == ["lost", "same", "gained"]
        assert items["candidate_completion"].to_list() == ["cand-greedy-0", "cand-greedy-1", "cand-greedy-2"]
    # on the other config the baseline never swept there is no pair: nothing to show, not the wrong pair
    cand_rows, base_rows = compared_rows(lake, "cand", "base", "a", "sampled")
    assert set(cand_rows["gen_config"]) == set(base_rows["gen_config"]) == {"greedy"}


def _history(lake, run_id, rows, *, old=False):
    frame = T.conform(pl.DataFrame([{"run_id": run_id, "created_at": "2026-11-01T00:00:00+00:00", **r} for r in rows]),
                      T.TRAINING_HISTORY)
    if old:  # written before the reward-hacking signals existed
        frame = frame.drop(*Q.TRAINING_LATER_COLUMNS)
    lake.write_batch("training_history", {"run": run_id}, {"part": frame})


def test_training_curves_read_the_hacking_signals_and_nulls_from_an_older_lake(assay_home):
    lake = Lake.at(assay_home)
    _history(lake, "r1-old", [{"step": 1, "domain": "a", "reward_mean": 0.5}], old=True)
    only_old = Q.training_curves(Q.open_views(lake, ["training_history"]), "r1-old")
    assert only_old.height == 1 and only_old["reward_mean"].to_list() == [0.5]
    assert all(only_old[c].is_null().all() for c in Q.TRAINING_LATER_COLUMNS)
    _history(lake, "r2-new", [{"step": 1, "domain": "a", "reward_mean": 0.5, "multi_answer_share": 0.25,
                            "prompt_copy_share": 0.5, "prompt_copy_reward": 0.75}])
    con = Q.open_views(lake, ["training_history"])
    new = Q.training_curves(con, "r2-new")
    assert new.select(Q.TRAINING_LATER_COLUMNS).row(0) == (0.25, 0.5, 0.75)  # the old file is listed (bound) first
    assert Q.training_curves(con, "r1-old")["multi_answer_share"].to_list() == [None]


def test_training_curves_read_the_learned_reward_columns_beside_a_lake_that_predates_them(assay_home):
    """A lake with the hacking signals but not the learned-reward columns (runs before the watch):
    the signals still come back, the learned columns as nulls; a newer run's values come back as written."""
    lake = Lake.at(assay_home)
    frame = T.conform(pl.DataFrame([{"run_id": "r1-signals", "created_at": "2026-11-01T00:00:00+00:00", "step": 1,
                                     "domain": "a", "reward_mean": 0.5, "multi_answer_share": 0.25}]),
                      T.TRAINING_HISTORY).drop(*Q.TRAINING_LEARNED_COLUMNS)
    lake.write_batch("training_history", {"run": "r1-signals"}, {"part": frame})
    signals = Q.training_curves(Q.open_views(lake, ["training_history"]), "r1-signals")
    assert signals["multi_answer_share"].to_list() == [0.25]
    assert all(signals[c].is_null().all() for c in Q.TRAINING_LEARNED_COLUMNS)
    _history(lake, "r2-learned", [{"step": s, "domain": "essays", "reward_mean": 0.5, "learned_mean": 0.5 + 0.1 * s,
                                   "score_mean": 0.5 - 0.1 * s, "reward_hacking": (None if s < 2 else float(s >= 3))}
                                  for s in (1, 2, 3, 4)] + [{"step": 4, "domain": "_all", "reward_mean": 0.5}])
    curves = Q.training_curves(Q.open_views(lake, ["training_history"]), "r2-learned")
    essays = curves.filter(pl.col("domain") == "essays")
    assert essays["learned_mean"].to_list() == pytest.approx([0.6, 0.7, 0.8, 0.9])
    assert essays["reward_hacking"].to_list() == [None, 0.0, 1.0, 1.0]
    flagged = Q.overoptimised_domains(curves)
    assert flagged.rows(named=True) == [{"domain": "essays", "first_step": 3, "last_step": 4, "flagged_steps": 2,
                                         "judged_steps": 3}]
    assert Q.overoptimised_domains(signals).height == 0  # judged nowhere: nothing flagged


def test_rising_shares_compare_the_last_third_of_steps_with_the_first():
    def series(domain, values):
        return [{"step": s, "domain": domain, "multi_answer_share": v} for s, v in enumerate(values, 1)]

    curves = pl.DataFrame([*series("climbs", [0.0, 0.05, 0.1, 0.2, 0.3, 0.4]),
                           *series("flat", [0.3, 0.35, 0.3, 0.3, 0.35, 0.3]),
                           *series("falls", [0.5, 0.4, 0.3, 0.2, 0.1, 0.0]),
                           *series("_all", [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]),  # the batch total is no domain
                           *series("short", [0.0, 0.9]),                        # too few steps to judge
                           {"step": 1, "domain": "unrecorded", "multi_answer_share": None}])
    rising = Q.rising_shares(curves, "multi_answer_share")
    assert rising["domain"].to_list() == ["climbs"]
    assert rising.row(0, named=True) == pytest.approx({"domain": "climbs", "first": 0.025, "last": 0.35,
                                                       "rise": 0.325, "steps": 6})
    assert Q.rising_shares(curves, "multi_answer_share", threshold=0.5).height == 0
    assert Q.rising_shares(curves.drop("multi_answer_share"), "multi_answer_share").height == 0


def test_the_latest_reward_gate_reads_a_lake_whose_checks_predate_the_recorded_bar(assay_home):
    """Checks written before reward_gates.gate_config existed (alone, then beside a newer one):
    the rows come back with the column null, never a query error on the domain page."""
    lake = Lake.at(assay_home)

    def check(name, at, with_bar):
        rows = [{"check": name, "domain": "essays", "reward_model": "rm", "criterion": c, "passed": True,
                 "checked_at": at, "gate_config": '{"min_pairs": 20}' if with_bar else None}
                for c in ("accuracy", "kappa")]
        frame = T.conform(pl.DataFrame(rows), T.REWARD_GATES)
        lake.write_batch("reward_gates", {"domain": "essays", "check": name},
                         {"part": frame if with_bar else frame.drop("gate_config")})

    check("rgate-old", "2026-11-01T00:00:00+00:00", with_bar=False)
    old = Q.latest_reward_gate(Q.open_views(lake, ["reward_gates"]), "essays")
    assert old["check"].to_list() == ["rgate-old"] * 2 and old["gate_config"].is_null().all()
    check("rgate-new", "2026-12-01T00:00:00+00:00", with_bar=True)
    new = Q.latest_reward_gate(Q.open_views(lake, ["reward_gates"]), "essays")
    assert new["check"].to_list() == ["rgate-new"] * 2 and new["gate_config"].to_list() == ['{"min_pairs": 20}'] * 2
    assert list(new.columns) == list(T.REWARD_GATES)


def test_forgotten_domains_names_when_a_domain_was_flagged_and_whether_it_recovered(assay_home):
    """Validation rows (training.validation): 'a' falls below its start at steps 4 and 6 and recovers at
    8; 'b' never falls; older runs without the columns read as nothing flagged."""
    lake = Lake.at(assay_home)
    rows = [{"step": 0, "domain": d, "val_score": 0.8} for d in ("a", "b")]
    for step, (score, flag) in {2: (0.8, 0.0), 4: (0.3, 1.0), 6: (0.2, 1.0), 8: (0.75, 0.0)}.items():
        rows.append({"step": step, "domain": "a", "val_score": score, "val_delta": score - 0.8, "val_q": 0.01 if flag
                     else 0.6, "forgetting": flag})
        rows.append({"step": step, "domain": "b", "val_score": 0.85, "val_delta": 0.05, "val_q": 1.0, "forgetting": 0.0})
    _history(lake, "r-val", rows)
    curves = Q.training_curves(Q.open_views(lake, ["training_history"]), "r-val")
    assert Q.forgotten_domains(curves).rows(named=True) == [
        {"domain": "a", "first_step": 4, "last_step": 6, "flagged_steps": 2, "judged_steps": 4, "start": 0.8,
         "latest": 0.75, "delta": pytest.approx(-0.6), "q": 0.01, "flagged_now": False}]
    _history(lake, "r-old", [{"step": 1, "domain": "a", "reward_mean": 0.5}], old=True)
    assert Q.forgotten_domains(Q.training_curves(Q.open_views(lake, ["training_history"]), "r-old")).height == 0
