"""The lake under concurrent writers and readers: recovery touches only dead writers' work,
readers never modify the lake and never find a replaced batch missing.

Writers that die are real child processes killed with SIGKILL mid-write
(:mod:`tests.storage.lake_writer_child`); "aside" runs force the commit used on file systems
without an atomic folder swap.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pytest

from storage import lake as lake_module
from storage import process_identity
from storage.lake import Lake
from storage.tables import QUARANTINE, SAMPLES, conform
from tests.conftest import REPO, run_cli

SWAPS = ["exchange", "aside"]


@pytest.fixture(params=SWAPS)
def swap(request, monkeypatch) -> str:
    """Run the test with the atomic swap (this machine's file system has it) and without."""
    if request.param == "aside":
        monkeypatch.setattr(lake_module, "_renameat2", None, raising=False)
    else:
        assert getattr(lake_module, "_renameat2", None) is not None, \
            "no renameat2 on this platform or file system: only the aside commit can run"
    return request.param


def _work_folders(lake: Lake) -> list[Path]:
    return sorted(p for p in lake.root.rglob(".*") if p.is_dir())


def _tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its inode, size and times: equal trees mean nothing changed."""
    out = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            st = path.lstat()
            out[str(path.relative_to(root))] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return out


class PausedWriter:
    """A child process stopped in the middle of ``write_batch`` (see lake_writer_child)."""

    def __init__(self, home: Path, table: str, batch: str, value: int, pause_at: str, aside: bool = False):
        args = [sys.executable, "-m", "tests.storage.lake_writer_child", str(home), table, batch, str(value),
                pause_at] + (["aside"] if aside else [])
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        assert line == "paused", (line, self.proc.stderr.read() if self.proc.poll() is not None else "")

    def go_on(self) -> subprocess.CompletedProcess:
        out, err = self.proc.communicate("go\n", timeout=60)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)


def _dead_identity() -> process_identity.ProcessIdentity:
    """The identity of a real process that has exited."""
    code = "from storage.process_identity import current; print(current().token)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    return process_identity.ProcessIdentity.parse(out.stdout.strip())


# -- recovery ------------------------------------------------------------------------------------

def test_a_writer_killed_after_renaming_aside_is_restored_and_its_staging_removed(assay_home):
    lake = Lake.at()
    final = lake.write_batch("t", {"batch": "b"}, {"part": pl.DataFrame({"v": [1]})})
    writer = PausedWriter(assay_home, "t", "b", 2, pause_at="aside", aside=True)
    try:
        assert not final.exists(), "the child is between its two renames"
        assert lake.read("t")["v"].to_list() == [1], "mid-replace, readers take the aside as the committed batch"
        assert lake.recover() == [], "a live writer's aside and staging are not touched"
        assert len(_work_folders(lake)) == 2 and not final.exists()
        writer.kill()
        os.waitid(os.P_PID, writer.proc.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
        assert process_identity.process_stat(writer.proc.pid)[0] == "Z"
        assert lake.recover() == [final], "a killed writer's aside is restored, even before it is reaped"
    finally:
        writer.proc.kill()
        writer.proc.wait()
    assert _work_folders(lake) == []
    assert lake.read("t")["v"].to_list() == [1]
    assert lake.recover() == [] and lake.read("t")["v"].to_list() == [1]


def test_a_writer_killed_mid_write_leaves_staging_that_recovery_removes(assay_home, swap):
    lake = Lake.at()
    lake.write_batch("t", {"batch": "b"}, {"part": pl.DataFrame({"v": [1]})})
    writer = PausedWriter(assay_home, "t", "b", 2, pause_at="write", aside=swap == "aside")
    try:
        (staging,) = _work_folders(lake)
        assert staging.name.startswith(".staging-") and (staging / "batch=b" / "part.parquet").exists()
        assert lake.recover() == [] and staging.exists(), "live staging is left alone"
        writer.kill()
        writer.proc.wait()
        assert lake.recover() == []
    finally:
        writer.proc.kill()
    assert _work_folders(lake) == []
    assert lake.read("t")["v"].to_list() == [1]


def test_a_live_writer_survives_a_concurrent_recovery_and_completes(assay_home, swap):
    lake = Lake.at()
    lake.write_batch("t", {"batch": "b"}, {"part": pl.DataFrame({"v": [1]})})
    writer = PausedWriter(assay_home, "t", "b", 2, pause_at="aside" if swap == "aside" else "write",
                          aside=swap == "aside")
    lake.recover()
    done = writer.go_on()
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr
    assert lake.read("t")["v"].to_list() == [2]
    assert _work_folders(lake) == [], "a finished writer leaves nothing behind"


def test_a_live_writer_survives_cli_readers_and_writers(assay_home, tmp_path):
    """`assay sql` and `assay quarantine` (readers) and `assay ingest` (a writer, which recovers
    first) run while another process is mid-write: its batch still commits."""
    lake = Lake.at()
    lake.write_batch("t", {"batch": "b"}, {"part": pl.DataFrame({"v": [1]})})
    writer = PausedWriter(assay_home, "t", "b", 2, pause_at="write")
    assert run_cli("sql", "select count(*) as n from t", "--json").returncode == 0
    assert run_cli("quarantine", "gsm", "--json").returncode == 0
    src = tmp_path / "rows.jsonl"
    src.write_text('{"prompt": "What is 40 plus 2?", "answer": "42"}\n')
    ingest = run_cli("ingest", "gsm", str(src), "--json")
    assert ingest.returncode == 0, ingest.stderr
    done = writer.go_on()
    assert done.returncode == 0, done.stderr
    assert lake.read("t")["v"].to_list() == [2]
    assert not [p for p in _work_folders(lake)], "no staging left by finished writers"


def test_a_reused_pid_or_an_earlier_boot_is_not_taken_for_a_live_writer(assay_home):
    lake = Lake.at()
    lake.write_batch("t", {"batch": "kept"}, {"part": pl.DataFrame({"v": [1]})})
    me = process_identity.current()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        other = process_identity.ProcessIdentity(me.boot, sleeper.pid, process_identity.process_stat(sleeper.pid)[1])
        assert other.is_alive()
        owners = {
            "reused-pid": process_identity.ProcessIdentity(me.boot, sleeper.pid, other.start - 1),  # pid, other start
            "reused-own-pid": process_identity.ProcessIdentity(me.boot, me.pid, me.start + 1),
            "earlier-boot": process_identity.ProcessIdentity("0123456789abcdef", me.pid, me.start),
            "exited": _dead_identity(),
            "live-other": other,
            "live-me": me,
        }
        parent = lake.table_dir("t")
        for label, owner in owners.items():
            for kind in ("staging", "deleted", "replaced"):
                folder = parent / f".{kind}-{owner.token}-{os.urandom(4).hex()}" / f"batch={label}"
                folder.mkdir(parents=True)
                pl.DataFrame({"v": [len(label)]}).write_parquet(folder / "part.parquet")
        assert sorted(p.name for p in lake.recover()) == ["batch=earlier-boot", "batch=exited",
                                                           "batch=reused-own-pid", "batch=reused-pid"]
        left = sorted(p.name.split("-")[0] + ":" + next(p.iterdir()).name for p in _work_folders(lake)
                      if p.parent == parent)
        assert left == sorted(f".{kind}:batch={label}" for kind in ("staging", "deleted", "replaced")
                              for label in ("live-other", "live-me"))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not other.is_alive(), "a reaped process is dead"


def test_recovery_does_not_restore_an_aside_over_a_newer_version(assay_home):
    lake = Lake.at()
    final = lake.write_batch("t", {"batch": "b"}, {"part": pl.DataFrame({"v": [2]})})
    old = lake.table_dir("t") / f".replaced-{_dead_identity().token}-0badf00d" / "batch=b"
    old.mkdir(parents=True)
    pl.DataFrame({"v": [1]}).write_parquet(old / "part.parquet")
    assert lake.read("t")["v"].to_list() == [2], "an aside is only read while its partition is absent"
    assert lake.recover() == [] and not old.parent.exists()
    assert lake.read("t")["v"].to_list() == [2] and final.exists()


def test_proc_stat_parsing_survives_odd_command_names():
    line = "4242 (a) b (c) d) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615"
    assert process_identity.parse_stat(line) == ("S", 987654)
    me = process_identity.current()
    assert me.is_alive() and process_identity.ProcessIdentity.parse(me.token) == me
    assert process_identity.ProcessIdentity.parse("batch=x-1234") is None


# -- readers -------------------------------------------------------------------------------------

def test_readers_never_modify_the_lake(assay_home, tmp_path):
    """Reads through the library, the CLI and the dashboard's data layer leave every file as it
    was, even with a dead writer's leftovers (including a batch only present as its aside)."""
    lake = Lake.at()

    def rows(table, ids):
        return conform(pl.DataFrame({"id": ids, "ingested_at": ["2026-01-01T00:00:00+00:00"] * len(ids),
                                     "reasons": [["malformed"]] * len(ids)}), table)

    lake.write_batch("ingest", {"domain": "gsm", "batch": "b1"},
                     {"samples": rows(SAMPLES, ["1", "2"]), "quarantine": rows(QUARANTINE, ["3"])})
    dead = _dead_identity().token
    aside = lake.table_dir("ingest") / "domain=gsm" / f".replaced-{dead}-0000cafe" / "batch=b2"
    staging = lake.table_dir("ingest") / "domain=gsm" / f".staging-{dead}-0000beef" / "batch=b3"
    for folder in (aside, staging):
        folder.mkdir(parents=True)
        rows(SAMPLES, ["4"]).write_parquet(folder / "samples.parquet")
    before = _tree(assay_home)

    from pipelines.settings import open_lake

    reader = open_lake()
    assert reader.read("ingest", "samples").height == 3, "the aside of an absent batch counts as committed"
    assert reader.sql("select count(*) as n from samples")["n"].to_list() == [3]
    assert len(reader.files("ingest", "samples")) == 2 and set(reader.views()) == {"samples", "quarantine"}
    out = run_cli("sql", "select count(*) as n from samples", "--json")
    assert out.returncode == 0 and '"n": 3' in out.stdout, out.stderr
    out = run_cli("quarantine", "gsm", "--json")
    assert out.returncode == 0 and '"id": "3"' in out.stdout, out.stderr

    from ui import data as ui_data

    assert ui_data.domains_in_lake(str(assay_home)) == ["gsm"]
    ui_data.domain_detail(str(assay_home), "gsm")
    ui_data.overview(str(assay_home), 5)
    assert _tree(assay_home) == before

    nowhere = tmp_path / "no_home"
    out = run_cli("sql", "select 1 as one", "--json", env={"ASSAY_HOME": str(nowhere)})
    assert out.returncode == 0, out.stderr
    assert not nowhere.exists(), "reading a lake that does not exist creates nothing"


def test_a_reader_between_the_two_renames_of_a_replace_sees_the_old_batch(assay_home, swap, monkeypatch):
    """Freeze the writer right after each rename it makes and read: the batch is always there,
    whole, in its old or its new version. (With the atomic swap there is no such moment.)"""
    lake = Lake.at()
    part = {"domain": "a", "batch": "b"}
    lake.write_batch("ingest", part, {"samples": pl.DataFrame({"v": [1, 1]}),
                                      "quarantine": pl.DataFrame({"v": [1]})})
    lake.write_batch("ingest", {"domain": "z", "batch": "other"}, {"samples": pl.DataFrame({"v": [0]}),
                                                                   "quarantine": pl.DataFrame({"v": [0]})})
    seen = []

    def values(name):
        frame = lake.read("ingest", name, where={"domain": "a"})
        return frame["v"].to_list() if "v" in frame.columns else []  # no column: the batch is missing

    def read_now():
        count = lake.sql("select count(*) as n from samples where domain = 'a'")["n"][0]
        seen.append((values("samples"), values("quarantine"), count))

    for name in ("rename", "replace"):
        real = getattr(os, name)

        def rename_then_read(src, dst, *args, _real=real, **kwargs):
            _real(src, dst, *args, **kwargs)
            read_now()

        monkeypatch.setattr(os, name, rename_then_read)
    lake.write_batch("ingest", part, {"samples": pl.DataFrame({"v": [2, 2]}), "quarantine": pl.DataFrame({"v": [2]})})
    monkeypatch.undo()
    assert seen or swap == "exchange", "the aside commit renames"
    for samples, quarantine, count in seen:
        assert (samples, quarantine, count) in (([1, 1], [1], 2), ([2, 2], [2], 2)), seen
    assert values("samples") == [2, 2]


def test_threads_writing_replacing_recovering_and_reading_at_once(assay_home, swap):
    lake = Lake.at()
    lake.write_batch("t", {"batch": "shared"}, {"part": pl.DataFrame({"v": [0] * 10})})
    errors: list[BaseException] = []
    counts: list[int] = []
    stop = threading.Event()

    def guarded(fn):
        def run():
            try:
                fn()
            except BaseException as exc:  # reported by the assertion below
                errors.append(exc)
        return run

    def writer(n):
        for i in range(25):
            lake.write_batch("t", {"batch": f"w{n}-{i}"}, {"part": pl.DataFrame({"v": [n]})})
            lake.write_batch("t", {"batch": "shared"}, {"part": pl.DataFrame({"v": [i] * 10})})

    def recoverer():
        while not stop.is_set():
            assert lake.recover() == []

    def reader():
        while not stop.is_set():
            frame = lake.read("t")
            counts.append(frame.filter(pl.col("batch") == "shared").height)

    writers = [threading.Thread(target=guarded(lambda n=n: writer(n))) for n in range(4)]
    others = [threading.Thread(target=guarded(f)) for f in (recoverer, reader)]
    for t in writers + others:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in others:
        t.join()
    assert errors == []
    assert counts and set(counts) == {10}, "the replaced batch was always there, whole"
    assert lake.read("t").height == 4 * 25 + 10
    assert _work_folders(lake) == []


def test_a_query_over_two_files_of_a_batch_swapped_meanwhile_runs_again(assay_home, swap, monkeypatch):
    """`samples` and `quarantine` of one batch are read at different moments by DuckDB: if the
    batch was replaced in between, the answer could mix two versions, so the query runs again."""
    lake = Lake.at()
    part = {"domain": "a", "batch": "b"}
    lake.write_batch("ingest", part, {"samples": pl.DataFrame({"v": [1, 1]}), "quarantine": pl.DataFrame({"v": [1]})})
    bound: list[list[str]] = []
    real_connect = lake_module.connect_views

    def connect_then_replace(views):
        con = real_connect(views)
        if not bound:
            lake.write_batch("ingest", part, {"samples": pl.DataFrame({"v": [2, 2]}),
                                              "quarantine": pl.DataFrame({"v": [2]})})
        bound.append(sorted(views))
        return con

    monkeypatch.setattr(lake_module, "connect_views", connect_then_replace)
    both = lake.sql("select (select sum(v) from samples) as s, (select sum(v) from quarantine) as q")
    assert both.to_dicts() == [{"s": 4, "q": 2}]
    assert bound == [["quarantine", "samples"]] * 2, "the first answer was dropped: its batch changed"
    bound.clear()
    assert lake.sql("select sum(v) as s from samples")["s"].to_list() == [4]
    assert bound == [["samples"]], "one file per batch cannot mix versions: one run, only the named view bound"


def test_reads_during_replaces_of_different_sizes_see_one_whole_version(assay_home, swap):
    """A writer replaces one batch non-stop with a 10-row and a 20,000-row version while a reader
    reads the table. Two ways a reader used to get it wrong: polars opened the file twice (footer,
    then pages) and met the other version's file in between (`ComputeError: ... wrong page size`,
    or a panic inside polars); and a listing that began on the version being swapped out read its
    folder while its files were deleted, so the batch came back empty. Every read must be one
    whole version."""
    import time

    lake = Lake.at()
    small = pl.DataFrame({"v": list(range(10)), "s": ["x"] * 10})
    big = pl.DataFrame({"v": list(range(20_000)), "s": [f"row {i} " * 5 for i in range(20_000)]})
    lake.write_batch("t", {"batch": "shared"}, {"part": small})
    stop = threading.Event()
    problems: list[str] = []
    reads = [0]

    def writer():
        for i in range(10 ** 6):
            if stop.is_set():
                return
            lake.write_batch("t", {"batch": "shared"}, {"part": big if i % 2 else small})

    def reader():
        while not stop.is_set():
            try:
                height = lake.read("t").height
                if height not in (10, 20_000):
                    problems.append(f"read {height} rows")
            except BaseException as exc:  # reported by the assertion below (a polars panic included)
                problems.append(f"{type(exc).__name__}: {str(exc)[:200]}")
            reads[0] += 1

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    time.sleep(6)
    stop.set()
    for t in threads:
        t.join()
    assert reads[0] > 100, "the reader should have raced the writer many times"
    assert problems == [], problems[:5]


def test_sql_lists_again_when_a_listed_file_is_gone_before_its_view_binds(assay_home, monkeypatch):
    """DuckDB checks a view's files when the view is created: a file a writer removed between the
    listing and that moment (a discarded aside, a replaced version) must send the query back to a
    fresh listing, not out as an IO error (it did, from a reader under load)."""
    lake = Lake.at()
    lake.write_batch("t", {"batch": "a"}, {"part": pl.DataFrame({"v": [1, 2, 3]})})
    real = lake_module._view_files
    listings = []

    def first_listing_is_stale(versions):
        views = real(versions)
        listings.append(views)
        if len(listings) == 1:
            views = {name: files + [lake.root / "t" / "batch=gone" / "part.parquet"] for name, files in views.items()}
        return views

    monkeypatch.setattr(lake_module, "_view_files", first_listing_is_stale)
    assert lake.sql("select count(*) as n from t")["n"].to_list() == [3]
    assert len(listings) == 2
