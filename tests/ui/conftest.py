"""A small fixture lake written through the real Lake (tables per storage/tables.py) plus a
real MLflow SQLite store with a run and metrics; shared by the UI tests of this folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from ui.synthetic import SyntheticSpec, write_registry_plugin, write_synthetic_lake

REPO = Path(__file__).resolve().parents[2]
APP = str(REPO / "ui" / "app.py")
SPEC = SyntheticSpec(domains=8, checkpoints=3, items=12, k=2, train_items=16, training_steps=6, seed=7,
                     prefix="fx")


@pytest.fixture(scope="session")
def fixture_lake(tmp_path_factory) -> dict:
    home = tmp_path_factory.mktemp("ui_lake") / "assay_home"
    summary = write_synthetic_lake(home, SPEC)
    plugins = write_registry_plugin(home.parent / "plugins", SPEC).parent
    return {"home": home, "plugins": plugins, **summary}


@pytest.fixture
def lake_env(fixture_lake, monkeypatch) -> dict:
    """ASSAY_HOME and ASSAY_DOMAINS_PATH pointing at the fixture lake for this test."""
    monkeypatch.setenv("ASSAY_HOME", str(fixture_lake["home"]))
    monkeypatch.setenv("ASSAY_DOMAINS_PATH", str(fixture_lake["plugins"]))
    return fixture_lake


@pytest.fixture
def empty_env(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "empty_home"
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.delenv("ASSAY_DOMAINS_PATH", raising=False)
    return home


def fresh_app():
    """An AppTest of the router with cleared data caches (tests share one process)."""
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    st.cache_data.clear()
    return AppTest.from_file(APP, default_timeout=60)


