"""Terminal agent episodes: a policy drives a sandboxed terminal turn by turn, the host judges.

The protocol the policy sees (in its chat template, :data:`TOOL_FORMAT` after the instruction):
each assistant turn holds one shell command in a fenced ```bash block; the next user turn
returns its exit code and output (truncated); a turn that says ``DONE`` (and holds no command)
ends the episode. A turn with neither gets a reminder of the format and counts as a turn.
The episode also ends at the task's ``max_turns`` or when its ``timeout_s`` (generation included)
runs out. Commands run in :class:`sandbox.terminal.TerminalEpisode` (one sandboxed process per
command over the episode's private working directory); the reward is the verdict of the task's
hidden tests, run by the host in a fresh sandbox (:func:`sandbox.terminal.run_hidden_tests`).

Episodes run in lockstep batches: every turn, the active episodes' prompts go to the engine in one
``generate`` call, then their commands run concurrently in a thread pool (each in its own sandbox),
so the CPU generates for all while commands of many episodes are in flight. Each episode keeps a
transcript (every command, output, exit code and timing) for the lake and the dashboard.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from generation.contract import SamplingParams, derive_seed

TOOL_FORMAT = (
    "You are working in a Linux shell, in the folder that holds the task's files.\n"
    "To run a command, reply with exactly one block:\n```bash\n<one command>\n```\n"
    "You will get its exit code and output. Files you create stay; `cd` and variables do not carry to the "
    "next command. When the task is done, reply DONE."
)
COMMAND_BLOCK = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)(?:\n```|$)", re.DOTALL)
PROTOCOL = "terminal-v1"  # names TOOL_FORMAT and the turn rules: change it when they change (sweep cache key)
REMINDER = "No command found. Reply with one command in a ```bash block, or DONE when the task is done."


@dataclass(frozen=True)
class Action:
    kind: str            # "command" | "done" | "invalid"
    command: str = ""


def parse_action(text: str) -> Action:
    """The action of one assistant turn: the first fenced command, else DONE, else invalid."""
    match = COMMAND_BLOCK.search(text)
    if match and match.group(1).strip():
        return Action("command", match.group(1).strip())
    if re.search(r"\bDONE\b", text):
        return Action("done")
    return Action("invalid")


def observation(result) -> str:
    """What the policy reads back after a command (:class:`sandbox.terminal.CommandResult`)."""
    notes = []
    if getattr(result, "timed_out", False):
        notes.append("(the command timed out)")
    if getattr(result, "truncated", False):
        notes.append("(output truncated)")
    head = f"exit code: {result.exit_code}" + (" " + " ".join(notes) if notes else "")
    return f"{head}\n{result.output}" if result.output else head


@dataclass
class Turn:
    turn: int
    assistant: str
    action: str
    command: str | None = None
    output: str | None = None
    exit_code: int | None = None
    seconds: float = 0.0          # the command's wall time (0 for done/invalid turns)
    generation_s: float = 0.0     # this turn's share of the batch's generation time
    truncated: bool = False
    timed_out: bool = False


@dataclass
class EpisodeResult:
    task: str
    passed: bool
    reward: float
    turns: list[Turn] = field(default_factory=list)
    end: str = ""                 # done | max_turns | timeout
    seconds: float = 0.0
    test_output: str = ""
    tokens: int = 0               # tokens the policy generated over all turns
    rewards: dict = field(default_factory=dict)  # every metric a Harbor verifier wrote (reward.json)

    def transcript(self) -> list[dict]:
        return [asdict(t) for t in self.turns]


def chat_messages(instruction: str, turns: Sequence[Turn]) -> list[dict]:
    """The conversation so far: the instruction with the tool format, then assistant/observation turns."""
    messages = [{"role": "user", "content": f"{instruction.strip()}\n\n{TOOL_FORMAT}"}]
    for turn in turns:
        messages.append({"role": "assistant", "content": turn.assistant})
        if turn.action == "command":
            messages.append({"role": "user", "content": observation(turn)})
        elif turn.action == "invalid":
            messages.append({"role": "user", "content": REMINDER})
    return messages


def next_turn(turns: Sequence[Turn], generated: str, generation_s: float) -> Turn:
    """The turn a policy's output makes: an open fence the stop string cut is closed, the action parsed."""
    text = generated + ("\n```" if generated.count("```") % 2 == 1 else "")
    action = parse_action(text)
    return Turn(turn=len(turns) + 1, assistant=text, action=action.kind, command=action.command or None,
                generation_s=generation_s)


def record_command(turn: Turn, result) -> None:
    """What the terminal returned for the turn's command (:class:`sandbox.terminal.CommandResult`)."""
    turn.output, turn.exit_code, turn.seconds = result.output, result.exit_code, result.seconds
    turn.truncated, turn.timed_out = bool(result.truncated), bool(result.timed_out)


def episode_end(turns: Sequence[Turn], spec, started: float) -> str:
    """Why an episode that did not say DONE ends now ("max_turns", "timeout"), or "" to go on."""
    if len(turns) >= spec.max_turns:
        return "max_turns"
    if time.perf_counter() - started > spec.timeout_s:
        return "timeout"
    return ""


def play_turn(pool, episodes: Sequence, texts: Sequence[str], generation_s: float) -> None:
    """Each episode's next turn from the text its policy generated: the command run in its terminal
    (all of them concurrently in ``pool``), DONE recorded, then whether the episode ends. An episode
    has ``turns``, ``terminal``, ``task``, ``started`` and ``end``."""
    pending = []
    for episode, text in zip(episodes, texts, strict=True):
        turn = next_turn(episode.turns, text, generation_s)
        episode.turns.append(turn)
        if turn.action == "command":
            pending.append((turn, pool.submit(episode.terminal.run, turn.command)))
        elif turn.action == "done":
            episode.end = "done"
    for turn, future in pending:
        record_command(turn, future.result())
    for episode in episodes:
        episode.end = episode.end or episode_end(episode.turns, episode.task.spec, episode.started)


class _Live:
    """One running episode."""

    def __init__(self, task, index: int, terminal_factory):
        self.task = task
        self.index = index
        self.turns: list[Turn] = []
        self.started = time.perf_counter()
        self.terminal = terminal_factory(task)
        self.terminal.__enter__()
        self.end = ""
        self.tokens = 0


def run_episodes(engine, tasks: Sequence, params: SamplingParams, *, seed: int = 0, max_workers: int = 4,
                 terminal_factory=None, judge=None, episode_seeds: Sequence[int] | None = None) -> list[EpisodeResult]:
    """Run one episode per task (a task may repeat, e.g. K samples of it) with ``engine`` and return
    the judged results in order. ``params``: sampling of each assistant turn (its ``max_new_tokens``
    bounds a turn). Sample i's turn t is seeded with ``derive_seed(seed, i, t)``, or with
    ``derive_seed(episode_seeds[i], t)`` when given (a sweep's per-sample seeds).
    ``terminal_factory(task)`` / ``judge(task, terminal)`` default to the task's own episode and
    verdict (``task.open_terminal()``, ``task.judge(terminal)``: the sandboxed terminal and hidden
    tests of :mod:`domains.task_folder`, or a Harbor task's image and verifier)."""
    from generation.prompts import chat_messages_prompt

    terminal_factory = terminal_factory or (lambda task: task.open_terminal())
    judge = judge or (lambda task, terminal: task.judge(terminal))
    live = [_Live(task, i, terminal_factory) for i, task in enumerate(tasks)]
    results: list[EpisodeResult | None] = [None] * len(live)
    turn_params = SamplingParams(max_new_tokens=params.max_new_tokens, temperature=params.temperature,
                                 top_p=params.top_p, top_k=params.top_k, stop=tuple(params.stop) or ("\n```\n",))
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        try:
            active = list(live)
            while active:
                prompts = [chat_messages_prompt(engine.tokenizer, chat_messages(e.task.spec.instruction, e.turns))
                           for e in active]
                seeds = None if turn_params.temperature == 0 else [
                    [derive_seed(seed, e.index, len(e.turns)) if episode_seeds is None
                     else derive_seed(episode_seeds[e.index], len(e.turns))] for e in active]
                started = time.perf_counter()
                outputs = engine.generate(prompts, turn_params, seeds)
                share = (time.perf_counter() - started) / len(active)
                for episode, out in zip(active, outputs):
                    episode.tokens += int(out[0].completion_tokens)
                play_turn(pool, active, [out[0].text for out in outputs], share)
                finished = [e for e in active if e.end]
                verdicts = [pool.submit(judge, e.task, e.terminal) for e in finished]
                for episode, future in zip(finished, verdicts):
                    verdict = future.result()
                    results[episode.index] = EpisodeResult(
                        task=episode.task.name, passed=bool(verdict.passed), reward=verdict_reward(verdict),
                        turns=episode.turns, end=episode.end, seconds=time.perf_counter() - episode.started,
                        test_output=verdict.output, tokens=episode.tokens,
                        rewards=dict(getattr(verdict, "rewards", {}) or {}))
                    episode.terminal.__exit__(None, None, None)
                active = [e for e in active if not e.end]
        finally:
            for episode in live:
                if results[episode.index] is None:
                    episode.terminal.__exit__(None, None, None)
    return results  # type: ignore[return-value]


def verdict_reward(verdict) -> float:
    """An episode's reward: the verdict's ``score`` (a Harbor verifier's reward), else 1.0 when the
    hidden tests passed and 0.0 when not."""
    score = getattr(verdict, "score", None)
    return float(score) if score is not None else (1.0 if verdict.passed else 0.0)


def episode_stats(results: Sequence[EpisodeResult]) -> dict[str, Any]:
    """Summary of a batch: pass rate, mean turns, how episodes ended."""
    n = len(results)
    ends: dict[str, int] = {}
    for r in results:
        ends[r.end] = ends.get(r.end, 0) + 1
    return {"episodes": n, "pass_rate": sum(r.passed for r in results) / n if n else None,
            "mean_turns": sum(len(r.turns) for r in results) / n if n else None, "ends": ends}
