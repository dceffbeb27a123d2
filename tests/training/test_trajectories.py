"""Multi-turn GRPO trajectories: episodes in token space with the policy's tokens marked, through a
real sandboxed terminal and the task's hidden tests; then the trainer learning from them.

The first tests replace only the policy (a scripted responder in token space, so each path is taken
on purpose); terminals, hidden tests and built-in tasks are real. The last test trains the real tiny
policy for a few steps on a task suite whose hidden test is a coin flip (rewards that vary within a
group whatever a random policy does, so the update runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from generation.torch_engine import DecodedRow
from generation.contract import SamplingParams
from training.trajectories import run_trajectories

TASKS = Path(__file__).resolve().parents[2] / "domains" / "builtin" / "terminal_tasks"
PARAMS = SamplingParams(max_new_tokens=32, temperature=1.0)


class ScriptedTokens:
    """A rollout engine that answers turn t of every episode with ``script[t]`` in token ids, the
    stop string's tokens included as a real sampler returns them; records every prompt it got."""

    name = "scripted"

    def __init__(self, tokenizer, script: list[str]):
        self.tokenizer = tokenizer
        self.script = script
        self.prompts: list[list[int]] = []
        self.turn: dict[int, int] = {}

    def generate(self, prompt_ids, params, seeds, with_logprobs):
        out = []
        for ids in prompt_ids:
            self.prompts.append(list(ids))
            turn = self.tokenizer.decode(ids).count("exit code:") + self.tokenizer.decode(ids).count("No command")
            text = self.script[min(turn, len(self.script) - 1)]
            completion = self.tokenizer.encode(text, add_special_tokens=False)
            out.append([DecodedRow(0, completion, text.removesuffix("\n```\n"), "stop", 0.0,
                                   [-0.5] * len(completion) if with_logprobs else None)])
        return out


@pytest.fixture
def tokenizer(tiny_home):
    from generation.policy import load_tokenizer

    return load_tokenizer("tiny", tiny_home)


def _task(name: str):
    from domains.task_folder import load_task

    return load_task(TASKS / name)


def test_a_solved_episode_marks_the_policys_tokens_and_feeds_the_engine_the_stream_it_trains_on(tokenizer):
    script = ["```bash\necho hello > hello.txt\n```\n", "```bash\ncat hello.txt\n```\n", "DONE"]
    engine = ScriptedTokens(tokenizer, script)
    [trajectory] = run_trajectories(engine, tokenizer, [_task("create_hello_file")], PARAMS, [7],
                                    with_logprobs=True)
    episode = trajectory.episode
    assert episode.passed and episode.end == "done" and [t.action for t in episode.turns] == ["command"] * 2 + ["done"]
    assert episode.turns[1].output.strip() == "hello" and episode.turns[1].exit_code == 0
    ids, mask = trajectory.completion_ids, trajectory.policy_mask
    assert len(ids) == len(mask) == len(trajectory.rollout_logprobs)
    own = [i for i, m in zip(ids, mask) if m == 1.0]
    assert own == [t for text in script for t in tokenizer.encode(text, add_special_tokens=False)]
    tool = tokenizer.decode([i for i, m in zip(ids, mask) if m == 0.0])
    assert "exit code: 0" in tool and "hello" in tool  # observations are in the stream, out of the loss
    assert all(lp == 0.0 for lp, m in zip(trajectory.rollout_logprobs, mask) if m == 0.0)
    # every turn was generated from exactly the ids that precede it in the trained stream
    stream = trajectory.prompt_ids + ids
    assert len(engine.prompts) == 3
    for prompt in engine.prompts:
        assert stream[:len(prompt)] == prompt
    assert engine.prompts[0] == trajectory.prompt_ids


def test_a_do_nothing_episode_fails_and_turns_without_a_command_get_the_reminder(tokenizer):
    engine = ScriptedTokens(tokenizer, ["I am not sure what to do.", "DONE"])
    [trajectory] = run_trajectories(engine, tokenizer, [_task("create_hello_file")], PARAMS, [1])
    assert not trajectory.episode.passed and trajectory.episode.end == "done"
    assert trajectory.rollout_logprobs is None
    tool = tokenizer.decode([i for i, m in zip(trajectory.completion_ids, trajectory.policy_mask) if m == 0.0])
    assert "No command found" in tool


def test_the_stream_stops_at_max_tokens_and_max_turns(tokenizer):
    chatty = ScriptedTokens(tokenizer, ["```bash\nseq 1 400\n```\n"])
    [long] = run_trajectories(chatty, tokenizer, [_task("create_hello_file")], PARAMS, [2], max_tokens=400)
    assert long.episode.end == "length" and long.finish_reason == "length"
    assert len(long.prompt_ids) + len(long.completion_ids) <= 400
    [capped] = run_trajectories(ScriptedTokens(tokenizer, ["```bash\nls\n```\n"]), tokenizer,
                                [_task("create_hello_file")], PARAMS, [3], max_tokens=100_000)
    assert capped.episode.end == "max_turns" and len(capped.episode.turns) == 10  # the task's max_turns


def test_tool_tokens_stay_out_of_the_loss_mask():
    from training.trainer import Rollout, build_batch

    plain = Rollout("d", {}, [5, 6], [7, 8, 9], "x", "stop")
    episode = Rollout("t", {}, [5], [7, 8, 9, 10], "{}", "stop", policy_mask=[1.0, 0.0, 0.0, 1.0])
    _, _, _, mask, width = build_batch([plain, episode], pad_id=0, mask_truncated=False)
    assert width == 4
    assert mask.tolist() == [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 1.0]]


COIN_TASK = {
    "task.yaml": "instruction: Run any command, then say DONE.\nmax_turns: 3\ntimeout_s: 60\n",
    "solution.sh": "#!/usr/bin/env bash\ntrue\n",
    # a coin flip: whatever the policy does, a group's rewards differ now and then
    "tests/run.sh": "#!/usr/bin/env bash\npython3 -c 'import os, sys; sys.exit(os.urandom(1)[0] % 2)'\n",
}


@pytest.mark.slow
def test_multi_turn_grpo_trains_the_tiny_policy_on_episodes(tiny_home, tmp_path):
    from domains.registry import Registry
    from domains.task_folder import task_suite_domain
    from pipelines.settings import open_lake
    from training.config import load_recipe
    from training.trainer import train

    suite = tmp_path / "coin_tasks"
    for name in ("coin_a", "coin_b", "coin_c"):
        for rel, text in COIN_TASK.items():
            path = suite / name / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    registry = Registry()
    registry.add_module(type("M", (), {"DOMAIN": task_suite_domain(suite)}), "test")
    config = load_recipe("tiny", domains=["coin_tasks"], max_steps=3, prompts_per_step=2, num_generations=4,
                         max_completion_length=12, max_episode_turns=2, max_episode_tokens=512,
                         train_samples_per_domain=3)
    result = train(config, open_lake(write=True), allow_generate=True, registry=registry, progress=False,
                   log=lambda m: None)
    assert result.steps_done == 3 and result.checkpoint
    rows = [h for h in result.history if h["domain"] == "coin_tasks"]
    assert len(rows) == 3
    assert any(h["loss"] is not None for h in rows)  # some group had both verdicts: the update ran
    assert all(0.0 <= h["reward_mean"] <= 1.0 for h in rows)

    from domains import get_registry

    registry.add_module(type("M", (), {"DOMAIN": get_registry().get("math_arith_easy")}), "builtin")
    mixed = load_recipe("tiny", domains=["coin_tasks", "math_arith_easy"], max_steps=1, train_samples_per_domain=3)
    with pytest.raises(ValueError, match=r"terminal-agent domains \(coin_tasks\) and single-turn domains "
                                         r"\(math_arith_easy\) cannot train in one run"):
        train(mixed, open_lake(write=True), allow_generate=True, registry=registry, progress=False, log=lambda m: None)
