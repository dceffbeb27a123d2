"""Attacks on terminal episodes and on the hidden tests' verdict. Each test asserts on the host's
side (a host file unchanged or absent, a listener never reached, no process left, the verdict
still failing) rather than on what the episode claims, so an isolation gap fails the test."""

from __future__ import annotations

import socket
import time
import uuid
from pathlib import Path

import pytest

from sandbox.terminal import MAX_ENTRIES, TerminalEpisode, copy_tree, folder_usage, run_hidden_tests
from tests.conftest import REPO, write_task
from tests.sandbox.sandbox_helpers import IS_ROOT, needs_bwrap, pids_of_uid

pytestmark = needs_bwrap
HOME = Path.home()


@pytest.fixture
def secret_task(tmp_path) -> tuple[Path, str]:
    """A task whose hidden tests hold a unique token (in run.sh and in a data file)."""
    token = f"HIDDEN{uuid.uuid4().hex}"
    task = write_task(tmp_path / "suite", "secret", files={"a.txt": "hello\n"},
                      run_sh=f'# {token}\nset -e\ntest "$(cat out.txt)" = "$(cat "$(dirname "$0")/expected.txt")"\n',
                      tests={"expected.txt": f"{token}\n", f"{token}.txt": "x"})
    return task, token


# -- the episode sees nothing of the host --------------------------------------------------------


def test_cannot_read_or_write_host_home_repository_or_host_tmp(tmp_path):
    host_file = tmp_path / "visible.txt"  # world-readable in a world-traversable folder
    host_file.write_text("HOSTSECRET\n")
    for folder in (tmp_path, *tmp_path.parents):
        if folder == Path("/"):
            break
        folder.chmod(folder.stat().st_mode | 0o755)
    readme_line = (REPO / "README.md").read_text().splitlines()[0]
    with TerminalEpisode(None) as episode:
        read = episode.run(f"cat {REPO}/README.md {host_file} {HOME}/.bashrc /etc/passwd /etc/shadow; "
                           f"ls {REPO} {HOME} /home /root /etc /var /opt /srv /mnt")
        listed_root = set(episode.run("ls /").output.split())
        write = episode.run(f"echo pwned > {REPO}/PWNED_{episode.uid}; echo pwned > {host_file}; "
                            f"echo pwned > {HOME}/PWNED; mkdir -p /root /etc/x; echo pwned > /usr/PWNED")
    assert readme_line not in read.output and "HOSTSECRET" not in read.output and "root:" not in read.output
    assert {"bin", "dev", "proc", "tmp", "usr", "work"} <= listed_root and "home" not in listed_root
    assert write.exit_code != 0
    assert not (REPO / f"PWNED_{episode.uid}").exists() and host_file.read_text() == "HOSTSECRET\n"
    assert not (HOME / "PWNED").exists() and not Path("/usr/PWNED").exists()


def test_hidden_tests_are_nowhere_in_the_episode(secret_task):
    task, token = secret_task
    spelled = f"$(echo {token[::-1]} | rev)"  # the command text itself must not hold the token
    with TerminalEpisode(task / "files") as episode:
        names = episode.run(
            f"find / -name \"*{spelled}*\" 2>/dev/null; "  # the whole tree, /usr and /proc included
            "find / \\( -path /usr -o -path /proc \\) -prune -o \\( -name run.sh -o -name 'expected*' -o -name tests "
            "-o -name 'verdict*' -o -name solution.sh \\) -print 2>/dev/null")
        contents = episode.run(f"grep -rls {spelled} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null;"
                               f" grep -ls {spelled} /proc/[0-9]*/environ 2>/dev/null")
        read = episode.run(f"cat {task}/tests/run.sh {task}/tests/expected.txt {task}/solution.sh; "
                           f"ls {task} {task.parent}; cat /proc/*/cmdline 2>/dev/null | tr '\\0' ' '")
        tamper = episode.run(f"echo 'exit 0' > {task}/tests/run.sh; rm -rf {task}/tests")
        # The episode cannot see the answer, so it cannot copy it: the tests still fail.
        episode.run("cp $(find / -name expected.txt 2>/dev/null | head -1) out.txt")
        verdict = run_hidden_tests(episode.workdir, task / "tests", timeout_s=20)
    assert names.output == "" and contents.output == "", (names.output, contents.output)
    assert token not in read.output and "set -e" not in read.output, read.output
    assert "No such file" in tamper.output and token in (task / "tests" / "run.sh").read_text()
    assert not verdict.passed


def test_episodes_cannot_see_or_touch_each_other(tmp_path):
    token = uuid.uuid4().hex
    spelled = f"$(echo {token[::-1]} | rev)"
    with TerminalEpisode(None) as a, TerminalEpisode(None) as b:
        a.run(f"echo {spelled} > mine.txt")
        spy = b.run(f"find / -name 'mine*' 2>/dev/null; cat {a.workdir}/mine.txt; ls {a.workdir.parent}; "
                    f"grep -rl {spelled} / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null; "
                    f"echo evil > {a.workdir}/evil.txt")
        assert token not in spy.output and "mine.txt\n" not in spy.output, spy.output
        assert not (a.workdir / "evil.txt").exists()
        assert sorted(p.name for p in a.workdir.iterdir()) == ["mine.txt"]
        assert (a.workdir / "mine.txt").read_text() == f"{token}\n"


def test_no_network():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        with TerminalEpisode(None) as episode:
            result = episode.run(f"echo stolen > /dev/tcp/127.0.0.1/{port} && echo connected; "
                                 "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=2)\" "
                                 "&& echo internet")
            interfaces = episode.run("tail -n +3 /proc/net/dev | cut -d: -f1").output.split()
        with pytest.raises(BlockingIOError):
            listener.accept()
        assert "connected" not in result.output and "internet" not in result.output, result.output
        assert interfaces == ["lo"], interfaces
    finally:
        listener.close()


# -- limits ---------------------------------------------------------------------------------------


@pytest.mark.skipif(not IS_ROOT, reason="counting the episode's processes by its own uid needs root")
def test_fork_bomb_is_contained_and_leaves_nothing():
    with TerminalEpisode(None, command_timeout_s=4) as episode:
        started = time.monotonic()
        bomb = episode.run("b(){ b | b & }; b; sleep 2; ps -e --no-headers | wc -l")  # pid 1 stays to count
        assert time.monotonic() - started < 10
        # the bomb died with its sandbox (the episode waits for the kernel to reap a killed one)
        assert pids_of_uid(episode.uid) == []
        assert "fork: retry" in bomb.output or int(bomb.output.split()[-1]) <= episode.limits.nproc + 2, bomb.output
        assert episode.run("echo alive").output == "alive\n"


def test_huge_output_is_cut_and_the_printer_killed():
    with TerminalEpisode(None, command_timeout_s=20) as episode:
        started = time.monotonic()
        result = episode.run("yes")
    assert time.monotonic() - started < 10, "yes ran to the timeout instead of being stopped for its output"
    assert result.truncated and result.exit_code == 137 and not result.timed_out
    assert len(result.output.encode()) < 4096 + 200 and "printed more than" in result.output


def test_sleep_forever_times_out():
    with TerminalEpisode(None, command_timeout_s=1) as episode:
        result = episode.run("sleep infinity")
    assert result.timed_out and result.exit_code == 124 and result.seconds < 4


def test_background_processes_die_with_their_command():
    with TerminalEpisode(None, command_timeout_s=5) as episode:
        started = time.monotonic()
        result = episode.run("(sleep 1; echo late > late.txt) & nohup sh -c 'sleep 1; echo late > nohup.txt' "
                             ">/dev/null 2>&1 & setsid sh -c 'sleep 1; echo late > setsid.txt' & echo started")
        assert result.output == "started\n" and time.monotonic() - started < 3
        time.sleep(2.5)
        assert sorted(p.name for p in episode.workdir.iterdir()) == []


def test_filling_the_working_folder_is_stopped():
    with TerminalEpisode(None, command_timeout_s=30, workdir_mb=4) as episode:
        started = time.monotonic()
        result = episode.run("i=0; while :; do head -c 1000000 /dev/zero > f$i; i=$((i+1)); done")
        elapsed = time.monotonic() - started
        assert elapsed < 10 and result.exit_code == 137 and "grew past" in result.output, result
        # stopped within a poll or two of passing the cap: far below what 30 s of writing would make
        assert folder_usage(episode.workdir, 256 << 20) is None
        # over the cap, the folder may still shrink (the agent can recover), and grows no more
        assert episode.run("rm -f f*; ls | wc -l").output == "0\n"
        many = episode.run("mkdir d; cd d; i=0; while :; do : > $i; i=$((i+1)); done")
        assert many.exit_code == 137 and folder_usage(episode.workdir, 64 << 20, MAX_ENTRIES * 3) is None
        assert episode.run("touch more; sleep 2").exit_code == 137  # over a cap: growing it stops the command
        assert episode.run("rm -rf d && touch fine && echo ok").output == "ok\n"


# -- the verdict cannot be fooled by what the agent leaves -----------------------------------------


@pytest.fixture
def strict_task(tmp_path) -> Path:
    """Solved iff out.txt says HELLO; the check runs as a python3 script from the tests folder."""
    return write_task(tmp_path / "suite", "strict", files={"a.txt": "hello\n"},
                      run_sh='grep -q . out.txt || exit 1\npython3 "$(dirname "$0")/check.py"\n',
                      tests={"check.py": "import json, sys\nsys.exit(0 if open('out.txt').read() == 'HELLO\\n' else 1)\n"})


PLANTS = {
    "fake run.sh and tests/ in the cwd": "printf 'exit 0\\n' > run.sh; mkdir -p tests; cp run.sh tests/run.sh; "
                                         "chmod +x run.sh tests/run.sh",
    "python3, bash, grep and test shadows": "mkdir -p bin; for f in python3 bash grep test sh; do "
                                            "printf '#!/bin/sh\\nexit 0\\n' > $f; cp $f bin/$f; chmod +x $f bin/$f; done",
    "shell startup files and a PATH file": "for f in .bashrc .profile .bash_profile .bash_login .env .pam_environment "
                                           "environment; do printf 'PATH=/work:/work/bin\\nexit 0\\n' > $f; done",
    "python import hooks": "for m in json sys sitecustomize usercustomize; do "
                           "printf 'import os\\nos._exit(0)\\n' > $m.py; done; mkdir -p json; cp json.py json/__init__.py",
    "a FIFO where the output should be": "echo wrong > out.txt; rm out.txt; mkfifo out.txt",
    "symlinks to host secrets": f"ln -s /etc/shadow out.txt; ln -s {HOME}/.bashrc home; ln -s / root",
}


@pytest.mark.parametrize("plant", PLANTS, ids=list(PLANTS))
def test_left_over_files_do_not_fool_the_verdict(strict_task, plant):
    with TerminalEpisode(strict_task / "files") as episode:
        episode.run(PLANTS[plant])
        started = time.monotonic()
        verdict = run_hidden_tests(episode.workdir, strict_task / "tests", timeout_s=15)
        assert not verdict.passed, (plant, verdict)
        assert time.monotonic() - started < 10, "the verdict hung on what the agent left"
        # and the same plant next to a real solution does not break a solved task
        episode.run("rm -f out.txt; tr a-z A-Z < a.txt > out.txt")
        solved = run_hidden_tests(episode.workdir, strict_task / "tests", timeout_s=15)
    assert solved.passed, (plant, solved)


def test_verdict_copy_never_follows_links_or_keeps_special_bits(tmp_path):
    secret = tmp_path / "host_secret"
    secret.write_text("HOSTSECRET")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link").symlink_to(secret)
    (work / "dirlink").symlink_to(tmp_path)
    (work / "setuid").write_text("#!/bin/sh\n")
    (work / "setuid").chmod(0o4755)
    import os

    os.mkfifo(work / "fifo")
    copy_tree(work, tmp_path / "copy", max_bytes=1 << 20)
    copy = tmp_path / "copy"
    assert (copy / "link").is_symlink() and os.readlink(copy / "link") == str(secret)
    assert (copy / "dirlink").is_symlink()
    assert not (copy / "fifo").exists()
    assert (copy / "setuid").stat().st_mode & 0o7777 == 0o755


def test_code_the_tests_run_cannot_rewrite_them(tmp_path):
    """The agent's program, run by the tests, finds their path in /proc and tries to rewrite run.sh."""
    task = write_task(tmp_path / "suite", "runs_agent_code", run_sh='bash ./prog.sh\ntest "$(cat out.txt)" = ok\n')
    with TerminalEpisode(None) as episode:
        episode.run("""cat > prog.sh <<'EOF'
tests=$(dirname "$(tr '\\0' '\\n' < /proc/1/cmdline | tail -1)")
printf 'exit 0\\n' > "$tests/run.sh" 2>/dev/null && echo REWROTE
rm -rf "$tests" 2>/dev/null
EOF""")
        verdict = run_hidden_tests(episode.workdir, task / "tests", timeout_s=15)
    assert not verdict.passed and "REWROTE" not in verdict.output, verdict
    assert "bash ./prog.sh" in (task / "tests" / "run.sh").read_text()


def test_oversized_working_folder_fails_without_running_tests(strict_task):
    with TerminalEpisode(strict_task / "files", workdir_mb=64) as episode:
        episode.run("tr a-z A-Z < a.txt > out.txt; head -c 3000000 /dev/zero > big")
        verdict = run_hidden_tests(episode.workdir, strict_task / "tests", timeout_s=15, workdir_mb=2)
    assert not verdict.passed and verdict.exit_code is None and "too large" in verdict.output


def test_locking_or_nesting_the_working_folder_breaks_neither_the_episode_nor_the_verdict(strict_task):
    with TerminalEpisode(strict_task / "files", command_timeout_s=30) as episode:
        episode.run("mkdir -p locked/deeper && echo x > locked/deeper/f && chmod 000 locked/deeper locked")
        # deeper than Python recurses and than a copy follows
        deep = "python3 -c \"import os\nfor _ in range(1500): os.mkdir('a'); os.chdir('a')\nprint(len(os.getcwd()))\""
        nested = episode.run(deep)
        assert int(nested.output.split()[-1]) > 3000, nested.output
        locked = episode.run("chmod 000 /work")
        assert locked.exit_code == 0
        after = episode.run("tr a-z A-Z < a.txt > out.txt && echo still-here")
        assert after.output == "still-here\n", after  # the next command starts in /work all the same
        verdict = run_hidden_tests(episode.workdir, strict_task / "tests", timeout_s=15)
        assert not verdict.passed and verdict.exit_code is None and "deeper than" in verdict.output, verdict
        episode.run("rm -rf a")
        solved = run_hidden_tests(episode.workdir, strict_task / "tests", timeout_s=15)
        assert solved.passed, solved
        episode.run(deep)
        root = episode.workdir.parent
    assert not root.exists()  # removed however deep


def test_a_link_to_a_host_file_holding_the_answer_is_not_followed(strict_task, tmp_path):
    """The host copies /work as root: following the agent's link would read any host file into the verdict."""
    answer = tmp_path / "answer.txt"
    answer.write_text("HELLO\n")
    answer.chmod(0o644)
    with TerminalEpisode(strict_task / "files") as episode:
        episode.run(f"ln -s {answer} out.txt")
        verdict = run_hidden_tests(episode.workdir, strict_task / "tests", timeout_s=15)
    assert not verdict.passed, verdict
