"""Environment self-test ("verify the verifier"): is a domain's data and scorer trustworthy?

A reward that gives 1.0 to a wrong answer, a generator that changes between runs, or an eval item
that leaks into training silently ruins every number downstream. :func:`check_domain` runs its
checks on a small sample of each split and reports each one with a human-readable detail:

- ``reference_scores_1``: every reference answer scores 1.0, both on the sample as generated and
  after the JSON round trip the lake applies to ``metadata``. A domain with its own
  ``score_many`` (what training and sweeps call) must also give, in one batch, the very scores
  ``score`` gives one at a time, on the references and on the empty answer.
- ``corruptions_score_less``: corrupted references (a number's leading digit changed, tokens
  shuffled, text replaced by random letters, truncated, another item's answer, empty) score below
  1.0. The rule: the empty string fails on every item (unless the reference itself is empty),
  every item has at least one failing corruption, and at least ``CORRUPTION_FAIL_SHARE`` (75%)
  of all corruptions fail. A corruption that normalizes to the reference is skipped. The share is
  not 100% because generic corruptions can legitimately stay correct where an answer space is
  tiny or admits several correct answers: a shuffled set of assignments ("A=1,B=2"), any valid
  graph colouring, commuting terms, a rounded decimal under a tolerant verifier.
- ``deterministic``: the same (split, n, seed) gives the same ids, prompts, answers and metadata.
- ``splits_disjoint``: no id and no normalized prompt (case, whitespace, sentence punctuation
  ignored; math symbols kept, so "0 + 1" and "0 - 1" stay different items) is
  in both train and eval.
- ``fuzz_never_raises``: the scorer returns a number in [0, 1] without raising on random ASCII,
  random unicode, control characters, unbalanced markup, huge numbers, very long text and the
  empty string, and no single call takes longer than ``FUZZ_MAX_SECONDS``.
- ``reward_attacks``: no reward hack built from the prompt alone (:mod:`quality.reward_attacks`:
  sprays, two-answer hedges, echoes, fig-leaf refusals...; plus the domain's own ``attacks``)
  scores above 0 on ``ATTACK_ITEMS`` eval items whose reference scores 1.0. A policy under RL finds
  such a reward within tens of steps, so this blocks training like the others.
- ``recall``: correct answers in other forms the prompt allows, built from the reference
  (:mod:`quality.report_card.recall`: ``$7$``, ``7.0``, ``1,795``, ``yes`` for ``Yes``, reasoning
  before the marker, ..., plus the domain's own ``equivalents``), on the same eval items, are paid
  at the domain's recall bar (``gate_thresholds["min_recall"]``, default 0.99): the false-negative
  side of the verifier, which ``reward_attacks`` cannot see.
- ``hack_corpus``: every hack the budgeted search once found for this domain and kept in the lake
  (:mod:`quality.report_card.hack_corpus`; the caller reads the rows and passes them as
  ``corpus_rows``) scores 0 again on the sample it was found on: a hole once found stays closed.
  With no rows it passes, saying the corpus is empty.

A domain that brings its own ``extra_checks`` (a terminal task suite: every task's oracle passes
and doing nothing fails) gets those too, by their names; a failing one fails the domain like a
generic check. A domain passes when all its checks pass. ``assay domains check DOMAIN|--all`` prints the results.

The checks are named once, in :data:`SCORER_CHECKS` (a domain with a verifier) and
:data:`DATA_CHECKS` (one without): adding a check is one line there. :func:`run_self_test` returns
a :class:`SelfTest`; :func:`check_domain` its ``as_dict()``, the shape the CLI's ``--json`` and
the batch gates read.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import string
import sys
import time
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from domains.base import Domain
# eval items the self-test attacks (quality.reward_attacks; `assay domains attack` tries more): enough
# to catch a scorer that pays a hack family, cheap enough for every gate evaluation
ATTACK_ITEMS = 3
CORRUPTION_FAIL_SHARE = 0.75
FUZZ_MAX_SECONDS = 5.0
# a terminal domain's score is a whole sandboxed episode plus its hidden tests (seconds under load)
FUZZ_MAX_SECONDS_EPISODE = 30.0
FUZZ_ITEMS = 3  # samples each fuzz string is scored against

_WS = re.compile(r"\s+")
# Sentence punctuation and quotes only: math symbols (+ - * / = < > ^ brackets) make a different item.
_PUNCT = re.compile(r"[.,;:!?'\"`\u2018\u2019\u201c\u201d]")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def normalize_prompt(text: str) -> str:
    """Case, whitespace and punctuation do not make a different item."""
    text = unicodedata.normalize("NFKC", text).casefold()
    return _WS.sub(" ", _PUNCT.sub(" ", text)).strip()


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict, and why in words (what failed, on which item, what to run next)."""

    passed: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"passed": bool(self.passed), "detail": self.detail}


@dataclass
class SelfTest:
    """A domain's self-test: each check's result by name, in the order they ran."""

    domain: str
    checks: dict[str, CheckResult]

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks.values())

    @property
    def failed(self) -> list[str]:
        return [name for name, check in self.checks.items() if not check.passed]

    def as_dict(self) -> dict[str, Any]:
        """``{"domain", "passed", "checks": {name: {"passed", "detail"}}}``"""
        return {"domain": self.domain, "passed": self.passed,
                "checks": {name: check.as_dict() for name, check in self.checks.items()}}


def _result(passed: bool, detail: str) -> CheckResult:
    return CheckResult(bool(passed), detail)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def _lake_round_trip(sample: dict) -> dict:
    """The sample as a reader of the lake sees it: metadata stored as JSON text, parsed back."""
    meta = json.loads(json.dumps(sample.get("metadata") or {}, sort_keys=True, default=str))
    return {"id": sample["id"], "prompt": sample["prompt"], "answer": sample["answer"], "metadata": meta}


def _short(text: str, limit: int = 60) -> str:
    text = repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- corruptions ------------------------------------------------------------------------------

def _perturb_numbers(answer: str, rng: random.Random) -> str | None:
    matches = list(_NUMBER.finditer(answer))
    if not matches:
        return None
    m = matches[rng.randrange(len(matches))]
    digits = m.group(0)
    # the leading digit: a change a relative tolerance cannot absorb (>= ~10% of the value)
    pos = 0
    new_digit = str((int(digits[pos]) + rng.randint(1, 9)) % 10)
    changed = digits[:pos] + new_digit + digits[pos + 1:]
    return answer[: m.start()] + changed + answer[m.end():]


def _shuffle_tokens(answer: str, rng: random.Random) -> str | None:
    tokens = re.split(r"(\s+|,\s*)", answer)
    words = [t for i, t in enumerate(tokens) if i % 2 == 0]
    if len(set(words)) >= 2:
        for _ in range(10):
            shuffled = words[:]
            rng.shuffle(shuffled)
            if shuffled != words:
                break
        out = []
        for i, t in enumerate(tokens):
            out.append(shuffled[i // 2] if i % 2 == 0 else t)
        return "".join(out)
    stripped = answer.strip()
    return stripped[::-1] if len(set(stripped)) >= 2 else None


def _replace_text(answer: str, rng: random.Random) -> str:
    length = max(3, min(len(answer), 40))
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(length))


def _truncate(answer: str, rng: random.Random) -> str | None:
    stripped = answer.strip()
    if _NUMBER.fullmatch(stripped.lstrip("-")):
        return None  # a truncated decimal is a rounding, which tolerant verifiers rightly accept
    return stripped[: len(stripped) // 2] if len(stripped) >= 2 else None


CORRUPTIONS: dict[str, Callable[[str, random.Random], str | None]] = {
    "perturb_numbers": _perturb_numbers,
    "shuffle_tokens": _shuffle_tokens,
    "replace_text": _replace_text,
    "truncate": _truncate,
}


def corruptions_of(answer: str, others: list[str], rng: random.Random) -> dict[str, str]:
    """Named corrupted versions of ``answer`` that differ from it after normalization."""
    ref_norm = normalize_prompt(answer)
    out: dict[str, str] = {}
    for name, fn in CORRUPTIONS.items():
        corrupted = fn(answer, rng)
        if corrupted is not None and corrupted != answer and normalize_prompt(corrupted) != ref_norm:
            out[name] = corrupted
    different = [o for o in others if normalize_prompt(o) != ref_norm]
    if different:
        out["other_answer"] = different[rng.randrange(len(different))]
    return out


# -- fuzz -------------------------------------------------------------------------------------

def _random_unicode(rng: random.Random, length: int) -> str:
    chars = []
    while len(chars) < length:
        cp = rng.randrange(0x110000)
        if 0xD800 <= cp <= 0xDFFF:  # lone surrogates cannot come out of a tokenizer's decode
            continue
        chars.append(chr(cp))
    return "".join(chars)


def fuzz_strings(rng: random.Random, reference: str = "") -> list[str]:
    printable = string.printable
    texts = [
        "", " ", "\n\n\t", "\x00", "0", "-0", "NaN", "nan", "inf", "-inf", "1e999", "9" * 5000,
        "-" * 50, "1/0", "0/0", "None", "null", "true", "[]", "{}", "{\"a\": [1, 2", "[[[[",
        "\\boxed{", "\\boxed{}", "\\boxed{\\boxed{1}", "<answer>", "<answer></answer>", "</answer><answer>",
        "Answer:", "answer: answer: answer:", "The answer is", "Answer: " + "(" * 200,
        "\u202e\u200b\u200d\ufeff", "🙂🙃🧪" * 20, "ﬁ ℌ Ⅻ ① ½ ²", "\u0663\u0664\u0665",
        "".join(rng.choice(printable) for _ in range(rng.randint(1, 200))),
        "".join(rng.choice(printable) for _ in range(rng.randint(200, 2000))),
        _random_unicode(rng, 50), _random_unicode(rng, 500),
        "a" * 20_000, "1 " * 10_000, ("word " * 20 + "\n") * 200,
    ]
    if reference:
        texts += [reference * 200, " ".join([reference] * 50), reference[::-1], "\x00" + reference]
    return texts


# -- the checks -------------------------------------------------------------------------------

def _score(domain: Domain, completion: str, sample: dict) -> float:
    return domain.safe_score(completion, sample)


def _check_reference(domain: Domain, samples: list[dict]) -> CheckResult:
    failures = []
    for sample in samples:
        for variant, row in (("as generated", sample), ("after lake round trip", _lake_round_trip(sample))):
            try:
                value = _score(domain, row["answer"], row)
            except Exception as exc:  # noqa: BLE001 - the detail names it
                failures.append(f"{sample['id']} ({variant}) raised {_describe(exc)}")
                continue
            if value != 1.0:
                failures.append(f"{sample['id']} ({variant}) scored {value:.3f}")
    if failures:
        return _result(False, f"{len(failures)} reference answers did not score 1.0: " + "; ".join(failures[:3]))
    disagreement = _batch_disagreement(domain, samples)
    if disagreement:
        return _result(False, disagreement)
    batch = "; score_many agrees with score" if domain.score_many is not None else ""
    return _result(True, f"{len(samples)} reference answers scored 1.0 (as generated and after the lake "
                         f"round trip){batch}")


def _batch_disagreement(domain: Domain, samples: list[dict]) -> str | None:
    """Training and sweeps score in batches: a domain's own ``score_many`` must give what ``score``
    gives one at a time (checked on each reference and on the empty answer, after the round trip)."""
    if domain.score_many is None:
        return None
    rows = [_lake_round_trip(s) for s in samples] * 2
    completions = [s["answer"] for s in samples] + [""] * len(samples)
    try:
        batch = domain.safe_score_many(completions, rows)
        single = [_score(domain, c, r) for c, r in zip(completions, rows)]
    except Exception as exc:  # noqa: BLE001 - the detail names it
        return f"batch scoring raised {_describe(exc)}"
    differ = [f"{r['id']} ({'empty' if not c else 'reference'}): score_many {b:.3f}, score {one:.3f}"
              for c, r, b, one in zip(completions, rows, batch, single) if b != one]
    if differ:
        return f"score_many disagrees with score on {len(differ)} of {len(rows)} completions: " + "; ".join(differ[:3])
    return None


def _check_corruptions(domain: Domain, samples: list[dict], rng: random.Random) -> CheckResult:
    answers = [s["answer"] for s in samples]
    empty_survivors, survivors, errors = [], [], []
    total = failed = 0
    undistinguished = []
    for sample in samples:
        row = _lake_round_trip(sample)
        item_failed = item_total = 0
        if sample["answer"].strip():
            try:
                if _score(domain, "", row) >= 1.0:
                    empty_survivors.append(sample["id"])
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{sample['id']} empty: {_describe(exc)}")
        for name, corrupted in corruptions_of(sample["answer"], answers, rng).items():
            try:
                value = _score(domain, corrupted, row)
            except Exception as exc:  # noqa: BLE001
                errors.append(f"{sample['id']} {name}: {_describe(exc)}")
                continue
            total += 1
            item_total += 1
            if value < 1.0:
                failed += 1
                item_failed += 1
            else:
                survivors.append(f"{name} {_short(corrupted)} for {_short(sample['answer'])}")
        if item_total and not item_failed:
            undistinguished.append(sample["id"])
    share = failed / total if total else 0.0
    problems = []
    if errors:
        problems.append(f"scorer raised on {len(errors)} corruptions: " + "; ".join(errors[:2]))
    if empty_survivors:
        problems.append(f"the empty answer scored 1.0 on {len(empty_survivors)} items ({empty_survivors[0]})")
    if undistinguished:
        problems.append(f"{len(undistinguished)} items scored every corruption 1.0 (e.g. {undistinguished[0]})")
    if total == 0:
        problems.append("no corruption differed from its reference")
    elif share < CORRUPTION_FAIL_SHARE:
        problems.append(f"only {failed}/{total} corruptions scored < 1.0 (need {CORRUPTION_FAIL_SHARE:.0%}); "
                        "still correct: " + "; ".join(survivors[:3]))
    if problems:
        return _result(False, " | ".join(problems))
    note = f"; still correct: {survivors[0]}" if survivors else ""
    return _result(True, f"{failed}/{total} corruptions scored < 1.0 and the empty answer failed everywhere{note}")


def _same(a: list[dict], b: list[dict]) -> str | None:
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} samples"
    for x, y in zip(a, b):
        for key in ("id", "prompt", "answer", "metadata"):
            if json.dumps(x[key], sort_keys=True, default=str) != json.dumps(y[key], sort_keys=True, default=str):
                return f"{key} differs at id {x['id']} vs {y['id']}"
    return None


def _check_deterministic(evals: list[dict], train: list[dict], generated: dict) -> CheckResult:
    diffs = [f"{split}: {d}" for split, d in (("eval", _same(evals, generated["eval_again"])),
                                              ("train", _same(train, generated["train_again"]))) if d]
    if diffs:
        return _result(False, "two calls with the same seed differ: " + "; ".join(diffs))
    return _result(True, f"eval (seed 0) and train (seed 1) repeat exactly ({len(evals) + len(train)} samples)")


def _check_disjoint(train: list[dict], evals: list[dict]) -> CheckResult:
    shared_ids = {s["id"] for s in train} & {s["id"] for s in evals}
    eval_prompts = {normalize_prompt(s["prompt"]): s["id"] for s in evals}
    shared_prompts = [(s["id"], eval_prompts[normalize_prompt(s["prompt"])]) for s in train
                      if normalize_prompt(s["prompt"]) in eval_prompts]
    if shared_ids or shared_prompts:
        parts = []
        if shared_ids:
            parts.append(f"{len(shared_ids)} ids in both splits (e.g. {sorted(shared_ids)[0]})")
        if shared_prompts:
            parts.append(f"{len(shared_prompts)} train prompts equal an eval prompt (e.g. train {shared_prompts[0][0]} = eval {shared_prompts[0][1]})")
        return _result(False, "; ".join(parts))
    return _result(True, f"{len(train)} train and {len(evals)} eval samples share no id and no normalized prompt")


def _check_fuzz(domain: Domain, samples: list[dict], rng: random.Random) -> CheckResult:
    problems = []
    slowest = 0.0
    calls = 0
    for sample in samples[:FUZZ_ITEMS]:
        row = _lake_round_trip(sample)
        for text in fuzz_strings(rng, sample["answer"]):
            start = time.perf_counter()
            try:
                raw = domain.score(text, row)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"raised {_describe(exc)} on {_short(text)}")
                continue
            finally:
                elapsed = time.perf_counter() - start
                slowest = max(slowest, elapsed)
                calls += 1
            if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not (0.0 <= raw <= 1.0) or (
                    isinstance(raw, float) and math.isnan(raw)):
                problems.append(f"returned {raw!r} (not a float in [0, 1]) on {_short(text)}")
            elif elapsed > (FUZZ_MAX_SECONDS_EPISODE if domain.episode_task is not None else FUZZ_MAX_SECONDS):
                problems.append(f"took {elapsed:.1f} s on {_short(text)}")
    if problems:
        return _result(False, f"{len(problems)} of {calls} fuzz calls failed: " + "; ".join(problems[:3]))
    return _result(True, f"{calls} fuzz calls returned a score in [0, 1]; slowest {slowest * 1000:.0f} ms")


def _extra_checks(domain: Domain) -> dict[str, CheckResult]:
    """The domain's own checks, each ``{"passed", "detail"}``; one that raises or breaks that shape fails."""
    if domain.extra_checks is None:
        return {}
    try:
        found = domain.extra_checks()
        out = {}
        for name, check in dict(found).items():
            if name in CHECK_NAMES or not isinstance(check, dict) or not isinstance(check.get("passed"), bool):
                return {"extra_checks": _result(False, f"extra_checks returned {name!r}: {check!r:.200}; expected "
                                                       "{name: {'passed': bool, 'detail': str}} with new names")}
            out[str(name)] = _result(check["passed"], str(check.get("detail", "")))
        return out
    except Exception as exc:  # noqa: BLE001 - the detail names it
        return {"extra_checks": _result(False, f"extra_checks raised {_describe(exc)}")}


def attack_items(domain: Domain) -> int:
    """Eval items the self-test attacks: ``ATTACK_ITEMS``, or the domain's own
    ``gate_thresholds["reward_attack_items"]`` (0 turns the attack off: for a scorer that is a
    deliberate stand-in, e.g. a test domain simulating a policy that solves everything)."""
    return max(0, int((domain.gate_thresholds or {}).get("reward_attack_items", ATTACK_ITEMS)))


def _check_attacks(domain: Domain, samples: list[dict]) -> CheckResult:
    """No generic or domain-specific reward hack (:mod:`quality.reward_attacks`) scores above 0 on
    an item whose reference scores 1.0: a reward a policy can earn without the work fails the domain."""
    from quality.reward_attacks import attack_domain

    if not samples:
        return _result(True, "skipped: the domain sets gate_thresholds['reward_attack_items'] = 0 "
                             "(its scorer is a stand-in); `assay domains attack` still tries it")

    report = attack_domain(domain, samples=samples)
    if report.error:
        return _result(False, f"scoring the attacks raised: {report.error}")
    if report.paid:
        return _result(False, f"reward hacks paid on {len(samples)} items: {report.summary()}; "
                              f"run `assay domains attack {domain.name}` for the details")
    return _result(True, report.summary())


def _check_hack_corpus(domain: Domain, rows: Sequence[dict]) -> CheckResult:
    """Every hack kept for the domain (``hack_corpus``) scores 0 again on its sample."""
    from quality.report_card.hack_corpus import replay_corpus

    replay = replay_corpus(domain, rows)
    if replay.passed:
        return _result(True, replay.summary())
    return _result(False, f"{replay.summary()}; the scorer pays a hack once found and kept "
                          f"(`assay domains report {domain.name}` shows the search)")


def _check_recall(domain: Domain, samples: list[dict]) -> CheckResult:
    """Correct answers in other forms the prompt allows (:mod:`quality.report_card.recall`) are paid
    at the domain's recall bar: a verifier that refuses right answers trains the policy away from
    them, the mirror image of a paid hack."""
    from quality.report_card.card import min_recall
    from quality.report_card.recall import measure_recall

    report = measure_recall(domain, samples=samples)
    if report.error:
        return _result(False, f"scoring the recall probes raised: {report.error}")
    if report.recall is None:
        return _result(True, "no equivalence family applies to these items (nothing to check)")
    bar = min_recall(domain)
    low, high = report.interval
    shown = f"{report.paid}/{report.candidates} correct answers in other forms paid (recall {report.recall:.3f}, " \
            f"95% [{low:.3f}, {high:.3f}])"
    if report.recall < bar:
        miss = report.misses[0] if report.misses else {}
        return _result(False, f"{shown}, below the bar {bar:.3f}; worst family {report.worst_family}, e.g. "
                              f"{_short(str(miss.get('completion', '')))} scored {miss.get('score', 0.0):.2f}; "
                              f"run `assay domains report {domain.name}` for the details")
    return _result(True, shown)


@dataclass
class _Inputs:
    """What the checks read: the samples of each split (each generated twice), the seeded generator
    they share (the corruptions draw before the fuzz), and the kept hacks."""

    domain: Domain
    evals: list[dict]
    train: list[dict]
    generated: dict[str, list[dict]]
    rng: random.Random
    corpus_rows: Sequence[dict]

    @property
    def both(self) -> list[dict]:
        return self.evals + self.train


# The checks of a domain with a verifier, by name, in the order they run.
SCORER_CHECKS: dict[str, Callable[[_Inputs], CheckResult]] = {
    "reference_scores_1": lambda s: _check_reference(s.domain, s.both),
    "corruptions_score_less": lambda s: _check_corruptions(s.domain, s.both, s.rng),
    "deterministic": lambda s: _check_deterministic(s.evals, s.train, s.generated),
    "splits_disjoint": lambda s: _check_disjoint(s.train, s.evals),
    "fuzz_never_raises": lambda s: _check_fuzz(s.domain, s.both, s.rng),
    "reward_attacks": lambda s: _check_attacks(s.domain, s.evals[:attack_items(s.domain)]),
    "recall": lambda s: _check_recall(s.domain, s.evals[:attack_items(s.domain)]),
    "hack_corpus": lambda s: _check_hack_corpus(s.domain, s.corpus_rows),
}
CHECK_NAMES = tuple(SCORER_CHECKS)


def _no_verifier(domain: Domain) -> CheckResult:
    # passed: declaring no verifier is allowed; the checks of a scorer do not apply, and the reward
    # model that replaces it is refused by GRPO until its own gate passed
    return _result(True, f"score=None: rewarded only by its learned reward, gated by `assay reward check "
                         f"{domain.name}` before GRPO trains on it; the scorer checks "
                         f"({', '.join(n for n in CHECK_NAMES if n not in DATA_CHECKS)}) do not apply")


# The checks of a domain with no verifier (score=None): its data, and a statement of what is not checked.
DATA_CHECKS: dict[str, Callable[[_Inputs], CheckResult]] = {
    "deterministic": SCORER_CHECKS["deterministic"],
    "splits_disjoint": SCORER_CHECKS["splits_disjoint"],
    "no_verifier": lambda s: _no_verifier(s.domain),
}
DATA_CHECK_NAMES = tuple(DATA_CHECKS)


def check_domain(domain: Domain, n: int = 20, *, corpus_rows: Sequence[dict] | None = None) -> dict[str, Any]:
    """Self-test one domain on ``n`` samples per split (capped by its ``eval_size``).

    ``corpus_rows``: the domain's kept hacks (:func:`quality.report_card.hack_corpus.read_corpus`),
    replayed by the check ``hack_corpus``; None or empty: the corpus is empty.

    Returns ``{"domain", "passed", "checks": {name: {"passed", "detail"}}}``; never raises for a
    broken domain (a generator or scorer that raises becomes a failed check naming the error).
    """
    return run_self_test(domain, n, corpus_rows=corpus_rows).as_dict()


def run_self_test(domain: Domain, n: int = 20, *, corpus_rows: Sequence[dict] | None = None) -> SelfTest:
    """:func:`check_domain`'s results as a :class:`SelfTest`."""
    # Domain code may print (some generators do); keep stdout clean for `--json` output.
    with contextlib.redirect_stdout(sys.stderr):
        return _self_test(domain, n, list(corpus_rows or []))


def _self_test(domain: Domain, n: int, corpus_rows: list[dict]) -> SelfTest:
    n = max(1, min(int(n), domain.eval_size))
    generated: dict[str, list[dict]] = {}
    gen_errors: dict[str, str] = {}
    for label, split, seed in (("eval", "eval", 0), ("eval_again", "eval", 0),
                               ("train", "train", 1), ("train_again", "train", 1)):
        try:
            generated[label] = domain.generate(split, n, seed)
        except Exception as exc:  # noqa: BLE001
            gen_errors[label] = _describe(exc)
    if gen_errors:
        detail = "samples raised: " + "; ".join(f"{k}: {v}" for k, v in gen_errors.items())
        return SelfTest(domain.name, {name: _result(False, detail) for name in CHECK_NAMES})
    evals, train = generated["eval"], generated["train"]
    if not evals or not train:
        detail = f"samples yielded {len(evals)} eval and {len(train)} train items for n={n}"
        return SelfTest(domain.name, {name: _result(False, detail) for name in CHECK_NAMES})

    inputs = _Inputs(domain, evals, train, generated, random.Random(f"domain-check:{domain.name}"), corpus_rows)
    # no verifier: nothing to score, the data contract only; the reward model has its own gate
    checks = SCORER_CHECKS if domain.has_verifier else DATA_CHECKS
    results = {name: check(inputs) for name, check in checks.items()}
    results.update(_learned_reward_gate(domain))
    results.update(_extra_checks(domain))
    return SelfTest(domain.name, results)


def _learned_reward_gate(domain: Domain) -> dict[str, CheckResult]:
    """``learned_reward_gate`` for a domain that declares a learned reward: its declared bar
    (``LearnedReward(gate=...)``) must be a valid gate configuration; the detail shows the bar."""
    if domain.learned_reward is None:
        return {}
    from quality.reward_gate_config import GateDeclarationError, RewardGateConfig, declared_gate

    try:
        bar = declared_gate(domain)
    except GateDeclarationError as exc:
        return {"learned_reward_gate": _result(False, str(exc))}
    defaults = RewardGateConfig()
    changed = {k: v for k, v in bar.model_dump().items() if v != getattr(defaults, k)}
    shown = ", ".join(f"{k}={v}" for k, v in changed.items()) or "the gate's defaults"
    return {"learned_reward_gate": _result(True, f"`assay reward check {domain.name}` judges its reward model at: "
                                                 f"{shown}; GRPO accepts no check at a laxer bar")}


__all__ = ["check_domain", "run_self_test", "corruptions_of", "fuzz_strings", "normalize_prompt", "CheckResult",
           "SelfTest", "CHECK_NAMES", "DATA_CHECK_NAMES", "SCORER_CHECKS", "DATA_CHECKS", "CORRUPTION_FAIL_SHARE"]
