"""Assay's environment variables are each read in the one module ARCHITECTURE.md names for them.

An AST scan of every project module: a read of ``os.environ`` / ``os.getenv`` whose key is an
``ASSAY_*`` literal or a module-level ``*_ENV`` constant must sit in one of the modules below, the
edges where configuration enters (a deployment profile, a home, a plugin path, a sandbox policy).
Writes (a child process's environment) are not reads and are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("storage", "sandbox", "domains", "generation", "quality", "training", "evaluation", "assets", "pipelines", "ui")
READERS = {  # module -> why it reads the environment (ARCHITECTURE.md "Configuration")
    "storage/home.py": "ASSAY_HOME",
    "storage/deployment.py": "ASSAY_PROFILE, ASSAY_PROFILE_FILE, ASSAY_POSTGRES_URL, ASSAY_S3_*, ASSAY_LAKE_CATALOG",
    "storage/tracking.py": "ASSAY_MLFLOW_UI_URL",
    "generation/vllm_server.py": "ASSAY_VLLM_SERVER_URL",
    "generation/device.py": "ASSAY_EMULATED_BF16",
    "domains/registry.py": "ASSAY_DOMAINS_PATH",
    "domains/importers/harbor.py": "ASSAY_IMAGE_CACHE",
    "domains/shipped_data.py": "ASSAY_SHIPPED_DATA_DIR",
    "sandbox/isolation.py": "ASSAY_SANDBOX_*, ASSAY_UNSAFE_LOCAL_EXEC, ASSAY_BUILD_CA_BUNDLE",
    "pipelines/instance.py": "ASSAY_MAX_CONCURRENT_RUNS, ASSAY_POOL_*",
}


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" or isinstance(node, ast.Name) and node.id == "environ"


def _assay_key(node: ast.AST, constants: dict[str, str]) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("ASSAY_"):
        return node.value
    if isinstance(node, ast.Name) and (node.id in constants or node.id.endswith("_ENV")):
        return constants.get(node.id, node.id)
    return None


def environment_reads(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), str(path))
    constants = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign)
                 and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                 for t in n.targets if isinstance(t, ast.Name) and n.value.value.startswith("ASSAY_")}
    reads = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "get" and _is_environ(func.value)) or \
                    (isinstance(func, ast.Attribute) and func.attr == "getenv"):
                key = _assay_key(node.args[0], constants)
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and _is_environ(node.value):
            key = _assay_key(node.slice, constants)
        if key:
            reads.append((node.lineno, key))
    return reads


def test_each_assay_variable_is_read_only_in_its_module():
    strays = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in READERS:
                continue
            strays += [f"{rel}:{line} reads {key}" for line, key in environment_reads(path)]
    assert not strays, "read these through the module ARCHITECTURE.md names (tests/test_environment_reads.py):\n" \
        + "\n".join(strays)


def test_the_scan_finds_a_stray_read(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text('import os\nHOME = "ASSAY_HOME"\nSOME_ENV = "ASSAY_X"\n'
                     'a = os.environ.get("ASSAY_HOME")\nb = os.environ[SOME_ENV]\nc = os.getenv(HOME)\n'
                     'os.environ["ASSAY_HOME"] = "/tmp"  # a write: not a read\n')
    assert environment_reads(probe) == [(4, "ASSAY_HOME"), (5, "ASSAY_X"), (6, "ASSAY_HOME")]
