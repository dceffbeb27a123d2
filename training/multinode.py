"""One training run across several machines: a DeepSpeed-style hostfile, one torchrun per node.

A hostfile names the machines and how many training processes (ranks) each runs, one per line,
in DeepSpeed's format::

    # comments and blank lines are allowed
    node-a slots=4
    node-b slots=2      # slots may differ: 6 ranks in all

Every node runs the same ``torchrun`` (:func:`node_command`): a c10d rendezvous at the first host
(``--rdzv_endpoint <first host>:<port>``; that host's agent hosts the rendezvous store) under one
rendezvous id derived from the hostfile and the run's arguments, so launchers on different
machines agree on it without talking to each other. Nodes differ only in ``--nproc_per_node``
(that host's slots), ``--local_addr`` (its name in the hostfile) and ``is_host``.

Why torchrun and not ``deepspeed --hostfile``: the DeepSpeed launcher starts the other nodes over
passwordless ssh (pdsh) from the first one; torchrun with a rendezvous needs only that the nodes
reach each other (the rendezvous port, then gloo's or NCCL's own connections), and each node is
started by whatever the cluster uses (a shell, a scheduler, a job array). The trainer needs nothing
more: under torchrun (``TORCHELASTIC_RUN_ID`` set) :func:`training.engine.setup_distributed` keeps
the launcher's RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT and calls
``deepspeed.init_distributed`` with them (gloo on CPU, NCCL on the GPU of ``LOCAL_RANK``); each
rank draws ``prompts_per_step`` prompts of the step whatever node it is on, so uneven slots only
change the world size (DeepSpeed's batch is micro-batch x accumulation x world size).

Which node's ranks come first is decided at the rendezvous, not by the hostfile's order (torchrun's
``--node_rank`` counts only for its static rendezvous, so the commands do not pass it): the c10d
rendezvous orders the nodes by their address (``--local_addr``), so rank 0 (the process that
tracks in MLflow, writes checkpoints and the result) runs on whichever node that puts first. With
one ASSAY_HOME shared by every node that makes no difference to what is written, only to which
node's launcher prints the result.

Pure: nothing here imports torch or touches the network, except :func:`this_node`, which asks the
resolver for this machine's names and addresses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from training.launch import RUN_GRPO, run_grpo_args, torchrun_executable
from storage.errors import UserError

DEFAULT_RDZV_PORT = 29400  # torchrun's own default for a c10d endpoint without a port
_HOST = re.compile(r"^([A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\])$")  # a name, an IPv4 address, a [bracketed] IPv6 one
_LOOPBACK = {"localhost", "localhost.localdomain", "ip6-localhost", "::1", "[::1]"}


class HostfileError(UserError, ValueError):
    """A hostfile that cannot be used, with the file and line that says why."""


@dataclass(frozen=True)
class Host:
    """One line of a hostfile: a machine and the training processes it runs."""

    name: str
    slots: int
    line: int = 0  # where it was read (0: built in code)

    def __post_init__(self):
        where = f"line {self.line}: " if self.line else ""
        if not self.name or not _HOST.match(self.name):
            raise HostfileError(f"{where}{self.name!r} is not a host name or address")
        if isinstance(self.slots, bool) or not isinstance(self.slots, int) or self.slots < 1:
            raise HostfileError(f"{where}host {self.name} has slots={self.slots}: each host runs at least one "
                                "process (slots >= 1)")


@dataclass(frozen=True)
class Hostfile:
    """The machines of one run, in order: the first hosts the rendezvous."""

    hosts: tuple[Host, ...]
    path: str = ""

    def __post_init__(self):
        where = f"{self.path}: " if self.path else ""
        if not self.hosts:
            raise HostfileError(f"{where}no hosts (expected lines like 'node-a slots=4')")
        seen: dict[str, Host] = {}
        for host in self.hosts:
            first = seen.setdefault(host.name.lower(), host)
            if first is not host:
                raise HostfileError(f"{where}line {host.line}: host {host.name} is already on line {first.line} "
                                    "(one line per machine; its slots are the processes it runs)")

    @property
    def world_size(self) -> int:
        return sum(host.slots for host in self.hosts)

    @property
    def nnodes(self) -> int:
        return len(self.hosts)


def parse_hostfile(text: str, path: str = "") -> Hostfile:
    """A hostfile's text (``host slots=N`` lines; ``#`` starts a comment) as a :class:`Hostfile`;
    raises :class:`HostfileError` naming the line of a bad line, a duplicate host or slots < 1."""
    where = f"{path}: " if path else ""
    hosts = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        match = re.fullmatch(r"slots=(-?\d+)", parts[1]) if len(parts) == 2 else None
        if match is None:
            raise HostfileError(f"{where}line {number}: expected 'HOST slots=N', got {raw.strip()!r}")
        try:
            hosts.append(Host(parts[0], int(match.group(1)), line=number))
        except HostfileError as exc:
            raise HostfileError(f"{where}{exc}") from None
    return Hostfile(tuple(hosts), path)


def read_hostfile(path: str | os.PathLike) -> Hostfile:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise HostfileError(f"cannot read hostfile {path}: {exc.strerror or exc}") from None
    return parse_hostfile(text, str(path))


@dataclass(frozen=True)
class Rendezvous:
    """Where and under which id the nodes' torchrun agents meet (c10d: the first host's agent
    hosts the store at ``port``)."""

    host: str
    port: int = DEFAULT_RDZV_PORT
    run_id: str = "assay"

    def __post_init__(self):
        if not 1 <= self.port <= 65535:
            raise HostfileError(f"rendezvous port {self.port} is not a TCP port (1-65535)")
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", self.run_id):
            raise HostfileError(f"rendezvous id {self.run_id!r}: letters, digits, '_', '.' and '-' only")

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class NodeLaunch:
    """What one node runs: its place in the hostfile and its torchrun command."""

    node_rank: int
    host: str
    slots: int
    command: tuple[str, ...]


def rendezvous_id(hostfile: Hostfile, port: int, run_args: Sequence[str]) -> str:
    """One id for the run that every node derives alike: the hosts, their slots, the port and the
    training arguments (another run on the same machines meets under another id)."""
    key = json.dumps([[h.name, h.slots] for h in hostfile.hosts] + [port, list(run_args)])
    return "assay-" + hashlib.sha256(key.encode()).hexdigest()[:12]


def node_command(hostfile: Hostfile, node_rank: int, run_args: Sequence[str], *, port: int = DEFAULT_RDZV_PORT,
                 run_id: str | None = None) -> list[str]:
    """The torchrun command of node ``node_rank`` (its line in the hostfile, from 0) for
    ``training.run_grpo`` with ``run_args`` (:func:`training.launch.run_grpo_args`)."""
    if not 0 <= node_rank < hostfile.nnodes:
        raise HostfileError(f"node rank {node_rank} is not in the hostfile: it names {hostfile.nnodes} node(s), "
                            f"ranks 0-{hostfile.nnodes - 1}")
    host = hostfile.hosts[node_rank]
    rdzv = Rendezvous(hostfile.hosts[0].name, port, run_id or rendezvous_id(hostfile, port, run_args))
    # no --node_rank: torchrun uses it only for its static rendezvous (and warns that c10d ignores it)
    return [torchrun_executable(), "--nnodes", str(hostfile.nnodes),
            "--nproc_per_node", str(host.slots), "--rdzv_backend", "c10d", "--rdzv_endpoint", rdzv.endpoint,
            "--rdzv_id", rdzv.run_id,
            # the first host's agent hosts the store; the others only connect (they would try to
            # host it too when their name resolves to the same machine, as on one test machine)
            "--rdzv_conf", f"is_host={int(node_rank == 0)}",
            # the address the other nodes reach this one at (MASTER_ADDR when it holds rank 0):
            # its hostfile name, not whatever socket.getfqdn() says
            "--local_addr", host.name,
            "--max_restarts", "0", *RUN_GRPO, *run_args]


def node_launches(hostfile: Hostfile, recipe: str, *, port: int = DEFAULT_RDZV_PORT, run_id: str | None = None,
                  output: str | None = None, **run_options) -> list[NodeLaunch]:
    """Every node's command for one run of ``recipe`` (``run_options``: those of
    :func:`training.launch.run_grpo_args`; ``output``: where rank 0 writes the result JSON, on
    whichever node it runs)."""
    args = run_grpo_args(recipe, output, **run_options)
    rid = run_id or rendezvous_id(hostfile, port, run_grpo_args(recipe, None, **run_options))
    return [NodeLaunch(rank, host.name, host.slots, tuple(node_command(hostfile, rank, args, port=port, run_id=rid)))
            for rank, host in enumerate(hostfile.hosts)]


def _local_names() -> tuple[set[str], set[str]]:
    """This machine's names (lower case) and addresses, as the resolver knows them."""
    hostname = socket.gethostname()
    names = {hostname.lower(), hostname.split(".")[0].lower(), socket.getfqdn().lower()} | _LOOPBACK
    addresses = {"127.0.0.1", "::1"}
    try:
        addresses |= set(socket.gethostbyname_ex(hostname)[2])
    except OSError:
        pass
    return names, addresses


def _resolves_to(name: str, addresses: set[str]) -> bool:
    try:
        found = {info[4][0] for info in socket.getaddrinfo(name.strip("[]"), None)}
    except OSError:
        return False
    return bool(found & addresses) or any(a.startswith("127.") for a in found)


def this_node(hostfile: Hostfile) -> int:
    """The node rank of this machine: the one hostfile line whose name is this machine's (its
    hostname, short name, FQDN, localhost) or resolves to one of its addresses. Raises
    :class:`HostfileError` when none or several do (then the node rank must be given)."""
    names, addresses = _local_names()
    matches = [rank for rank, host in enumerate(hostfile.hosts) if host.name.lower() in names]
    if not matches:
        matches = [rank for rank, host in enumerate(hostfile.hosts)
                   if host.name in addresses or _resolves_to(host.name, addresses)]
    if len(matches) == 1:
        return matches[0]
    where = f"{hostfile.path}: " if hostfile.path else ""
    if not matches:
        raise HostfileError(f"{where}no line names this machine ({socket.gethostname()}): pass its node rank "
                            f"(its line among the hosts, from 0)")
    lines = ", ".join(str(hostfile.hosts[rank].line or rank) for rank in matches)
    raise HostfileError(f"{where}several lines name this machine (lines {lines}): pass its node rank "
                        "(its line among the hosts, from 0)")
