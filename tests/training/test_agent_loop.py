"""Terminal agent episodes: the turn protocol, real sandboxed terminals and hidden tests.

The policy is the only part replaced in most tests: a scripted responder (a policy's outputs are
arbitrary text; the script makes each path of the loop happen on purpose). Terminals, hidden tests
and the built-in tasks are real; the last test drives the real tiny policy end to end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from generation.agent_loop import Action, EpisodeResult, parse_action, run_episodes
from generation.contract import Generation, SamplingParams

TASKS = Path(__file__).resolve().parents[2] / "domains" / "builtin" / "terminal_tasks"


@pytest.mark.parametrize("text, expected", [
    ("```bash\necho hi > a.txt\n```", Action("command", "echo hi > a.txt")),
    ("Let me look.\n```\nls -la\n```\nthen DONE", Action("command", "ls -la")),  # the command comes first
    ("```sh\necho DONE\n```", Action("command", "echo DONE")),   # DONE inside a command is a command
    ("All finished. DONE", Action("done")),
    ("```bash\n\n```", Action("invalid")),                       # an empty block runs nothing
    ("I would use ls.", Action("invalid")),
    ("```bash\ncat x", Action("command", "cat x")),              # cut by the stop string, block unclosed
])
def test_actions_are_parsed_from_the_turn_text(text, expected):
    assert parse_action(text) == expected


class ScriptedPolicy:
    """Answers turn t of every episode with ``script[t]`` (the turn is counted from the prompt)."""

    name = "scripted"

    def __init__(self, tokenizer, script: list[str]):
        self.tokenizer = tokenizer
        self.script = script
        self.prompts: list[str] = []

    def generate(self, prompts, params, seeds=None, *, with_logprobs=False):
        out = []
        for prompt in prompts:
            self.prompts.append(prompt)
            turn = prompt.count("exit code:") + prompt.count("No command found")
            text = self.script[min(turn, len(self.script) - 1)]
            out.append([Generation(text=text, completion_tokens=len(text.split()), prompt_tokens=0,
                                   finish_reason="stop", latency_s=0.0)])
        return out


@pytest.fixture
def tokenizer(tiny_home):
    from generation.policy import load_tokenizer

    return load_tokenizer("tiny", tiny_home)


def _task(name: str, tmp_path: Path, max_turns: int | None = None):
    """A built-in task (Harbor's format: it runs on its image), copied, with ``max_turns`` changed."""
    import re

    from domains.task_folder import load_task

    folder = tmp_path / name
    shutil.copytree(TASKS / name, folder)
    if max_turns is not None:
        toml = folder / "task.toml"
        toml.write_text(re.sub(r"(?m)^max_turns = \d+$", f"max_turns = {max_turns}", toml.read_text()))
    return load_task(folder)


GREEDY = SamplingParams(max_new_tokens=64, temperature=0.0)


def test_a_solved_task_passes_its_hidden_tests_and_keeps_the_transcript(tokenizer, tmp_path):
    task = _task("create_hello_file", tmp_path)
    policy = ScriptedPolicy(tokenizer, ["```bash\nls\n```", "```bash\necho hello > hello.txt\n```", "DONE"])
    [result] = run_episodes(policy, [task], GREEDY)
    assert isinstance(result, EpisodeResult) and result.passed and result.reward == 1.0 and result.end == "done"
    assert [t.action for t in result.turns] == ["command", "command", "done"]
    assert result.turns[1].command == "echo hello > hello.txt" and result.turns[1].exit_code == 0
    assert "exit code: 0" in policy.prompts[-1] and task.spec.instruction.strip() in policy.prompts[0]


def test_doing_nothing_or_talking_fails_and_ends_at_max_turns(tokenizer, tmp_path):
    task = _task("create_hello_file", tmp_path, max_turns=3)
    [result] = run_episodes(ScriptedPolicy(tokenizer, ["I think the file should say hello."]), [task], GREEDY)
    assert not result.passed and result.reward == 0.0 and result.end == "max_turns"
    assert [t.action for t in result.turns] == ["invalid"] * 3


def test_claiming_done_early_earns_nothing(tokenizer, tmp_path):
    [result] = run_episodes(ScriptedPolicy(tokenizer, ["DONE"]), [_task("count_lines", tmp_path)], GREEDY)
    assert result.end == "done" and not result.passed


def test_an_episode_cannot_find_the_hidden_tests_or_forge_a_pass(tokenizer, tmp_path):
    task = _task("count_lines", tmp_path)
    script = ["```bash\nfind / \\( -path '*count_lines*' -o -path '*terminal_tasks*' -o -path '*verdict*' \\) "
              "2>/dev/null | head\n```",
              "```bash\nmkdir -p tests && printf 'exit 0\\n' > tests/run.sh && printf 'exit 0\\n' > run.sh\n```",
              "DONE"]
    [result] = run_episodes(ScriptedPolicy(tokenizer, script), [task], GREEDY)
    assert result.turns[0].exit_code == 0 and (result.turns[0].output or "").strip() == ""  # nothing of the task
    assert not result.passed


def test_episodes_run_in_lockstep_and_each_is_judged_on_its_own_folder(tokenizer, tmp_path):
    good = _task("create_hello_file", tmp_path / "a")
    bad = _task("make_directory", tmp_path / "b", max_turns=2)
    policy = ScriptedPolicy(tokenizer, ["```bash\necho hello > hello.txt\n```", "DONE"])
    results = run_episodes(policy, [good, bad, good], GREEDY)
    assert [r.passed for r in results] == [True, False, True]
    assert [r.task for r in results] == ["create_hello_file", "make_directory", "create_hello_file"]


@pytest.mark.slow
def test_the_tiny_policy_drives_real_episodes(tiny_home, tmp_path):
    from generation.factory import make_engine

    engine = make_engine("tiny", "torch", home=str(tiny_home))
    tasks = [_task("create_hello_file", tmp_path / "a", max_turns=2), _task("count_lines", tmp_path / "b", max_turns=2)]
    results = run_episodes(engine, tasks * 2, SamplingParams(max_new_tokens=24, temperature=1.0), seed=3)
    assert len(results) == 4 and all(r.end in ("done", "max_turns", "timeout") for r in results)
    assert all(1 <= len(r.turns) <= 2 and r.reward in (0.0, 1.0) for r in results)
    # seeded: the same call gives the same turns
    again = run_episodes(engine, tasks * 2, SamplingParams(max_new_tokens=24, temperature=1.0), seed=3)
    assert [[t.assistant for t in r.turns] for r in again] == [[t.assistant for t in r.turns] for r in results]


def test_a_sweep_runs_a_terminal_suite_as_episodes_and_caches_them(tokenizer, tmp_path, assay_home):
    import json

    from domains.task_folder import task_suite_domain
    from evaluation.sweep import run_sweep
    from evaluation.sweep_config import SweepConfig
    from pipelines.settings import open_lake

    suite = tmp_path / "shell_basics"
    for name in ("create_hello_file", "count_lines", "make_directory", "first_line"):
        shutil.copytree(TASKS / name, suite / name)
    domain = task_suite_domain(suite)
    built = []

    def factory():
        built.append(1)
        return ScriptedPolicy(tokenizer, ["```bash\nmkdir out\n```", "DONE"])

    from generation.prompts import prompt_format_of_tokenizer

    fmt = prompt_format_of_tokenizer(tokenizer)
    lake = open_lake(write=True)
    result = run_sweep(lake, "scripted", [domain], factory, SweepConfig(progress=False), prompt_format=fmt)
    rows = result.domains[0].items.sort("item_id")
    # eval split of these four: count_lines and make_directory; the script solves only the latter
    assert dict(zip(rows["item_id"], rows["score"])) == {"shell_basics/count_lines": 0.0,
                                                          "shell_basics/make_directory": 1.0}
    transcript = json.loads(rows["completion"][1])
    assert transcript["turns"][0]["command"] == "mkdir out" and transcript["end"] == "done"
    again = run_sweep(lake, "scripted", [domain], factory, SweepConfig(progress=False), prompt_format=fmt)
    assert len(built) == 1 and again.domains[0].generated == 0  # cached: no engine, no episode
