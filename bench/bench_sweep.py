"""Sweep throughput on SmolLM2-135M-Instruct, and the speed-up of a cached re-run.

Three measurements in one process, on the same prompts:

1. a cold sweep (``evaluation.sweep.run_sweep``: generation, scoring, lake commits per batch) of a
   few built-in domains: items/s and completion tokens/s, model load timed apart;
2. the same sweep again: everything comes from the lake cache (the model is not even loaded);
   the speed-up is cold wall time / cached wall time;
3. the baseline: plain transformers ``model.generate`` on the same formatted prompts, the same
   batches (items x K samples), dtype, sampling settings and token limit: tokens/s.

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_sweep [--domains math_arith_easy gsm strings]
     [--limit 8] [--samples 2] [--max-new-tokens 32] [--model-home DIR]
``--model-home``: an ASSAY_HOME whose models/smollm2 is already converted (else it is converted
once into the bench's temporary home, ~20 s). The lake is a fresh temporary folder every run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--domains", nargs="+", default=["math_arith_easy", "gsm", "strings"])
    parser.add_argument("--limit", type=int, default=8, help="items per domain")
    parser.add_argument("--samples", type=int, default=2, help="K samples per item")
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--batch-items", type=int, default=8)
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--model-home", help="ASSAY_HOME holding an already converted models/smollm2")
    args = parser.parse_args()

    import torch

    from domains import get_registry
    from storage.lake import Lake
    from training.generation import make_engine
    from training.policy import ensure_smollm2
    from training.prompts import prompt_format_of_folder
    from evaluation.sweep import SweepConfig, run_sweep

    torch.manual_seed(0)
    registry = get_registry()
    domains = registry.select(names=args.domains)
    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        home = Path(tmp)
        if args.model_home:
            (home / "models").mkdir(parents=True)
            os.symlink(Path(args.model_home).resolve() / "models" / "smollm2", home / "models" / "smollm2")
        model_dir = ensure_smollm2(home)
        lake = Lake.at(home)
        loads = []

        def factory():
            start = time.perf_counter()
            engine = make_engine(str(model_dir), dtype=args.dtype, home=str(home), max_batch_size=64)
            loads.append(time.perf_counter() - start)
            factory.engine = engine
            return engine

        config = SweepConfig(samples=args.samples, limit=args.limit, max_new_tokens=args.max_new_tokens,
                             batch_items=args.batch_items, progress=False)
        start = time.perf_counter()
        prompt_format = prompt_format_of_folder(model_dir)  # as sweep_checkpoint does: no model load to key the cache
        cold = run_sweep(lake, "base-smollm2", domains, factory, config, prompt_format=prompt_format)
        cold_wall = time.perf_counter() - start
        start = time.perf_counter()
        warm = run_sweep(lake, "base-smollm2", domains, factory, config, prompt_format=prompt_format)
        warm_wall = time.perf_counter() - start
        assert warm.generated == 0 and not warm.model_loaded, "the re-run should be served from the cache"

        rows = [d.items for d in cold.domains]
        tokens = sum(int(r["tokens"].sum()) for r in rows)
        items = sum(r["item_id"].n_unique() for r in rows)
        samples = sum(r.height for r in rows)
        sweep_seconds = cold_wall - loads[0]
        gen_seconds = sum(float(r["latency_s"].sum()) for r in rows)

        # baseline: plain HF generate, same prompts / batches / settings
        engine = factory.engine
        model, tok = engine.model, engine.tokenizer
        prompts = []
        for domain in domains:
            prompts += [engine.format_prompt(item["prompt"]) for item in domain.eval_items()[: args.limit]]
        params = config.sampling(args.samples)
        hf_tokens, start = 0, time.perf_counter()
        eos = tok.eos_token_id
        with torch.inference_mode():
            for i in range(0, len(prompts), args.batch_items):
                batch = tok(prompts[i:i + args.batch_items], return_tensors="pt", padding=True, add_special_tokens=False)
                out = model.generate(**batch, max_new_tokens=args.max_new_tokens, do_sample=params.temperature > 0,
                                     temperature=params.temperature or None, top_p=params.top_p if params.temperature else None,
                                     num_return_sequences=args.samples, pad_token_id=tok.pad_token_id)
                new = out[:, batch["input_ids"].shape[1]:]
                # count up to and including the first EOS, as the engine does
                for row in new.tolist():
                    hf_tokens += next((j + 1 for j, t in enumerate(row) if t == eos), len(row))
        hf_seconds = time.perf_counter() - start

    print(f"sweep throughput, SmolLM2-135M-Instruct {args.dtype}, {len(domains)} domains "
          f"({', '.join(args.domains)}), {args.limit} items each, K={args.samples}, max {args.max_new_tokens} new tokens, "
          f"batches of {args.batch_items} items, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"model load                 {loads[0]:8.1f} s")
    print(f"cold sweep (excl. load)    {sweep_seconds:8.1f} s  {items / sweep_seconds:6.2f} items/s  "
          f"{samples / sweep_seconds:6.2f} samples/s  {tokens / sweep_seconds:7.1f} tokens/s end to end "
          f"({tokens / gen_seconds:.1f} tokens/s in generation; {tokens} tokens)")
    print(f"cached re-run              {warm_wall:8.2f} s  speed-up {cold_wall / warm_wall:.0f}x over the cold run "
          f"incl. load ({sweep_seconds / warm_wall:.0f}x excl. load)")
    print(f"baseline HF generate       {hf_seconds:8.1f} s  {hf_tokens / hf_seconds:7.1f} tokens/s ({hf_tokens} tokens)")
    print(f"sweep end-to-end tokens/s vs plain generate: {(tokens / sweep_seconds) / (hf_tokens / hf_seconds):.2f}x")
    print("scores: " + ", ".join(f"{d.domain} {d.summary['mean']:.3f}" for d in cold.domains))


if __name__ == "__main__":
    main()
