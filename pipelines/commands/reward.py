"""``assay reward pairs|train|check|compare|promote|list``: learned reward models for domains without a verifier (issue 31).

``pairs`` builds a preference-pairs file from a domain whose verifier knows the truth
(:mod:`training.verified_pairs`: the proof set, and a quick start), ``train`` fits a reward model on a preference-pairs file (:mod:`training.reward_model`), ``check``
runs its gate on labelled pairs (:mod:`quality.reward_gate`: agreement with intervals and bias
probes; exit 1 when it fails, with the reasons), ``compare`` and ``promote`` regression-test a reward
model against another or the domain's champion (:mod:`evaluation.reward_promotion`), ``list`` shows
the trained ones. Records: lake tables ``reward_models``, ``reward_gates``, ``reward_sweeps`` and
``reward_promotions``, MLflow runs and the registered model
``assay-reward-model``. torch and MLflow are imported inside the handlers (``--help`` stays cheap).

The ``--help`` examples chain (pairs, then train on the tiny policy, then check): the examples test
runs them in that order on a fresh home.
"""

from __future__ import annotations

import argparse
import json
import sys

from pipelines.cli import EXIT_FAILED, CliError, add_json_flag, emit, with_examples
from pipelines.config_flags import add_model_flags, model_from_args
from quality.reward_gate_config import RewardGateConfig
from training.reward_config import RewardTrainConfig, VerifiedPairsConfig


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reward", help="learned reward models: train on preference pairs, gate before use",
        description="Learned rewards for domains without an exact verifier: a reward model (a causal LM with a "
                    "scalar head, Bradley-Terry loss) trained on preference pairs, and its gate (agreement with "
                    "held-out labelled pairs, bias probes).")
    sub = parser.add_subparsers(dest="reward_command", metavar="ACTION", required=True)

    pairs = sub.add_parser(
        "pairs", help="write preference pairs from a verifiable domain (reference vs verified-wrong answers)",
        description="Build a preference-pairs file from DOMAIN's train items where its verifier knows the truth: "
                    "the reference answer (chosen) against wrong answers (near misses for numbers, sibling items' "
                    "answers otherwise), each confirmed by the domain's scorer (1.0 and 0.0); with --hack-families "
                    "also against hacks built from the prompt, and with --policy also the policy's own sampled "
                    "completions (a correct one over a wrong one). Items where that cannot be shown are skipped "
                    "and counted by reason.")
    with_examples(pairs, "assay reward pairs math_arith_easy --out pairs.jsonl --items 60")
    pairs.add_argument("domain", metavar="DOMAIN", help="a registered domain with a verifier")
    pairs.add_argument("--out", required=True, metavar="FILE", help="the JSONL file to write")
    add_model_flags(pairs, VerifiedPairsConfig, metavars={"items": "N", "wrong_per_item": "K", "hack_families": "FAMILY",
                                                          "samples": "N", "temperature": "T", "max_new_tokens": "N"})
    add_json_flag(pairs)
    pairs.set_defaults(handler=pairs_command)

    train = sub.add_parser(
        "train", help="train a reward model for DOMAIN on a pairs file (JSONL prompt, chosen, rejected)",
        description="Train a reward model for DOMAIN on preference pairs: one JSON object per line with prompt, "
                    "chosen (the better answer) and rejected, optionally id and metadata. Every bad line is "
                    "reported by number and the file is refused whole. A share of the prompts is held out (saved "
                    "beside the model) for `assay reward check`. Recorded in lake table reward_models, in MLflow "
                    "and as a version of the registered model assay-reward-model.")
    with_examples(train, "assay reward train math_arith_easy --pairs pairs.jsonl --base tiny --epochs 1 --max-length 96")
    train.add_argument("domain", metavar="DOMAIN", help="the domain the reward model scores (lower_snake_case)")
    train.add_argument("--pairs", required=True, metavar="FILE", help="the preference-pairs file (JSONL)")
    _add_drop_duplicates_flag(train)
    add_model_flags(train, RewardTrainConfig, metavars={"base": "POLICY", "max_steps": "N"})
    add_json_flag(train)
    train.set_defaults(handler=train_command)

    check = sub.add_parser(
        "check", help="gate a reward model: agreement with labelled pairs and bias probes (exit 1 if it fails)",
        description="Judge DOMAIN's reward model (the latest unless --reward-model) on labelled pairs (its held-out "
                    "pairs unless --pairs): accuracy (Wilson interval) and Cohen's kappa (bootstrap interval) must "
                    "clear their bars, and hacks built from the pairs (the rejected answer padded, stated with "
                    "certainty; the prompt echoed, fig-leaf refusals, hedges, sprays as in `assay domains attack`) "
                    "must not beat the chosen answer more often than the rejected answer does. The bar is the one "
                    "the domain declares (LearnedReward(gate={...}), keys: these flags with underscores), the "
                    "defaults below where it declares none; a flag laxer than the domain's bar is allowed, recorded and "
                    "said, but such a check lets nothing train. Recorded in lake table reward_gates and MLflow. "
                    "Exit 1 if it fails, with the reasons.")
    with_examples(check, "assay reward check math_arith_easy", "assay reward check math_arith_easy --pairs pairs.jsonl "
                         "--probes length_padding confident_wrong --json",
                  note="A tiny reward model trained for one epoch fails its gate (exit 1): that is the gate working.")
    check.add_argument("domain", metavar="DOMAIN", help="the domain whose reward model to check")
    check.add_argument("--pairs", metavar="FILE", help="labelled pairs to judge on (default: the reward model's own "
                                                       "held-out pairs)")
    _add_drop_duplicates_flag(check)
    check.add_argument("--reward-model", default="latest", metavar="ID|latest",
                       help="which reward model (default: the domain's latest)")
    check.add_argument("--batch-size", type=int, default=16, metavar="N",
                       help="sequences per forward pass of the reward model (default 16)")
    check.add_argument("--no-mlflow", action="store_true", help="do not log the check to MLflow")
    add_model_flags(check, RewardGateConfig, metavars={"probes": "PROBE"})
    add_json_flag(check)
    check.set_defaults(handler=check_command)

    judge = sub.add_parser(
        "judge", help="make a policy a judge of DOMAIN: prompted with a rubric, scored from log P(Yes) - log P(No)",
        description="Register POLICY (smollm2, tiny, a model folder or a checkpoint id) as a judge of DOMAIN: it "
                    "reads the rubric, the question and an answer and is asked Yes or No; its reward is log P(Yes) "
                    "- log P(No) of its next token. Registered like a trained reward model; gate it with "
                    "`assay reward check DOMAIN --reward-model ID --pairs FILE` before training on it.")
    judge.add_argument("domain", metavar="DOMAIN")
    judge.add_argument("--policy", default="smollm2", metavar="POLICY", help="the judging policy (default smollm2)")
    judge.add_argument("--rubric", required=True, metavar="TEXT", help="what a good answer does, in one or two "
                                                                        "sentences")
    judge.add_argument("--max-length", type=int, default=1024, metavar="N",
                       help="tokens of the judge's prompt it reads (default 1024)")
    add_json_flag(judge)
    judge.set_defaults(handler=judge_command)

    compare = sub.add_parser(
        "compare", help="paired regression test of two reward models on the labelled pairs both were checked on",
        description="Compare CANDIDATE with BASELINE (reward-model ids, 'latest' or 'champion') on the labelled "
                    "pairs both newest gate checks judged: per pair, whether each preferred the labelled answer; "
                    "the policy's paired per-item test (one-sided p of a drop in agreement, CI, MDE). Exit 1 when "
                    "the candidate regressed.")
    compare.add_argument("domain", metavar="DOMAIN")
    compare.add_argument("candidate", metavar="CANDIDATE")
    compare.add_argument("baseline", metavar="BASELINE")
    add_json_flag(compare)
    compare.set_defaults(handler=compare_command)

    promote = sub.add_parser(
        "promote", help="make a reward model DOMAIN's champion if its gate passed and it does not regress",
        description="Make REWARD_MODEL (an id or 'latest') DOMAIN's champion reward model, which "
                    "LearnedReward(reward_model='champion') trains on: only if its newest gate check passed and, "
                    "against the current champion, the paired test on their shared labelled pairs finds no "
                    "regression. Every decision is recorded in lake table reward_promotions. Exit 1 when refused.")
    promote.add_argument("domain", metavar="DOMAIN")
    promote.add_argument("reward_model", metavar="REWARD_MODEL")
    add_json_flag(promote)
    promote.set_defaults(handler=promote_command)

    lister = sub.add_parser("list", help="list trained reward models and their latest gate verdicts",
                            description="List the trained reward models (of DOMAIN when given), oldest first.")
    lister.add_argument("domain", nargs="?", metavar="DOMAIN", help="only this domain's")
    with_examples(lister, "assay reward list --json")
    add_json_flag(lister)
    lister.set_defaults(handler=list_command)


def _note_unregistered(domain: str) -> None:
    from domains import get_registry

    if domain not in get_registry():
        print(f"assay: note: {domain!r} is not a registered domain (see `assay domains list`); the reward model is "
              "kept under that name", file=sys.stderr)


def _add_drop_duplicates_flag(parser) -> None:
    parser.add_argument("--drop-duplicates", action="store_true",
                        help="keep the first line of a pair repeated in the file (same prompt, chosen and rejected) "
                             "and say how many lines went, instead of refusing the file")


def _read_pairs(path: str, drop_duplicates: bool = False):
    from storage.preference_pairs import PairsFileError, read_pairs

    dropped: list[int] = []
    try:
        pairs = read_pairs(path, drop_duplicates=drop_duplicates, dropped=dropped)
    except PairsFileError as exc:
        raise CliError(str(exc)) from None
    if dropped:  # on stderr, so --json output stays one object
        lines = ", ".join(map(str, dropped[:10])) + (f" and {len(dropped) - 10} more" if len(dropped) > 10 else "")
        print(f"assay: {path}: dropped {len(dropped)} line(s) repeating an earlier pair (lines {lines}); "
              f"{len(pairs)} pairs used", file=sys.stderr)
    return pairs, len(dropped)


def _gate_config(args: argparse.Namespace) -> tuple[RewardGateConfig, list[str]]:
    """The bar of ``assay reward check``: the domain's declared one (``LearnedReward(gate=...)``)
    where a flag was left at the gate's default, the flag's value otherwise; and where that bar is
    laxer than the domain's (a check GRPO will not accept)."""
    from quality.reward_gate import registered_domain_bar
    from quality.reward_gate_config import GateDeclarationError

    try:
        required = registered_domain_bar(args.domain)
    except GateDeclarationError as exc:
        raise CliError(str(exc)) from None
    defaults = RewardGateConfig()
    untouched = [name for name in RewardGateConfig.model_fields if getattr(args, name) == getattr(defaults, name)]
    config = model_from_args(RewardGateConfig, args, **{name: getattr(required, name) for name in untouched})
    laxer = config.laxer_than(required)
    if laxer:
        print(f"assay: note: this bar is laxer than {args.domain}'s declared one ({'; '.join(laxer)}): the check is "
              "recorded, but GRPO, the Dagster check and promotion will not accept it", file=sys.stderr)
    return config, laxer


def pairs_command(args: argparse.Namespace) -> int:
    from domains import UnknownDomainError, get_registry
    from storage.preference_pairs import write_pairs
    from training.verified_pairs import build_verified_pairs

    config = model_from_args(VerifiedPairsConfig, args)
    try:
        domain = get_registry().get(args.domain)
    except UnknownDomainError as exc:
        raise CliError(str(exc)) from None
    if not domain.has_verifier:
        raise CliError(f"domain {args.domain!r} has no verifier, so nothing here knows which answer is right: its "
                       "pairs must be labelled (a JSONL file of prompt, chosen, rejected for `assay reward train`)")
    from generation.policy import PolicyError
    from pipelines.settings import resolve_home

    try:
        built = build_verified_pairs(domain, config, home=resolve_home() if config.policy else None)
    except PolicyError as exc:
        raise CliError(str(exc)) from None
    if not built.pairs:
        raise CliError(f"no pairs could be built from {args.domain}'s train items (skipped: {dict(built.skipped)}): "
                       "its reference answers must score 1.0 and some wrong answer 0.0", code=EXIT_FAILED)
    path = write_pairs(built.pairs, args.out)
    payload = {**built.summary(), "out": str(path)}

    def human(p):
        skipped = ", ".join(f"{k} {v}" for k, v in p["skipped"].items()) or "none"
        sources = ", ".join(f"{k} {v}" for k, v in p["sources"].items())
        policy = (f"; the policy got {p['policy_correct']}/{p['policy_completions']} completions right"
                  if "policy_completions" in p else "")
        return (f"{p['pairs']} pairs ({sources}) over {p['prompts']} prompts from {p['items']} {p['domain']} train "
                f"items written to {p['out']} (skipped: {skipped}){policy}\nnext: assay reward train {p['domain']} "
                f"--pairs {p['out']}")

    emit(args, payload, human)
    return 0


def train_command(args: argparse.Namespace) -> int:
    from generation.policy import PolicyError
    from pipelines.settings import open_lake
    from training.reward_model import RewardTrainingError, train_reward_model

    config = model_from_args(RewardTrainConfig, args)
    pairs, duplicates_dropped = _read_pairs(args.pairs, args.drop_duplicates)
    _note_unregistered(args.domain)
    lake = open_lake(write=True)
    try:
        record = train_reward_model(lake, lake.mlflow_uri, args.domain, pairs, config, pairs_source=args.pairs,
                                    log=lambda m: print(m, file=sys.stderr))
    except (RewardTrainingError, PolicyError) as exc:
        raise CliError(str(exc)) from None
    payload = {**record.to_json(), "config": json.loads(record.config or "{}"),
               "duplicates_dropped": duplicates_dropped}

    def human(p):
        return (f"reward model {p['reward_model']} for {p['domain']} (base {p['base_model']}): "
                f"{p['train_pairs']} pairs trained, {p['steps']} steps in {p['train_seconds']:.1f} s, final loss "
                f"{p['final_loss']:.4f}; held-out accuracy {p['heldout_accuracy']:.3f} on {p['heldout_pairs']} pairs"
                + (" (label-shuffled control)" if p["shuffled_labels"] else "")
                + f"\nnext: assay reward check {p['domain']} --reward-model {p['reward_model']}")

    emit(args, payload, human)
    return 0


def check_command(args: argparse.Namespace) -> int:
    from generation.reward_models import RewardModelNotFound, resolve_reward_model
    from generation.reward_scorer import RewardModelError, RewardScorer
    from pipelines.settings import open_lake
    from quality.reward_gate import check_reward, record_reward_gate
    from storage.preference_pairs import pairs_fingerprint

    config, laxer = _gate_config(args)
    if args.batch_size < 1:
        raise CliError(f"--batch-size {args.batch_size}: must be >= 1")
    lake = open_lake(write=True)
    try:
        record = resolve_reward_model(lake, args.domain, args.reward_model)
    except RewardModelNotFound as exc:
        raise CliError(str(exc)) from None
    if not args.pairs and not record.heldout_path.exists():
        raise CliError(f"{record.reward_model} has no held-out pairs of its own (a judge is not trained): pass "
                       f"--pairs FILE, labelled pairs of {args.domain}")
    source = args.pairs or str(record.heldout_path)
    pairs, duplicates_dropped = _read_pairs(source, args.drop_duplicates)
    try:
        scorer = RewardScorer.load(record.path, batch_size=args.batch_size)
    except RewardModelError as exc:
        raise CliError(str(exc)) from None
    result = check_reward(scorer, pairs, config)
    fingerprint = pairs_fingerprint(pairs)
    written = record_reward_gate(lake, None if args.no_mlflow else lake.mlflow_uri, result, domain=args.domain,
                                 reward_model=record.reward_model, pairs_source=source, pairs_fingerprint=fingerprint)
    payload = {"domain": args.domain, "reward_model": record.reward_model, "pairs_source": source,
               "pairs_fingerprint": fingerprint, "duplicates_dropped": duplicates_dropped,
               "laxer_than_domain_bar": laxer, **result.to_json(), **written}

    def human(p):
        lines = [f"{'criterion':<28} {'observed':>8} {'interval':>17} {'bar':>7}  verdict"]
        for c in p["criteria"]:
            observed = "n/a" if c["observed"] is None else f"{c['observed']:.3f}"
            interval = "" if c["ci_low"] is None else f"[{c['ci_low']:.3f},{c['ci_high']:.3f}]"
            bar = "" if c["threshold"] is None else f"{c['threshold']:.3f}"
            lines.append(f"{c['criterion']:<28} {observed:>8} {interval:>17} {bar:>7}  "
                         f"{'ok' if c['passed'] else 'FAIL'}")
        verdict = "PASSED" if p["passed"] else "FAILED"
        if p["passed"] and p["laxer_than_domain_bar"]:
            verdict += " at a bar laxer than the domain's (not accepted for training or promotion)"
        lines.append(f"reward model {p['reward_model']} on {p['pairs']} labelled pairs: {verdict}")
        lines += [f"  {reason}" for reason in p["reasons"]]
        return "\n".join(lines)

    emit(args, payload, human)
    return 0 if result.passed else EXIT_FAILED


def list_command(args: argparse.Namespace) -> int:
    from generation.reward_models import list_reward_models
    from pipelines.settings import open_lake
    from quality.reward_gate import latest_reward_gate, shortfall_against_domain

    lake = open_lake()
    rows = []
    for record in list_reward_models(lake, args.domain):
        gate = latest_reward_gate(lake, record.domain, record.reward_model)
        verdict = None if not gate else ("passed" if all(r["passed"] for r in gate) else "failed")
        if verdict == "passed" and shortfall_against_domain(record.domain, gate):
            verdict = "passed at a laxer bar than the domain's"
        rows.append({"reward_model": record.reward_model, "domain": record.domain, "base_model": record.base_model,
                     "shuffled_labels": record.shuffled_labels, "heldout_accuracy": record.heldout_accuracy,
                     "created_at": record.created_at,
                     "gate": verdict})

    def human(rows):
        lines = [f"{r['reward_model']:<48} {r['domain']:<20} acc {'n/a' if r['heldout_accuracy'] is None else format(r['heldout_accuracy'], '.3f')}  "
                 f"gate {r['gate'] or 'not checked'}" for r in rows]
        return "\n".join(lines + [f"{len(rows)} reward models"])

    emit(args, rows, human)
    return 0


def _resolve(lake, domain: str, ref: str) -> str:
    from generation.reward_models import RewardModelNotFound, resolve_reward_model

    try:
        return resolve_reward_model(lake, domain, ref).reward_model
    except RewardModelNotFound as exc:
        raise CliError(str(exc)) from None


def compare_command(args: argparse.Namespace) -> int:
    from evaluation.reward_promotion import RewardPromotionError, compare_reward_models
    from pipelines.settings import open_lake

    lake = open_lake()
    candidate, baseline = _resolve(lake, args.domain, args.candidate), _resolve(lake, args.domain, args.baseline)
    try:
        report = compare_reward_models(lake, args.domain, candidate, baseline)
    except RewardPromotionError as exc:
        raise CliError(str(exc)) from None
    d = report.domains[0]
    payload = {"domain": args.domain, "candidate": candidate, "baseline": baseline, **d.to_json()}

    def human(p):
        return (f"{candidate} vs {baseline} on {d.n} shared labelled pairs: agreement {100 * d.delta:+.1f} pts "
                f"[{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}], p={d.p:.2g} ({d.test}), MDE "
                f"{100 * d.mde:.1f} pts: {d.verdict}")

    emit(args, payload, human)
    return EXIT_FAILED if d.verdict == "regression" else 0


def promote_command(args: argparse.Namespace) -> int:
    from evaluation.reward_promotion import RewardPromotionError, promote_reward_model
    from pipelines.settings import open_lake

    lake = open_lake(write=True)
    candidate = _resolve(lake, args.domain, args.reward_model)
    try:
        decision = promote_reward_model(lake, args.domain, candidate)
    except RewardPromotionError as exc:
        raise CliError(str(exc)) from None
    emit(args, decision.to_json(),
         lambda p: f"{'promoted' if p['promoted'] else 'refused'}: {p['reason']} (decision {p['decision']})")
    return 0 if decision.promoted else EXIT_FAILED


def judge_command(args: argparse.Namespace) -> int:
    from generation.judge import create_judge
    from generation.policy import PolicyError
    from generation.reward_scorer import RewardModelError
    from pipelines.settings import open_lake

    if args.max_length < 16:
        raise CliError(f"--max-length {args.max_length}: must be >= 16 (the rubric, question and answer must fit)")
    _note_unregistered(args.domain)
    lake = open_lake(write=True)
    try:
        record = create_judge(lake, lake.mlflow_uri, args.domain, args.policy, args.rubric, max_length=args.max_length)
    except (PolicyError, RewardModelError) as exc:
        raise CliError(str(exc)) from None
    emit(args, record.to_json(), lambda p: f"judge {p['reward_model']} of {p['domain']} (policy {p['base_model']}); "
                                           f"next: assay reward check {p['domain']} --reward-model "
                                           f"{p['reward_model']} --pairs FILE")
    return 0
