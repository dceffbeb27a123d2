"""The cost of per-sample seeds: decoding throughput, and the sampler alone, vs the shared generator.

Each sampled row draws from its own ``torch.Generator`` (``generation.torch_engine``): its uniforms
for the whole completion are drawn up front and one ``cumsum`` + ``searchsorted`` picks every
row's token per step. Two measurements, interleaved ``--repeats`` times so load drifts hit both:

1. decoding, the tiny policy by default: ``engine.generate`` of ``--batch`` prompts x
   ``--max-new-tokens`` tokens, sampled at temperature 1 with a seed per sample, and greedy (the
   floor: no sampling at all); completion tokens/s. Run the same command with ``PYTHONPATH`` at
   a checkout before per-sample seeds (``--decode-only``: that code has no per-row sampler) to
   compare the whole decode loop before/after;
2. the sampler alone on random logits, ``--batch`` rows, vocabularies of the tiny policy (512) and
   SmolLM2 (49152): the old ``torch.multinomial`` with one shared generator (copied here as the
   baseline) vs the per-row inverse-CDF pick plus its share of drawing the per-row uniforms.

Run: OMP_NUM_THREADS=1 .venv/bin/python -m bench.bench_sampling [--policy tiny] [--batch 32]
     [--max-new-tokens 32] [--repeats 5] [--decode-only]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def _old_pick(logits, temperature: float, generator):
    """The sampler before per-sample seeds (top-k/top-p off): one multinomial, one shared generator."""
    import torch

    return torch.multinomial((logits / temperature).softmax(-1), 1, generator=generator).squeeze(-1)


def decode_rates(engine, batch: int, max_new_tokens: int, repeats: int) -> dict[str, list[float]]:
    from generation.contract import SamplingParams

    prompts = [engine.format_prompt(f"Write a few words about the number {i}.") for i in range(batch)]
    modes = {"sampled T=1, seed per sample": SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0, seed=0),
             "greedy": SamplingParams(max_new_tokens=max_new_tokens)}
    rates: dict[str, list[float]] = {name: [] for name in modes}
    for name, params in modes.items():  # warm-up
        engine.generate(prompts[:2], params)
    for _ in range(repeats):
        for name, params in modes.items():
            start = time.perf_counter()
            out = engine.generate(prompts, params)
            seconds = time.perf_counter() - start
            rates[name].append(sum(g.completion_tokens for per in out for g in per) / seconds)
    return rates


def sampler_costs(batch: int, steps: int, repeats: int) -> dict[str, list[float]]:
    import torch

    from generation.contract import SamplingParams
    from generation.torch_engine import pick_tokens, RowNoise

    params = SamplingParams(temperature=1.0)
    costs: dict[str, list[float]] = {}
    for vocab in (512, 49152):
        logits = torch.randn(batch, vocab, generator=torch.Generator().manual_seed(0)) * 3
        shared = torch.Generator().manual_seed(0)
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(steps):
                _old_pick(logits, 1.0, shared)
            costs.setdefault(f"V={vocab} multinomial, shared generator", []).append(
                (time.perf_counter() - start) / steps * 1e6)
            start = time.perf_counter()
            noise = RowNoise(list(range(batch)), steps, logits.device)
            for step in range(steps):
                pick_tokens(logits, params, noise.at(step))
            costs.setdefault(f"V={vocab} per-row inverse CDF (incl. drawing the uniforms)", []).append(
                (time.perf_counter() - start) / steps * 1e6)
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", default="tiny", help="tiny (default) or smollm2")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--decode-only", action="store_true", help="skip the sampler micro-benchmark")
    args = parser.parse_args()

    import torch

    from generation.factory import make_engine

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="bench_sampling_") as home:
        engine = make_engine(args.policy, dtype="float32", home=home, max_batch_size=args.batch)
        rates = decode_rates(engine, args.batch, args.max_new_tokens, args.repeats)
    print(f"decoding {args.policy}, batch {args.batch}, {args.max_new_tokens} new tokens, float32, "
          f"torch threads {torch.get_num_threads()} (completion tokens/s, median of {args.repeats}):")
    for name, values in rates.items():
        print(f"  {name:32s} {statistics.median(values):9.1f}   runs {[round(v) for v in values]}")
    sampled, greedy = (statistics.median(v) for v in rates.values())
    print(f"  sampled / greedy: {sampled / greedy:.3f}")
    if args.decode_only:
        return
    costs = sampler_costs(args.batch, args.max_new_tokens, args.repeats)
    print(f"sampler alone, {args.batch} rows, microseconds per step (median of {args.repeats}):")
    for name, values in costs.items():
        print(f"  {name:62s} {statistics.median(values):9.1f}")


if __name__ == "__main__":
    main()
