"""An ingest run of many domains on the team lake: one unit vs one commit per batch (issue 30).

Each of ``--domains`` generated domains has an eval batch (``--eval`` rows) and a train batch
(``--train`` rows), gated by the default row gates. Two arms on a fresh lake each, on the team
profile's Iceberg lake (PostgreSQL catalog, moto's S3 server, started here) and the local lake:

1. ``unit``: ``quality.ingest.ingest_generated_many``, every batch held and committed as one
   ``write_batches`` unit at the end (one Iceberg commit);
2. ``one-by-one``: ``quality.ingest.ingest_records`` per batch, each written as it is gated (the
   behaviour before: two commits per domain).

    OMP_NUM_THREADS=2 .venv/bin/python -m bench.bench_ingest_units [--domains 100 --eval 8 --train 32]
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


def make_domains(count: int, eval_size: int):
    from domains import Domain

    out = []
    for d in range(count):
        name = f"bench_{d:03d}"

        def rows(split, n, seed, d=d, name=name):
            base = 100_000 * (d + 1) + (0 if split == "eval" else 50_000)
            return [{"id": f"{name}-{split}-{i}", "prompt": f"What is {base + 37 * i} times {13 + 11 * i + d}?",
                     "answer": str((base + 37 * i) * (13 + 11 * i + d))} for i in range(n)]

        out.append(Domain(name=name, owner="bench@example.com", description="bench domain", samples=rows,
                          score=lambda completion, sample: float(completion == sample["answer"]),
                          eval_size=eval_size))
    return out


def one_by_one(lake, domains, train: int) -> None:
    from quality.ingest import generated_records, ingest_records

    for domain in domains:
        for split, n in (("eval", domain.eval_size), ("train", train)):
            ingest_records(lake, domain, generated_records(domain, split, n, 0), source=f"generated:{domain.name}:{split}",
                           batch=f"generated-{split}", default_split=split)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=100)
    parser.add_argument("--eval", type=int, default=8)
    parser.add_argument("--train", type=int, default=32)
    parser.add_argument("--json")
    args = parser.parse_args(argv)

    from quality.ingest import ingest_generated_many
    from storage.deployment import Profile, open_lake
    from storage.lake import Lake
    from storage.team_services import TeamServices

    figures = {"command": "python -m bench.bench_ingest_units " + " ".join(argv if argv is not None else sys.argv[1:]),
               "load_before": os.getloadavg()}
    print(f"load before {figures['load_before']}", flush=True)
    scratch = Path(tempfile.mkdtemp(prefix="assay-bench-ingest-units-"))
    services = TeamServices.start(tempfile.mkdtemp(prefix="assay-team-"))
    for key, value in services.env().items():
        if key.startswith("AWS_"):
            os.environ[key] = value
    try:
        domains = make_domains(args.domains, args.eval)
        ingest_generated_many(Lake.at(scratch / "warm-up"), make_domains(1, args.eval), train_n=args.train)  # imports
        for kind in ("local", "iceberg"):
            for arm in ("unit", "one-by-one"):
                if kind == "local":
                    lake = Lake.at(scratch / f"{kind}-{arm}")
                else:
                    profile = Profile(name="team", postgres_url=services.postgres_url, s3_endpoint=services.s3_endpoint,
                                      s3_bucket=services.bucket, lake_catalog=f"bench-ingest-{arm}-{os.getpid()}")
                    lake = open_lake(scratch / f"{kind}-{arm}", write=True, profile=profile)
                began = time.perf_counter()
                if arm == "unit":
                    ingest_generated_many(lake, domains, train_n=args.train)
                else:
                    one_by_one(lake, domains, args.train)
                seconds = time.perf_counter() - began
                rows = lake.read("ingest", "samples").height + lake.read("ingest", "quarantine").height
                assert rows == args.domains * (args.eval + args.train), rows
                commits = len(lake.iceberg_table("ingest").snapshots()) if kind == "iceberg" else None
                figures[f"{kind}/{arm}"] = {"seconds": seconds, "rows": rows, "snapshots": commits,
                                            "load": os.getloadavg()}
                print(f"{kind:8s} {arm:10s} {args.domains} domains x 2 batches ({rows:,} rows) {seconds:7.1f} s"
                      + (f", {commits} snapshots" if commits is not None else "") + f" (load {os.getloadavg()})",
                      flush=True)
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
