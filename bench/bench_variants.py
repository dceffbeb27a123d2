"""Fast variants: each method's decoding speed against its parent, in one run, on one machine.

For a parent checkpoint (default ``base-smollm2``) every chosen method's variant is made (or reused)
in ``--home``, then each side decodes the same chat-formatted prompts (eval items of the core
domains) in a fresh process (:mod:`evaluation.variant_speed`): tokens/s at batch 1 and at the
sweep's batch, median time to first token, peak RSS. The parent is timed first and again last; its
figures are the mean of both, and the drift between them is printed (a drift over ~10% means the
machine was not quiet and the ratios are weak). ``ratio_b1`` / ``ratio_batch``: a variant's
tokens/s over the parent's on its standard engine (the torch engine), the speedup a user gets.

For the GGUF methods the parent is also exported to GGUF f32 and timed on llama.cpp
(``parent-gguf-f32``): what quantization alone buys on the same engine, apart from what changing
engines buys.

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_variants --home /tmp/bench_variants

Equivalence (per-domain non-inferiority) is what ``assay variant`` measures; commands and verdicts
are in bench/RESULTS.md, "Fast variants".
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

DEFAULT_METHODS = ("int8", "gguf-q8_0", "gguf-q4_0", "spec-ngram", "spec-draft")
DEFAULT_DOMAINS = ("math_arith_easy", "gsm", "general_qa", "code", "strings")


def _load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def _gguf_f32_parent(lake, parent, variant_folder: Path) -> Path:
    """A variant-shaped folder serving the parent's f32 GGUF export on llama.cpp (bench only)."""
    from generation.gguf_export import export_gguf
    from generation.variants import MANIFEST

    folder = Path(lake.home) / "bench" / f"{parent.checkpoint}--gguf-f32"
    if not (folder / MANIFEST).exists():
        folder.mkdir(parents=True, exist_ok=True)
        export_gguf(parent.path, folder / "model.f32.gguf", quant="f32")
        for item in variant_folder.iterdir():
            if item.is_file() and item.suffix != ".gguf":
                shutil.copy2(item, folder / item.name)
        manifest = json.loads((folder / MANIFEST).read_text())
        manifest.update(variant=folder.name, artifact="model.f32.gguf", options={"bench": "parent exported to f32"})
        (folder / MANIFEST).write_text(json.dumps(manifest, indent=2))
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", default="/tmp/bench_variants", help="ASSAY_HOME of the bench (variants are kept)")
    parser.add_argument("--parent", default="base-smollm2")
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS))
    parser.add_argument("--domains", nargs="+", default=list(DEFAULT_DOMAINS))
    parser.add_argument("--prompts", type=int, default=16, help="prompts; the batch figure decodes all at once")
    parser.add_argument("--batch1", type=int, default=8, help="prompts timed one at a time")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--json", help="write the rows to this file too")
    args = parser.parse_args(argv)
    os.environ["ASSAY_HOME"] = args.home

    from domains import get_registry
    from evaluation.variant_config import VariantConfig
    from evaluation.variants import _measure_one, create_variant, speed_prompts
    from storage.lake import Lake
    from generation.variants import unavailable_reason

    lake = Lake.at(args.home)
    domains = get_registry().select(args.domains)
    prompts = speed_prompts(domains, args.prompts)
    prompts_file = Path(args.home) / "bench" / "prompts.json"
    prompts_file.parent.mkdir(parents=True, exist_ok=True)
    prompts_file.write_text(json.dumps(prompts))
    config = VariantConfig(speed_prompts=args.prompts, speed_batch1_prompts=args.batch1,
                           speed_new_tokens=args.new_tokens, dtype=args.dtype)

    sides: list[tuple[str, str]] = []
    parent = None
    for method in args.methods:
        problem = unavailable_reason(method)
        if problem:
            print(f"{method}: skipped, {problem}", file=sys.stderr)
            continue
        parent, record = create_variant(lake, lake.mlflow_uri, args.parent, config.model_copy(update={"method": method}),
                                        log=lambda m: print(m, file=sys.stderr))
        sides.append((method, record.path))
        if method.startswith("gguf-") and not any(name == "parent-gguf-f32" for name, _ in sides):
            sides.append(("parent-gguf-f32", str(_gguf_f32_parent(lake, parent, Path(record.path)))))
    if parent is None:
        print("no method can run here", file=sys.stderr)
        return 2

    print(f"load before: {_load()}", file=sys.stderr)
    first = _measure_one(parent.path, str(prompts_file), config, args.home)
    rows = [{"side": "parent", **first}]
    for name, path in sides:
        print(f"timing {name} ...", file=sys.stderr)
        rows.append({"side": name, **_measure_one(path, str(prompts_file), config, args.home)})
    last = _measure_one(parent.path, str(prompts_file), config, args.home)
    rows.append({"side": "parent (again)", **last})
    base = {k: (first[k] + last[k]) / 2 for k in ("tokens_per_s_batch1", "tokens_per_s_batch", "ttft_s")}
    drift = abs(first["tokens_per_s_batch1"] - last["tokens_per_s_batch1"]) / base["tokens_per_s_batch1"]
    print(f"load after: {_load()}; parent drift at batch 1 between first and last timing: {100 * drift:.1f}%",
          file=sys.stderr)
    header = (f"{'side':<18} {'engine':<40} {'tok/s b1':>9} {'ratio_b1':>8} {'tok/s b' + str(args.prompts):>10} "
              f"{'ratio_b':>8} {'ttft ms':>8} {'peak GiB':>9}")
    print(header)
    for row in rows:
        row["ratio_b1"] = row["tokens_per_s_batch1"] / base["tokens_per_s_batch1"]
        row["ratio_batch"] = row["tokens_per_s_batch"] / base["tokens_per_s_batch"]
        print(f"{row['side']:<18} {row['engine'][:40]:<40} {row['tokens_per_s_batch1']:>9.1f} {row['ratio_b1']:>8.2f} "
              f"{row['tokens_per_s_batch']:>10.1f} {row['ratio_batch']:>8.2f} {1000 * row['ttft_s']:>8.0f} "
              f"{row['peak_rss_gib']:>9.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "drift": drift, "load": _load()}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
