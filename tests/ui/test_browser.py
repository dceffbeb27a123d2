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
            text = visit(page, f"{url}/{path}", first)
            page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)
            assert "Traceback" not in text and "Error" not in text.replace("errors", ""), text[:2000]
            missing = [e for e in expected if e not in text]
            assert not missing, f"{name}: {missing} not visible in:\n{text[:3000]}"
    assert (ARTIFACTS / "dashboard-overview.png").stat().st_size > 10_000
