"""``assay difficulty``: a domain's train items judged by the pass rate of a named policy.

K seeded samples per item (drawn like a sweep's), scored by the domain; the verdict is ``in_band``,
``too_easy`` (all K pass, or the pass rate is above the domain's band) or ``too_hard`` (all fail,
or below it). Cached in lake table ``pass_rates`` per (policy, item, K, generation config): a
re-run computes only new items. See :mod:`evaluation.pass_rates`.
"""

from __future__ import annotations

import argparse
import sys

from evaluation.pass_rate_config import DEFAULT_LIMIT, DEFAULT_SAMPLES, PassRateConfig
from pipelines.cli import CliError, add_json_flag, emit, with_examples
from pipelines.config_flags import add_model_flags, model_from_args
from generation.contract import BACKENDS


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "difficulty", help="pass rate of a policy on a domain's train items, and each item's verdict (cached)",
        description="Sample K completions per train item with a policy, score them with the domain, and judge "
                    "each item against the domain's pass-rate band: all K passing is too_easy, all failing "
                    "too_hard (no GRPO signal either way). Items: the domain's admitted train rows in the lake, "
                    "else the first N of its own train split. Cached per (policy, item, K, generation "
                    "config) in lake table pass_rates: a re-run computes only what is new.",
    )
    with_examples(parser, "assay difficulty math_arith_easy --policy base-smollm2 --samples 4 --limit 8",
                  "assay difficulty math_arith_easy --policy champion --json",
                  note=f"Defaults: --samples {DEFAULT_SAMPLES}, --limit {DEFAULT_LIMIT} (a default run generates at "
                       f"most {DEFAULT_SAMPLES * DEFAULT_LIMIT} completions).")
    parser.add_argument("domain", metavar="DOMAIN", help="the domain whose train items to judge")
    parser.add_argument("--policy", default=None, metavar="ID|champion|base-RECIPE",
                        help="which policy: a checkpoint id, 'champion' (the registry alias), 'latest', or "
                             "'base-smollm2' / 'base-tiny' (default: the champion, else base-tiny, the base "
                             "policy of `assay train`'s default recipe)")
    # --samples, --limit, --max-new-tokens, --temperature, --top-p, --batch-items, --seed: the fields
    # of PassRateConfig, help text from their descriptions.
    add_model_flags(parser, PassRateConfig, exclude={"progress"}, metavars={"samples": "K", "limit": "N"})
    parser.add_argument("--backend", choices=BACKENDS, default="auto",
                        help="generation engine: torch, vllm, or auto (default auto); not part of the cache key")
    parser.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                        help="dtype the engine runs the policy in (default bfloat16)")
    add_json_flag(parser)
    parser.set_defaults(handler=run_difficulty_command)


def run_difficulty_command(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError, get_registry

    config = model_from_args(PassRateConfig, args, progress=True)
    registry = get_registry()
    for error in registry.errors:
        print(f"assay: warning: domain plugin {error}", file=sys.stderr)
    try:
        domain = registry.get(args.domain)
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None

    from evaluation.pass_rates import PassRateError, default_policy, policy_pass_rates
    from pipelines.settings import open_lake
    from storage.tracking import CHAMPION_ALIAS, current_champion
    from generation.checkpoints import CheckpointError
    from generation.vllm_engine import VllmUnavailable

    lake = open_lake(write=True)
    policy = args.policy
    if policy is None:
        policy = default_policy(lake.mlflow_uri)
    elif policy == CHAMPION_ALIAS and current_champion(lake.mlflow_uri) is None:
        raise CliError("no champion yet: use --policy base-smollm2 (or base-tiny), or train and promote a "
                       "checkpoint first")
    try:
        result = policy_pass_rates(lake, lake.mlflow_uri, policy, domain, config=config, backend=args.backend,
                                   dtype=args.dtype, log=lambda m: print(m, file=sys.stderr))
    except (CheckpointError, VllmUnavailable) as exc:
        raise CliError(str(exc)) from None
    except PassRateError as exc:
        raise CliError(str(exc), code=1) from None
    summary = result.summary()
    rows = result.items.to_dicts()

    def human(_payload):
        lines = [f"{'item':<36} {'pass rate':>9} {'K':>3}  {'verdict':<9} cached"]
        lines += [f"{r['id'][:36]:<36} {r['pass_rate']:>9.3f} {r['samples']:>3}  {r['verdict']:<9} "
                  f"{'yes' if r['cached'] else 'no'}" for r in rows]
        in_band = sum(r["verdict"] == "in_band" for r in rows)
        lines.append(f"{summary['domain']} on {summary['checkpoint']} (items from {summary['source']}): "
                     f"{in_band}/{summary['items']} in band ({summary['in_band_share']:.0%}), mean pass rate "
                     f"{summary['mean_pass_rate']:.3f}, K={config.samples}; {summary['computed']} items computed, "
                     f"{summary['cached']} cached, {summary['seconds']:.1f} s"
                     + (f", engine {summary['engine']}" if summary["engine"] else ""))
        return "\n".join(lines)

    emit(args, result.per_item(), human)
    if args.json:  # the document is the per-item list; the summary goes where a person reads it
        print(f"{summary['domain']} on {summary['checkpoint']}: {summary['computed']} computed, "
              f"{summary['cached']} cached, {summary['seconds']:.1f} s", file=sys.stderr)
    return 0
