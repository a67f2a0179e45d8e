"""Fault injection: producers (acks=all, replication factor 3, min.insync.replicas 2,
idempotent) and a consumer group run a workload while a nemesis with a fixed seed kills leader
replicas, brokers (ray.kill and SIGKILL of the process) and the controller, expires ZooKeeper
sessions, and SIGKILLs ZooKeeper itself and starts it again on the same port and data dir. The
checker then judges the whole history.

The cluster runs on a ZooKeeper server of its own: the session's server is shared by every test,
and restarting it would be a fault injected into all of them.

The default test run is short (RAFKA_FAULT_SECONDS=30, stretched to the time it takes to inject
each kind of fault once); `RAFKA_FAULT_SECONDS=600 pytest -m reliability` is the long version.
RAFKA_FAULT_SEED picks the nemesis's choices.
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
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import ray

from actors import Cluster
from coordination.embedded import EmbeddedZooKeeper
from coordination.errors import TopicExistsError, ZooKeeperUnavailableError

from ..actors.conftest import expire_broker_session, wait_until
from ..conftest import TEST_BROKER_CONFIG, make_chroot
from ..replicas import ReplicaOnHost
from .checker import Ack, Commit, Fault, History, Poll, check

pytestmark = pytest.mark.reliability

TOPIC = "jepsen"
PARTITIONS = 3


class Recorder:
    """Everything the workload saw, with times, safe to add to from several threads."""

    def __init__(self) -> None:
        self.history = History()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    def add(self, kind: str, item: object) -> None:
        with self.lock:
            getattr(self.history, kind).append(item)


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
                pending.append((value, producer.send(TOPIC, value=value)))
                sequence += 1
            time.sleep(0.01)
            pending = settle(pending, recorder, wait=False)
        settle(pending, recorder, wait=True)
    finally:
        producer.close()


def settle(pending: list, recorder: Recorder, wait: bool) -> list:
    left = []
    for value, future in pending:
        if not wait and not future.done():
            left.append((value, future))
            continue
        try:
            meta = future.result(150)
        except Exception as error:  # an unacknowledged write may or may not exist: fine
            recorder.errors.append(error)
            continue
        recorder.add("acks", Ack(value, meta.partition, meta.offset, time.monotonic()))
    return left


def consume(cluster: Cluster, name: str, recorder: Recorder, until: Callable[[], bool]) -> None:
    consumer = cluster.consumer([TOPIC], group="checker", enable_auto_commit=False,
                                auto_offset_reset="earliest", session_timeout_ms=4000,
                                max_poll_records=200)
    try:
        while not until():
            records = consumer.poll(200)
            now = time.monotonic()
            recorder.add("polls", Poll(name, now, tuple((r.partition, r.offset, r.value)
                                                        for r in records)))
            if records:
                positions = {tp: consumer.position(*tp) for tp in consumer.assignment()}
                try:
                    consumer.commit(positions)
                except Exception as error:  # a commit may fail during a fault; retried later
                    recorder.errors.append(error)
                    continue
                for tp, offset in positions.items():
                    recorder.add("commits", Commit(name, time.monotonic(), tp.partition, offset))
    finally:
        consumer.close(commit=False)


class Nemesis:
    """Picks a fault every few seconds with a seeded RNG, and heals what it broke."""

    def __init__(self, cluster: Cluster, zookeeper: EmbeddedZooKeeper, recorder: Recorder,
                 seed: int) -> None:
        self.cluster, self.zookeeper, self.recorder = cluster, zookeeper, recorder
        self.random = random.Random(seed)
        self.down: set[int] = set()
        # Seconds from each ZooKeeper crash until the cluster worked again (see below), and
        # what did not come back: the test fails on any of those.
        self.zookeeper_recoveries: list[float] = []
        self.problems: list[str] = []

    def leader_of(self, partition: int) -> int:
        return self.cluster.describe_topic(TOPIC)["partitions"][partition]["leader"]

    def kill_leader_replica(self) -> str:
        partition = self.random.randrange(PARTITIONS)
        leader = self.leader_of(partition)
        if leader < 0:
            return "no leader"
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
            return "no controller"
        self.cluster.kill_broker(controller)
        self.down.add(controller)
        return str(controller)

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
        serving_after = time.monotonic() - crashed_at
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
                self.sigkill_broker, self.expire_session, self.kill_controller]

    def run(self, seconds: float) -> None:
        """Inject faults for `seconds`. The first rounds go through every fault once, whatever
        `seconds` is, so that even the short run has each (ZooKeeper's restart first: the
        broker faults after it find out whether the controller's watches work again); then
        the seeded RNG picks until the time is up."""
        faults = self.faults
        deadline = time.monotonic() + seconds
        round_number = 0
        while round_number < len(faults) or time.monotonic() < deadline:
            fault = faults[round_number] if round_number < len(faults) else \
                self.random.choice(faults)
            round_number += 1
            started = time.monotonic()
            try:
                target = fault()
            except Exception as error:
                print(f"nemesis: {fault.__name__} failed: {error!r}")
                self.recorder.errors.append(error)
                if fault == self.restart_zookeeper:  # the cluster did not come back
                    self.problems.append(f"restart_zookeeper: {error!r}")
                continue
            self.recorder.add("faults", Fault(started, fault.__name__, target))
            print(f"nemesis: {fault.__name__} {target} ({time.monotonic() - started:.1f} s)")
            if fault != self.restart_zookeeper:  # which has healed already, and checked it
                time.sleep(self.random.uniform(2.0, 4.0))
                self.heal()
            time.sleep(self.random.uniform(1.0, 3.0))


def eventually(condition: Callable[[], object], what: str, timeout_s: float = 60) -> None:
    """Wait until `condition()` holds; a ZooKeeperUnavailableError only means "not yet"."""
    def attempt() -> object:
        try:
            return condition()
        except ZooKeeperUnavailableError:
            return False

    wait_until(attempt, timeout_s, what)


def read_final_log(cluster: Cluster) -> dict[int, list[tuple[int, bytes]]]:
    consumer = cluster.consumer([TOPIC], auto_offset_reset="earliest")
    ends = consumer.end_offsets([(TOPIC, p) for p in range(PARTITIONS)])
    log: dict[int, list[tuple[int, bytes]]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 120
    while any(consumer.position(*tp) < end for tp, end in ends.items()):
        for record in consumer.poll(500):
            log[record.partition].append((record.offset, record.value))
        assert time.monotonic() < deadline, "the final read did not finish"
    consumer.close()
    return log


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[EmbeddedZooKeeper]:
    """A ZooKeeper server for this test alone, which the nemesis may crash and restart."""
    server = EmbeddedZooKeeper(tmp_path / "zookeeper", force_sync=False).start()
    yield server
    server.stop()


@pytest.fixture
def cluster_on_own_zookeeper(own_zookeeper: EmbeddedZooKeeper, ray_session: None,
                             tmp_path: Path) -> Iterator[Cluster]:
    name = f"faults{uuid.uuid4().hex[:8]}"
    cluster = Cluster.start(3, name=name, zk=str(make_chroot(own_zookeeper, name)),
                            data_dir=tmp_path / name, broker_config=TEST_BROKER_CONFIG)
    yield cluster
    cluster.shutdown()


FAULT_SECONDS = float(os.environ.get("RAFKA_FAULT_SECONDS", "30"))


# The suite's 600 s timeout is for the short run: the long one needs its length on top.
@pytest.mark.timeout(FAULT_SECONDS + 600)
def test_no_acknowledged_record_is_lost_under_faults(
    cluster_on_own_zookeeper: Cluster, own_zookeeper: EmbeddedZooKeeper
) -> None:
    seconds = FAULT_SECONDS
    seed = int(os.environ.get("RAFKA_FAULT_SEED", "20261120"))
    cluster = cluster_on_own_zookeeper
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
    nemesis = Nemesis(cluster, own_zookeeper, recorder, seed)
    try:
        time.sleep(3)
        nemesis.run(seconds)
    finally:
        nemesis.heal()
        recorder.stop.set()
        for thread in threads[:2]:
            thread.join(300)

    final_log = read_final_log(cluster)
    total = sum(len(records) for records in final_log.values())

    def consumed_everything() -> bool:
        with recorder.lock:
            seen = {(p, o) for poll in recorder.history.polls for p, o, _v in poll.records}
        return len(seen) >= total

    wait_until(consumed_everything, 120, "the group to read everything")
    drained.set()
    for thread in threads[2:]:
        thread.join(120)
    recorder.history.final_log = final_log
    recorder.history.end = time.monotonic()
    verdict = check(recorder.history, resume_within_s=60)
    print(json.dumps({"seed": seed, "seconds": seconds, **verdict.summary(),
                      "zookeeper_recoveries_s": [round(s, 1) for s in nemesis.zookeeper_recoveries],
                      "client_errors": len(recorder.errors)}, indent=2))
    assert not nemesis.problems, nemesis.problems
    assert nemesis.zookeeper_recoveries, "ZooKeeper was never restarted"
    assert {fault.kind for fault in recorder.history.faults} == \
        {fault.__name__ for fault in nemesis.faults}
    assert verdict.acknowledged > 0
    assert verdict.ok, verdict.summary()
