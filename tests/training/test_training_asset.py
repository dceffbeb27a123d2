"""The Dagster training asset: trains in its own process on gated train sets, registers the checkpoint."""

from __future__ import annotations

import json

import dagster as dg
import polars as pl
import pytest

from storage import tables
from storage.lake import Lake
from tests.conftest import write_plugin


def _write_train_set(home, domain: str, n: int = 16, evaluation: str = "e1",
                     evaluated_at: str = "2026-11-29T00:00:00.000001+00:00") -> None:
    """A train set as domain_train_set writes it, after a passing gate evaluation (recorded too:
    training uses a train set only while the evaluation it was built after is the latest)."""
    rows = pl.DataFrame({
        "domain": [domain] * n, "id": [f"{domain}-{i}" for i in range(n)],
        "prompt": [f"What is {i} plus 1?" for i in range(n)], "answer": [str(i + 1) for i in range(n)],
        "metadata": [json.dumps({})] * n, "difficulty": [0.5] * n, "evaluation": [evaluation] * n,
        "gated_at": ["2026-11-29T00:00:00+00:00"] * n,
    })
    lake = Lake.at(home)
    lake.write_batch("gate_results", {"domain": domain, "evaluation": evaluation}, {"part": pl.DataFrame([{
        "domain": domain, "evaluation": evaluation, "gate": "format", "expectation": "expect_column_values_to_be_unique(id)",
        "severity": "critical", "success": True, "observed": "{}", "threshold": "{}", "rows_checked": n,
        "rows_failed": 0, "evaluated_at": evaluated_at, "mlflow_run_id": None}], schema=tables.GATE_RESULTS)})
    lake.write_batch("train_set", {"domain": domain}, {"part": tables.conform(rows, tables.TRAIN_SET)})


def _materialize(home, run_config: dict, instance):
    from assets.training import policy_checkpoint
    from assets.resources import default_resources

    return dg.materialize([policy_checkpoint], resources=default_resources(str(home)), instance=instance,
                          run_config={"ops": {"policy_checkpoint": {"config": run_config}}}, raise_on_error=False)


@pytest.mark.slow  # two training subprocesses (~30 s on a quiet machine)
def test_policy_checkpoint_trains_on_the_train_set_and_adds_the_partition(tiny_home, tmp_path, monkeypatch):
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    instance = dg.DagsterInstance.ephemeral()

    refused = _materialize(tiny_home, {"recipe": "tiny", "domains": ["plugged"], "steps": 2,
                                       "threads_per_process": 1}, instance)
    assert not refused.success
    failure = [e for e in refused.all_events if e.event_type_value == "STEP_FAILURE"][0]
    assert "no train_set" in str(failure.event_specific_data.error.message) or \
        "no train_set" in json.dumps(str(failure.event_specific_data))

    _write_train_set(tiny_home, "plugged")
    result = _materialize(tiny_home, {"recipe": "tiny", "domains": ["plugged"], "steps": 2,
                                      "threads_per_process": 1}, instance)
    assert result.success
    meta = result.asset_materializations_for_node("policy_checkpoint")[0].metadata
    checkpoint = meta["checkpoint"].value
    assert checkpoint.endswith("-step000002") and meta["steps"].value == 2
    assert set(meta["final_reward"].value) == {"plugged"}
    # the in-loop validation (the trained domain and the protected one it watches) and its forgetting flags
    validation = meta["validation"].value
    assert validation["step"] == 2 and {r["domain"] for r in validation["results"]} == {"plugged", "safety_refusal"}
    assert meta["forgetting"].value == {"flagged": {}, "flagged_during_run": []}
    assert "validation" in meta["history"].value
    assert instance.get_dynamic_partitions("checkpoint") == [checkpoint]
    records = Lake.at(tiny_home).read("checkpoints")
    assert records["checkpoint"].to_list() == [checkpoint]
    assert (tiny_home / "checkpoints" / checkpoint / "model.safetensors").exists()


def _failure_message(result) -> str:
    failure = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"][0]
    return str(failure.event_specific_data.error.message)


@pytest.mark.slow  # two short trainings and one that returns at once (~60 s on a quiet machine)
def test_new_gated_rows_train_a_new_run_and_the_same_rows_return_the_finished_one(tiny_home, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(plugins))
    instance = dg.DagsterInstance.ephemeral()
    run = {"recipe": "tiny", "domains": ["plugged"], "steps": 2, "threads_per_process": 1}

    _write_train_set(tiny_home, "plugged", n=16)
    first = _materialize(tiny_home, run, instance)
    assert first.success
    a = first.asset_materializations_for_node("policy_checkpoint")[0].metadata
    assert a["resumed_from"].value == 0

    same = _materialize(tiny_home, run, instance)  # same rows, same recipe: the finished run is returned
    assert same.success
    b = same.asset_materializations_for_node("policy_checkpoint")[0].metadata
    assert b["checkpoint"].value == a["checkpoint"].value and b["mlflow_run_id"].value == a["mlflow_run_id"].value
    assert b["resumed_from"].value == 2

    # new gated data arrives (two more rows, a later passing evaluation): the same recipe trains anew
    _write_train_set(tiny_home, "plugged", n=18, evaluation="e2", evaluated_at="2026-11-29T00:00:01.000001+00:00")
    fresh = _materialize(tiny_home, run, instance)
    assert fresh.success
    c = fresh.asset_materializations_for_node("policy_checkpoint")[0].metadata
    assert c["checkpoint"].value != a["checkpoint"].value, "new rows must not return the earlier finished run"
    assert c["mlflow_run_id"].value != a["mlflow_run_id"].value and c["resumed_from"].value == 0
    assert b["data_fingerprint"].value == a["data_fingerprint"].value != c["data_fingerprint"].value
    assert c["data"].value["plugged"]["rows"] == 18 and c["data"].value["plugged"]["evaluation"] == "e2"

    # the checkpoint is traceable to its rows: MLflow run, LoggedModel, model version, lake row
    lake = Lake.at(tiny_home)
    client = MlflowClient(tracking_uri=lake.mlflow_uri)
    for meta in (a, c):
        fingerprint, checkpoint = meta["data_fingerprint"].value, meta["checkpoint"].value
        mlflow_run = client.get_run(meta["mlflow_run_id"].value)
        assert mlflow_run.data.tags["assay.data_fingerprint"] == fingerprint
        assert mlflow_run.data.params["data_fingerprint"] == fingerprint
        assert mlflow_run.data.params["data.plugged.fingerprint"]
        version = [v for v in client.search_model_versions("name='assay-policy'") if v.tags["checkpoint"] == checkpoint]
        assert [v.tags["data_fingerprint"] for v in version] == [fingerprint]
        model = [m for m in client.search_logged_models([mlflow_run.info.experiment_id]) if m.name == checkpoint]
        assert model[0].tags["assay.data_fingerprint"] == fingerprint
    rows = {r["checkpoint"]: r["data_fingerprint"] for r in lake.read("checkpoints").iter_rows(named=True)}
    assert rows == {a["checkpoint"].value: a["data_fingerprint"].value, c["checkpoint"].value: c["data_fingerprint"].value}


@pytest.mark.slow  # real ingest, three gate evaluations and two short trainings (~2 min on a quiet machine)
def test_a_domain_whose_latest_gates_failed_is_refused_until_a_good_batch_passes(tiny_home, tmp_path):
    from assets.quality import domain_train_set, gated_samples
    from assets.training import policy_checkpoint
    from domains import get_registry
    from assets.resources import default_resources
    from quality.ingest import ingest_file

    domain = get_registry().get("math_arith_easy")  # answer_pattern: an integer
    lake = Lake.at(tiny_home)
    resources = default_resources(str(tiny_home))
    instance = dg.DagsterInstance.ephemeral()
    train = {"recipe": "tiny", "domains": ["math_arith_easy"], "steps": 1, "threads_per_process": 1}

    def ingest(name: str, rows: list[tuple[str, str, str]]):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(json.dumps({"id": i, "prompt": p, "answer": a}) for i, p, a in rows) + "\n")
        return ingest_file(lake, domain, path)

    def gate():
        result = dg.materialize([gated_samples, domain_train_set], partition_key="math_arith_easy",
                                resources=resources, instance=instance, raise_on_error=False,
                                run_config={"ops": {"gated_samples": {"config": {"selftest_samples": 4,
                                                                                 "log_to_mlflow": False}}}})
        checks = {e.event_specific_data.check_name: e.event_specific_data.passed
                  for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"}
        built = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
        return checks, built

    def trained(result) -> dict:
        return {k: v.value for k, v in result.asset_materializations_for_node("policy_checkpoint")[0].metadata.items()}

    def sums(prefix: str, start: int) -> list[tuple[str, str, str]]:
        return [(f"{prefix}{k}", f"What is {k} plus {k + 3}?", str(2 * k + 3)) for k in range(start, start + 12)]

    assert ingest("good", sums("g", 10)).admitted == 12
    checks, built = gate()
    assert all(checks.values()) and "domain_train_set" in built, checks
    first = _materialize(tiny_home, train, instance)
    assert first.success
    first_checkpoint = trained(first)["checkpoint"]

    # a bad batch: answers that are not integers; its format gate fails (critical)
    assert ingest("bad", [(f"b{k}", f"What is {k} plus 1?", f"the number {k + 1}") for k in range(50, 56)]).admitted == 6
    checks, built = gate()
    assert checks["format_gate"] is False and "domain_train_set" not in built
    refused = _materialize(tiny_home, train, instance)
    assert not refused.success, "training must not fall back to the previous train set"
    message = _failure_message(refused)
    assert "domain math_arith_easy: latest batch failed gate format_gate (critical: " \
           "expect_column_values_to_match_regex(answer))" in message, message
    assert "fix the data and re-run the gates" in message

    # a good batch passes although the domain holds the bad one; training runs again, anew
    assert ingest("fixed", sums("f", 200)).admitted == 12
    checks, built = gate()
    assert all(checks.values()) and "domain_train_set" in built, checks
    again = _materialize(tiny_home, train, instance)
    assert again.success
    meta = trained(again)
    assert meta["checkpoint"] != first_checkpoint and meta["resumed_from"] == 0
    assert meta["data"]["math_arith_easy"]["rows"] == 24, "the accepted batches, not the rejected one"
    ids = set(lake.read("train_set", where={"domain": "math_arith_easy"})["id"].to_list())
    assert ids == {f"g{k}" for k in range(10, 22)} | {f"f{k}" for k in range(200, 212)}
