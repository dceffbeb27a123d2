"""The served app in headless Chromium: every page loads and shows what a person should see."""

from __future__ import annotations

import pytest

from pathlib import Path

from tests.ui.serve import CHROMIUM, REPO, chromium_page, served_app, visit

ARTIFACTS = REPO / "tests" / ".artifacts"


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_every_page_in_chromium(lake_env):
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: run `make test-deps` (apt-get install -y chromium) "
                    "or set ASSAY_CHROMIUM to a Chromium binary")
    domain = lake_env["domains"][2]
    env = {"ASSAY_HOME": str(lake_env["home"]), "ASSAY_DOMAINS_PATH": str(lake_env["plugins"])}
    checks = {
        "overview": ("", "Assay quality overview",
                     ["Improved", "Regressed", "Unchanged", "Gate failures (24 h)", "Champion:",
                      lake_env["champion"], "Domains on this page"]),
        "domain": (f"domain?domain={domain}", "Latest regression verdict",
                   ["Data quality", "Items lost / gained", "MDE", "Gate pass rate per evaluation",
                    "Difficulty of train items", "Quarantined rows (newest)", "safety@acme", "protected"]),
        "training": ("training", "Zero-variance groups",
                     ["Tokens/s (median)", "open in MLflow", "synth-grpo", "Mean reward", "KL to reference"]),
        "regressions": ("regressions", "Domains compared",
                        ["Protected regressions", "Comparison (newest first)", lake_env["checkpoints"][-1]]),
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with served_app(env) as url, chromium_page() as page:
        for name, (path, first, expected) in checks.items():
            text = visit(page, f"{url}/{path}", first, expect=tuple(expected))
            page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)
            assert "Traceback" not in text and "Error" not in text.replace("errors", ""), text[:2000]
            missing = [e for e in expected if e not in text]
            assert not missing, f"{name}: {missing} not visible in:\n{text[:3000]}"
    assert (ARTIFACTS / "dashboard-overview.png").stat().st_size > 10_000


@pytest.mark.browser
@pytest.mark.timeout(300)
def test_measured_difficulty_view_in_chromium(tmp_path):
    """A domain with pass rates of two checkpoints shows one histogram panel per checkpoint (the
    champion marked); a domain without any says which command fills it."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: run `make test-deps` (apt-get install -y chromium) "
                    "or set ASSAY_CHROMIUM to a Chromium binary")
    import polars as pl

    from storage import tables as T
    from storage.lake import Lake
    from ui.synthetic import SyntheticSpec, write_registry_plugin

    spec = SyntheticSpec(domains=2, prefix="pr")
    home = tmp_path / "home"
    lake = Lake.at(home)
    plugins = write_registry_plugin(tmp_path / "plugins", spec).parent
    for checkpoint, passes in (("base-tiny", [0, 1, 1, 2, 4]), ("c1", [1, 2, 3, 3, 4])):
        rows = [{"checkpoint": checkpoint, "domain": "pr_000", "item_id": f"train-{i}", "samples": 4, "passes": n,
                 "pass_rate": n / 4, "mean_score": n / 4, "gen_config": "g4", "gen_params": '{"temperature": 1.0}',
                 "engine": "torch:test", "created_at": "2026-11-01T00:00:00+00:00"} for i, n in enumerate(passes)]
        lake.write_batch("pass_rates", {"checkpoint": checkpoint, "domain": "pr_000", "batch": "b"},
                         {"part": T.conform(pl.DataFrame(rows), T.PASS_RATES)})
    lake.write_batch("promotions", {"decision": "p1"}, {"part": T.conform(pl.DataFrame([
        {"decision": "p1", "candidate": "c1", "previous_champion": "base-tiny", "promoted": True, "reason": "test",
         "created_at": "2026-11-01T06:00:00+00:00"}]), T.PROMOTIONS)})
    env = {"ASSAY_HOME": str(home), "ASSAY_DOMAINS_PATH": str(plugins)}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with served_app(env) as url, chromium_page() as page:
        text = visit(page, f"{url}/domain?domain=pr_000", "Difficulty measured on the policy")
        assert "Traceback" not in text, text[:2000]
        histogram = page.locator("[data-testid='stVegaLiteChart']").filter(
            has_text="Pass rate of the train items per policy checkpoint")
        assert histogram.count() == 1, text[-3000:]
        histogram.scroll_into_view_if_needed()
        drawn = histogram.inner_text()
        for panel in ("1. base-tiny (base policy)", "2. c1 (current champion)", "all fail", "all pass"):
            assert panel in drawn, (panel, drawn)
        assert histogram.locator("g.mark-rect path").count() >= 8  # bars drawn: 5 + 5 items, some share a bar
        histogram.screenshot(path=str(ARTIFACTS / "dashboard-pass-rates.png"))
        text = visit(page, f"{url}/domain?domain=pr_001", "Difficulty measured on the policy")
        assert "assay difficulty pr_001 --policy champion" in text, text[-3000:]
        assert page.locator("[data-testid='stVegaLiteChart']").filter(
            has_text="Pass rate of the train items").count() == 0
