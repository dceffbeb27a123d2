"""A sweep of many domains on the team lake, end to end through ``evaluation.sweep.run_sweep`` (issue 30).

What ``bench_team_lake --unit-writes`` measures at the lake's interface, here through the sweep
itself: the cache read, generation and scoring, the summaries and the commits, with an engine that
needs no model (each completion is a word count as text, ~1 ms per batch) so what is timed is the
sweep's own work and its lake I/O. Three arms on one Iceberg lake (PostgreSQL catalog, moto's S3
server, started here) and the local lake:

1. a fresh sweep of ``--domains`` domains (``--items`` eval items, K=``--samples``), committed by work
   (``commit_seconds`` 30: all domains in one unit per table);
2. the same sweep again, fully cached (one results read, one summaries commit);
3. ``--per-batch-domains`` domains with ``commit_seconds=0`` (every batch and summary its own
   commit, the behaviour before issue 30), for the per-commit cost.

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_sweep_units [--domains 300 --items 20 --samples 4]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


class WordCountEngine:
    name = "word-count"

    def generate(self, prompts, params, seeds=None, *, with_logprobs=False):
        from generation.contract import Generation

        return [[Generation(text=str(len(p.split()) % 3), completion_tokens=1, prompt_tokens=1, finish_reason="stop",
                            latency_s=0.001) for _ in range(params.n)] for p in prompts]

    def format_prompt(self, text):
        return text


def make_domains(count: int, items: int, samples: int):
    from domains import Domain

    out = []
    for d in range(count):
        name = f"bench_{d:03d}"

        def rows(split, n, seed, name=name):
            return [{"id": f"{name}-{split}-{i}", "prompt": f"{name} item {' x' * (i % 9)}", "answer": str(i % 3)}
                    for i in range(n)]

        out.append(Domain(name=name, owner="bench@example.com", description="bench domain", samples=rows,
                          score=lambda completion, sample: float(completion == sample["answer"]),
                          eval_size=items, eval_samples_per_item=samples))
    return out


def sweep(lake, checkpoint, domains, commit_seconds: float, batch_items: int) -> tuple[float, object]:
    from evaluation.sweep import run_sweep
    from evaluation.sweep_config import SweepConfig

    began = time.perf_counter()
    result = run_sweep(lake, checkpoint, domains, WordCountEngine,
                       SweepConfig(progress=False, batch_items=batch_items, commit_seconds=commit_seconds),
                       prompt_format="raw")
    return time.perf_counter() - began, result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=300)
    parser.add_argument("--items", type=int, default=20)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--batch-items", type=int, default=16, help="items per results batch (SweepConfig default 16)")
    parser.add_argument("--per-batch-domains", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    from storage.deployment import Profile, open_lake
    from storage.lake import Lake
    from storage.team_services import TeamServices

    figures = {"command": "python -m bench.bench_sweep_units " + " ".join(argv if argv is not None else sys.argv[1:]),
               "load_before": os.getloadavg()}
    print(f"load before {figures['load_before']}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="assay-bench-sweep-units-"))
    services = TeamServices.start(tempfile.mkdtemp(prefix="assay-team-"))
    for key, value in services.env().items():
        if key.startswith("AWS_"):
            os.environ[key] = value
    profile = Profile(name="team", postgres_url=services.postgres_url, s3_endpoint=services.s3_endpoint,
                      s3_bucket=services.bucket, lake_catalog=f"bench-sweep-{os.getpid()}")
    try:
        domains = make_domains(args.domains, args.items, args.samples)
        for name, lake in (("local", Lake.at(scratch / "local")),
                           ("iceberg", open_lake(scratch / "team", write=True, profile=profile))):
            fresh_s, fresh = sweep(lake, "ck-units", domains, 30.0, args.batch_items)
            cached_s, cached = sweep(lake, "ck-units", domains, 30.0, args.batch_items)
            assert cached.generated == 0 and cached.cached == fresh.generated
            few = domains[: args.per_batch_domains]
            per_batch_s, per_batch = sweep(lake, "ck-per-batch", few, 0.0, args.batch_items)
            batches = sum(-(-args.items // args.batch_items) for _ in few)
            figures[name] = {"fresh_s": fresh_s, "samples": fresh.generated, "cached_s": cached_s,
                             "per_batch_s": per_batch_s, "per_batch_domains": len(few),
                             "per_batch_commits": batches + len(few),
                             "per_batch_extrapolated_s": per_batch_s * len(domains) / len(few)}
            f = figures[name]
            print(f"{name:8s} fresh sweep of {len(domains)} domains ({f['samples']:,} samples) {fresh_s:6.1f} s, "
                  f"cached rerun {cached_s:5.1f} s; {len(few)} domains one commit per batch {per_batch_s:5.1f} s "
                  f"({f['per_batch_commits']} commits; x{len(domains) / len(few):.0f} ~ "
                  f"{f['per_batch_extrapolated_s']:.0f} s, extrapolated) (load {os.getloadavg()})", flush=True)
    finally:
        services.stop()
        shutil.rmtree(services.folder, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    figures["load_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
