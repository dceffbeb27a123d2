"""Sweep throughput on SmolLM2-135M-Instruct per engine, the speed-up of a cached re-run, and
generation throughput of each engine vs transformers ``generate`` at batch 8 and 32.

In one process, on the same prompts (the domains' eval items, chat-formatted):

1. per backend (``--backends torch vllm``): a cold sweep (``evaluation.sweep.run_sweep``:
   generation, scoring, lake commits per batch) of a few built-in domains, each into a fresh lake:
   items/s and completion tokens/s, engine start timed apart;
2. the first backend's sweep again: everything comes from the lake cache (the model is not even
   loaded); the speed-up is cold wall time / cached wall time;
3. generation throughput (``--batches 8 32``): greedy, ``--gen-tokens`` new tokens, the same
   prompt batches, the same dtype: transformers ``model.generate`` (sdpa, left padding), Assay's
   torch engine and the vLLM engine, one warm-up call each, then ``--reps`` timed calls per engine
   interleaved round by round; completion tokens (up to and including EOS, each engine's own
   count) / median seconds. The ratio of each engine to ``generate`` is the figure the sweep target
   is about (>= 1.5x at batch 8 and 32, same dtype).

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_sweep [--domains math_arith_easy gsm strings]
     [--limit 8] [--samples 2] [--max-new-tokens 32] [--model-home DIR] [--backends torch vllm] [--json]
``--model-home``: an ASSAY_HOME whose models/smollm2 is already converted (else it is converted
once into the bench's temporary home, ~20 s). The lakes are fresh temporary folders every run.
Benchmark on a quiet machine only (the load average is printed): under contention the engines
slow down unevenly.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path


def _load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def _completion_tokens(rows, eos: set[int]) -> int:
    """Tokens of each completion up to and including its first EOS (as the engines count)."""
    return sum(next((j + 1 for j, t in enumerate(row) if t in eos), len(row)) for row in rows)


def generation_throughput(torch_engine, vllm_engine, prompts: list[str], batches: list[int], new_tokens: int,
                          reps: int) -> list[dict]:
    """Greedy tokens/s of transformers ``generate``, the torch engine and vLLM on the same batches."""
    import statistics

    import torch

    from generation.contract import SamplingParams
    from generation.torch_engine import eos_token_ids

    model, tok = torch_engine.model, torch_engine.tokenizer
    eos = eos_token_ids(model, tok)
    params = SamplingParams(max_new_tokens=new_tokens)

    def hf(batch):
        enc = tok(batch, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            out = model.generate(**enc, max_new_tokens=new_tokens, do_sample=False, pad_token_id=tok.pad_token_id)
        return _completion_tokens(out[:, enc["input_ids"].shape[1]:].tolist(), eos)

    def ours(engine):
        return lambda batch: sum(g[0].completion_tokens for g in engine.generate(batch, params))

    arms = {"transformers generate": hf, "assay torch engine": ours(torch_engine)}
    if vllm_engine is not None:
        arms["vllm"] = ours(vllm_engine)
    rows = []
    for size in batches:
        batch = [prompts[i % len(prompts)] for i in range(size)]
        times: dict[str, list[float]] = {name: [] for name in arms}
        tokens: dict[str, int] = {}
        for name, run in arms.items():  # warm-up
            tokens[name] = run(batch)
        for _ in range(reps):  # interleaved, so a burst of load hits every engine alike
            for name, run in arms.items():
                began = time.perf_counter()
                tokens[name] = run(batch)
                times[name].append(time.perf_counter() - began)
        base = tokens["transformers generate"] / statistics.median(times["transformers generate"])
        for name in arms:
            rate = tokens[name] / statistics.median(times[name])
            rows.append({"batch": size, "engine": name, "tokens": tokens[name],
                         "median_s": statistics.median(times[name]), "tokens_per_s": rate,
                         "ratio_vs_generate": rate / base})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domains", nargs="+", default=["math_arith_easy", "gsm", "strings"])
    parser.add_argument("--limit", type=int, default=8, help="items per domain")
    parser.add_argument("--samples", type=int, default=2, help="K samples per item")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-items", type=int, default=8)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--model-home", help="ASSAY_HOME holding an already converted models/smollm2")
    parser.add_argument("--backends", nargs="+", default=["torch", "vllm"], choices=("torch", "vllm"),
                        help="engines to sweep with (the first one's sweep is also re-run from the cache)")
    parser.add_argument("--batches", nargs="+", type=int, default=[8, 32], help="generation throughput batch sizes")
    parser.add_argument("--gen-tokens", type=int, default=32, help="new tokens in the generation throughput runs")
    parser.add_argument("--reps", type=int, default=3, help="timed calls per engine and batch size")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()
    load_start = _load()

    import torch

    from domains import get_registry
    from evaluation.sweep import SweepConfig, run_sweep
    from storage.lake import Lake
    from generation.factory import make_engine
    from generation.policy import ensure_smollm2
    from generation.prompts import prompt_format_of_folder

    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    registry = get_registry()
    domains = registry.select(names=args.domains)
    for domain in domains:  # build the eval sets before any timing (the first call per domain pays for it)
        domain.eval_items()
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        home = Path(tmp)
        if args.model_home:
            (home / "models").mkdir(parents=True)
            os.symlink(Path(args.model_home).resolve() / "models" / "smollm2", home / "models" / "smollm2")
        model_dir = ensure_smollm2(home)
        config = SweepConfig(samples=args.samples, limit=args.limit, max_new_tokens=args.max_new_tokens,
                             batch_items=args.batch_items, progress=False)
        prompt_format = prompt_format_of_folder(model_dir)  # as sweep_checkpoint does: no model load to key the cache
        engines, sweeps = {}, []
        for backend in args.backends:
            lake = Lake.at(home / f"lake-{backend}")
            loads = []

            def factory(backend=backend, loads=loads):
                began = time.perf_counter()
                options = {"max_batch_size": 64} if backend == "torch" else {}
                engines[backend] = make_engine(str(model_dir), backend, dtype=args.dtype, home=str(home), **options)
                loads.append(time.perf_counter() - began)
                return engines[backend]

            began = time.perf_counter()
            cold = run_sweep(lake, "base-smollm2", domains, factory, config, prompt_format=prompt_format)
            cold_wall = time.perf_counter() - began
            rows = [d.items for d in cold.domains]
            tokens = sum(int(r["tokens"].sum()) for r in rows)
            sweep_seconds = cold_wall - loads[0]
            entry = {"backend": backend, "engine": cold.engine, "engine_start_s": loads[0],
                     "sweep_s": sweep_seconds, "items": sum(r["item_id"].n_unique() for r in rows),
                     "samples": sum(r.height for r in rows), "tokens": tokens,
                     "tokens_per_s": tokens / sweep_seconds,
                     "generation_tokens_per_s": tokens / sum(float(r["latency_s"].sum()) for r in rows),
                     "scores": {d.domain: d.summary["mean"] for d in cold.domains}}
            if not sweeps:
                began = time.perf_counter()
                warm = run_sweep(lake, "base-smollm2", domains, factory, config, prompt_format=prompt_format)
                entry["cached_rerun_s"] = time.perf_counter() - began
                assert warm.generated == 0 and not warm.model_loaded, "the re-run should be served from the cache"
                entry["cached_speedup"] = cold_wall / entry["cached_rerun_s"]
            sweeps.append(entry)

        torch_engine = engines.get("torch") or make_engine(str(model_dir), "torch", dtype=args.dtype, home=str(home))
        vllm_engine = engines.get("vllm")
        # round-robin over the domains, so each batch mixes short answers with long ones (gsm reasons)
        per_domain = [[torch_engine.format_prompt(item["prompt"]) for item in domain.eval_items()[:32]]
                      for domain in domains]
        prompts = [p for group in zip(*per_domain) for p in group]
        throughput = generation_throughput(torch_engine, vllm_engine, prompts, args.batches, args.gen_tokens,
                                           args.reps)
        if vllm_engine is not None:
            vllm_engine.close()

    result = {"model": "SmolLM2-135M-Instruct", "dtype": args.dtype, "domains": args.domains, "limit": args.limit,
              "samples": args.samples, "max_new_tokens": args.max_new_tokens, "batch_items": args.batch_items,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "load_start": load_start, "load_end": _load(),
              "sweeps": sweeps, "generation": throughput}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"sweep throughput, SmolLM2-135M-Instruct {args.dtype}, {len(domains)} domains "
          f"({', '.join(args.domains)}), {args.limit} items each, K={args.samples}, max {args.max_new_tokens} new "
          f"tokens, batches of {args.batch_items} items, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
          f"load average {load_start} at start, {result['load_end']} at end")
    for entry in sweeps:
        print(f"{entry['engine']:<24} start {entry['engine_start_s']:6.1f} s  cold sweep (excl. start) "
              f"{entry['sweep_s']:7.1f} s  {entry['items'] / entry['sweep_s']:5.2f} items/s  "
              f"{entry['tokens_per_s']:7.1f} tokens/s end to end ({entry['generation_tokens_per_s']:.1f} in "
              f"generation; {entry['tokens']} tokens)  scores " + ", ".join(f"{k} {v:.3f}" for k, v in
                                                                          entry["scores"].items()))
        if "cached_rerun_s" in entry:
            print(f"{'':<24} cached re-run {entry['cached_rerun_s']:.2f} s: {entry['cached_speedup']:.0f}x the cold "
                  "run incl. engine start")
    print(f"generation throughput, greedy, {args.gen_tokens} new tokens, median of {args.reps} interleaved calls:")
    print(f"{'batch':>5} {'engine':<24} {'tokens':>7} {'median s':>9} {'tokens/s':>9} {'vs generate':>11}")
    for row in throughput:
        print(f"{row['batch']:>5} {row['engine']:<24} {row['tokens']:>7} {row['median_s']:>9.2f} "
              f"{row['tokens_per_s']:>9.1f} {row['ratio_vs_generate']:>10.2f}x")


if __name__ == "__main__":
    main()
