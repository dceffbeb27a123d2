"""reasoning-gym plumbing shared by the pack and the domains built from its tasks: drawing
entries lazily (the package is imported on first use, never when the registry loads) and scoring
a free-form completion with a task's own verifier without ever raising, and without any verifier
executing the completion's text (``_rg_untrusted_answers``)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import random
import re
import subprocess
import sys
import threading
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

from domains.answers import (NUMBER, declared_answer, declared_number, equivalent_answers, exact_number,
                             final_answer_text, line_claim, normalize_span, normalize_text_answer, single_number,
                             stated_answers, states_non_finite)
from domains.builtin._common import int_seed, stream_split
from domains.builtin._rg_untrusted_answers import SYMPY_TASKS, harden_verifier, is_plain_math

ANSWER_HINT = "Give your final answer inside <answer></answer> tags."
PROMPT_SUFFIX = "\n\n" + ANSWER_HINT

# Items whose `answer` is None (several valid answers) carry one valid answer in metadata.
_REFERENCE_KEYS = ("possible_answer", "example_correct_answer", "example_answer")
_LOCK = threading.Lock()


def _strict_bool_score(answer: str, entry: dict) -> float:
    # reasoning-gym's game_of_life_halting compares bool(answer) == bool(entry["answer"]) on
    # strings, so every non-empty text scores 1.0; compare the stated truth value instead.
    said = normalize_text_answer(answer)
    return 1.0 if said in ("true", "false") and said == normalize_text_answer(str(entry["answer"])) else 0.0


def _puzzle24_score(answer: str, entry: dict) -> float:
    # reasoning-gym's puzzle24 checks that the expression makes 24 with four numbers in range, not
    # that they are the four numbers given: "10 + 4 + 3 + 7" would solve every puzzle.
    given = sorted(int(x) for x in (entry.get("metadata") or {}).get("numbers") or [])
    used = sorted(int(x) for x in re.findall(r"\b\d+\b", answer or ""))
    if not given or used != given:
        return 0.0
    return float(scoring_dataset("puzzle24").score_answer(answer, entry))


def _coin_flip_score(answer: str, entry: dict) -> float:
    # reasoning-gym's coin_flip falls back to comparing the digits of the formatted numbers, so
    # "0" shares the leading "0" of every probability below 1 and scores 1.0; compare values.
    from fractions import Fraction

    try:
        said = float(Fraction(answer.replace(",", "").strip()))
        truth = float(Fraction(str(entry["answer"]).replace(",", "").strip()))
    except (ValueError, ZeroDivisionError):
        return 0.0
    return 1.0 if math.isclose(said, truth, rel_tol=1e-3, abs_tol=1e-9) else 0.0


def conclusion_defect(answer: str, premises: list[str]) -> str | None:
    """Why a conclusion the premises entail still shows no inference (None: it shows one).

    reasoning-gym pays any entailed formula that is not a tautology or a lone variable, so the
    premises themselves, and any premise weakened by "∨ anything", "solve" every item from the
    prompt alone (31 of 40 items took "(premise ∨ Q)"). The rule here, written down once:

    - ``contradictory premises``: nothing can be concluded from premises no assignment satisfies
      (anything follows; such items are not drawn either);
    - ``restates premises``: the conclusion has the truth table of one premise or of some premises
      joined with ∧ (re-bracketed, reordered, double-negated);
    - ``follows from one premise``: a single premise entails it (a premise weakened or taken apart:
      ``P`` -> ``(P ∨ Q)``, ``(Q → P)``, ``(P ∧ R)`` -> ``(P ↔ R)``): no premises were combined;
    - ``weaker than the premises allow``: it leaves open an assignment of its own variables that the
      premises rule out (``(R ∨ S)`` where the premises give ``R``; ``(P ↔ Q)`` where they give both):
      a conclusion states all the premises say about the variables it names, no padding.

    Compared by truth table over every variable named, so re-bracketing and reordering change nothing.
    """
    from itertools import combinations

    from reasoning_gym.logic.propositional_logic import Expression

    dataset = scoring_dataset("propositional_logic")
    parsed = [Expression.from_string(p) for p in premises]
    conclusion = Expression.from_string(answer)
    assignments = dataset._generate_assignments(dataset._collect_variables(parsed + [conclusion]))
    models = [a for a in assignments if all(p.evaluate(a) for p in parsed)]
    if not models:
        return "contradictory premises"

    def table(exprs):
        return tuple(all(e.evaluate(a) for e in exprs) for a in assignments)

    said = table([conclusion])
    if any(table(subset) == said for k in range(1, len(parsed) + 1) for subset in combinations(parsed, k)):
        return "restates premises"
    if any(all(conclusion.evaluate(a) for a in assignments if premise.evaluate(a)) for premise in parsed):
        return "follows from one premise"
    named = sorted(dataset._collect_variables([conclusion]))
    allowed = {tuple(a[v] for v in named) for a in models}
    claimed = {tuple(a[v] for v in named) for a in assignments if conclusion.evaluate(a)}
    if claimed != allowed:
        return "weaker than the premises allow"
    return None


def _propositional_logic_score(answer: str, entry: dict) -> float:
    # reasoning-gym accepts any entailed formula; a conclusion must also show an inference
    # (conclusion_defect). Items whose own reference shows none are not drawn (ITEM_FILTERS).
    value = float(scoring_dataset("propositional_logic").score_answer(answer, entry))
    if value < 1.0:
        return value
    return 0.0 if conclusion_defect(answer, list(entry["metadata"]["premises"])) else value


def _reference_shows_inference(entry: dict) -> bool:
    reference = reference_answer(entry)
    if reference is None:
        return False
    try:
        premises = list(entry["metadata"]["premises"])
        if scoring_dataset("propositional_logic").score_answer(reference, entry) < 1.0:
            return False  # a lone variable: reasoning-gym's own triviality rule pays it 0.25
        return conclusion_defect(reference, premises) is None
    except (ValueError, KeyError, AttributeError):
        return False


# Items a task's generator makes that no scorer can judge fairly, dropped when drawing.
ITEM_FILTERS: dict[str, Callable[[dict], bool]] = {
    # most references show no inference (conclusion_defect): of 600 generated items, 141 have
    # contradictory premises, 182 restate them, most others weaken a premise; ~3% remain (drawing
    # costs ~35 ms per eval item, EVAL_SIZES): such an item cannot tell work from copying.
    "propositional_logic": _reference_shows_inference,
    # reasoning-gym asks "What is {person1} to {person2}?" but labels the in-law branch by what
    # person2 is to person1 (person2 is person1's spouse's parent, answered "mother-in-law": the
    # true answer is son/daughter-in-law), and the niece/nephew branch by person2's gender (person2
    # is person1's aunt/uncle there); the family is not in the metadata to relabel, so drop them.
    "family_relationships": lambda entry: str(entry.get("answer")) not in (
        "mother-in-law", "father-in-law", "niece", "nephew"),
    # reasoning-gym builds polynomial x sin/cos integrands with an undefined function named "sin", so
    # sympy leaves their reference unevaluated ("3*Integral(x**3*cos(x), x) + C", ~1 item in 9): the
    # problem restated is no answer (Integral is not allowed in answers, _rg_untrusted_answers)
    "intermediate_integration": lambda entry: "Integral" not in str(reference_answer(entry) or ""),
    # about 1 item in 15 asks to simplify a fraction already in lowest terms (reduction factor 1): its
    # answer is the question's fraction handed back, so copying the prompt solves it
    "fraction_simplification": lambda entry: (entry.get("metadata") or {}).get("reduction_factor", 2) != 1,
}


# a sequence of button labels and nothing else: "A → B → C", "A, B, C", "a b c", "A->B", or the labels
# run together in capitals ("AABA"); a word is not a sequence of labels
_BUTTON_SEQUENCE = re.compile(r"[A-Za-z](?:\s*(?:→|->|,)\s*[A-Za-z]|\s+[A-Za-z])*|[A-Z]+")


def _quantum_lock_score(answer: str, entry: dict) -> float:
    # reasoning-gym's quantum_lock reads every letter A-C anywhere in the text, upper-cased, so prose
    # whose a/b/c letters happen to spell the sequence ("Koti Nufa Zita Vibalo Duto" reads A A B A)
    # is paid; the answer must be the sequence itself, its labels in any case and separators
    if not _BUTTON_SEQUENCE.fullmatch((answer or "").strip()):
        return 0.0
    return float(scoring_dataset("quantum_lock").score_answer(answer, entry))


SCORE_OVERRIDES: dict[str, Callable[[str, dict], float]] = {
    "game_of_life_halting": _strict_bool_score,
    "quantum_lock": _quantum_lock_score,
    "puzzle24": _puzzle24_score,
    "coin_flip": _coin_flip_score,
    "propositional_logic": _propositional_logic_score,
}

# Tasks allowed to pay reasoning-gym's partial credit, each with the reason beside it. Empty: no
# task has shown that its partial credit measures progress rather than format.
SHAPED_TASKS: dict[str, str] = {}

_TRUTH_WORDS = ("true", "false", "yes", "no")


def _hedges_truth_value(span: str, entry: dict) -> bool:
    """A span that names both truth values for a yes/no or true/false item ("Yes or No")."""
    reference = normalize_text_answer(str(entry.get("answer") or ""))
    if reference not in _TRUTH_WORDS:
        return False
    said = set(re.findall(r"[a-z]+", normalize_text_answer(span))) & set(_TRUTH_WORDS)
    return len(said) > 1


@lru_cache(maxsize=None)
def scoring_dataset(task: str, config_json: str = "{}"):
    """The task's dataset whose ``score_answer`` judges completions, made safe for untrusted text
    (``_rg_untrusted_answers``: no verifier executes a completion)."""
    import reasoning_gym

    with _LOCK:
        dataset = reasoning_gym.create_dataset(task, size=1, seed=0, **json.loads(config_json))
        harden_verifier(task, dataset)
        return dataset


class _Discard(io.TextIOBase):
    def write(self, text: str) -> int:
        return len(text)


_quiet_depth = 0
_quiet_saved = None
_QUIET_LOCK = threading.Lock()


@contextlib.contextmanager
def _quiet():
    """Discard stdout while reasoning-gym code runs: some generators print progress (the bf
    compiler prints dots), some verifiers print every invalid move, and stdout belongs to the
    CLI's ``--json`` output. Reference-counted so overlapping threads restore the real stdout."""
    global _quiet_depth, _quiet_saved
    with _QUIET_LOCK:
        if _quiet_depth == 0:
            _quiet_saved, sys.stdout = sys.stdout, _Discard()
        _quiet_depth += 1
    try:
        yield
    finally:
        with _QUIET_LOCK:
            _quiet_depth -= 1
            if _quiet_depth == 0:
                sys.stdout, _quiet_saved = _quiet_saved, None


# Generators that draw from the global `random`/numpy state instead of their seeded Random
# (found by the self-test's determinism check, which every other task passes without this).
GLOBAL_RNG_TASKS = frozenset({"list_functions"})


@contextlib.contextmanager
def _seeded_globals(seed: int, task: str):
    """Seed the global RNGs per item for the tasks that use them, then restore them."""
    if task not in GLOBAL_RNG_TASKS:
        yield
        return
    import numpy as np

    state, np_state = random.getstate(), np.random.get_state()
    random.seed(seed)
    np.random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)
        np.random.set_state(np_state)


def _tuples(value):
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


# Metadata fields some verifiers compare as tuples; JSON (and the lake) turns them into lists.
TUPLE_FIELDS: dict[str, tuple[str, ...]] = {"arc_agi": ("input", "output"), "rearc": ("input", "output")}


def json_safe(value):
    return json.loads(json.dumps(value, default=str))


def reference_answer(entry: dict) -> str | None:
    answer = entry.get("answer")
    if answer is not None:
        return str(answer)
    meta = entry.get("metadata") or {}
    for key in _REFERENCE_KEYS:
        if meta.get(key) is not None:
            value = meta[key]
            return value if isinstance(value, str) else json.dumps(value)
    return None


# Generators whose output depends on str hashing (they iterate sets of strings), so the same seed
# gives different items in processes with different PYTHONHASHSEED (found by comparing eval sets
# across processes). Their chunks are generated in a child process with PYTHONHASHSEED=0.
HASH_SENSITIVE_TASKS = frozenset({"isomorphic_strings", "knight_swap", "polynomial_multiplication",
                                  "ransom_note", "word_ladder"})


def _chunk_entries(task: str, config: dict, size: int, seed: int, chunk_seed_parts: tuple) -> Iterator[dict]:
    """The raw entries of one dataset chunk (question, answer, JSON-safe metadata), lazily: slow
    generators only pay for the items a stream consumes."""
    import reasoning_gym

    with _quiet():
        ds = reasoning_gym.create_dataset(task, size=size, seed=seed, **config)
    for i in range(size):
        with _quiet(), _seeded_globals(int_seed("rg-globals", task, *chunk_seed_parts, i), task):
            entry = ds[i]
        yield {"question": entry["question"], "answer": entry.get("answer"),
               "metadata": json_safe(entry.get("metadata") or {})}


def _chunk_entries_hash_stable(task: str, config: dict, size: int, seed: int, chunk_seed_parts: tuple):
    if task not in HASH_SENSITIVE_TASKS or os.environ.get("PYTHONHASHSEED") == "0":
        return _chunk_entries(task, config, size, seed, chunk_seed_parts)
    request = json.dumps({"task": task, "config": config, "size": size, "seed": seed,
                          "parts": [str(p) for p in chunk_seed_parts]})
    repo = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONHASHSEED="0",
               PYTHONPATH=os.pathsep.join([repo] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    out = subprocess.run([sys.executable, "-m", "domains.builtin._rg"], input=request, capture_output=True,
                         text=True, env=env, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"generating {task} in a PYTHONHASHSEED=0 child failed: {out.stderr[-500:]}")
    return json.loads(out.stdout)


def draw_entries(task: str, config: dict, n: int, *seed_parts: object,
                 prompt_suffix: str = PROMPT_SUFFIX) -> Iterator[dict]:
    """Endless candidates for ``stream_split`` from one task, in chunks of fresh seeds."""
    chunk = 0
    # a child process computes its whole chunk: keep it near the ~2n draws a 50% split needs
    size = 2 * n + (4 if task in HASH_SENSITIVE_TASKS else 16)
    while True:
        parts = (*seed_parts, chunk)
        for entry in _chunk_entries_hash_stable(task, config, size, int_seed("rg", task, *parts), parts):
            reference = reference_answer(entry)
            if reference is None or (task in ITEM_FILTERS and not ITEM_FILTERS[task](entry)):
                continue
            meta = {"task": task, "rg_answer": None if entry.get("answer") is None else str(entry["answer"]),
                    "rg_metadata": entry["metadata"]}
            if config:
                meta["rg_config"] = config
            yield {"key": entry["question"], "prompt": entry["question"] + prompt_suffix,
                   "answer": reference, "metadata": meta}
        chunk += 1


def _metadata(sample: dict) -> dict:
    meta = sample.get("metadata") or {}
    if isinstance(meta, str):  # rows read back from the lake carry metadata as JSON text
        try:
            meta = json.loads(meta)
        except ValueError:
            meta = {}
    return meta if isinstance(meta, dict) else {}


def score_with_verifier(completion: str, sample: dict, *, task: str | None = None,
                        prompt_suffix: str = PROMPT_SUFFIX) -> float:
    """1.0 when the task's verifier gives full marks to the one answer span the completion
    declares (``declared_answer``, normalised), or to the reference when that span says exactly
    what the reference says in another form (``equivalent_answers``); else 0.0: a hedge (several
    different declared answers), a non-finite value, a verifier that raises, or partial credit
    (unless the task is in ``SHAPED_TASKS``)."""
    if not isinstance(completion, str) or not completion.strip():
        return 0.0
    meta = _metadata(sample)
    task = task or meta.get("task")
    if not isinstance(task, str):
        return 0.0
    prompt = sample.get("prompt") or ""
    entry = {
        "question": prompt[: -len(prompt_suffix)] if prompt_suffix and prompt.endswith(prompt_suffix) else prompt,
        "answer": meta.get("rg_answer", sample.get("answer")),
        "metadata": dict(meta.get("rg_metadata") or {}),
    }
    for field in TUPLE_FIELDS.get(task, ()):
        if field in entry["metadata"]:
            entry["metadata"][field] = _tuples(entry["metadata"][field])
    scorer = SCORE_OVERRIDES.get(task)
    if scorer is None:
        try:
            scorer = scoring_dataset(task, json.dumps(meta.get("rg_config") or {}, sort_keys=True)).score_answer
        except Exception:  # noqa: BLE001 - an unknown task or bad config in a row's metadata
            return 0.0
    reference = sample.get("answer")
    reference = reference if isinstance(reference, str) else None
    # the declared span, normalised (domains.answers: no $..$, \\boxed{}, ** around it, no label)
    candidate = declared_answer(completion, fallback="whole")
    if reference and exact_number(reference, grouping=False) is not None and _undeclared(completion):
        # no tag, box or answer line, and the answer is one number: what the last line claims, by the
        # built-ins' rule ("The result is 1649.", "3 + 4 = 7"; a question, a spray or a hedge claims none)
        candidate = _claimed_number_text(completion)
    if candidate is None or not candidate.strip() or _hedges_truth_value(candidate, entry):
        return 0.0
    if states_non_finite(candidate) and not states_non_finite(reference):
        return 0.0  # nan/inf is no answer (complex_arithmetic's verifier paid "nan" on every item)
    if reference and exact_number(reference, grouping=False) is not None:
        if single_number(candidate) is None:
            return 0.0  # the answer is one number: "41 42" is a spray (gsm_symbolic's verifier reads the first)
        # and the verifier reads it as we do: "784,785" is 784785, not gsm_symbolic's first match 784
        candidate = NUMBER.sub(lambda m: m.group(0).replace(",", ""), candidate)
    value = _verdict(scorer, task, candidate, entry)
    if value < 1.0 and reference and candidate != reference.strip() and equivalent_answers(candidate, reference):
        # the same answer in another exact form ("1170.0", "1,795", "true", "[19,20]"): the verifier
        # judges the reference's spelling of it, so it must still accept the reference itself
        value = _verdict(scorer, task, reference.strip(), entry)
    if task in SHAPED_TASKS:
        return min(1.0, max(0.0, value))
    # Binary: reasoning-gym's partial credit pays format-only junk (0.01-0.05 for any parseable
    # answer) and containment (len(answer)/len(text)), which beats nothing in an all-wrong group.
    return 1.0 if value >= 1.0 else 0.0


def _undeclared(completion: str) -> bool:
    """No declared span at all: no tag, no \\boxed{}, no answer line, no "the answer is"."""
    return not stated_answers(completion) and final_answer_text(completion.replace("\x00", "")) is None


def _claimed_number_text(completion: str) -> str | None:
    """The text of the one number an undeclared completion's last line claims, as written ("The
    result is 1649." -> "1649", "= 13/36" -> "13/36"); None when the built-ins' rule finds no single
    claimed number (``declared_number``: a question, a negation, a hedge, a spray)."""
    if declared_number(completion) is None:
        return None
    lines = [ln for ln in completion.replace("\x00", "").splitlines() if ln.strip()]
    claim = line_claim(lines[-1]) if lines else None
    claim = normalize_span(claim.strip().rstrip(".!").strip()) if claim else None
    return claim if claim and single_number(claim) is not None else None


def _verdict(scorer: Callable[[str, dict], float], task: str, answer: str, entry: dict) -> float:
    """The task's verifier on one answer text, never raising; 0.0 for text it must not see."""
    if task in SYMPY_TASKS and not is_plain_math(answer, SYMPY_TASKS[task]):
        return 0.0  # sympy would eval() it: only plain arithmetic may reach these verifiers
    try:
        with _quiet():  # some verifiers print (tower_of_hanoi prints every invalid move)
            value = float(scorer(answer, entry))
    except Exception:  # noqa: BLE001 - malformed text is simply not a correct answer
        return 0.0
    return value if value == value else 0.0


def mixed_samples(domain: str, tasks: dict[str, dict], *, eval_share: float = 0.5):
    """``samples`` for a domain that interleaves several tasks (name -> difficulty config)."""

    def samples(split: str, n: int, seed: int):
        streams = [draw_entries(task, config, n, domain, split, seed) for task, config in tasks.items()]

        def interleaved():
            while True:
                for stream in streams:
                    yield next(stream)

        yield from stream_split(domain, split, n, seed, interleaved(), eval_share=eval_share)

    return samples


def mixed_score(tasks: dict[str, dict]):
    """``score`` for a mixed domain: the item's task (from its metadata) verifies it."""

    def score(completion: str, sample: dict) -> float:
        task = _metadata(sample).get("task")
        if task not in tasks:
            return 0.0
        return score_with_verifier(completion, sample, task=task)

    return score


def _child_main() -> None:
    """``python -m domains.builtin._rg``: one chunk, as JSON on stdout (see HASH_SENSITIVE_TASKS)."""
    request = json.loads(sys.stdin.read())
    entries = _chunk_entries(request["task"], request["config"], request["size"], request["seed"],
                             tuple(request["parts"]))
    sys.stdout.write(json.dumps(list(entries)))


if __name__ == "__main__":
    _child_main()
