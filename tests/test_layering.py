"""The import rules of ARCHITECTURE.md, as import-linter contracts (pyproject.toml), hold.

The second test proves the checks can fail: the packages copied elsewhere with an upward import
added (storage importing training) must break the layers contract, and the dashboard importing the
registry itself (not through evaluation's readers) must break the dashboard's contract.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("storage", "sandbox", "domains", "generation", "quality", "training", "evaluation", "assets", "pipelines", "ui")
LINT = Path(sys.executable).with_name("lint-imports")


def _lint(cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache"], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_hold():
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout and "Stages import downward" in done.stdout


def test_an_upward_import_breaks_the_layers_contract(tmp_path):
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "storage" / "upward.py").write_text("def probe():\n    from training import trainer  # lazy, still an import\n")
    (tmp_path / "ui" / "sideways.py").write_text("from domains.registry import get_registry\n")  # past the readers
    done = _lint(tmp_path)
    assert done.returncode != 0
    assert "storage.upward -> training.trainer" in done.stdout, done.stdout[-4000:]
    assert "ui.sideways -> domains.registry" in done.stdout, done.stdout[-4000:]
    assert "The dashboard reads only storage and evaluation's readers" in done.stdout


def private_imports(root: Path = ROOT) -> list[str]:
    """``from a.b import _name`` of a private function, class or constant from another module.
    A private *module* of a package (``domains.builtin._long_text``) imported within that package
    is allowed: it is the package's own helper."""
    import ast

    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            here = ".".join(rel.with_suffix("").parts[:-1])
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                        and node.module.split(".")[0] in PACKAGES):
                    continue
                for alias in node.names:
                    if not alias.name.startswith("_") or alias.name.startswith("__"):
                        continue
                    is_module = (root / Path(*node.module.split(".")) / f"{alias.name}.py").exists()
                    if not (is_module and node.module == here):
                        found.append(f"{rel}:{node.lineno} imports {node.module}.{alias.name}")
    return found


def test_no_module_imports_another_modules_private_names(tmp_path):
    assert private_imports() == []
    (tmp_path / "storage").mkdir()
    (tmp_path / "storage" / "probe.py").write_text("from storage.lake import _connect\n")
    assert private_imports(tmp_path) == ["storage/probe.py:1 imports storage.lake._connect"]
