"""bf16 against fp32 on this CPU: the measurement behind running bf16 settings in fp32 where the
CPU would only emulate bf16 (:mod:`generation.device`).

1. A SmolLM2-shaped matmul (``[tokens, 576] @ [576, 1536]``, the MLP's up projection) in each dtype,
   interleaved, median of ``--repeats`` timings.
2. Generation: the torch engine decoding ``--new-tokens`` greedy tokens for ``--batch`` prompts with
   the policy in each dtype (``ASSAY_EMULATED_BF16=1`` is set so bf16 really runs in bf16).

Prints what oneDNN reports (native bf16 or not), the ratios bf16/fp32, and one JSON document.

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_precision [--policy smollm2] [--skip-generation]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time


def time_matmul(dtype, tokens: int) -> float:
    import torch

    a = torch.randn(tokens, 576).to(dtype)
    w = torch.randn(576, 1536).to(dtype)
    for _ in range(2):
        a @ w
    started = time.perf_counter()
    a @ w
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--policy", default="smollm2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--skip-generation", action="store_true")
    args = parser.parse_args(argv)
    os.environ["ASSAY_EMULATED_BF16"] = "1"  # measure bf16 itself, not the fallback

    import torch

    native = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    out: dict = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "onednn_bf16": native,
                 "threads": torch.get_num_threads(), "loadavg_start": os.getloadavg()}
    samples = {"float32": [], "bfloat16": []}
    for _ in range(args.repeats):  # interleaved: drift hits both
        for name in samples:
            samples[name].append(time_matmul(getattr(torch, name), args.tokens))
    out["matmul_ms"] = {name: round(statistics.median(v) * 1e3, 3) for name, v in samples.items()}
    out["matmul_ratio_bf16_over_fp32"] = round(out["matmul_ms"]["bfloat16"] / out["matmul_ms"]["float32"], 1)
    if not args.skip_generation:
        from generation.contract import SamplingParams
        from generation.factory import make_engine

        home = os.environ.get("ASSAY_HOME", ".assay")
        prompts = [f"Count from {i} to {i + 5}." for i in range(args.batch)]
        params = SamplingParams(max_new_tokens=args.new_tokens, temperature=0.0)
        rates = {}
        for name in ("float32", "bfloat16"):
            engine = make_engine(args.policy, "torch", dtype=name, home=home)
            engine.generate(prompts[:1], SamplingParams(max_new_tokens=4, temperature=0.0))  # warm-up
            started = time.perf_counter()
            outs = engine.generate(prompts, params)
            tokens = sum(o[0].completion_tokens for o in outs)
            rates[name] = round(tokens / (time.perf_counter() - started), 1)
        out["generation_tokens_per_s"] = rates
        out["generation_ratio_fp32_over_bf16"] = round(rates["float32"] / rates["bfloat16"], 1)
    out["loadavg_end"] = os.getloadavg()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
