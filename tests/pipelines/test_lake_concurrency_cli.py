"""Many processes on one lake, as Dagster's multiprocess executor, the sensor's runs and a user's
CLI put them: parallel `assay ingest` into several domains, an `assay sweep`, writers replacing a
batch non-stop (with and without the atomic folder swap), and readers (`assay sql` in a loop and a
tight in-process loop). Every process succeeds, every committed row is there, every read saw each
batch whole, and nothing is left behind."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from itertools import combinations
from pathlib import Path

import pytest

from storage.lake import Lake
from tests.conftest import REPO, run_cli, write_plugin

INGEST_DOMAINS = ("conc_a", "conc_b", "conc_c")
FILES_PER_DOMAIN = 2
ROWS = 3000
REPLACED = {"conc_r": "exchange", "conc_f": "aside"}  # domain -> how its batch is swapped
REPLACED_ROWS = 40
SWEEP_DOMAIN, SWEEP_LIMIT = "conc_s", 6


@pytest.fixture(scope="module")
def tiny_built(tmp_path_factory):
    from generation.policy import ensure_tiny

    return ensure_tiny(tmp_path_factory.mktemp("tiny_concurrency_home"))


def _source_file(path: Path, tag: str) -> Path:
    """ROWS lines, unique across files; some malformed, some empty, one repeated: quarantines."""
    lines = []
    for i in range(ROWS - 1):
        if i % 250 == 7:
            lines.append("{not json")
        elif i % 300 == 11:
            lines.append(json.dumps({"prompt": " ", "answer": "1"}))
        else:
            lines.append(json.dumps({"prompt": f"[{tag}] What is {i} plus 17?", "answer": str(i + 17)}))
    lines.append(lines[0])  # a duplicate of the first row
    path.write_text("\n".join(lines) + "\n")
    return path


def _popen(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen, quiet: bool = True, timeout: float = 600) -> tuple[str, str]:
    """Wait for ``proc``: exit 0 and nothing on stderr (``quiet=False``: progress lines, no error)."""
    out, err = proc.communicate(timeout=timeout)
    problems = err.strip() if quiet else re.findall(r"(?im)^.*(?:error|traceback|exception|warning).*$", err)
    if proc.returncode != 0 or problems:  # pytest.fail prints the whole stderr tail (an assert's repr is cut)
        pytest.fail(f"{' '.join(proc.args[1:4])} exited {proc.returncode}; stderr:\n{err[-3000:]}")
    return out, err


@pytest.mark.slow
def test_parallel_ingests_sweep_replacers_and_readers_share_one_lake(assay_home, tmp_path, tiny_built):
    shutil.copytree(tiny_built, assay_home / "models" / "tiny")
    plugins = tmp_path / "plugins"
    for name in (*INGEST_DOMAINS, SWEEP_DOMAIN):
        write_plugin(plugins, name)
    env = {**os.environ, "ASSAY_HOME": str(assay_home), "ASSAY_DOMAINS_PATH": str(plugins),
           "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    sources = {(d, f): _source_file(tmp_path / f"{d}-{f}.jsonl", f"{d}/{f}")
               for d in INGEST_DOMAINS for f in range(FILES_PER_DOMAIN)}
    sweep_args = ("sweep", "--checkpoint", "base-tiny", "--domains", SWEEP_DOMAIN, "--samples", "2",
                  "--max-new-tokens", "4", "--dtype", "float32", "--batch-items", "1", "--json")
    # registers base-tiny (MLflow's SQLite registry is not what this test is about), sweeps 1 item
    first = run_cli(*sweep_args, "--limit", "1", env=env)
    assert first.returncode == 0, first.stderr

    stop = tmp_path / "stop"
    done = threading.Event()
    procs: list[subprocess.Popen] = []
    readers: list[threading.Thread] = []
    try:
        replacers = {d: _popen("-m", "tests.pipelines.lake_load", "replace", str(assay_home), d, str(REPLACED_ROWS),
                               str(stop), *(["aside"] if swap == "aside" else []), env=env)
                     for d, swap in REPLACED.items()}
        procs.extend(replacers.values())
        deadline = time.monotonic() + 120
        while {p.parent.parent.name for p in Lake(assay_home).files("ingest", "samples")} != {
                f"domain={d}" for d in REPLACED}:  # readers start once the replaced batches exist
            dead = [p.communicate()[1][-2000:] for p in procs if p.poll() is not None]
            assert not dead and time.monotonic() < deadline, f"a replacer did not start: {dead}"
            time.sleep(0.1)
        fast_reader = _popen("-m", "tests.pipelines.lake_load", "read", str(assay_home), str(stop), env=env)
        procs.append(fast_reader)
        cli_reads: list[subprocess.CompletedProcess] = []

        def cli_reader():
            while not done.is_set():
                cli_reads.append(run_cli("sql", "select domain, count(*) as n from samples group by 1 order by 1",
                                         "--json", env=env))

        readers.extend(threading.Thread(target=cli_reader) for _ in range(2))
        for t in readers:
            t.start()
        ingests = {key: _popen("-m", "pipelines.cli", "ingest", key[0], str(path), "--json", env=env)
                   for key, path in sources.items()}
        sweep = _popen("-m", "pipelines.cli", *sweep_args, "--limit", str(SWEEP_LIMIT), "--no-mlflow", env=env)
        procs.extend([*ingests.values(), sweep])

        reports = {key: json.loads(_finish(proc)[0]) for key, proc in ingests.items()}
        swept = json.loads(_finish(sweep, quiet=False)[0])  # its progress goes to stderr
        reads_during_writes = len(cli_reads)
        done.set()
        for t in readers:
            t.join()
        stop.touch()
        replaced = {d: json.loads(_finish(proc)[0]) for d, proc in replacers.items()}
        fast = json.loads(_finish(fast_reader)[0])
    finally:  # a failed assertion must not leave writers and readers running
        done.set()
        stop.touch()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for t in readers:
            t.join()

    print(f"reads: {len(cli_reads)} assay sql ({reads_during_writes} while ingesting/sweeping), "
          f"{fast['reads']} in-process; replace rounds: {replaced}")
    # every process succeeded, quietly
    for read in cli_reads:
        assert read.returncode == 0 and not read.stderr.strip(), read.stderr[-3000:]
    assert reads_during_writes >= 4 and fast["reads"] >= 20, (reads_during_writes, fast["reads"])
    assert all(r["rounds"] >= 20 for r in replaced.values()), replaced

    # each ingest's own accounting, and its rows in the lake
    lake = Lake(assay_home)
    by_source = {(r["source"], r["t"]): r["n"] for r in lake.sql(
        "select source, 'samples' as t, count(*) as n from samples group by 1 "
        "union all select source, 'quarantine', count(*) from quarantine group by 1").to_dicts()}
    for key, report in reports.items():
        source = str(sources[key].resolve())
        assert report["received"] == ROWS == report["admitted"] + report["quarantined"], report
        assert report["quarantined"] >= 20 and report["reasons"]["duplicate"] == 1, report
        assert by_source.get((source, "samples"), 0) == report["admitted"], (key, report)
        assert by_source.get((source, "quarantine"), 0) == report["quarantined"], (key, report)
    final = {r["domain"]: r["n"] for r in lake.sql("select domain, count(*) as n from samples group by 1").to_dicts()}
    for domain in INGEST_DOMAINS:
        assert final[domain] == sum(reports[(domain, f)]["admitted"] for f in range(FILES_PER_DOMAIN))
    assert {final[d] for d in REPLACED} == {REPLACED_ROWS}

    # the sweep committed every sample it reports
    (summary,) = swept["domains"]
    assert summary["n"] == SWEEP_LIMIT and swept["generated"] + swept["cached"] == SWEEP_LIMIT * 2
    results = lake.sql(f"select count(*) as n from results where domain = '{SWEEP_DOMAIN}'")["n"][0]
    assert results == SWEEP_LIMIT * 2

    # what readers saw: the replaced batches always whole, an ingest domain only as whole batches
    whole = {d: {sum(reports[(d, f)]["admitted"] for f in subset)
                 for k in range(FILES_PER_DOMAIN + 1) for subset in combinations(range(FILES_PER_DOMAIN), k)}
             for d in INGEST_DOMAINS}
    cli_seen: dict[str, Counter] = {}
    for read in cli_reads:
        for row in json.loads(read.stdout):
            cli_seen.setdefault(row["domain"], Counter())[str(row["n"])] += 1
    for seen, reads in ((cli_seen, len(cli_reads)), (fast["seen"], fast["reads"])):
        for domain in REPLACED:
            assert dict(seen[domain]) == {str(REPLACED_ROWS): reads}, (domain, seen[domain], reads)
        for domain in INGEST_DOMAINS:
            assert {int(n) for n in seen.get(domain, {})} <= whole[domain], (domain, seen.get(domain))

    # finished writers leave no staging, aside or deleted folders
    assert [p for p in lake.root.rglob(".*")] == []
