"""storage.tracking against a real MLflow SQLite store: the experiment's get-or-create under
concurrent creators, the champion alias, metric batches, the scoped global tracking URI."""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path

import pytest

ROUNDS = 12
CREATORS = 6


def _fresh_store(template: Path, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(template, folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


def _via_tracking(uri: str, artifacts: str) -> str:
    from storage import tracking

    return tracking.experiment_id(uri, artifact_root=artifacts)


def _via_resource(uri: str, artifacts: str) -> str:
    from assets.resources import MlflowResource

    return MlflowResource(tracking_uri=uri, artifact_root=artifacts).experiment_id()


@pytest.mark.parametrize("get_or_create", [_via_tracking, _via_resource], ids=["tracking", "MlflowResource"])
def test_concurrent_creators_of_the_experiment_all_get_one_id(get_or_create, tmp_path, empty_mlflow_db, monkeypatch):
    """Threads released together on a fresh store: each finds no experiment and creates it, the
    store's unique constraint rejects all but one, and every loser must still get that one id."""
    from mlflow.tracking import MlflowClient

    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads between get and create, as separate processes would
    try:
        for r in range(ROUNDS):
            uri = _fresh_store(empty_mlflow_db, tmp_path / f"round{r}")
            MlflowClient(tracking_uri=uri).search_experiments()  # the store is open before the race
            barrier, results = threading.Barrier(CREATORS), []

            def create():
                barrier.wait(timeout=60)
                try:
                    results.append(get_or_create(uri, str(tmp_path / "artifacts")))
                except Exception as exc:  # noqa: BLE001 - collected and reported below
                    results.append(f"{type(exc).__name__}: {exc}"[:300])

            threads = [threading.Thread(target=create) for _ in range(CREATORS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=120)
            ids = {e.experiment_id for e in MlflowClient(tracking_uri=uri).search_experiments()
                   if e.name == "assay"}
            assert len(ids) == 1, f"round {r}: experiments named assay: {ids}"
            assert results == [ids.pop()] * CREATORS, f"round {r}: {results}"
    finally:
        sys.setswitchinterval(previous)


def _create_in_process(uris: list[str], artifacts: str, barrier, out) -> None:
    """For each fresh store in turn: wait for the other process, then get-or-create through the
    resource every Dagster run uses (two runs starting at once on a new ASSAY_HOME)."""
    from mlflow.tracking import MlflowClient

    from assets.resources import MlflowResource

    for uri in uris:
        MlflowClient(tracking_uri=uri).search_experiments()
        barrier.wait(timeout=120)
        try:
            out.put((uri, MlflowResource(tracking_uri=uri, artifact_root=artifacts).experiment_id()))
        except Exception as exc:  # noqa: BLE001 - reported by the test
            out.put((uri, f"{type(exc).__name__}: {exc}"[:300]))


def test_two_processes_creating_the_experiment_on_fresh_stores_get_the_same_id(tmp_path, empty_mlflow_db):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    uris = [_fresh_store(empty_mlflow_db, tmp_path / f"round{r}") for r in range(ROUNDS)]
    barrier, out = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_create_in_process, args=(uris, str(tmp_path / "artifacts"), barrier, out))
             for _ in range(2)]
    for p in procs:
        p.start()
    got: dict[str, list[str]] = {}
    for _ in range(2 * len(uris)):
        uri, answer = out.get(timeout=300)
        got.setdefault(uri, []).append(answer)
    for p in procs:
        p.join(timeout=60)
    for uri, answers in got.items():
        assert len(set(answers)) == 1 and answers[0].isdigit(), f"{uri}: {answers}"


def test_a_run_logs_more_metrics_than_one_mlflow_batch_holds_and_ends_failed_on_error(tmp_path, empty_mlflow_db):
    from storage import tracking

    uri = _fresh_store(empty_mlflow_db, tmp_path / "store")
    tracker = tracking.Tracker(uri, str(tmp_path / "artifacts"))
    metrics = {f"score/d{i:04d}": i / 2500 for i in range(2500)}  # MLflow takes 1000 per batch
    with tracker.run("many", params={f"p{i}": i for i in range(150)}, tags={"assay.kind": "test"}):
        tracker.log_metrics(3, {**metrics, "nan": float("nan"), "none": None})
        tracker.log_text("| a |\n|---|\n| 1 |", "table.md")
    run = tracking.client(uri).get_run(tracker.run_id)
    assert run.info.status == "FINISHED" and run.info.experiment_id == tracking.experiment_id(uri)
    assert run.data.metrics == metrics  # NaN and None are absent, not logged as numbers
    assert len(run.data.params) == 150 and run.data.tags["assay.kind"] == "test"
    with pytest.raises(RuntimeError, match="boom"):
        with tracker.run("broken"):
            raise RuntimeError("boom")
    assert tracking.client(uri).get_run(tracker.run_id).info.status == "FAILED"


def test_the_global_tracking_uri_is_set_only_inside_the_block(tmp_path, monkeypatch):
    import mlflow

    from storage import tracking

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(None)
    inside = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking.global_tracking_uri(inside):
        assert mlflow.get_tracking_uri() == inside
    assert not mlflow.tracking.is_tracking_uri_set()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    with tracking.global_tracking_uri(inside):
        assert mlflow.get_tracking_uri() == inside
    assert mlflow.get_tracking_uri() == "sqlite:///elsewhere.db"
    mlflow.set_tracking_uri(None)
