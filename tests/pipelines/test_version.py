"""`assay --version`: the version, the commit of the checkout it runs from (clean or dirty), and
where ASSAY_HOME points; fast, importing nothing heavy."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from tests.conftest import REPO


def version(cwd, env=None, *extra: str) -> subprocess.CompletedProcess:
    import os

    full = {k: v for k, v in os.environ.items() if k != "ASSAY_HOME"}
    full.update(env or {})
    return subprocess.run([sys.executable, "-m", "pipelines.cli", "--version", *extra], capture_output=True,
                          text=True, cwd=cwd, env=full, timeout=60)


def test_version_names_the_commit_of_a_clean_checkout_and_where_assay_home_points(tmp_path):
    clone = tmp_path / "assay"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    commit = subprocess.run(["git", "-C", str(clone), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    home = tmp_path / "home"
    out = version(clone, {"ASSAY_HOME": str(home)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"assay {metadata.version('assay')}",
        f"commit {commit} (clean) in checkout {clone}",
        f"ASSAY_HOME {home} (from $ASSAY_HOME; not created yet)",
    ]
    (clone / "README.md").write_text("changed\n")
    out = version(clone)  # ASSAY_HOME unset: .assay in the working directory
    lines = out.stdout.splitlines()
    assert lines[1] == f"commit {commit} (dirty: uncommitted changes to tracked files) in checkout {clone}"
    assert lines[2] == f"ASSAY_HOME {clone / '.assay'} ($ASSAY_HOME unset: .assay in the working directory; " \
                       "not created yet)"


def test_version_is_fast_and_imports_nothing_heavy():
    code = ("import sys, time\nfrom pipelines.cli import main\nt = time.monotonic()\n"
            "try:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "print(round(time.monotonic() - t, 3), [m for m in ('torch', 'deepspeed', 'great_expectations', "
            "'transformers', 'dagster', 'mlflow', 'polars', 'duckdb') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    seconds, heavy = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert heavy == "[]", out.stdout
    assert float(seconds) < 2.0, out.stdout
