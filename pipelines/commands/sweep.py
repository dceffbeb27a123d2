"""``assay sweep``: benchmark one checkpoint on every (or some) domain(s), cached per item.

Writes lake tables ``results`` (one row per scored sample) and ``sweep_summary`` (one row per
domain) and logs ``score/<domain>``, ``stderr/<domain>`` to MLflow against the checkpoint. Re-runs
skip every (checkpoint, item, sample, generation config) already scored; a killed sweep resumes.
See :mod:`evaluation.sweep`.
"""

from __future__ import annotations

import argparse
import sys

from evaluation.sweep_config import SweepConfig
from pipelines.cli import CliError, add_domains_argument, add_json_flag, emit, with_examples
from pipelines.config_flags import add_model_flags, model_from_args
from generation.contract import BACKENDS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep", help="benchmark a checkpoint on each domain's eval items (K samples per item, cached)",
        description="Generate K completions per eval item with the checkpoint, score them with each "
                    "domain's scorer, and summarise per domain (mean, pass@1, pass@K, clustered SE, "
                    "95% CI, tokens/s). Cached per (checkpoint, item, sample, generation config): a "
                    "re-run only generates what is missing, and a killed sweep resumes.",
    )
    with_examples(parser, "assay sweep --checkpoint champion --domains math_arith_easy strings --samples 2 --limit 8",
                  "assay sweep --checkpoint latest --tag arithmetic --limit 4 --json")
    parser.add_argument("--checkpoint", required=True, metavar="ID|champion|latest|base-RECIPE",
                        help="which checkpoint: an id, 'champion' (the registry alias), 'latest', or "
                             "'base-smollm2' / 'base-tiny' (the untrained policy)")
    add_domains_argument(parser, "--domains", help="domains to sweep (default: all registered)")
    parser.add_argument("--tag", action="append", help="only domains with this tag (repeatable)")
    parser.add_argument("--exclude-tag", action="append", metavar="TAG",
                        help="leave out domains with this tag (repeatable); without --domains/--tag the long-context "
                             "buckets are left out unless --exclude-tag none (they cost minutes per item on CPU)")
    # --samples, --limit, --max-new-tokens, --temperature, --top-p, --batch-items, --seed: the
    # fields of SweepConfig, help text from their descriptions.
    add_model_flags(parser, SweepConfig, exclude={"progress"}, metavars={"samples": "K", "limit": "N"})
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="generation engine: torch, vllm, or auto = vLLM where it is installed, serves the model "
                             "and was measured faster, else torch (default auto). The engine is not part of the "
                             "cache key: results of both are draws of the same policy (see evaluation.sweep)")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="dtype the engine runs the policy in (default bfloat16)")
    parser.add_argument("--no-mlflow", action="store_true", help="do not log the sweep to MLflow")
    parser.add_argument("--rescore", action="store_true",
                        help="first score the cached samples again with each domain's current scorer (after a scorer "
                             "fix: the cache key does not name the scorer), then summarize as usual")
    add_json_flag(parser)
    parser.set_defaults(handler=run_sweep_command)


def run_sweep_command(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError, get_registry
    from pipelines.settings import open_lake
    from generation.checkpoints import CheckpointError
    from evaluation.sweep import SweepError, sweep_checkpoint
    from generation.vllm_engine import VllmUnavailable

    config = model_from_args(SweepConfig, args, progress=sys.stderr.isatty() or not args.json)
    registry = get_registry()
    for error in registry.errors:
        print(f"assay: warning: domain plugin {error}", file=sys.stderr)
    try:
        exclude = None if args.exclude_tag is None else [t for t in args.exclude_tag if t != "none"]
        domains = registry.sweep_selection(names=args.domains, tags=args.tag, exclude_tags=exclude)
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None
    if not domains:
        raise CliError("no domains selected: check --domains/--tag (see `assay domains list`)")
    lake = open_lake(write=True)
    if args.rescore:
        from evaluation.sweep import rescore_cached
        from generation.checkpoints import resolve_checkpoint

        try:
            record = resolve_checkpoint(args.checkpoint, lake, lake.mlflow_uri)
            rescore_cached(lake, record.checkpoint, domains, log=lambda m: print(m, file=sys.stderr))
        except CheckpointError as exc:
            raise CliError(str(exc)) from None
        except SweepError as exc:
            raise CliError(str(exc), code=1) from None
    try:
        result, run_id = sweep_checkpoint(lake, lake.mlflow_uri, args.checkpoint, domains, config=config,
                                          backend=args.backend, dtype=args.dtype, log_mlflow=not args.no_mlflow,
                                          log=lambda m: print(m, file=sys.stderr))
    except (CheckpointError, VllmUnavailable) as exc:
        raise CliError(str(exc)) from None
    except SweepError as exc:
        raise CliError(str(exc), code=1) from None
    payload = {**result.to_json(), "mlflow_run_id": run_id}

    def human(p):
        lines = [f"{'domain':<28} {'n':>5} {'K':>3} {'mean':>6} {'95% CI':>15} {'pass@K':>6} {'tok/s':>7}  cached"]
        for d in p["domains"]:
            ci = f"[{d['ci_low']:.3f},{d['ci_high']:.3f}]" if d["ci_low"] is not None else "n/a"
            tps = f"{d['tokens_per_s']:.1f}" if d["tokens_per_s"] is not None else "n/a"
            lines.append(f"{d['domain'][:28]:<28} {d['n']:>5} {d['k']:>3} {d['mean']:>6.3f} {ci:>15} "
                         f"{d['passk']:>6.3f} {tps:>7}  {d['cached']}/{d['cached'] + d['generated']}")
        lines.append(f"checkpoint {p['checkpoint']}: {p['generated']} samples generated, {p['cached']} cached, "
                     f"{p['seconds']:.1f} s" + (f", engine {p['engine']}" if p["engine"] else "")
                     + (f"; MLflow run {run_id}" if run_id else ""))
        return "\n".join(lines)

    emit(args, payload, human)
    return 0
