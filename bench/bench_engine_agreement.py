"""Do the torch engine and vLLM compute the same thing on SmolLM2-135M-Instruct?

On the same prompts (the eval items of a few built-in domains, chat-formatted by each engine), in
one process, per dtype:

- greedy completions: the share of items whose completion is token-for-token identical, and how
  far into the completion the first difference comes where they differ (bf16 rounds differently
  in the two engines' kernels, so near-ties can flip and the completions then diverge);
- log-probs of sampled tokens: vLLM samples (temperature 1.0, seeded) and reports each token's
  log-prob; the torch engine's model scores the same tokens with one full forward in the same
  dtype (as the trainer recomputes them); mean and max absolute gap per token. This gap is what the trainer's truncated
  importance sampling corrects for (``training.losses.rollout_correction``).

Run: OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_engine_agreement [--model-home DIR]
     [--domains math_arith_easy gsm strings code] [--limit 16] [--dtypes float32 bfloat16] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile


def _items(domains: list[str], limit: int) -> list[str]:
    from domains import get_registry

    registry = get_registry()
    prompts = []
    for name in domains:
        domain = registry.get(name)
        prompts += [row["prompt"] for row in domain.generate("eval", limit, seed=0)]
    return prompts


def _first_difference(a: list[int], b: list[int]) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _trainer_logprobs(model, prompt_ids: list[int], completion: list[int]) -> list[float]:
    """log p(token) for each completion token under ``model``, one full forward (as the trainer)."""
    import torch

    ids = torch.tensor([prompt_ids + completion])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1:-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, torch.tensor(completion)[:, None])[:, 0].tolist()


def measure(model_ref: str, home: str, prompts: list[str], dtype: str, max_new_tokens: int) -> dict:
    import torch

    from generation.contract import SamplingParams
    from generation.factory import make_engine

    torch_engine = make_engine(model_ref, "torch", dtype=dtype, home=home)
    vllm_engine = make_engine(model_ref, "vllm", dtype=dtype, home=home, kv_cache_gib=1.0)
    try:
        texts = [torch_engine.format_prompt(p) for p in prompts]
        greedy = SamplingParams(max_new_tokens=max_new_tokens)
        ours = [g[0].token_ids for g in vllm_engine.generate(texts, greedy)]
        theirs = [g[0].token_ids for g in torch_engine.generate(texts, greedy)]
        same = sum(a == b for a, b in zip(ours, theirs))
        firsts = [_first_difference(a, b) for a, b in zip(ours, theirs) if a != b]

        sampled = vllm_engine.generate(texts, SamplingParams(max_new_tokens=max_new_tokens, temperature=1.0),
                                       seeds=[[i] for i in range(len(texts))], with_logprobs=True)
        model = torch_engine.model
        prompt_ids = torch_engine.encode(texts)
        gaps = []
        for ids, rows in zip(prompt_ids, sampled):
            row = rows[0]
            if not row.token_ids:
                continue
            recomputed = _trainer_logprobs(model, list(ids), list(row.token_ids))
            gaps += [abs(x - y) for x, y in zip(row.token_logprobs, recomputed)]
    finally:
        vllm_engine.close()
    return {"dtype": dtype, "items": len(prompts), "greedy_exact_match": same / len(prompts),
            "greedy_same": same, "first_difference_median_token": statistics.median(firsts) if firsts else None,
            "sampled_tokens": len(gaps), "logprob_gap_mean": statistics.fmean(gaps) if gaps else None,
            "logprob_gap_max": max(gaps) if gaps else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-home", help="an ASSAY_HOME holding a converted models/smollm2")
    parser.add_argument("--domains", nargs="+", default=["math_arith_easy", "gsm", "strings", "code"])
    parser.add_argument("--limit", type=int, default=16, help="eval items per domain")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=("float32", "bfloat16"))
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "2")
    from pipelines.console import stdout_for_result_only

    with stdout_for_result_only() as out:
        import torch

        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        home = args.model_home or tempfile.mkdtemp(prefix="bench_agree_")
        with open("/proc/loadavg") as handle:
            load_start = " ".join(handle.read().split()[:3])
        prompts = _items(args.domains, args.limit)
        rows = [measure("smollm2", home, prompts, dtype, args.max_new_tokens) for dtype in args.dtypes]
        with open("/proc/loadavg") as handle:
            load_end = " ".join(handle.read().split()[:3])
        if args.json:
            print(json.dumps({"load_start": load_start, "load_end": load_end, "rows": rows}, indent=2), file=out)
        else:
            print(f"load average {load_start} at start, {load_end} at end", file=out)
            for r in rows:
                print(f"{r['dtype']:9s} greedy exact match {r['greedy_same']}/{r['items']} "
                      f"({r['greedy_exact_match']:.1%}), first difference at token {r['first_difference_median_token']} "
                      f"(median); log-prob gap over {r['sampled_tokens']} sampled tokens: mean "
                      f"{r['logprob_gap_mean']:.2e}, max {r['logprob_gap_max']:.2e}", file=out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
