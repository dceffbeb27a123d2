"""Multi-turn GRPO trajectories: terminal episodes generated in token space, for training.

Sweeps run episodes on text (:mod:`generation.agent_loop`: each turn the conversation is formatted
and tokenized again). Training needs the exact token stream the policy acted on, and which of its
tokens the policy produced, so here an episode is one growing list of token ids:

    prompt ids (instruction + tool format + generation prompt)
    | turn 1: the policy's completion ids            (policy_mask 1)
    | the template's end of turn, the observation message (exit code + output) and the next
      generation prompt                              (policy_mask 0: tool and template tokens)
    | turn 2: ...

Turn t+1 is generated from exactly the ids before it (the rollout engine takes ids), so the
trainer's forward over the whole stream sees what the sampler saw. The loss counts only the
policy's own tokens (``policy_mask``); the reward is the trajectory's: the hidden tests' verdict,
decided on the host (:func:`sandbox.terminal.run_hidden_tests`), shared by every token of the
episode; GRPO normalises it within the group of episodes of one task (the trainer's groups).

The observation tokens are the chat template's own rendering: the conversation with and without
the new messages is formatted and the difference tokenized (:func:`turn_suffix_ids`), so a
template that rewrites earlier turns (one that strips or reorders them) is refused with a message.
Episodes end on DONE, at the task's ``max_turns``, at its ``timeout_s``, or when the stream would
pass ``max_tokens`` (``end="length"``).
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Sequence

from generation.agent_loop import REMINDER, TOOL_FORMAT, EpisodeResult, Turn, observation, play_turn, verdict_reward
from generation.contract import SamplingParams


class TrajectoryError(RuntimeError):
    """A trajectory cannot be laid out in tokens (a chat template that rewrites earlier turns)."""


@dataclass
class Trajectory:
    prompt_ids: list[int]
    completion_ids: list[int]          # every token after the prompt: the policy's and the tools'
    policy_mask: list[float]           # 1.0 where the policy generated the token (it enters the loss)
    rollout_logprobs: list[float] | None  # the sampler's log-prob per completion token (0.0 on tool tokens)
    episode: EpisodeResult
    finish_reason: str = "stop"        # "length" when the stream hit max_tokens
    policy_tokens: int = 0

    @property
    def text(self) -> str:
        """The transcript as JSON, the shape sweeps store in ``results.completion``."""
        e = self.episode
        return json.dumps({"end": e.end, "passed": e.passed, "turns": e.transcript(), "tests": e.test_output[-2000:]},
                          ensure_ascii=False)


def _messages(instruction: str, turns: Sequence[Turn]) -> list[dict]:
    from generation.agent_loop import chat_messages

    return chat_messages(instruction, turns)


def _follow_up(turn: Turn) -> str | None:
    if turn.action == "command":
        return observation(turn)
    if turn.action == "invalid":
        return REMINDER
    return None


def turn_suffix_ids(tokenizer, before_messages: list[dict], assistant_text: str, follow_up: str,
                    completion_ids: Sequence[int]) -> list[int]:
    """The ids between the policy's turn (``completion_ids``, its text ``assistant_text``) and its
    next turn: the template's end of the assistant turn, the ``follow_up`` user message and the
    next generation prompt."""
    from generation.prompts import chat_messages_prompt, encode_prompt

    before = chat_messages_prompt(tokenizer, before_messages)
    after = chat_messages_prompt(tokenizer, before_messages + [{"role": "assistant", "content": assistant_text},
                                                               {"role": "user", "content": follow_up}])
    if not after.startswith(before):
        raise TrajectoryError("the chat template renders earlier turns differently once a turn is added: "
                              "multi-turn GRPO needs a template that only appends (chatml-like)")
    rest = after[len(before):]
    # the policy's turn is already in the stream as its own ids: what the template renders of it
    # is skipped, as far as it agrees with the decoded ids (a closing fence the stop string cut
    # from the text but not from the ids is not repeated; one it cut from both is added here)
    generated = tokenizer.decode(list(completion_ids), skip_special_tokens=True)
    common = os.path.commonprefix([rest, generated])
    suffix = encode_prompt(tokenizer, rest[len(common):])
    eos = getattr(tokenizer, "eos_token_id", None)
    if suffix and completion_ids and completion_ids[-1] == suffix[0] == eos:
        suffix = suffix[1:]  # the policy ended its turn with the end-of-turn token the template adds again
    return suffix


@dataclass
class _Live:
    task: object
    index: int
    terminal: object
    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    policy_mask: list[float] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    started: float = field(default_factory=time.perf_counter)
    end: str = ""
    tokens: int = 0
    last_turn_ids: list[int] = field(default_factory=list)


def run_trajectories(engine, tokenizer, tasks: Sequence, params: SamplingParams, seeds: Sequence[int], *,
                     with_logprobs: bool = False, max_tokens: int = 2048, max_workers: int = 4,
                     terminal_factory=None, judge=None) -> list[Trajectory]:
    """One episode per task (tasks repeat for a GRPO group), in lockstep as
    :func:`generation.agent_loop.run_episodes`, with the trainer's rollout ``engine``
    (``generate(prompt_ids, params, seeds, with_logprobs)``). Episode i's turn t is seeded with
    ``derive_seed(seeds[i], t)``. ``max_tokens`` bounds each stream (prompt included)."""
    from generation.contract import derive_seed
    from generation.prompts import chat_messages_prompt, encode_prompt

    terminal_factory = terminal_factory or (lambda task: task.open_terminal())
    judge = judge or (lambda task, terminal: task.judge(terminal))
    turn_params = SamplingParams(max_new_tokens=params.max_new_tokens, temperature=params.temperature,
                                 top_p=params.top_p, top_k=params.top_k, stop=tuple(params.stop) or ("\n```\n",))
    live: list[_Live] = []
    out: list[Trajectory | None] = [None] * len(tasks)
    try:
        for i, task in enumerate(tasks):
            prompt = chat_messages_prompt(tokenizer, _messages(task.spec.instruction, []))
            terminal = terminal_factory(task)
            terminal.__enter__()
            live.append(_Live(task, i, terminal, encode_prompt(tokenizer, prompt)))
        with ThreadPoolExecutor(max_workers=max_workers) as pool:
            active = list(live)
            while active:
                started = time.perf_counter()
                decoded = engine.generate([e.prompt_ids + e.completion_ids for e in active], turn_params,
                                          [[derive_seed(seeds[e.index], len(e.turns))] for e in active],
                                          with_logprobs)
                share = (time.perf_counter() - started) / len(active)
                for episode, rows in zip(active, decoded):
                    row = rows[0]
                    ids = list(row.completion_ids)
                    episode.last_turn_ids = ids
                    episode.completion_ids += ids
                    episode.policy_mask += [1.0] * len(ids)
                    episode.logprobs += list(row.logprobs) if row.logprobs is not None else [0.0] * len(ids)
                    episode.tokens += len(ids)
                play_turn(pool, active, [rows[0].text for rows in decoded], share)
                for episode in active:
                    if not episode.end:  # the template's turn end, the observation, the next prompt
                        turn = episode.turns[-1]
                        suffix = turn_suffix_ids(tokenizer, _messages(episode.task.spec.instruction, episode.turns[:-1]),
                                                 turn.assistant, _follow_up(turn), episode.last_turn_ids)
                        if len(episode.prompt_ids) + len(episode.completion_ids) + len(suffix) \
                                + turn_params.max_new_tokens > max_tokens:
                            episode.end = "length"
                        else:
                            episode.completion_ids += suffix
                            episode.policy_mask += [0.0] * len(suffix)
                            episode.logprobs += [0.0] * len(suffix)
                finished = [e for e in active if e.end]
                verdicts = [pool.submit(judge, e.task, e.terminal) for e in finished]
                for episode, future in zip(finished, verdicts):
                    verdict = future.result()
                    result = EpisodeResult(task=episode.task.name, passed=bool(verdict.passed),
                                           reward=verdict_reward(verdict), turns=episode.turns, end=episode.end,
                                           seconds=time.perf_counter() - episode.started,
                                           test_output=verdict.output, tokens=episode.tokens,
                                           rewards=dict(getattr(verdict, "rewards", {}) or {}))
                    out[episode.index] = Trajectory(
                        episode.prompt_ids, episode.completion_ids, episode.policy_mask,
                        episode.logprobs if with_logprobs else None, result,
                        finish_reason="length" if episode.end == "length" else "stop", policy_tokens=episode.tokens)
                    episode.terminal.__exit__(None, None, None)
                active = [e for e in active if not e.end]
    finally:
        for episode in live:
            if out[episode.index] is None:
                episode.terminal.__exit__(None, None, None)
    return out  # type: ignore[return-value]


__all__ = ["Trajectory", "TrajectoryError", "run_trajectories", "turn_suffix_ids", "TOOL_FORMAT"]
