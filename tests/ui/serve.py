"""Serve the dashboard with `streamlit run` on a free localhost port and drive Debian's chromium
with Playwright (no browser download) (executable_path points at the system chromium).

Also regenerates the README screenshot, from the lake of a real ``make demo`` run (``--home``) or
from a synthetic lake (no ``--home``)::

    .venv/bin/python -m tests.ui.serve --home .assay --screenshot docs/dashboard.png
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("ASSAY_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def served_app(env: dict[str, str], timeout_s: float = 60.0):
    """Yield the base URL of `streamlit run ui/app.py` started with ``env``; stop it afterwards."""
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    cmd = [sys.executable, "-m", "streamlit", "run", str(REPO / "ui" / "app.py"), "--server.headless", "true",
           "--server.address", "127.0.0.1", "--server.port", str(port), "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=REPO, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"streamlit exited with {proc.returncode}: {Path(log.name).read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"streamlit did not answer on {url} within {timeout_s:.0f} s")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        os.unlink(log.name)


@contextlib.contextmanager
def chromium_page(width: int = 1440, height: int = 1000):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


def visit(page, url: str, must_show: str, settle_s: float = 2.0, timeout_ms: int = 60_000,
          expect: tuple[str, ...] = ()) -> str:
    """Load ``url``, wait until ``must_show`` is visible and a little longer (late errors render
    after the first paint), and return the text a person sees; with ``expect``, keep reading until
    all of those texts are there or ``timeout_ms`` passed (a loaded machine paints a page in parts)."""
    import time

    page.goto(url)
    page.get_by_text(must_show, exact=False).first.wait_for(state="visible", timeout=timeout_ms)
    with contextlib.suppress(Exception):  # the spinner may already be gone
        page.wait_for_selector("[data-testid='stStatusWidget']", state="detached", timeout=timeout_ms)
    page.wait_for_timeout(int(settle_s * 1000))
    text = page.inner_text("body")
    deadline = time.monotonic() + timeout_ms / 1000
    while any(e not in text for e in expect) and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        text = page.inner_text("body")
    return text


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Screenshot the dashboard on a lake (a synthetic one by default)")
    parser.add_argument("--home", default="", help="ASSAY_HOME of a real run (e.g. after make demo); "
                                                   "unset: a synthetic lake")
    parser.add_argument("--screenshot", default="docs/dashboard.png")
    parser.add_argument("--page", default="", help="url path, e.g. 'domain?domain=demo_002'")
    parser.add_argument("--domains", type=int, default=24)
    parser.add_argument("--checkpoints", type=int, default=8)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from ui.synthetic import SyntheticSpec, write_registry_plugin, write_synthetic_lake

    with tempfile.TemporaryDirectory() as tmp:
        if args.home:
            env = {"ASSAY_HOME": str(Path(args.home).resolve())}
        else:
            spec = SyntheticSpec(domains=args.domains, checkpoints=args.checkpoints, items=40, k=2, prefix="demo")
            home = Path(tmp) / "home"
            write_synthetic_lake(home, spec)
            plugins = write_registry_plugin(Path(tmp) / "plugins", spec).parent
            env = {"ASSAY_HOME": str(home), "ASSAY_DOMAINS_PATH": str(plugins)}
        with served_app(env) as url, chromium_page(1600, 1250) as page:
            visit(page, f"{url}/{args.page}", "Assay quality overview" if not args.page else "Domain", 3.0)
            out = Path(args.screenshot)
            out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(out), full_page=False)
            print(out)

if __name__ == "__main__":
    main()
