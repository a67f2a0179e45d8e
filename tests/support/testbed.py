"""A multi-node test bed of real network hosts on one machine (issue 22): each node is a Linux
network namespace with an address of its own on a bridge the bed creates, so a test can cut
the network between two nodes, or around one, as a switch or a firewall would.

The bed keeps its traffic to itself: the bridge lives in a namespace of its own with no uplink,
the nodes have no route but the bed's subnet, and nothing is added to the machine's own
namespace. Every name carries the prefix `rfk<pid>` of the process that made it, so a run that
crashed leaves names a later run recognises and sweeps (`sweep_leftovers`), while a bed another
live process owns is left alone. Faults are iptables rules inside the nodes' namespaces, which
go with the namespace when the bed is removed.

Needs root, `ip` (iproute2) and `iptables`; `.ci/run` installs iptables when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

PREFIX = "rfk"
_NAME = re.compile(rf"^{PREFIX}(\d+)-")
# A subnet reserved for the bed: it reaches nothing, since no namespace of the bed routes out.
SUBNET = "10.213.{bed}.0/24"


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def _netns_names() -> list[str]:
    return [line.split()[0] for line in _run("ip", "netns", "list").splitlines() if line.strip()]


def _namespace_pids(namespace: str) -> list[int]:
    try:
        return [int(pid) for pid in _run("ip", "netns", "pids", namespace).split()]
    except subprocess.CalledProcessError:
        return []  # already gone


def _signal_all(pids: Sequence[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def _kill_all(pids: Sequence[int]) -> None:
    """SIGKILL `pids` and wait until they are gone."""
    _signal_all(pids, signal.SIGCONT)  # a paused process cannot die of SIGKILL until it runs
    _signal_all(pids, signal.SIGKILL)
    processes = []
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess):
            processes.append(psutil.Process(pid))
    psutil.wait_procs(processes, timeout=5)


def _remove_namespace(namespace: str) -> None:
    """Kill every process in it, then delete it (its veths and iptables rules go with it)."""
    _kill_all(_namespace_pids(namespace))
    with contextlib.suppress(subprocess.CalledProcessError):
        _run("ip", "netns", "delete", namespace)


def sweep_leftovers() -> list[str]:
    """Remove the namespaces of beds whose owner process is gone; returns their names."""
    swept = []
    for namespace in _netns_names():
        match = _NAME.match(namespace)
        if match and not psutil.pid_exists(int(match.group(1))):
            _remove_namespace(namespace)
            swept.append(namespace)
    return swept


@dataclass(frozen=True)
class Node:
    name: str  # n1, n2, ...
    namespace: str
    address: str


class TestBed:
    """`nodes` network hosts on one bridge; remove it with `close()` (or use it as a context).

    Processes are started in a node with `start`; `kill_node`, `pause_node` and
    `resume_node` act on every process in the node's namespace, found by the kernel
    (`ip netns pids`), so children a process started are included.
    """

    __test__ = False  # not a test class, whatever pytest thinks of its name

    def __init__(self, nodes: int = 3, bed: int | None = None) -> None:
        if os.geteuid() != 0:
            raise PermissionError("the test bed needs root: it creates network namespaces")
        sweep_leftovers()
        self.owner = f"{PREFIX}{os.getpid()}"
        self.bed = os.getpid() % 250 + 1 if bed is None else bed
        self.network = SUBNET.format(bed=self.bed)
        self.bridge_namespace = f"{self.owner}-br"
        self.nodes: dict[str, Node] = {}
        self.processes: list[subprocess.Popen[bytes]] = []
        try:
            self._create(nodes)
        except BaseException:
            self.close()
            raise

    def _create(self, count: int) -> None:
        if any(name.startswith(f"{self.owner}-") for name in _netns_names()):
            raise RuntimeError(f"this process already has a test bed ({self.owner}-*)")
        ns = self.bridge_namespace
        _run("ip", "netns", "add", ns)
        _run("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", ns, "link", "set", "br0", "up")
        for index in range(1, count + 1):
            node = Node(f"n{index}", f"{self.owner}-n{index}",
                        self.network.replace(".0/24", f".{index}"))
            _run("ip", "netns", "add", node.namespace)
            port = f"{self.owner}v{index}"  # the bridge's end of the node's cable
            _run("ip", "link", "add", port, "type", "veth", "peer", "name", "eth0",
                 "netns", node.namespace)
            _run("ip", "link", "set", port, "netns", ns)
            _run("ip", "-n", ns, "link", "set", port, "master", "br0")
            _run("ip", "-n", ns, "link", "set", port, "up")
            _run("ip", "-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", "eth0")
            _run("ip", "-n", node.namespace, "link", "set", "eth0", "up")
            _run("ip", "-n", node.namespace, "link", "set", "lo", "up")
            self.nodes[node.name] = node

    # ------------------------------------------------------------------------- processes

    def start(self, node: str, argv: Sequence[str], *, log: Path | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Run `argv` inside `node`'s namespace (its own address, its own view of the net)."""
        output = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.nodes[node].namespace, *argv],
                stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        finally:
            if log is not None:
                output.close()
        self.processes.append(process)
        return process

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", self.nodes[node].namespace, *argv],
                              capture_output=True, text=True, timeout=timeout_s)

    def pids(self, node: str) -> list[int]:
        return _namespace_pids(self.nodes[node].namespace)

    def kill_node(self, node: str) -> list[int]:
        """SIGKILL every process of the node, as a machine that loses power."""
        pids = self.pids(node)
        _kill_all(pids)
        return pids

    def pause_node(self, node: str) -> list[int]:
        """SIGSTOP every process of the node: it holds its connections and says nothing."""
        pids = self.pids(node)
        _signal_all(pids, signal.SIGSTOP)
        return pids

    def resume_node(self, node: str) -> None:
        _signal_all(self.pids(node), signal.SIGCONT)

    # ---------------------------------------------------------------------------- faults

    def _drop(self, node: str, peer_address: str, *, inbound: bool, outbound: bool) -> None:
        namespace = self.nodes[node].namespace
        if inbound:
            _run("ip", "netns", "exec", namespace, "iptables", "-A", "INPUT", "-s",
                 peer_address, "-j", "DROP")
        if outbound:
            _run("ip", "netns", "exec", namespace, "iptables", "-A", "OUTPUT", "-d",
                 peer_address, "-j", "DROP")

    def cut(self, a: str, b: str, *, one_way: bool = False) -> None:
        """Drop packets between `a` and `b` silently (no reset, as a dead link does). With
        `one_way`, only what `a` sends to `b` is lost; `b` still reaches `a`."""
        self._drop(a, self.nodes[b].address, inbound=not one_way, outbound=True)
        if not one_way:
            self._drop(b, self.nodes[a].address, inbound=True, outbound=True)

    def isolate(self, node: str) -> None:
        """Cut `node` off from every other node of the bed."""
        for other in self.nodes:
            if other != node:
                self.cut(node, other)

    def heal(self) -> None:
        """Remove every cut."""
        for node in self.nodes.values():
            for chain in ("INPUT", "OUTPUT"):
                _run("ip", "netns", "exec", node.namespace, "iptables", "-F", chain)

    # --------------------------------------------------------------------------- cleanup

    def close(self) -> None:
        """Kill every process of every node and delete the namespaces, whatever state the
        bed is in (half-created, paused nodes, cuts in place)."""
        for namespace in [n for n in _netns_names() if n.startswith(f"{self.owner}-")]:
            _remove_namespace(namespace)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=5)

    def __enter__(self) -> TestBed:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

