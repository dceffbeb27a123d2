"""Several machines (training.multinode, ``assay train --hostfile``): hostfile parsing, the
commands each node runs, and one real run of two "nodes" on this machine over gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import polars as pl
import pytest

from tests.conftest import REPO, run_cli, write_plugin
from training import multinode
from training.engine import free_port
from training.launch import run_grpo_args, training_command
from training.multinode import (Host, Hostfile, HostfileError, node_launches, parse_hostfile, read_hostfile,
                                this_node)


def test_hostfile_with_comments_blank_lines_and_uneven_slots():
    hostfile = parse_hostfile("# the cluster\n\nnode-a slots=4\n  node-b   slots=2   # half\n10.0.0.7 slots=1\n",
                              "hosts.txt")
    assert [(h.name, h.slots, h.line) for h in hostfile.hosts] == [("node-a", 4, 3), ("node-b", 2, 4),
                                                                   ("10.0.0.7", 1, 5)]
    assert hostfile.nnodes == 3 and hostfile.world_size == 7


@pytest.mark.parametrize("text, message", [
    ("node-a slots=2\nnode-b\n", "hosts.txt: line 2: expected 'HOST slots=N', got 'node-b'"),
    ("node-a slots=two\n", "line 1: expected 'HOST slots=N', got 'node-a slots=two'"),
    ("node-a slots=2 gpus=8\n", "line 1: expected 'HOST slots=N'"),
    ("node-a slots=2\n# x\nnode-b slots=0\n", "hosts.txt: line 3: host node-b has slots=0: each host runs at least"),
    ("node-a slots=-1\n", "line 1: host node-a has slots=-1"),
    ("node-a slots=2\nnode-b slots=1\nNODE-A slots=1\n", "hosts.txt: line 3: host NODE-A is already on line 1"),
    ("# nothing but comments\n\n", "hosts.txt: no hosts"),
    ("no/de slots=1\n", "line 1: 'no/de' is not a host name or address"),
    ("node-a:22 slots=1\n", "line 1: 'node-a:22' is not a host name or address"),
])
def test_bad_hostfiles_say_which_line_and_why(text, message):
    with pytest.raises(HostfileError) as error:
        parse_hostfile(text, "hosts.txt")
    assert message in str(error.value)


def test_typed_hosts_are_validated_when_built_and_a_missing_file_is_a_hostfile_error(tmp_path):
    with pytest.raises(HostfileError, match="slots >= 1"):
        Host("a", 0)
    with pytest.raises(HostfileError, match="already on line"):
        Hostfile((Host("a", 1, 1), Host("a", 2, 2)))
    with pytest.raises(HostfileError, match="cannot read hostfile .*missing.txt"):
        read_hostfile(tmp_path / "missing.txt")


def test_every_node_runs_torchrun_with_one_c10d_rendezvous_at_the_first_host():
    hostfile = parse_hostfile("node-a slots=4\nnode-b slots=2\n")
    launches = node_launches(hostfile, "tiny", port=29555, domains=["math_arith_easy"], steps=3, seed=7,
                             run_name="big", require_train_set=False, backend="torch")
    assert [(n.node_rank, n.host, n.slots) for n in launches] == [(0, "node-a", 4), (1, "node-b", 2)]
    args = run_grpo_args("tiny", domains=["math_arith_easy"], steps=3, seed=7, run_name="big",
                         require_train_set=False, backend="torch")
    assert args == ["--recipe", "tiny", "--domains", "math_arith_easy", "--steps", "3", "--seed", "7",
                    "--run-name", "big", "--set", "rollout.backend=torch"]
    ids = set()
    for node in launches:
        command = list(node.command)
        assert command[0].endswith("torchrun")
        flags = dict(zip(command[1:command.index("-m"):2], command[2:command.index("-m"):2]))
        assert flags == {"--nnodes": "2", "--nproc_per_node": str(node.slots),
                         "--rdzv_backend": "c10d", "--rdzv_endpoint": "node-a:29555", "--rdzv_id": flags["--rdzv_id"],
                         "--rdzv_conf": f"is_host={int(node.node_rank == 0)}", "--local_addr": node.host,
                         "--max_restarts": "0"}
        assert command[command.index("-m"):] == ["-m", "training.run_grpo", *args]
        ids.add(flags["--rdzv_id"])
    # one id, derived alike on every machine; another run (or port) meets under another
    assert len(ids) == 1
    again = node_launches(hostfile, "tiny", port=29555, domains=["math_arith_easy"], steps=3, seed=7,
                          run_name="big", require_train_set=False, backend="torch", output="/tmp/a/result.json")
    assert again[1].command[again[1].command.index("--rdzv_id") + 1] in ids  # a node-local output path is no part of it
    assert "--output" in again[0].command
    other = node_launches(hostfile, "tiny", port=29555, steps=4)
    assert other[0].command[other[0].command.index("--rdzv_id") + 1] not in ids
    with pytest.raises(HostfileError, match="node rank 2 is not in the hostfile: it names 2 node"):
        multinode.node_command(hostfile, 2, args)


def test_single_machine_command_is_unchanged():
    assert training_command("tiny", "/tmp/r.json", domains=["a", "b"], steps=2, seed=1)[1:] == [
        "-m", "training.run_grpo", "--recipe", "tiny", "--require-train-set", "--output", "/tmp/r.json",
        "--domains", "a,b", "--steps", "2", "--seed", "1"]
    command = training_command("tiny", "/tmp/r.json", nproc=2, require_train_set=False, backend="torch")
    assert command[0].endswith("torchrun") and command[1:] == [
        "--standalone", "--nproc_per_node", "2", "-m", "training.run_grpo", "--recipe", "tiny", "--output",
        "/tmp/r.json", "--set", "rollout.backend=torch"]


def test_this_node_is_found_by_hostname_or_address(monkeypatch):
    monkeypatch.setattr(multinode, "_local_names", lambda: ({"gpu-07", "gpu-07.cluster", "localhost"},
                                                            {"127.0.0.1", "10.1.0.7"}))
    monkeypatch.setattr(multinode, "_resolves_to", lambda name, addresses: name == "gpu-07-ib")
    assert this_node(parse_hostfile("gpu-06 slots=8\ngpu-07 slots=8\n")) == 1
    assert this_node(parse_hostfile("10.1.0.6 slots=8\n10.1.0.7 slots=8\n")) == 1
    assert this_node(parse_hostfile("gpu-06 slots=8\ngpu-07-ib slots=8\n")) == 1
    with pytest.raises(HostfileError, match=r"no line names this machine .*pass its node rank"):
        this_node(parse_hostfile("gpu-06 slots=8\ngpu-08 slots=8\n"))
    with pytest.raises(HostfileError, match=r"several lines name this machine \(lines 1, 2\)"):
        this_node(parse_hostfile("localhost slots=1\ngpu-07 slots=1\n"))


def test_cli_prints_each_nodes_command_and_refuses_bad_flags(tmp_path, monkeypatch, capsys):
    from pipelines.cli import main

    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("node-a slots=2\nnode-b slots=1\n")
    home = tmp_path / "home"
    monkeypatch.setenv("ASSAY_HOME", str(home))
    monkeypatch.delenv("ASSAY_DOMAINS_PATH", raising=False)
    out = run_cli("train", "--recipe", "tiny", "--domains", "math_arith_easy", "--steps", "2", "--hostfile",
                  str(hostfile), "--rdzv-port", "29777", "--print-commands", "--json", env={"ASSAY_HOME": str(home)},
                  timeout=60)  # as a user runs it: one JSON document on stdout
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)
    assert [(r["node_rank"], r["host"], r["slots"]) for r in rows] == [(0, "node-a", 2), (1, "node-b", 1)]
    for row in rows:
        assert "--rdzv_endpoint node-a:29777" in row["shell"] and f"ASSAY_HOME={home}" in row["shell"]
        assert row["command"][-4:] == ["--domains", "math_arith_easy", "--steps", "2"]
    assert not home.exists()  # printing touches nothing
    assert main(["train", "--hostfile", str(hostfile), "--node-rank", "1", "--print-commands"]) == 0
    text = capsys.readouterr().out
    assert text.count("torchrun") == 1 and "--local_addr node-b" in text and "# node 1: node-b slots=1" in text

    for flags, message in [(["--node-rank", "0"], "--node-rank needs --hostfile"),
                           (["--print-commands"], "--print-commands needs --hostfile"),
                           (["--hostfile", str(tmp_path / "none.txt"), "--print-commands"], "cannot read hostfile"),
                           (["--hostfile", str(hostfile), "--node-rank", "2", "--print-commands"],
                            "--node-rank 2: " + str(hostfile) + " names 2 node(s), ranks 0-1"),
                           (["--hostfile", str(hostfile), "--rdzv-port", "0", "--print-commands"],
                            "rendezvous port 0 is not a TCP port"),
                           (["--hostfile", str(hostfile), "--max-minutes", "5"], "--max-minutes is not supported")]:
        assert main(["train", "--domains", "math_arith_easy", *flags]) == 2, flags
        captured = capsys.readouterr()
        assert message in captured.err and not captured.out, (flags, captured.err[-1000:])


@pytest.mark.slow
def test_two_nodes_on_this_machine_train_one_run_over_gloo(tiny_home, tmp_path):
    """``assay train --hostfile`` on two "nodes" (127.0.0.1 and localhost: one machine, two names),
    each its own launcher, torchrun agent and rank: they meet at the c10d rendezvous, train one
    step as one world of 2, and rank 0 writes the result, checkpoint and lake rows once."""
    plugins = tmp_path / "plugins"
    write_plugin(plugins, "plugged")
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("127.0.0.1 slots=1\nlocalhost slots=1\n")
    env = {**os.environ, "ASSAY_HOME": str(tiny_home), "ASSAY_DOMAINS_PATH": str(plugins), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "pipelines.cli", "train", "--recipe", "tiny", "--domains", "plugged",
               "--steps", "1", "--run-name", "two-nodes", "--hostfile", str(hostfile), "--rdzv-port",
               str(free_port()), "--json"]
    started = time.monotonic()
    nodes = [subprocess.Popen([*command, "--node-rank", str(rank)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        outs = [node.communicate(timeout=300) for node in nodes]
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
    print(f"two nodes, 1 step: {time.monotonic() - started:.1f} s")
    for node, (stdout, stderr) in zip(nodes, outs):
        assert node.returncode == 0, stderr[-3000:]
    payloads = [json.loads(stdout) for stdout, _ in outs]
    assert [p["node_rank"] for p in payloads] == [0, 1]
    [result] = [p for p in payloads if p["rank0"]]  # one node held rank 0 and printed the run's result
    [other] = [p for p in payloads if not p["rank0"]]
    assert result["world_size"] == 2 and other["world_size"] == 2 and result["steps"] == 1
    assert result["run_name"] == "two-nodes" and result["checkpoint"] == "two-nodes-step000001"
    assert "rank 0 ran on another node" in other["result"]
    assert any("node 1 of 2 (localhost" in note for note in other["notes"])

    from pipelines.settings import open_lake

    lake = open_lake()
    assert sorted(p.name for p in lake.checkpoints_dir.iterdir() if not p.name.startswith(".")) == \
        ["two-nodes-step000001"]
    assert lake.read("checkpoints")["checkpoint"].to_list() == ["two-nodes-step000001"]
    history = lake.read("training_history")
    trained = history.filter(pl.col("reward_mean").is_not_null() | (pl.col("domain") == "_all"))
    assert sorted(trained["domain"].to_list()) == ["_all", "plugged"]  # one step, written once
    # rank 0 validated at steps 0 and 1 (the trained domain and the protected one it watches), the other
    # rank waited for its decisions: no hang, one row per (step, domain)
    validated = history.filter(pl.col("val_score").is_not_null()).sort("step", "domain")
    assert validated.select("step", "domain").rows() == [(0, "plugged"), (0, "safety_refusal"),
                                                         (1, "plugged"), (1, "safety_refusal")]
    assert history["run_id"].unique().to_list() == [result["mlflow_run_id"]]
