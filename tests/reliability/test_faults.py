"""Fault injection: producers (acks=all, replication factor 3, min.insync.replicas 2,
idempotent) and a consumer group run a workload while a seeded nemesis kills leader
replicas, brokers (ray.kill and SIGKILL of the process), two brokers at once and the controller;
expires ZooKeeper sessions; SIGKILLs ZooKeeper itself and starts it again on the same port and
data dir; pauses (SIGSTOP) a leader's broker and the controller past their session timeout, and
a follower past replica.lag.time.max.ms; kills a leader while the controller is paused; and cuts
a broker off from ZooKeeper (each broker reaches it through a TCP proxy) while Ray still reaches
it. The checker then judges the whole history, liveness included.

The cluster runs on a ZooKeeper server of its own: the session's server is shared by every test,
and restarting it would be a fault injected into all of them.

The default test run is short (RAFKA_FAULT_SECONDS=30, stretched to the time it takes to inject
each kind of fault once); `RAFKA_FAULT_SECONDS=600 pytest -m reliability` is the long version.
The nemesis draws a new seed every run and prints it; RAFKA_FAULT_SEED (or RAFKA_SEED) replays
a run's choices.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import ray

from rafka import Cluster
from rafka.actors.clients.group_consumer import GroupConsumer
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.embedded import EmbeddedZooKeeper
from rafka.coordination.errors import TopicExistsError, ZooKeeperUnavailableError
from tests.support import checker
from tests.support.checker import Ack, Commit, Fault, History, Limits, Poll, Rebalance, check
from tests.support.cluster import TEST_BROKER_CONFIG
from tests.support.faults import (
    PAST_THE_SESSION_S,
    broker_pids,
    expire_broker_session,
    host_pids,
    paused,
)
from tests.support.replicas import ReplicaOnHost
from tests.support.seeds import run_seed
from tests.support.waiting import wait_until
from tests.support.workloads import read_final_log, settle
from tests.support.zookeeper import TcpProxy, make_chroot

pytestmark = pytest.mark.reliability

TOPIC = "jepsen"
PARTITIONS = 3
# The test clusters' replica.lag.time.max.ms (tests/support/cluster.py).
LAG_TIME_MAX_S = TEST_BROKER_CONFIG["replica.lag.time.max.ms"] / 1000


class Recorder:
    """Everything the workload saw, with times, safe to add to from several threads."""

    def __init__(self) -> None:
        self.history = History()
        self.lock = threading.Lock()
        self.stop = threading.Event()

    def add(self, kind: str, item: object) -> None:
        with self.lock:
            getattr(self.history, kind).append(item)

    def ack(self, value: bytes, meta: object) -> None:
        self.add("acks", Ack(value, meta.partition, meta.offset, time.monotonic()))

    def send_failed(self, value: bytes, error: BaseException) -> None:
        self.add("failed", checker.FailedSend(value, None, time.monotonic(), type(error).__name__))

    def unresolved(self, value: bytes) -> None:
        self.add("unresolved", checker.Unresolved(value, None, time.monotonic()))

    def client_error(self, error: BaseException) -> None:
        """A client call that failed: counted by kind; the checker has limits for each."""
        with self.lock:
            self.history.client_errors[type(error).__name__] += 1

    def last(self, kind: str) -> float:
        """When the last ack (kind "acks") or non-empty poll ("polls") was recorded."""
        with self.lock:
            if kind == "acks":
                return max((ack.at for ack in self.history.acks), default=0.0)
            return max((poll.at for poll in self.history.polls if poll.records), default=0.0)


def produce(cluster: Cluster, name: str, recorder: Recorder) -> None:
    producer = cluster.producer(acks="all", linger_ms=2, retry_backoff_ms=50,
                                delivery_timeout_ms=120_000)
    pending = []
    sequence = 0
    try:
        while not recorder.stop.is_set():
            for _ in range(20):
                value = f"{name}-{sequence}".encode()
                recorder.add("attempts", time.monotonic())
                try:
                    pending.append((value, producer.send(TOPIC, value=value)))
                except Exception as error:  # refused before it was queued: never written
                    recorder.send_failed(value, error)
                sequence += 1
            time.sleep(0.01)
            pending = settle(pending, wait=False, on_ack=recorder.ack,
                             on_error=recorder.send_failed)
        settle(pending, wait=True, on_ack=recorder.ack, on_error=recorder.send_failed,
               on_unresolved=recorder.unresolved)
    finally:
        producer.close()


def consume(cluster: Cluster, name: str, recorder: Recorder, until: Callable[[], bool]) -> None:
    poll_started = float("-inf")

    def gained(partitions: set[TopicPartition]) -> None:
        """Called inside poll() once the member has read the committed offsets of the
        partitions it claimed: it must read each from there."""
        recorder.add("rebalances", Rebalance(name, poll_started, time.monotonic(),
                                             frozenset(tp.partition for tp in partitions)))

    def revoked(partitions: set[TopicPartition]) -> None:
        """Called inside poll() before the member lets go of partitions moving away: it held
        them until now."""
        given_up = frozenset(tp.partition for tp in partitions)
        recorder.add("revocations", checker.Revocation(name, time.monotonic(), given_up))

    consumer = cluster.consumer([TOPIC], group="checker", enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=4000,
                                max_poll_records=200, on_partitions_assigned=gained,
                                on_partitions_revoked=revoked)
    try:
        while not until():
            poll_started = time.monotonic()
            try:
                records = consumer.poll(200)
            except Exception as error:  # a poll may fail during a fault; the next one retries
                recorder.client_error(error)
                continue
            recorder.add("polls", Poll(name, time.monotonic(), tuple(
                (r.partition, r.offset, r.value) for r in records)))
            if records:
                commit_positions(consumer, name, recorder)
    finally:
        revoked(consumer.assignment())  # closing lets go of what it holds
        consumer.close(commit=False)


def commit_positions(consumer: GroupConsumer, name: str, recorder: Recorder) -> None:
    """Commit the position of every partition the member owns, recording when it was asked
    and when answered (never, if it failed: it may or may not have been stored)."""
    try:
        positions = {tp: consumer.position(*tp) for tp in consumer.assignment()}
    except Exception as error:  # finding a position may fail during a fault; the next retries
        recorder.client_error(error)
        return
    asked = time.monotonic()
    try:
        consumer.commit(positions)
        answered = time.monotonic()
    except Exception as error:
        recorder.client_error(error)
        answered = float("inf")
    for tp, offset in positions.items():
        recorder.add("commits", Commit(name, answered, tp.partition, offset, started=asked))


class FaultDidNothing(Exception):
    """The fault found nothing to act on (no leader to kill, no controller): not counted."""


class Nemesis:
    """Picks a fault every few seconds with a seeded RNG, and heals what it broke."""

    def __init__(self, cluster: Cluster, zookeeper: EmbeddedZooKeeper, recorder: Recorder,
                 seed: int, proxies: dict[int, TcpProxy]) -> None:
        self.cluster, self.zookeeper, self.recorder = cluster, zookeeper, recorder
        self.random = random.Random(seed)
        # Each broker reaches ZooKeeper through a proxy of its own, which `cut_zookeeper` severs.
        self.proxies = proxies
        self.down: set[int] = set()
        self.did_nothing: list[str] = []
        self.failed: list[str] = []
        # Seconds from each ZooKeeper crash until the cluster worked again (see below), and
        # what did not come back: the test fails on any of those.
        self.zookeeper_recoveries: list[float] = []
        self.problems: list[str] = []
        # When the fault being injected healed itself (ZooKeeper serving again after its
        # restart); None: when it returned, or when the nemesis restarted what it took down.
        self.healed_itself_at: float | None = None

    def leader_of(self, partition: int) -> int:
        return self.cluster.describe_topic(TOPIC)["partitions"][partition]["leader"]

    def kill_leader_replica(self) -> str:
        partition = self.random.randrange(PARTITIONS)
        leader = self.leader_of(partition)
        if leader < 0:
            raise FaultDidNothing(f"{TOPIC}-{partition} has no leader")
        # Its host goes, and every replica on it: the broker recreates the host.
        ray.kill(ReplicaOnHost(self.cluster, TOPIC, partition, leader).host)
        return f"{TOPIC}-{partition}@{leader}"

    def kill_broker(self) -> str:
        broker = self.random.choice(sorted({0, 1, 2} - self.down))
        self.cluster.kill_broker(broker)
        self.down.add(broker)
        return str(broker)

    def sigkill_broker(self) -> str:
        broker = self.random.choice(sorted({0, 1, 2} - self.down))
        handle = ray.get_actor(f"broker-{broker}", namespace=self.cluster.namespace)
        os.kill(ray.get(handle.pid.remote(), timeout=30), signal.SIGKILL)
        # Its replicas die with it: Ray kills the actors a dead actor owned (the cluster helper
        # does the same at once for ray.kill); here we let Ray do it, as a crash would.
        self.down.add(broker)
        return str(broker)

    def expire_session(self) -> str:
        broker = self.random.choice(sorted({0, 1, 2} - self.down))
        expire_broker_session(self.cluster, broker)
        return str(broker)

    def kill_controller(self) -> str:
        controller = self.cluster.controller()
        if controller is None or controller in self.down:
            raise FaultDidNothing("no controller")
        self.cluster.kill_broker(controller)
        self.down.add(controller)
        return str(controller)

    def kill_two_brokers(self) -> str:
        """Two of three down together: with min.insync.replicas 2 writes are refused (never
        acknowledged) until they return."""
        victims = self.random.sample(sorted({0, 1, 2} - self.down), 2)
        for broker in victims:
            self.cluster.kill_broker(broker)
            self.down.add(broker)
        return ",".join(map(str, sorted(victims)))

    def kill_leader_while_controller_paused(self) -> str:
        """The controller paused past its session; meanwhile a leader on another broker dies.
        The next controller must find the dead broker's partitions a leader."""
        controller = self.cluster.controller()
        if controller is None:
            raise FaultDidNothing("no controller")
        leaders = {p["leader"] for p in self.cluster.describe_topic(TOPIC)["partitions"]}
        if not leaders - {controller, -1}:
            # Leadership gathers where brokers survived: spread it back first.
            self.cluster.elect_preferred_leaders()
            leaders = {p["leader"] for p in self.cluster.describe_topic(TOPIC)["partitions"]}
        victims = sorted(leaders - {controller, -1})
        if not victims:
            raise FaultDidNothing(f"every leader is on the controller, broker {controller}")
        victim = self.random.choice(victims)
        with paused(broker_pids(self.cluster, controller)):
            self.cluster.kill_broker(victim)
            self.down.add(victim)
            time.sleep(PAST_THE_SESSION_S)
        return f"controller {controller} paused, leader {victim} killed"

    def pause_leader(self) -> str:
        """A leader's broker stopped past its session: others take over, and on its return it
        must accept nothing that is acknowledged."""
        partition = self.random.randrange(PARTITIONS)
        leader = self.leader_of(partition)
        if leader < 0:
            raise FaultDidNothing(f"{TOPIC}-{partition} has no leader")
        with paused(broker_pids(self.cluster, leader)):
            time.sleep(PAST_THE_SESSION_S)
        return f"{TOPIC}-{partition}@{leader}"

    def pause_controller(self) -> str:
        """The controller stopped past its session: a new one is elected, and the old one's
        decisions are refused by the controller epoch when it resumes."""
        controller = self.cluster.controller()
        if controller is None:
            raise FaultDidNothing("no controller")
        with paused(broker_pids(self.cluster, controller)):
            time.sleep(PAST_THE_SESSION_S)
        return str(controller)

    def pause_follower(self) -> str:
        """A follower's replica hosts stopped past replica.lag.time.max.ms, within the broker's
        session: the leaders drop it from their ISRs, then take it back."""
        partition = self.random.randrange(PARTITIONS)
        state = self.cluster.describe_topic(TOPIC)["partitions"][partition]
        followers = [b for b in state["replicas"] if b not in (state["leader"], -1)]
        if not followers:
            raise FaultDidNothing(f"{TOPIC}-{partition} has no follower")
        follower = self.random.choice(followers)
        with paused(host_pids(self.cluster, follower)):
            time.sleep(LAG_TIME_MAX_S + 2)
        return f"{TOPIC}-{partition}: {follower}"

    def cut_zookeeper(self) -> str:
        """A broker's ZooKeeper connection severed past its session, Ray still reaching it: it
        must stop leading, and accept no write its partitions' new leaders never see."""
        broker = self.random.choice(sorted({0, 1, 2} - self.down))
        proxy = self.proxies[broker]
        proxy.cut()
        try:
            time.sleep(PAST_THE_SESSION_S)
        finally:
            proxy.restore()
        return str(broker)

    def restart_zookeeper(self) -> str:
        """SIGKILL the ZooKeeper server, start it again 1-3 s later on the same port and data
        dir, and check that the cluster works again: every broker up is registered (its session
        survived the restart, or it registered in a new one), there is a controller, and the
        controller's watches fire: a topic created now gets a leader, which only a watch on
        /brokers/topics set again after the restart can bring about."""
        crashed_at = time.monotonic()
        up = sorted({0, 1, 2} - self.down)
        sessions = {broker: self.session_of(broker) for broker in up}
        old_pid = self.zookeeper.pid
        self.zookeeper.restart(pause_s=self.random.uniform(1.0, 3.0))
        self.healed_itself_at = time.monotonic()
        serving_after = self.healed_itself_at - crashed_at
        probe = f"probe-{len(self.zookeeper_recoveries)}"
        # A timeout here fails the test (see run()): the cluster did not come back. The test's
        # own ZooKeeper client may still be reconnecting: its errors only mean "ask again".
        eventually(lambda: {b["id"] for b in self.cluster.brokers()} >= set(up),
                   f"brokers {up} to be registered after the ZooKeeper restart")
        eventually(lambda: self.cluster.controller() is not None,
                   "a controller after the ZooKeeper restart")
        # One replica, and no waiting for its actor: what is checked is the controller's
        # reaction (it writes the partition's state), not how fast Ray starts a process.
        eventually(lambda: self.create_probe(probe), f"{probe} to be created")
        eventually(lambda: self.leader_of_topic(probe) >= 0,
                   f"the controller to elect a leader of {probe} after the restart")
        recovered_after = time.monotonic() - crashed_at
        self.zookeeper_recoveries.append(recovered_after)
        kept = sum(self.session_of(broker) == sessions[broker] for broker in up)
        return (f"pid {old_pid} -> {self.zookeeper.pid}, serving after {serving_after:.1f} s, "
                f"{probe} led after {recovered_after:.1f} s, {kept}/{len(up)} broker sessions "
                f"kept")

    def create_probe(self, topic: str) -> bool:
        # TopicExistsError: an earlier attempt created it, and its answer was lost.
        with contextlib.suppress(TopicExistsError):
            self.cluster.create_topic(topic, partitions=1, replication_factor=1, wait=False)
        return True

    def session_of(self, broker: int) -> int:
        handle = ray.get_actor(f"broker-{broker}", namespace=self.cluster.namespace)
        return ray.get(handle.zookeeper_session.remote(), timeout=30)["session_id"]

    def leader_of_topic(self, topic: str) -> int:
        """The leader ZooKeeper names (without asking the replica, which may not be up yet)."""
        state = self.cluster.admin.describe_topic(topic).states.get(0)
        return state.value.leader if state else -1

    def heal(self) -> None:
        """Restart every broker the nemesis took down. After a SIGKILL, Ray may hold the dead
        broker's name for a while: try again until it lets go."""
        for broker in sorted(self.down):
            deadline = time.monotonic() + 90
            while True:
                try:
                    self.cluster.start_broker(broker, timeout_s=120)
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(1)
        self.down.clear()

    @property
    def faults(self) -> list[Callable[[], str]]:
        return [self.restart_zookeeper, self.kill_leader_replica, self.kill_broker,
                self.sigkill_broker, self.expire_session, self.kill_controller,
                self.kill_two_brokers, self.kill_leader_while_controller_paused,
                self.pause_leader, self.pause_controller, self.pause_follower,
                self.cut_zookeeper]

    def run(self, seconds: float) -> None:
        """Inject faults for `seconds`. The first rounds go through every fault once, whatever
        `seconds` is, so that even the short run has each (ZooKeeper's restart first: the
        broker faults after it find out whether the controller's watches work again); then
        the seeded RNG picks until the time is up."""
        faults = self.faults
        deadline = time.monotonic() + seconds
        # Every kind fires once before the RNG picks; one that finds nothing to act on goes to
        # the back of the line (three times at most).
        first_round = list(faults)
        tries: Counter[str] = Counter()
        while first_round or time.monotonic() < deadline:
            fault = first_round.pop(0) if first_round else self.random.choice(faults)
            started = time.monotonic()
            self.healed_itself_at = None
            try:
                target = fault()
            except FaultDidNothing as nothing:
                print(f"nemesis: {fault.__name__} did nothing ({nothing}): not counted")
                self.did_nothing.append(fault.__name__)
                tries[fault.__name__] += 1
                if tries[fault.__name__] < 3 and fault not in first_round:
                    first_round.append(fault)
                continue
            except Exception as error:
                print(f"nemesis: {fault.__name__} failed: {error!r}")
                self.failed.append(f"{fault.__name__}: {error!r}")
                if fault == self.restart_zookeeper:  # the cluster did not come back
                    self.problems.append(f"restart_zookeeper: {error!r}")
                self.heal()
                continue
            if self.down:  # broker faults: they come back after a while
                time.sleep(self.random.uniform(2.0, 4.0))
                self.heal()
            healed = self.healed_itself_at or time.monotonic()
            self.recorder.add("faults", Fault(started, fault.__name__, target, healed_at=healed))
            print(f"nemesis: {fault.__name__} {target} (healed after {healed - started:.1f} s)")
            time.sleep(self.random.uniform(1.0, 3.0))


def eventually(condition: Callable[[], object], what: str, timeout_s: float = 60) -> None:
    """Wait until `condition()` holds; a ZooKeeperUnavailableError only means "not yet"."""
    def attempt() -> object:
        try:
            return condition()
        except ZooKeeperUnavailableError:
            return False

    wait_until(attempt, timeout_s, what)


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[EmbeddedZooKeeper]:
    """A ZooKeeper server for this test alone, which the nemesis may crash and restart."""
    server = EmbeddedZooKeeper(tmp_path / "zookeeper", force_sync=False).start()
    yield server
    server.stop()


@dataclass
class FaultCluster:
    cluster: Cluster
    zookeeper: EmbeddedZooKeeper
    proxies: dict[int, TcpProxy]


@pytest.fixture
def fault_cluster(own_zookeeper: EmbeddedZooKeeper, ray_session: None,
                  tmp_path: Path) -> Iterator[FaultCluster]:
    """Three brokers on a ZooKeeper of their own, each reaching it through a proxy."""
    name = f"faults{uuid.uuid4().hex[:8]}"
    chroot = make_chroot(own_zookeeper, name)
    proxies = {broker: TcpProxy.to(chroot) for broker in range(3)}
    try:
        cluster = Cluster.start(
            3, name=name, zk=str(chroot), data_dir=tmp_path / name,
            broker_config=TEST_BROKER_CONFIG,
            broker_overrides={broker: {"zookeeper.connect": str(proxy.address(chroot.chroot))}
                              for broker, proxy in proxies.items()})
        yield FaultCluster(cluster, own_zookeeper, proxies)
        cluster.shutdown()
    finally:
        for proxy in proxies.values():
            proxy.close()


FAULT_SECONDS = float(os.environ.get("RAFKA_FAULT_SECONDS", "30"))

# How soon writes and reads must resume once a fault is healed. Most faults heal when the
# killed brokers are back or the paused ones resume; leaders were elected meanwhile, and what
# is left is clients finding them (metadata, request.timeout.ms for a leader that went silent:
# 30 s). A ZooKeeper restart heals itself, and everyone reconnects and re-registers after it.
RESUME_WITHIN_S = {"restart_zookeeper": 60.0}
DEFAULT_RESUME_WITHIN_S = 45.0


# Sends have delivery.timeout.ms (120 s), past any fault's heal here: none may fail.
MAX_FAILED_SENDS = 0


def limits_for(faults: int) -> Limits:
    return Limits(
        default_resume_within_s=DEFAULT_RESUME_WITHIN_S,
        resume_within_s=RESUME_WITHIN_S,
        # Two brokers of three down, or a controller paused while a leader died, stop writes
        # (min ISR 2) until they return: a session timeout, the restart, and the heal's wait.
        # The 600 s run's longest: 14.7 s for writes, 10.6 s for reads.
        max_write_unavailability_s=60,
        max_read_unavailability_s=60,
        # A commit may fail while its offset manager moves (the 600 s run: 12 in 77 faults);
        # any other client error is a finding.
        max_client_errors={"CommitFailedError": 2 * faults},
        other_client_errors=0,
        max_failed_sends=MAX_FAILED_SENDS,
        # Every send is waited for at the end (150 s, past delivery.timeout.ms): none may be
        # left without an outcome.
        max_unresolved_sends=0,
    )


# The suite's 600 s timeout is for the short run: the long one needs its length on top.
@pytest.mark.timeout(FAULT_SECONDS + 900)
def test_no_acknowledged_record_is_lost_under_faults(fault_cluster: FaultCluster) -> None:
    seconds = FAULT_SECONDS
    seed = run_seed("the fault nemesis", variable="RAFKA_FAULT_SEED")
    cluster = fault_cluster.cluster
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": 2})
    recorder = Recorder()
    drained = threading.Event()
    threads = [threading.Thread(target=produce, args=(cluster, f"p{i}", recorder))
               for i in range(2)]
    threads += [threading.Thread(target=consume, args=(cluster, f"c{i}", recorder,
                                                       drained.is_set)) for i in range(2)]
    for thread in threads:
        thread.start()
    nemesis = Nemesis(cluster, fault_cluster.zookeeper, recorder, seed, fault_cluster.proxies)
    try:
        time.sleep(3)
        nemesis.run(seconds)
        # The last fault is judged like the others: the workload goes on until writes and
        # reads have resumed after it, or its bound has passed (the checker then says so).
        last = max((fault.healed for fault in recorder.history.faults), default=0.0)
        bound = max([DEFAULT_RESUME_WITHIN_S, *RESUME_WITHIN_S.values()])
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline and min(recorder.last("acks"),
                                                  recorder.last("polls")) <= last:
            time.sleep(0.5)
    finally:
        nemesis.heal()
        recorder.stop.set()
        for thread in threads[:2]:
            thread.join(300)

    final_log = read_final_log(cluster, TOPIC, PARTITIONS)
    total = sum(len(records) for records in final_log.values())

    def consumed() -> int:
        with recorder.lock:
            return len({(p, o) for poll in recorder.history.polls for p, o, _v in poll.records})

    # Give the group time to read everything; whether it did is the checker's to say.
    deadline = time.monotonic() + 120
    while consumed() < total and time.monotonic() < deadline:
        time.sleep(0.5)
    drained.set()
    for thread in threads[2:]:
        thread.join(120)
    recorder.history.final_log = final_log
    recorder.history.end = time.monotonic()
    verdict = check(recorder.history, limits_for(len(recorder.history.faults)))
    fired = {fault.kind for fault in recorder.history.faults}
    print(json.dumps({"seed": seed, "seconds": seconds, **verdict.summary(),
                      "faults_by_kind": dict(Counter(f.kind for f in recorder.history.faults)),
                      "faults_that_did_nothing": nemesis.did_nothing,
                      "faults_that_failed": nemesis.failed,
                      "zookeeper_recoveries_s": [round(t, 1) for t in
                                                 nemesis.zookeeper_recoveries]},
                     indent=2))
    assert not nemesis.problems, nemesis.problems
    assert not nemesis.failed, nemesis.failed
    assert nemesis.zookeeper_recoveries, "ZooKeeper was never restarted"
    assert fired == {fault.__name__ for fault in nemesis.faults}, (
        f"never fired: {sorted({f.__name__ for f in nemesis.faults} - fired)}")
    assert verdict.acknowledged > 0
    assert verdict.ok, {"seed": seed, **verdict.summary(), "unresolved": verdict.unresolved[:5],
                        "ownership_overlaps": [str(o) for o in verdict.ownership_overlaps[:5]],
                        "first_loss": loss_context(recorder.history, verdict.lost)}


def loss_context(history: History, lost: list[Ack]) -> dict[str, object] | None:
    """Where the first lost record was, and what the nemesis was doing around it: enough to
    start from when a CI run loses what a run here does not."""
    if not lost:
        return None
    first = min(lost, key=lambda ack: ack.at)
    start = min([ack.at for ack in history.acks] + [fault.at for fault in history.faults])
    stored = dict(history.final_log.get(first.partition, []))
    around = [f"{fault.kind} {fault.target} at {fault.at - start:.1f}-{fault.healed - start:.1f} s"
              for fault in history.faults if fault.at - 20 <= first.at <= fault.healed + 20]
    return {"partition": first.partition, "offset": first.offset, "value": first.value.decode(),
            "acknowledged_at_s": round(first.at - start, 1),
            "final_log_there": repr(stored.get(first.offset)),
            "final_log_end": max(stored, default=-1) + 1,
            "lost_offsets": sorted({(ack.partition, ack.offset) for ack in lost})[:5],
            "faults_within_20_s": around}
