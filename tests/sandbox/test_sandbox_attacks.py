"""The attack suite: hostile programs the sandbox must contain. Each test asserts on the host's
side (a file not created, a listener not reached, a process still alive, no process left), not on
what the program claims, so a sandbox that lets the attack through fails the test."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.sandbox.sandbox_helpers import IS_ROOT, needs_bwrap, needs_root, stop_and_kill
from sandbox import Limits, run_program

pytestmark = needs_bwrap
REPO = Path(__file__).resolve().parents[2]
LIMITS = Limits(cpu_s=5, wall_s=10, memory_mb=256, nproc=16, output_bytes=100_000)


@pytest.fixture(autouse=True, params=["fork-exec", "prlimit-setpriv"])
def launch_path(request, monkeypatch):
    """Every attack against both ways a run starts (small parents fork; large ones exec a chain)."""
    import sandbox.runner as runner

    monkeypatch.setattr(runner, "CHAIN_ABOVE_RSS_MB", float("inf") if request.param == "fork-exec" else 0)
    return request.param


def run_attack(source: str, argv=(), **limit_changes):
    return run_program(source, argv=argv, limits=LIMITS.replace(**limit_changes))


# -- network ----------------------------------------------------------------------------------------

def test_cannot_reach_a_host_loopback_listener():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        result = run_attack(f"""
import socket
for host in ('127.0.0.1', 'localhost', '::1'):
    try:
        socket.create_connection((host, {port}), timeout=2).sendall(b'stolen')
        print('connected', host)
    except OSError as exc:
        print('blocked', host, type(exc).__name__)
""")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected to the host's listener
        assert "connected" not in result.stdout and result.stdout.count("blocked") == 3, result
    finally:
        listener.close()


def test_no_outside_network_and_no_dns():
    result = run_attack("""
import socket
for addr in [('1.1.1.1', 53), ('8.8.8.8', 443), ('151.101.0.223', 443)]:
    try:
        socket.create_connection(addr, timeout=2); print('connected', addr)
    except OSError as exc:
        print('blocked', exc.errno)
try:
    print('resolved', socket.gethostbyname('pypi.org'))
except OSError:
    print('no dns')
print(sorted(name for _, name in socket.if_nameindex()))
""")
    lines = result.stdout.splitlines()
    assert lines[:3] == ["blocked 101"] * 3, result  # ENETUNREACH: no route at all
    assert lines[3] == "no dns" and lines[4] == "['lo']", result


# -- the filesystem ---------------------------------------------------------------------------------

def test_cannot_write_outside_scratch(tmp_path):
    marker = f"pwned-{os.getpid()}-{time.monotonic_ns()}"
    host_targets = [tmp_path / marker, REPO / marker, Path.home() / marker, Path("/tmp") / marker,
                    Path("/usr") / marker, Path("/etc") / marker, Path("/") / marker, Path("/dev") / marker]
    result = run_attack(f"""
import os
for target in {[str(p) for p in host_targets]!r}:
    try:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, 'w').write('x')
        print('wrote', target)
    except OSError as exc:
        print('denied', target, exc.errno)
""")
    leaked = [target for target in host_targets if target.exists()]
    for target in leaked:
        target.unlink()  # clean up before failing, so a broken sandbox leaves no litter behind
    assert leaked == [], f"the sandbox wrote {leaked} on the host"
    assert result.status == "ok", result.stderr
    # Inside, only its own /tmp (private scratch) accepts writes. When the repo or tmp_path lives
    # under the host's /tmp (a CI clone in /tmp, say), those paths resolve inside the scratch too:
    # harmless, and the host-side check above is what proves nothing escaped.
    wrote = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("wrote")}
    assert f"/tmp/{marker}" in wrote, result.stdout
    assert all(p.startswith("/tmp/") for p in wrote), result.stdout


def test_nothing_but_scratch_is_writable():
    result = run_attack("""
import os
writable = []
for root, dirs, files in os.walk('/'):
    if root.startswith(('/proc', '/sys')):
        dirs[:] = []
        continue
    try:
        probe = os.path.join(root, '.probe'); open(probe, 'w').close(); os.unlink(probe); writable.append(root)
    except OSError:
        pass
print(sorted(writable))
""", wall_s=30, cpu_s=20)
    assert result.status == "ok", result.stderr
    assert result.stdout == "['/tmp']\n"


def test_cannot_read_root_only_files_or_the_repo(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET-TOKEN")
    secret.chmod(0o600)
    targets = ["/etc/shadow", "/root/.bashrc", str(secret), str(REPO / "pyproject.toml"), "/proc/1/environ",
               f"/proc/{os.getpid()}/environ"]
    result = run_attack(f"""
import os
for target in {targets!r}:
    try:
        print('read', target, open(target, 'rb').read()[:40])
    except OSError as exc:
        print('denied', target, exc.errno)
print('uid', os.getuid(), os.geteuid())
print([line for line in open('/proc/self/status') if line.startswith(('CapEff', 'CapPrm'))])
""")
    assert result.status == "ok", result.stderr
    assert "TOP-SECRET" not in result.stdout and "read " not in result.stdout.replace("read /proc/1/environ", ""), result.stdout
    if IS_ROOT:
        uid_line = next(line for line in result.stdout.splitlines() if line.startswith("uid"))
        assert uid_line != "uid 0 0", "the program ran as root"
    assert "0000000000000000" in result.stdout and "CapEff:\\t0000000000000000" in result.stdout


def test_parent_environment_does_not_leak(monkeypatch):
    token = f"leak-check-{time.monotonic_ns()}"
    monkeypatch.setenv("ASSAY_TEST_SECRET", token)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", token)
    result = run_attack(f"""
import os
print(sorted(os.environ))
print(dict(os.environ))
for pid in ('1', 'self', '{os.getpid()}', str(os.getppid())):
    try:
        print(pid, open(f'/proc/{{pid}}/environ', 'rb').read())
    except OSError as exc:
        print(pid, 'denied', exc.errno)
""")
    assert result.status == "ok", result.stderr
    assert token not in result.stdout + result.stderr
    keys = eval(result.stdout.splitlines()[0])  # noqa: S307 - our own program's repr of a list of str
    assert set(keys) <= {"PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "USER", "LOGNAME", "PYTHONDONTWRITEBYTECODE", "PWD"}


# -- processes --------------------------------------------------------------------------------------

@needs_root
def test_fork_bomb_stops_at_the_process_limit_and_leaves_nothing():
    counted = run_attack("""
import os, time
children = 0
for _ in range(200):
    try:
        if os.fork() == 0:
            time.sleep(2); os._exit(0)
        children += 1
    except OSError:
        break
print(children)
""", nproc=10)
    assert counted.status == "ok", counted.stderr
    assert 1 <= int(counted.stdout) <= 9, counted.stdout  # the program itself is the 10th process
    marker = f"bomb-{time.monotonic_ns()}"
    started = time.monotonic()
    bomb = run_attack("""
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""", argv=[marker], nproc=32, wall_s=2, cpu_s=30)
    survivors = stop_and_kill(marker)  # before any assert: an escaped bomb must not outlive the test
    assert survivors == [], f"{len(survivors)} fork bomb processes survived"
    assert bomb.status == "timeout" and bomb.limit == "wall"
    assert time.monotonic() - started < 8


def test_memory_bomb_is_stopped():
    one_shot = run_attack("x = bytearray(8 << 30)", memory_mb=256)
    growing = run_attack("chunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))", memory_mb=256)
    for result in (one_shot, growing):
        assert (result.status, result.limit) == ("memory", "memory"), result
        assert result.duration_s < 5


def test_infinite_loop_and_cpu_spin_hit_the_cpu_limit():
    loop = run_attack("while True:\n    pass", cpu_s=1, wall_s=20)
    assert (loop.status, loop.limit) == ("timeout", "cpu") and loop.duration_s < 10, loop
    spin = run_attack("""
import threading
def spin():
    while True:
        pass
for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
spin()
""", cpu_s=2, wall_s=30)
    assert (spin.status, spin.limit) == ("timeout", "cpu") and spin.duration_s < 15, spin


def test_sleeping_past_the_wall_limit():
    started = time.monotonic()
    result = run_attack("import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)", wall_s=1)
    assert (result.status, result.limit, result.returncode) == ("timeout", "wall", -9)
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_huge_output_is_capped_and_stopped(stream):
    started = time.monotonic()
    result = run_attack(f"import sys\nwhile True:\n    sys.{stream}.write('x' * 65536)", output_bytes=50_000, wall_s=30)
    assert (result.status, result.limit) == ("killed", "output") and result.truncated
    assert len(getattr(result, stream)) == 50_000
    assert time.monotonic() - started < 5


def test_cannot_kill_its_parent_or_another_process():
    victim = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        result = run_attack(f"""
import os, signal
attempts = [('victim', lambda: os.kill({victim.pid}, signal.SIGKILL)),
            ('victim group', lambda: os.killpg({victim.pid}, signal.SIGKILL)),
            ('test process', lambda: os.kill({os.getpid()}, signal.SIGKILL)),
            ('test group', lambda: os.killpg({os.getpgid(0)}, signal.SIGKILL)),
            ('parent', lambda: os.kill(os.getppid(), signal.SIGKILL)),
            ('everyone', lambda: os.kill(-1, signal.SIGKILL))]
for name, attempt in attempts:
    try:
        attempt(); print('sent', name)
    except OSError as exc:
        print('denied', name, type(exc).__name__)
""")
        time.sleep(0.2)
        assert victim.poll() is None, "the sandbox killed a host process"
        assert result.status == "ok", result
        for name in ("victim", "victim group", "test process", "test group"):
            assert f"sent {name}\n" not in result.stdout, result.stdout
    finally:
        victim.kill()
        victim.wait()


def test_no_background_process_survives():
    marker = f"31.{time.monotonic_ns()}"
    daemon = f"""
import os, subprocess
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/usr/bin/sleep', ['/usr/bin/sleep', '{marker}'])
    os._exit(0)
subprocess.Popen(['/usr/bin/sleep', '{marker}'], start_new_session=True)
"""
    quick = run_attack(daemon + "print('left them running')")
    assert stop_and_kill(marker) == [], "a daemon outlived its sandbox"
    assert quick.status == "ok", quick.stderr
    killed = run_attack(daemon + "import time\ntime.sleep(600)", wall_s=1)
    assert stop_and_kill(marker) == [], "a daemon outlived its sandbox after the wall limit"
    assert killed.status == "timeout"


def test_signal_from_inside_cannot_end_the_supervisor_early():
    # The program is pid 1 of its namespace: killing "itself" or its group must not confuse the
    # outcome (the supervisor still reports how the program ended).
    result = run_attack("import os, signal\nos.killpg(0, signal.SIGTERM)\nprint('still here')")
    assert result.status == "ok" and result.stdout == "still here\n"
