"""A multi-node test bed of real network hosts on one machine (issue 22): each node is a Linux
network namespace with an address of its own on a bridge the bed creates, so a test can cut
the network between two nodes, or around one, as a switch or a firewall would; and a PID
namespace of its own, so its processes see only each other.

The bed keeps its traffic to itself: the bridge lives in a namespace of its own with no uplink,
the nodes' only route (their default one included) is onto that bridge, and nothing is added to
the machine's own namespace. Every name carries the prefix `rfk<pid>` of the process that made
it, so a run that crashed leaves names a later run recognises and sweeps (`sweep_leftovers`),
while a bed another live process owns is left alone. Faults are iptables rules inside the
nodes' namespaces, which go with the namespace when the bed is removed.

Needs root, `ip` (iproute2) and `iptables`; `.ci/run` installs iptables when it is missing.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
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
    deadline = time.monotonic() + 5
    while any(_running(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.02)


def _running(pid: int) -> bool:
    """Alive: a dead process that waits for its parent to reap it (a zombie) is not."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


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


# A node's first process, pid 1 of its PID namespace: it reaps what is orphaned there, as a
# machine's init does, and when it dies the kernel kills everything else in the namespace.
_INIT = ("import os, time\n"
         "while True:\n"
         "    try:\n"
         "        os.wait()\n"
         "    except ChildProcessError:\n"
         "        time.sleep(1)\n")


@dataclass(frozen=True)
class Cut:
    """A cut in place: the iptables chains it added, per node. `TestBed.restore` undoes it."""

    parts: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass
class Node:
    name: str  # n1, n2, ...
    namespace: str
    address: str
    init: subprocess.Popen[bytes] | None = None  # `unshare`, whose child is the node's pid 1


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
        self._chains = 0  # how many iptables chains the bed's cuts have made: their names
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
            # A default route onto the bed's own bridge, where nothing answers for outside
            # addresses: Ray finds a node's address from the route towards a public one, as
            # on a real host, and without one it falls back to 127.0.0.1.
            _run("ip", "-n", node.namespace, "route", "add", "default", "dev", "eth0")
            self.nodes[node.name] = node

    # ------------------------------------------------------------------------- processes

    def enter(self, name: str) -> list[str]:
        """The command prefix that runs a program on node `name`: in its network namespace and
        its PID namespace, with a /proc of its own. Its processes see only each other, as on a
        machine of their own: `ray stop` or `ps` on one node leaves the others (and the
        machine's own processes) alone. A node whose processes were all killed gets a new
        PID namespace here, as a machine that boots again."""
        node = self.nodes[name]
        if node.init is None or node.init.poll() is not None or not self._init_pid(node):
            node.init = subprocess.Popen(
                ["ip", "netns", "exec", node.namespace, "unshare", "--pid", "--fork",
                 "--mount-proc", "--kill-child", sys.executable, "-c", _INIT],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
            self.processes.append(node.init)
            deadline = time.monotonic() + 10
            while not self._init_pid(node):
                if time.monotonic() > deadline or node.init.poll() is not None:
                    raise RuntimeError(f"node {name}'s PID namespace did not start")
                time.sleep(0.02)
        return ["nsenter", "-t", str(self._init_pid(node)), "-p", "-m", "-n", "--"]

    @staticmethod
    def _init_pid(node: Node) -> int | None:
        """The pid (as this machine sees it) of the node's pid 1, None if it is gone."""
        if node.init is None:
            return None
        with contextlib.suppress(psutil.NoSuchProcess):
            for child in psutil.Process(node.init.pid).children():
                if child.status() != psutil.STATUS_ZOMBIE:
                    return child.pid
        return None

    def start(self, node: str, argv: Sequence[str], *, log: Path | None = None,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Run `argv` on `node` (its own address, its own view of the net and of processes)."""
        prefix = self.enter(node)
        output = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115
        try:
            process = subprocess.Popen(
                [*prefix, *argv],
                stdout=output, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        finally:
            if log is not None:
                output.close()
        self.processes.append(process)
        return process

    def run(self, node: str, argv: Sequence[str], timeout_s: float = 30
            ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.enter(node), *argv],
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
    #
    # Each cut is a pair of iptables chains of its own in each node it touches, jumped to from
    # INPUT and OUTPUT, so that overlapping cuts can be undone one at a time (`restore`) and
    # one cut's exceptions (RETURN) never let through what another cut drops.

    def _add_chains(self, node: str, inbound: list[list[str]], outbound: list[list[str]]
                    ) -> tuple[str, tuple[str, ...]]:
        self._chains += 1
        namespace = self.nodes[node].namespace
        chains = []
        for main_chain, rules, suffix in (("INPUT", inbound, "i"), ("OUTPUT", outbound, "o")):
            if not rules:
                continue
            chain = f"{PREFIX}{self._chains}{suffix}"
            _run("ip", "netns", "exec", namespace, "iptables", "-N", chain)
            for rule in rules:
                _run("ip", "netns", "exec", namespace, "iptables", "-A", chain, *rule)
            _run("ip", "netns", "exec", namespace, "iptables", "-A", main_chain, "-j", chain)
            chains.append(chain)
        return node, tuple(chains)

    @staticmethod
    def _rules(direction: str, peer: str, except_ports: Sequence[int]) -> list[list[str]]:
        """Drop what goes to (`-d`) or comes from (`-s`) `peer`, but TCP on `except_ports`
        (either end of the connection)."""
        rules = []
        if except_ports:
            rules.append([direction, peer, "-p", "tcp", "-m", "multiport", "--ports",
                          ",".join(map(str, except_ports)), "-j", "RETURN"])
        rules.append([direction, peer, "-j", "DROP"])
        return rules

    def cut(self, a: str, b: str, *, one_way: bool = False,
            except_ports: Sequence[int] = ()) -> Cut:
        """Drop packets between `a` and `b` silently (no reset, as a dead link does). With
        `one_way`, only what `a` sends to `b` is lost; `b` still reaches `a`. TCP connections
        on `except_ports` (at either end) still go through, such as ZooKeeper's."""
        a_address, b_address = self.nodes[a].address, self.nodes[b].address
        parts = [self._add_chains(
            a, [] if one_way else self._rules("-s", b_address, except_ports),
            self._rules("-d", b_address, except_ports))]
        if not one_way:
            parts.append(self._add_chains(b, self._rules("-s", a_address, except_ports),
                                          self._rules("-d", a_address, except_ports)))
        return Cut(tuple(parts))

    def isolate(self, node: str, *, among: Sequence[str] | None = None,
                except_ports: Sequence[int] = ()) -> Cut:
        """Cut `node` off from every other node of the bed (or those of `among`)."""
        others = [other for other in (among or self.nodes) if other != node]
        return Cut(tuple(part for other in others
                         for part in self.cut(node, other, except_ports=except_ports).parts))

    def cut_port(self, node: str, port: int) -> Cut:
        """`node` reaches no TCP `port` anywhere, its own address included: what it has
        connected there goes silent, and what it sends to other ports goes through."""
        return Cut((self._add_chains(
            node, [], [["-p", "tcp", "--dport", str(port), "-j", "DROP"]]),))

    def restore(self, cut: Cut) -> None:
        """Undo one cut, leaving the others in place."""
        for node, chains in cut.parts:
            namespace = self.nodes[node].namespace
            for chain in chains:
                main_chain = "INPUT" if chain.endswith("i") else "OUTPUT"
                _run("ip", "netns", "exec", namespace, "iptables", "-D", main_chain,
                     "-j", chain)
                _run("ip", "netns", "exec", namespace, "iptables", "-F", chain)
                _run("ip", "netns", "exec", namespace, "iptables", "-X", chain)

    def heal(self) -> None:
        """Remove every cut."""
        for node in self.nodes.values():
            for flag in ("-F", "-X"):  # empty INPUT and OUTPUT, then drop the cuts' chains
                _run("ip", "netns", "exec", node.namespace, "iptables", flag)

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

