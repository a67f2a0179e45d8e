"""A nemesis over the test bed's deployment (issue 22): random, overlapping faults of every kind
a deployment of cluster.yaml meets, each healed after a random while, while a client writes and
a consumer group reads.

The kinds (`KINDS`):
- `leader-cut-from-followers`: a partition leader's node loses every packet to and from the
  other cluster nodes but ZooKeeper's (client and quorum ports): it still holds its session,
  and must stop acknowledging what its followers never get;
- `cut-from-zookeeper`: a node reaches no ZooKeeper member (its own included) on the client
  port, while Ray and replication still reach it;
- `node-isolated`: a node cut off from every other node, the head and the client included;
- `node-killed` / `head-killed`: every process of a node SIGKILLed (for the head: the GCS, a
  ZooKeeper member and a broker at once), then the node booted with its start commands;
- `node-paused`: every process of a node SIGSTOPped past ZooKeeper's session timeout;
- `zookeeper-member-killed`: one ensemble member SIGKILLed; its supervisor (cluster.yaml's
  `rafka supervise start zookeeper`) starts it again, which the heal checks.

At most `overlap` faults are in place at once, each on a node of its own. With
`min.insync.replicas=2` of three, two nodes out at once stop every partition's writes, as in
Kafka, for as long as that lasts: so a fault that joins one already in place lasts at most
`DOUBLE_FAULT_S`, and joins it only once the client's last view of the cluster, taken after the
last heal, has every partition writable without the faulty node (its leader elsewhere, enough of
its ISR elsewhere); and a fault with none in place waits until that view has every replica back
in its ISR (a node healed but not yet caught up is out too). Faults still overlap; what a
partition's write gap measures is then how fast the cluster recovers, not how long the schedule
chose to keep it short of replicas.

Heals run in the nemesis's thread, one after the other; a heal that fails is recorded and
retried at the end, when everything is healed (`heal_everything`). Faults are recorded as the
checker's `Fault`, with wall-clock times (the client runs in another process).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from .checker import Fault
from .deployment import Deployment, DeploymentError
from .testbed import Cut

# ZooKeeper's client ports, the secure one (what every client of the secured profile uses) and
# the plaintext one (the node's own checks), and the ensemble's quorum and election ports
# (cluster.yaml).
ZOOKEEPER_CLIENT_PORTS = (2182, 2181)
ZOOKEEPER_PORTS = (*ZOOKEEPER_CLIENT_PORTS, 2888, 3888)
# What a killed member's supervisor gets to start it again (its backoff is 1 s after a long
# run, and the command then starts an interpreter and a JVM), on a bed that may be busy.
SUPERVISED_RESTART_S = 60.0
# Past the brokers' zookeeper.session.timeout.ms (6 s, rafka's default in cluster.yaml).
PAST_THE_SESSION_S = (8.0, 12.0)

# How long a fault may last while another is in place: the schedule's share of a write gap.
DOUBLE_FAULT_S = 15.0

KINDS = ("leader-cut-from-followers", "cut-from-zookeeper", "node-isolated", "node-killed",
         "head-killed", "node-paused", "zookeeper-member-killed")
# How long each kind stays in place, in seconds: a node isolated past Ray's health check
# (about 30 s) is declared dead and must come back by itself.
DURATIONS = {
    "leader-cut-from-followers": (4.0, 20.0),
    "cut-from-zookeeper": (4.0, 15.0),
    "node-isolated": (4.0, 45.0),
    "node-killed": (2.0, 15.0),
    "head-killed": (2.0, 15.0),
    "node-paused": PAST_THE_SESSION_S,
    "zookeeper-member-killed": (3.0, 20.0),
}


class NothingToDo(Exception):
    """The fault found nothing to act on (no leader known yet): not counted."""


@dataclass
class _InPlace:
    kind: str
    node: str
    target: str
    at: float
    heal_at: float
    heal: Callable[[], None]


class BedNemesis:
    """Faults on `deployment`'s cluster nodes, aimed with the client's `leaders.json`."""

    def __init__(self, deployment: Deployment, leaders_file: Path, *, seed: int,
                 overlap: int = 2, gap_s: tuple[float, float] = (2.0, 8.0),
                 min_insync_replicas: int = 2,
                 log: Callable[[str], object] = print) -> None:
        self.deployment = deployment
        self.bed = deployment.bed
        self.leaders_file = leaders_file
        self.random = random.Random(seed)
        self.overlap = overlap
        self.gap_s = gap_s
        self.min_insync_replicas = min_insync_replicas
        self.log = log
        self.faults: list[Fault] = []
        self.failed_heals: list[str] = []
        self._in_place: list[_InPlace] = []
        self._last_heal = 0.0  # wall-clock, as leaders.json's "at"
        self._deck: list[str] = []  # the kinds not dealt yet in this round
        self._to_boot: set[str] = set()  # nodes whose boot failed: booted again at the end
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------- running

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="bed-nemesis", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop making faults, and heal what is in place."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(600)
        self.heal_everything()

    def _run(self) -> None:
        next_fault = time.monotonic() + self.random.uniform(*self.gap_s)
        while not self._stop.wait(0.2):
            now = time.monotonic()
            for fault in [f for f in self._in_place if f.heal_at <= now]:
                self._heal(fault)
            if (now >= next_fault and len(self._in_place) < self.overlap
                    and self._recovered_enough()):
                next_fault = now + self.random.uniform(*self.gap_s)
                self._inject()

    def _next_kinds(self) -> list[str]:
        """The kinds in a random order that deals each one before any comes twice, so that a
        short run still makes every kind (a kind that finds nothing to do waits its turn)."""
        if not self._deck:
            self._deck = self.random.sample(KINDS, len(KINDS))
        return list(self._deck)

    def _inject(self) -> None:
        busy = {fault.node for fault in self._in_place}
        for kind in self._next_kinds():
            try:
                node, target, heal = getattr(self, kind.replace("-", "_"))(busy)
            except NothingToDo as reason:
                self.log(f"nemesis: {kind} did nothing: {reason}")
                continue
            self._deck.remove(kind)
            break
        else:
            return
        at = time.time()
        duration = self.random.uniform(*DURATIONS[kind])
        if self._in_place:
            duration = min(duration, DOUBLE_FAULT_S)
        self._in_place.append(_InPlace(kind, node, target, at, time.monotonic() + duration, heal))
        self.log(f"nemesis: {kind} {target} for {duration:.1f} s")

    def _heal(self, fault: _InPlace) -> None:
        self._in_place.remove(fault)
        try:
            fault.heal()
        except Exception as error:  # retried by heal_everything
            self.failed_heals.append(f"{fault.kind} {fault.target}: {error!r}"[:500])
            self._to_boot.add(fault.node)
            self.log(f"nemesis: healing {fault.kind} {fault.target} failed: {error!r}")
        self._last_heal = time.time()
        self.faults.append(Fault(fault.at, fault.kind, fault.target, self._last_heal, fault.node))
        self.log(f"nemesis: healed {fault.kind} {fault.target}")

    def heal_everything(self) -> None:
        for fault in list(self._in_place):
            self._heal(fault)
        self.bed.heal()  # no cut left, whatever a failed heal left behind
        for node in sorted(self._to_boot):
            self.deployment.start_node(node)  # raises if the node cannot boot at all
        self._to_boot.clear()

    def counts(self) -> dict[str, int]:
        return dict(Counter(fault.kind for fault in self.faults))

    # --------------------------------------------------------------------- aiming

    def _free_nodes(self, busy: set[str]) -> list[str]:
        free = [node for node in self.deployment.cluster_nodes if node not in busy]
        if not free:
            raise NothingToDo("every node has a fault")
        return free

    def _leaders(self) -> dict[str, object]:
        try:
            return json.loads(self.leaders_file.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise NothingToDo(f"no leaders known yet: {error!r}") from None

    def _recovered_enough(self) -> bool:
        """Whether the client's last view, taken after the last heal, lets a fault in: with
        none in place, every replica back in its ISR (a fault right after a heal, before the
        healed node is back, would be a double fault); with one, every partition led, and
        enough of its ISR, on nodes without a fault."""
        try:
            known = self._leaders()
        except NothingToDo:
            return False
        if known["at"] <= self._last_heal:
            return False
        partitions = known["partitions"].values()
        if not self._in_place:
            return all(sorted(state["isr"]) == sorted(state["replicas"])
                       for state in partitions)
        faulty = {fault.node for fault in self._in_place}
        brokers = {int(broker): self._node_of(host) for broker, host in known["brokers"].items()}

        def healthy(broker: int) -> bool:
            return brokers.get(broker) not in (None, *faulty)

        return all(healthy(state["leader"])
                   and sum(map(healthy, state["isr"])) >= self.min_insync_replicas
                   for state in partitions)

    def _node_of(self, host: str) -> str | None:
        return next((node for node in self.deployment.cluster_nodes
                     if self.deployment.address(node) == host), None)

    # ---------------------------------------------------------------------- the kinds

    def leader_cut_from_followers(self, busy: set[str]) -> tuple[str, str, Callable[[], None]]:
        known = self._leaders()
        brokers = {int(broker): host for broker, host in known["brokers"].items()}
        candidates = []
        for partition, state in known["partitions"].items():
            node = self._node_of(brokers.get(state["leader"], ""))
            if node is not None and node not in busy:
                candidates.append((partition, state["leader"], node))
        if not candidates:
            raise NothingToDo("no leader on a node without a fault")
        partition, leader, node = self.random.choice(sorted(candidates))
        cut = self.bed.isolate(node, among=self.deployment.cluster_nodes,
                               except_ports=ZOOKEEPER_PORTS)
        return node, f"partition {partition}: leader {leader} on {node}", self._restore(cut)

    def cut_from_zookeeper(self, busy: set[str]) -> tuple[str, str, Callable[[], None]]:
        node = self.random.choice(self._free_nodes(busy))
        cuts = [self.bed.cut_port(node, port) for port in ZOOKEEPER_CLIENT_PORTS]
        return node, node, self._restore(Cut(tuple(part for cut in cuts for part in cut.parts)))

    def node_isolated(self, busy: set[str]) -> tuple[str, str, Callable[[], None]]:
        node = self.random.choice(self._free_nodes(busy))
        return node, node, self._restore(self.bed.isolate(node))

    def node_killed(self, busy: set[str]) -> tuple[str, str, Callable[[], None]]:
        workers = [n for n in self._free_nodes(busy) if n != self.deployment.head]
        if not workers:
            raise NothingToDo("every worker node has a fault")
        return self._kill(self.random.choice(workers))

    def head_killed(self, busy: set[str]) -> tuple[str, str, Callable[[], None]]:
        if self.deployment.head in busy:
            raise NothingToDo("the head has a fault")
        return self._kill(self.deployment.head)

    def node_paused(self, busy: set[str]) -> tuple[str, str, Callable[[], None]]:
        node = self.random.choice(self._free_nodes(busy))
        self.bed.pause_node(node)
        return node, node, lambda: self.bed.resume_node(node)

    def zookeeper_member_killed(self, busy: set[str]) -> tuple[str, str, Callable[[], None]]:
        node = self.random.choice(self._free_nodes(busy))
        member = self._zookeeper_member(node)
        if member is None:
            raise NothingToDo(f"no ZooKeeper member runs on {node}")
        member.send_signal(signal.SIGKILL)
        with contextlib.suppress(psutil.TimeoutExpired):
            member.wait(10)

        killed = member.pid

        def started_again() -> None:
            deadline = time.monotonic() + SUPERVISED_RESTART_S
            while (again := self._zookeeper_member(node)) is None or again.pid == killed:
                if time.monotonic() > deadline:
                    raise DeploymentError(
                        f"no ZooKeeper member runs on {node} again: its supervisor did not "
                        f"start it within {SUPERVISED_RESTART_S:g} s\n{self.deployment.logs()}")
                time.sleep(0.5)

        return node, node, started_again

    # ---------------------------------------------------------------------- helpers

    def _restore(self, cut: Cut) -> Callable[[], None]:
        return lambda: self.bed.restore(cut)

    def _kill(self, node: str) -> tuple[str, str, Callable[[], None]]:
        self.bed.kill_node(node)

        def boot() -> None:
            try:
                self.deployment.start_node(node)
            except DeploymentError:
                self._to_boot.add(node)
                raise

        return node, node, boot

    def _zookeeper_member(self, node: str) -> psutil.Process | None:
        return zookeeper_member(self.deployment, node)


def zookeeper_member(deployment: Deployment, node: str) -> psutil.Process | None:
    """The ZooKeeper member (its JVM) that runs on `node`, if one does."""
    for pid in deployment.bed.pids(node):
        with contextlib.suppress(psutil.NoSuchProcess):
            process = psutil.Process(pid)
            if "QuorumPeerMain" in " ".join(process.cmdline()):
                return process
    return None
