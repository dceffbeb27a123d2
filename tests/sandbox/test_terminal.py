"""Terminal episodes (sandbox.terminal) in real bubblewrap sandboxes: what persists between
commands, what comes back from one, and the hidden tests' verdict."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sandbox import Limits
from sandbox.terminal import (
    CommandResult, TerminalEpisode, WorkdirTooLarge, copy_tree, folder_usage, run_hidden_tests,
)
from tests.conftest import write_task
from tests.sandbox.sandbox_helpers import IS_ROOT, needs_bwrap

pytestmark = needs_bwrap


@pytest.fixture
def task(tmp_path) -> Path:
    return write_task(tmp_path / "suite", "upper", files={"a.txt": "hello\n", "sub/b.txt": "x\n"},
                      solution="tr a-z A-Z < a.txt > out.txt\n", run_sh='set -e\ntest "$(cat out.txt)" = HELLO\n')


def test_files_persist_but_shell_state_does_not(task):
    with TerminalEpisode(task / "files") as episode:
        first = episode.run("pwd; cat a.txt sub/b.txt; tr a-z A-Z < a.txt > out.txt; cd /tmp; X=1; echo tmp > /tmp/t")
        assert first == CommandResult(first.command, "/work\nhello\nx\n", 0, first.seconds, False, False)
        second = episode.run('pwd; cat out.txt; echo "x=[$X]"; ls /tmp')
        # the file written to /work is there; the cd, the variable and /tmp's file are not
        assert second.output == "/work\nHELLO\nx=[]\n", second
        assert (episode.workdir / "out.txt").read_text() == "HELLO\n"
        assert (task / "files" / "out.txt").exists() is False  # the task's files were copied, not used
    assert not episode.workdir.exists()  # cleaned up


def test_output_is_merged_in_order_and_exit_codes_come_back():
    with TerminalEpisode(None) as episode:
        result = episode.run("echo one; echo two >&2; echo three; ls /nonexistent; exit 3")
        lines = result.output.splitlines()
        assert lines[:3] == ["one", "two", "three"] and "nonexistent" in lines[3], result
        assert result.exit_code == 3 and not result.timed_out and not result.truncated
        assert episode.run("bash -c 'kill -SEGV $$'").exit_code == 128 + 11


def test_a_command_may_hold_any_text_even_nul_bytes():
    with TerminalEpisode(None) as episode:
        result = episode.run("printf '%s' \"it's \\\"quoted\\\" $((6*7))\"\necho done")
        assert result.output == "it's \"quoted\" 42done\n", result
        assert isinstance(episode.run("echo a\x00b").exit_code, int)  # bash judges it; nothing raises


def test_output_is_capped_with_head_tail_and_a_marker():
    with TerminalEpisode(None, output_bytes=200) as episode:
        result = episode.run("for i in $(seq 1 2000); do echo line$i; done")
    assert result.truncated and result.exit_code == 0
    assert result.output.startswith("line1\nline2\n") and result.output.endswith("line2000\n")
    assert "bytes of output omitted" in result.output and len(result.output.encode()) < 300


def test_per_command_timeout():
    with TerminalEpisode(None, command_timeout_s=1) as episode:
        started = time.monotonic()
        result = episode.run("echo before; sleep 30")
        assert time.monotonic() - started < 5
        assert result.timed_out and result.exit_code == 124 and result.output.startswith("before\n")
        assert "timed out after 1 s" in result.output
        assert episode.run("echo after").output == "after\n"  # the episode goes on
    with TerminalEpisode(None, command_timeout_s=30) as episode:  # what is left of an episode's time
        result = episode.run("sleep 30", timeout_s=0.5)
        assert result.timed_out and result.seconds < 3 and "timed out after 0.5 s" in result.output


def test_cpu_limit_is_a_timeout_too():
    with TerminalEpisode(None, limits=Limits(cpu_s=1, wall_s=10), command_timeout_s=10) as episode:
        result = episode.run("while :; do :; done")
    assert result.timed_out and result.exit_code == 124 and result.seconds < 6, result


@pytest.mark.skipif(not IS_ROOT, reason="a uid of its own per episode needs root")
def test_the_episode_runs_as_one_unprivileged_uid_that_owns_its_files(task):
    with TerminalEpisode(task / "files") as a, TerminalEpisode(task / "files") as b:
        assert a.uid is not None and b.uid is not None and a.uid != b.uid
        assert a.run("id -u").output.strip() == str(a.uid) == a.run("id -u").output.strip()
        a.run("echo 1 > made.txt")
        assert (a.workdir / "made.txt").stat().st_uid == a.uid
        assert (a.workdir / "a.txt").stat().st_uid == a.uid
        assert a.run("echo 2 >> made.txt && cat made.txt").output == "1\n2\n"  # the next command may change it


def test_verdict_passes_only_when_the_task_is_solved(task):
    with TerminalEpisode(task / "files") as episode:
        assert not run_hidden_tests(episode.workdir, task / "tests", timeout_s=20).passed
        episode.run("tr a-z A-Z < a.txt > out.txt")
        verdict = run_hidden_tests(episode.workdir, task / "tests", timeout_s=20)
    assert verdict.passed and verdict.exit_code == 0, verdict


def test_verdict_runs_in_a_copy_with_tests_at_a_random_read_only_path(tmp_path):
    probe = write_task(tmp_path / "suite", "probe", run_sh=(
        'echo "dir=$(cd "$(dirname "$0")" && pwd)"; echo "cwd=$(pwd)"; ls\n'
        'touch "$(dirname "$0")/written" 2>/dev/null && echo tests-writable\n'
        'echo changed > out.txt; exit 1\n'))
    with TerminalEpisode(None) as episode:
        episode.run("echo mine > out.txt")
        first = run_hidden_tests(episode.workdir, probe / "tests", timeout_s=20)
        second = run_hidden_tests(episode.workdir, probe / "tests", timeout_s=20)
        assert (episode.workdir / "out.txt").read_text() == "mine\n"  # the tests changed only their copy
    assert not first.passed and first.exit_code == 1
    dirs = [line for v in (first, second) for line in v.output.splitlines() if line.startswith("dir=")]
    assert len(dirs) == 2 and dirs[0] != dirs[1] and dirs[0].startswith("dir=/verdict-"), dirs  # random each time
    assert "cwd=/work" in first.output and "out.txt" in first.output
    assert "tests-writable" not in first.output and not (probe / "tests" / "written").exists()


def test_verdict_timeout_fails(tmp_path):
    slow = write_task(tmp_path / "suite", "slow", run_sh="sleep 30\n")
    with TerminalEpisode(None) as episode:
        verdict = run_hidden_tests(episode.workdir, slow / "tests", timeout_s=1)
    assert not verdict.passed and verdict.exit_code is None and "timed out" in verdict.output
    assert verdict.seconds < 5


def test_folder_usage_and_copy_caps(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    (source / "big").write_bytes(b"x" * (2 << 20))
    assert folder_usage(source, 1 << 20) == "more than 1 MB"
    assert folder_usage(source, 4 << 20) is None
    with pytest.raises(WorkdirTooLarge):
        copy_tree(source, tmp_path / "dst", max_bytes=1 << 20)
    for i in range(30):
        (source / f"f{i}").touch()
    assert "files and folders" in folder_usage(source, 4 << 20, max_entries=10)


def test_closed_episode_refuses_commands():
    episode = TerminalEpisode(None)
    episode.close()
    episode.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        episode.run("true")


def test_missing_files_dir_is_an_error_and_leaves_nothing(tmp_path, monkeypatch):
    import tempfile

    scratch = tmp_path / "host_tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TerminalEpisode(tmp_path / "nope")
    with TerminalEpisode(None) as episode:
        assert episode.workdir.parent.parent == scratch
    assert list(scratch.iterdir()) == []


def test_the_tools_agents_type_are_there_but_the_rest_of_etc_is_not():
    """awk is a link through /etc/alternatives on Debian: an episode must be able to run it."""
    with TerminalEpisode(None) as episode:
        result = episode.run("printf 'a 1\\nb 2\\n' | awk '{s += $2} END {print s}'; ls /etc")
        assert result.exit_code == 0, result.output
        assert result.output.split() == ["3", "alternatives"]
        assert "root:" not in episode.run("cat /etc/passwd /etc/shadow 2>&1").output
