"""The sandbox's API on benign programs: it must not be so tight that ordinary code fails, and
every status (ok, error, timeout, memory, killed) must be reported for the right cause."""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.conftest import run_cli
from tests.sandbox.sandbox_helpers import needs_bwrap, needs_root
from sandbox import (ExecutionRequest, Limits, Sandbox, SandboxConfig, SandboxError, SandboxPool,
                              SandboxUnavailable, run_program)

pytestmark = needs_bwrap
FAST = Limits(cpu_s=5, wall_s=10, memory_mb=256)


# -- benign programs succeed ----------------------------------------------------------------------

def test_print_and_exit_ok():
    result = run_program("print('hello', 'sandbox')", limits=FAST)
    assert (result.status, result.returncode, result.stdout, result.stderr) == ("ok", 0, "hello sandbox\n", "")
    assert result.isolation == "bubblewrap" and 0 < result.duration_s < 10


def test_reads_stdin_and_argv():
    result = run_program("import sys\nprint(sys.stdin.read().upper(), sys.argv[1:])", stdin="abc\ndef",
                         argv=["x", "y z"], limits=FAST)
    assert result.status == "ok", result.stderr
    assert result.stdout == "ABC\nDEF ['x', 'y z']\n"


def test_writes_and_reads_scratch_files_and_gets_extra_files():
    program = """
import os, json
os.makedirs('out/deep', exist_ok=True)
with open('out/deep/a.bin', 'wb') as f:
    f.write(os.urandom(1 << 20))
print(os.getcwd(), os.environ['HOME'], os.path.getsize('out/deep/a.bin'))
print(open('data/input.txt').read(), json.load(open('cfg.json'))['k'])
"""
    result = run_program(program, files={"data/input.txt": "given", "cfg.json": b'{"k": 7}'}, limits=FAST)
    assert result.status == "ok", result.stderr
    assert result.stdout == "/tmp /tmp 1048576\ngiven 7\n"


def test_spawns_children_threads_and_a_multiprocessing_pool():
    program = """
import subprocess, sys, threading, multiprocessing
print(subprocess.run([sys.executable, '-c', 'print(6 * 7)'], capture_output=True, text=True).stdout.strip())
print(subprocess.run('echo hi | tr a-z A-Z', shell=True, capture_output=True, text=True).stdout.strip())
out = []
threads = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
[t.start() for t in threads]; [t.join() for t in threads]
print(sorted(out))
with multiprocessing.Pool(2) as pool:
    print(pool.map(abs, [-1, -2, -3]))
"""
    result = run_program(program, limits=FAST)
    assert result.status == "ok", result.stderr
    assert result.stdout.split("\n")[:4] == ["42", "HI", "[0, 1, 2, 3]", "[1, 2, 3]"]


def test_unicode_and_binary_output_are_decoded():
    result = run_program("import sys\nprint('héllo ✓')\nsys.stdout.flush()\nsys.stdout.buffer.write(b'\\xff\\n')",
                         limits=FAST)
    assert result.status == "ok" and result.stdout == "héllo ✓\n\ufffd\n"


# -- each status for its cause --------------------------------------------------------------------

def test_nonzero_exit_is_error_with_stderr():
    result = run_program("import sys\nprint('bad', file=sys.stderr)\nsys.exit(3)", limits=FAST)
    assert (result.status, result.returncode, result.stderr) == ("error", 3, "bad\n")
    exception = run_program("raise ValueError('boom')", limits=FAST)
    assert exception.status == "error" and exception.returncode == 1 and "ValueError: boom" in exception.stderr


def test_signal_death_is_killed():
    result = run_program("import ctypes\nctypes.string_at(0)", limits=FAST)  # SIGSEGV
    assert result.status == "killed" and result.returncode == -11, result


def test_file_size_limit():
    program = "open('big', 'wb').write(b'x' * (3 << 20))"
    assert run_program(program, limits=FAST.replace(file_size_mb=1)).status == "error"
    assert run_program(program, limits=FAST.replace(file_size_mb=8)).status == "ok"


def test_scratch_size_limit():
    program = "for i in range(40):\n    open(f'f{i}', 'wb').write(b'x' * (1 << 20))"
    full = run_program(program, limits=FAST.replace(scratch_mb=8))
    assert full.status == "error" and "No space left" in full.stderr
    assert run_program(program, limits=FAST.replace(scratch_mb=64)).status == "ok"


def test_limits_reject_nonsense():
    for bad in ({"wall_s": 0}, {"cpu_s": -1}, {"memory_mb": 8}, {"nproc": 0}, {"output_bytes": 1.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            Limits(**bad)


def test_result_contract_has_exactly_five_keys():
    assert set(run_program("print(1)", limits=FAST).to_dict()) == {"status", "returncode", "stdout", "stderr", "duration_s"}


@needs_root
@pytest.mark.parametrize("chain", [True, False], ids=["prlimit-setpriv", "fork-exec"])
def test_both_launch_paths_enforce_uid_and_limits(chain, monkeypatch):
    # Small processes set uid and limits between fork and exec; large ones go through util-linux's
    # prlimit + setpriv (so CPython can vfork). Force each path and check the same guarantees.
    import sandbox.runner as runner

    monkeypatch.setattr(runner, "CHAIN_ABOVE_RSS_MB", 0 if chain else float("inf"))
    sandbox = Sandbox(SandboxConfig())
    program = """
import os, resource
kids = 0
for _ in range(50):
    try:
        if os.fork() == 0:
            import time; time.sleep(1); os._exit(0)
        kids += 1
    except OSError:
        break
print(os.getuid(), kids, resource.getrlimit(resource.RLIMIT_AS)[0] >> 20)
"""
    result = sandbox.run_program(program, limits=FAST.replace(nproc=5))
    uid, kids, memory_mb = map(int, result.stdout.split())
    assert result.status == "ok" and uid >= 1000 and kids == 4 and memory_mb == 256, result
    assert sandbox.run_program("x = bytearray(1 << 30)", limits=FAST).status == "memory"


def test_a_failed_sandbox_setup_is_retried_then_raised(monkeypatch):
    import sandbox.runner as runner

    real_launch, calls = runner._launch, []

    def broken_once(command, *args, **kwargs):  # bwrap rejects the option: a setup failure
        calls.append(command)
        if len(calls) == 1 or always_broken:
            command = [command[0], "--not-a-bwrap-option", *command[1:]]
        return real_launch(command, *args, **kwargs)

    monkeypatch.setattr(runner, "_launch", broken_once)
    always_broken = False
    retried = run_program("print(open('data.txt').read(), input())", files={"data.txt": "kept"}, stdin="in", limits=FAST)
    assert len(calls) == 2 and (retried.status, retried.stdout) == ("ok", "kept in\n"), retried
    always_broken = True
    with pytest.raises(SandboxError, match="failed to set up.*not-a-bwrap-option"):
        run_program("print(1)", limits=FAST)


# -- refusal without isolation, and the unsafe opt-in ---------------------------------------------

def test_refuses_without_isolation():
    sandbox = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap"))
    with pytest.raises(SandboxUnavailable, match="bubblewrap.*not installed.*ASSAY_UNSAFE_LOCAL_EXEC=1"):
        sandbox.run_program("print(1)")


def test_refuses_when_bwrap_cannot_build_namespaces():
    import shutil
    import tempfile
    from pathlib import Path

    folder = Path(tempfile.mkdtemp(prefix="fake-bwrap-", dir="/tmp"))  # reachable by the sandbox uid
    try:
        folder.chmod(0o755)
        fake = folder / "bwrap"  # what bwrap says where user namespaces are disabled
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
        fake.chmod(0o755)
        sandbox = Sandbox(SandboxConfig(bwrap=str(fake)))
        with pytest.raises(SandboxUnavailable, match="cannot create a sandbox here: bwrap: No permissions"):
            sandbox.run_program("print(1)")
    finally:
        shutil.rmtree(folder)


def test_unsafe_opt_in_runs_and_warns_on_every_run(capfd):
    assert SandboxConfig.from_env({"ASSAY_UNSAFE_LOCAL_EXEC": "1"}).allow_unsafe
    assert not SandboxConfig.from_env({}).allow_unsafe
    sandbox = Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap", allow_unsafe=True))
    first = sandbox.run_program("print(input())", stdin="x", limits=FAST)
    second = sandbox.run_program("import time; time.sleep(30)", limits=FAST.replace(wall_s=0.5))
    assert (first.status, first.stdout, first.isolation) == ("ok", "x\n", "none")
    assert second.status == "timeout" and second.duration_s < 5
    assert capfd.readouterr().err.count("WARNING: ASSAY_UNSAFE_LOCAL_EXEC=1: running untrusted code WITHOUT isolation") == 2


# -- the pool ---------------------------------------------------------------------------------------

@needs_root
def test_pool_runs_in_parallel_with_distinct_uids():
    program = "import os, time\ntime.sleep(1.0)\nprint(os.getuid())"
    started = time.monotonic()
    with SandboxPool(workers=4, limits=FAST) as pool:
        results = pool.run_many([ExecutionRequest(source=program) for _ in range(4)])
    elapsed = time.monotonic() - started
    assert all(r.status == "ok" for r in results), results
    uids = {int(r.stdout) for r in results}
    assert len(uids) == 4 and all(uid >= 1000 for uid in uids)
    assert elapsed < 3.5, f"4 one-second programs on 4 workers took {elapsed:.1f}s: not parallel"


@needs_root
def test_pool_process_limit_is_per_execution():
    # Each run needs 5 processes at once under a limit of 6: only distinct uids make all succeed.
    program = """
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        time.sleep(0.8); os._exit(0)
    kids.append(pid)
[os.waitpid(p, 0) for p in kids]
print(len(kids))
"""
    with SandboxPool(workers=4, limits=FAST.replace(nproc=6)) as pool:
        results = pool.run_many([ExecutionRequest(source=program) for _ in range(8)])
    assert [(r.status, r.stdout) for r in results] == [("ok", "4\n")] * 8, [r.stderr for r in results]


def test_pool_keeps_order_and_runs_commands():
    with SandboxPool(workers=2, limits=FAST) as pool:
        results = pool.run_many([ExecutionRequest(source=f"print({i} * {i})") for i in range(10)]
                                + [ExecutionRequest(command=["/bin/sh", "-c", "echo $HOME"])])
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(10)] + ["/tmp\n"]
    with pytest.raises(ValueError, match="exactly one of"):
        ExecutionRequest()


# -- the CLI ------------------------------------------------------------------------------------------

def test_cli_run_json_contract(tmp_path, assay_home):
    program = tmp_path / "prog.py"
    program.write_text("import sys\nprint('out')\nprint('err', file=sys.stderr)\nsys.exit(5)\n")
    done = run_cli("sandbox", "run", str(program), "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert list(payload) == ["status", "returncode", "stdout", "stderr", "duration_s"]
    assert (payload["status"], payload["returncode"], payload["stdout"], payload["stderr"]) == ("error", 5, "out\n", "err\n")


def test_cli_limits_and_missing_file(tmp_path, assay_home):
    sleeper = tmp_path / "sleep.py"
    sleeper.write_text("import time\ntime.sleep(30)\n")
    timed = run_cli("sandbox", "run", str(sleeper), "--timeout", "1", "--json")
    assert timed.returncode == 0 and json.loads(timed.stdout)["status"] == "timeout"
    hog = tmp_path / "hog.py"
    hog.write_text("x = bytearray(1 << 30)\n")
    assert json.loads(run_cli("sandbox", "run", str(hog), "--memory-mb", "128", "--json").stdout)["status"] == "memory"
    missing = run_cli("sandbox", "run", str(tmp_path / "nope.py"), "--json")
    assert missing.returncode == 2 and "no such file" in missing.stderr and missing.stdout == ""


def test_cli_refuses_without_isolation(tmp_path, assay_home):
    program = tmp_path / "prog.py"
    program.write_text("print(1)\n")
    refused = run_cli("sandbox", "run", str(program), "--json", env={"ASSAY_SANDBOX_BWRAP": "/nonexistent/bwrap"})
    assert refused.returncode == 1 and "refusing to run untrusted code" in refused.stderr


def test_import_is_light():
    code = ("import sys, time; t = time.perf_counter(); import sandbox; "
            "heavy = [m for m in ('torch', 'dagster', 'polars', 'numpy') if m in sys.modules]; "
            "print(heavy, time.perf_counter() - t)")
    import subprocess

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    heavy, seconds = done.stdout.rsplit(" ", 1)
    assert heavy == "[]" and float(seconds) < 1.0
