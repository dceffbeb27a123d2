"""The served app in headless Chromium: every page loads and shows what a person should see, and
every chart shows its titles whole at the widths people use."""

from __future__ import annotations

import contextlib
import re

import pytest

from pathlib import Path

from tests.ui.serve import CHROMIUM, REPO, chromium_page, served_app, visit

ARTIFACTS = REPO / "tests" / ".artifacts"
WIDTHS = (1440, 1024)
SLACK_PX = 1.0  # sub-pixel rounding of text boxes

# Every chart's title texts as drawn (vega-embed renders Altair charts as SVG): the chart's title,
# axis, legend and facet-header titles, with the box of the chart's element and each axis's scale
# type (from Vega's aria-label: "Y-axis titled '...' for a linear scale ...").
MEASURE_CHARTS = """() => Array.from(document.querySelectorAll("[data-testid='stVegaLiteChart']")).map((chart, index) => {
  const box = (el) => { const b = el.getBoundingClientRect(); return {x: b.left, y: b.top, r: b.right, b: b.bottom}; };
  const texts = [];
  for (const t of chart.querySelectorAll('svg g.mark-text text')) {
    const role = [...t.closest('g.mark-text').classList].find(c => c.startsWith('role-')) || '';
    if (!role.includes('title') || !t.textContent.trim()) continue;
    texts.push({role: role.slice(5), text: t.textContent, ...box(t)});
  }
  const axes = Array.from(chart.querySelectorAll('svg g.role-axis[aria-label]')).map(a => a.getAttribute('aria-label'));
  return {index, box: box(chart), texts, axes, view: {w: window.innerWidth}};
})"""


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
                     ["Tokens/s (median)", "open in MLflow", "synth-grpo", "Mean reward", "KL to reference",
                      "Held-out validation", "Forgetting"]),
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


def _overlap(a: dict, b: dict) -> float:
    """Area shared by two boxes (0 when they only touch)."""
    width = min(a["r"], b["r"]) - max(a["x"], b["x"])
    height = min(a["b"], b["b"]) - max(a["y"], b["y"])
    return max(0.0, width - SLACK_PX) * max(0.0, height - SLACK_PX)


def title_problems(charts: list[dict]) -> list[str]:
    """What a person would see wrong with the charts of one page: a chart without a title, a title
    cut by its chart's box or the window, two titles over each other or a title under another chart,
    a numeric axis whose title gives no unit ('quantity (unit)')."""
    problems = []
    for chart in charts:
        name = next((t["text"] for t in chart["texts"] if t["role"] == "title-text"), None)
        label = f"chart {chart['index'] + 1} ({name or 'untitled'})"
        if name is None:
            problems.append(f"{label}: no title")
        box = chart["box"]
        for t in chart["texts"]:
            cut = [side for side, out in (("left", t["x"] < box["x"] - SLACK_PX), ("right", t["r"] > box["r"] + SLACK_PX),
                                          ("top", t["y"] < box["y"] - SLACK_PX),
                                          ("bottom", t["b"] > box["b"] + SLACK_PX)) if out]
            if t["x"] < -SLACK_PX or t["r"] > chart["view"]["w"] + SLACK_PX:
                cut.append("window")
            if t["text"].endswith("…"):  # Vega shortened it to its limit
                cut.append("end (shortened with '…')")
            if cut:
                problems.append(f"{label}: {t['role']} {t['text']!r} cut at the {'/'.join(cut)} edge "
                                f"(text {t['x']:.0f}..{t['r']:.0f} x {t['y']:.0f}..{t['b']:.0f}, chart "
                                f"{box['x']:.0f}..{box['r']:.0f} x {box['y']:.0f}..{box['b']:.0f})")
        texts = chart["texts"]
        for i, a in enumerate(texts):
            for b in texts[i + 1:]:
                if _overlap(a, b):
                    problems.append(f"{label}: {a['role']} {a['text']!r} overlaps {b['role']} {b['text']!r}")
        for other in charts:
            if other is chart:
                continue
            for t in texts:
                if _overlap(t, other["box"]):
                    problems.append(f"{label}: {t['role']} {t['text']!r} lies under chart {other['index'] + 1}")
        for axis in chart["axes"]:
            found = re.match(r"([XY])-axis titled '(.*)' for a (\w+) scale", axis)
            if found and found.group(3) in ("linear", "log", "pow", "sqrt", "symlog") and "(" not in found.group(2):
                problems.append(f"{label}: {found.group(1)} axis {found.group(2)!r} gives no unit: write 'quantity (unit)'")
            elif not found and "-axis titled" not in axis:
                problems.append(f"{label}: an axis without a title ({axis})")
    return problems


def full_page_screenshot(page, path: Path) -> None:
    """Streamlit scrolls inside its main block, not the document: grow the window to the content's
    height for the shot, then put it back."""
    size = page.viewport_size
    height = page.evaluate("() => Math.max(...Array.from(document.querySelectorAll("
                           "\"[data-testid='stMain'], [data-testid='stMainBlockContainer'], section.main\"))"
                           ".map(e => e.scrollHeight), document.body.scrollHeight)")
    page.set_viewport_size({"width": size["width"], "height": min(int(height) + 80, 12_000)})
    page.wait_for_timeout(1500)  # charts re-fit to the new window
    page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(size)


def wait_for_charts(page, timeout_s: float = 60.0) -> None:
    """Until every chart element holds a drawn SVG and the count is stable (a loaded machine paints late)."""
    import time

    deadline, last = time.monotonic() + timeout_s, -1
    while time.monotonic() < deadline:
        state = page.evaluate("() => Array.from(document.querySelectorAll(\"[data-testid='stVegaLiteChart']\"))"
                              ".map(c => !!c.querySelector('svg g.mark-text, svg g.mark-line, svg g.mark-rect'))")
        if all(state) and len(state) == last:
            return
        last = len(state) if all(state) else -1
        page.wait_for_timeout(1000)


@pytest.mark.browser
@pytest.mark.timeout(600)
def test_every_chart_on_every_page_shows_its_titles_whole_at_1440_and_1024_px(lake_env):
    """Walks the sidebar's pages (a new page is checked without editing this test) at both widths:
    no title cut by its chart or the window, none over another, every chart titled, every numeric
    axis with its unit. Screenshots of each page at each width go to tests/.artifacts/."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: run `make test-deps` (apt-get install -y chromium) "
                    "or set ASSAY_CHROMIUM to a Chromium binary")
    env = {"ASSAY_HOME": str(lake_env["home"]), "ASSAY_DOMAINS_PATH": str(lake_env["plugins"])}
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    problems, charts_seen, shots = [], 0, []
    with served_app(env) as url:
        for width in WIDTHS:
            with chromium_page(width=width) as page:
                visit(page, url, "Assay quality overview")
                links = page.eval_on_selector_all(  # innerText's first lines are the icon's name
                    "[data-testid='stSidebarNav'] a", "links => links.map(a => [a.innerText.trim().split('\\n').pop(), a.href])")
                assert len(links) >= 5, links
                for name, href in links:
                    page.goto(href)
                    page.locator("h1").first.wait_for(timeout=60_000)
                    with contextlib.suppress(Exception):  # the run indicator may already be gone
                        page.wait_for_selector("[data-testid='stStatusWidget']", state="detached", timeout=60_000)
                    wait_for_charts(page)
                    errors = page.locator("[data-testid='stException']")
                    if errors.count():
                        problems.append(f"{name} at {width} px: the page failed: {errors.first.inner_text()[:1500]}")
                    charts = page.evaluate(MEASURE_CHARTS)
                    charts_seen += len(charts)
                    problems += [f"{name} at {width} px: {p}" for p in title_problems(charts)]
                    shot = ARTIFACTS / f"dashboard-{re.sub(r'[^a-z0-9]+', '-', name.lower())}-{width}.png"
                    full_page_screenshot(page, shot)
                    shots.append(shot)
    assert charts_seen >= 2 * 10, f"only {charts_seen} charts drawn over {len(WIDTHS)} widths"
    assert not problems, "\n".join(problems)
    assert all(shot.stat().st_size > 10_000 for shot in shots)
