"""Decoding speed of one model folder, measured in a process of its own.

A variant's speed claim is a ratio against its parent measured in the same run on the same machine
(:func:`evaluation.variants.measure_speed` runs this module once per side, one after the other). Each
side runs in a fresh process so its peak resident memory (``ru_maxrss``) is its own and neither
side inherits the other's warm caches or allocator state. Per side, on the same chat-formatted prompts:

- ``ttft_s``: median seconds to the first token (a one-token greedy generation per prompt: the
  prefill plus one decoding step), after one warm-up call;
- ``tokens_per_s_batch1``: completion tokens per second generating the prompts one at a time
  (greedy, ``max_new_tokens`` each): the interactive, latency-bound use;
- ``tokens_per_s_batch``: the same over all prompts in one ``generate`` call (the sweep's batch):
  the throughput use. An engine that decodes one sequence at a time (llama.cpp here, assisted
  generation) gains nothing from the batch, which is what this figure shows;
- ``peak_rss_gib``: the process's peak resident memory, model load included.

Run as ``python -m evaluation.variant_speed --model DIR --prompts FILE ...``; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time


def peak_rss_bytes() -> int:
    """This process's peak resident memory: ``VmHWM``, which an ``exec`` starts afresh (``ru_maxrss``
    keeps the peak of the process that forked it, e.g. a bench that had a model loaded)."""
    try:
        with open("/proc/self/status") as handle:
            for line in handle:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # no procfs: KiB on Linux, may include the forker's


def measure(model_dir: str, prompts: list[str], *, max_new_tokens: int, batch1_prompts: int, dtype: str,
            home: str | None, threads: int | None) -> dict:
    from generation.contract import SamplingParams
    from generation.factory import make_engine

    started = time.perf_counter()
    engine = make_engine(model_dir, "torch", dtype=dtype, home=home, **({"threads": threads} if threads else {}))
    load_s = time.perf_counter() - started
    formatted = [engine.format_prompt(p) for p in prompts]
    greedy = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    one_token = SamplingParams(max_new_tokens=1, temperature=0.0)
    engine.generate(formatted[:1], SamplingParams(max_new_tokens=4, temperature=0.0))  # warm-up, not timed

    ttft = []
    for prompt in formatted[:batch1_prompts]:
        t0 = time.perf_counter()
        engine.generate([prompt], one_token)
        ttft.append(time.perf_counter() - t0)

    tokens, seconds = 0, 0.0
    for prompt in formatted[:batch1_prompts]:
        t0 = time.perf_counter()
        out = engine.generate([prompt], greedy)
        seconds += time.perf_counter() - t0
        tokens += out[0][0].completion_tokens
    batch1 = tokens / seconds if seconds > 0 else float("nan")

    t0 = time.perf_counter()
    outs = engine.generate(formatted, greedy)
    batch_s = time.perf_counter() - t0
    batch_tokens = sum(o[0].completion_tokens for o in outs)
    peak = peak_rss_bytes()
    identity = getattr(engine, "identity", None) or getattr(engine, "name", type(engine).__name__)
    engine.close()
    return {"engine": identity, "load_s": load_s, "ttft_s": statistics.median(ttft),
            "tokens_per_s_batch1": batch1, "batch1_tokens": tokens, "batch1_prompts": min(batch1_prompts, len(prompts)),
            "tokens_per_s_batch": batch_tokens / batch_s if batch_s > 0 else float("nan"),
            "batch": len(formatted), "batch_tokens": batch_tokens, "peak_rss_gib": peak / 2 ** 30}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evaluation.variant_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="model or variant folder")
    parser.add_argument("--prompts", required=True, help="JSON file: a list of user prompts")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch1-prompts", type=int, default=8, help="prompts timed one at a time")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--home", default=None)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    with open(args.prompts) as handle:
        prompts = json.load(handle)
    result = measure(args.model, prompts, max_new_tokens=args.max_new_tokens, batch1_prompts=args.batch1_prompts,
                     dtype=args.dtype, home=args.home, threads=args.threads)
    print(json.dumps(result), file=sys.stdout, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
