"""What every unmodified Kafka client's tests go through against rafka's Kafka listener: topics
of three partitions, records a user would check (keys, some null, timestamps, headers) written or
read by rafka's own clients, and a group of two that rebalances when one leaves and resumes from
its commits after a restart; and what each broker's Kafka listener says of its clients."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

import ray

from rafka import Cluster

from .waiting import wait_until

PARTITIONS = 3
BASE_TIMESTAMP_MS = 1_700_000_000_000

Record = tuple[bytes | None, bytes, int, list[tuple[str, bytes]]]


def listener_stats(cluster: Cluster) -> list[dict[str, Any]]:
    """Every broker's `Broker.kafka_listener_stats`: its clients' connections, principals,
    fetch sessions, and the calls to its hosts that failed."""
    return [ray.get(ray.get_actor(f"broker-{broker['id']}", namespace=cluster.namespace)
                    .kafka_listener_stats.remote(), timeout=30)
            for broker in cluster.brokers()]


def new_topic(cluster: Cluster, name: str) -> str:
    cluster.create_topic(name, partitions=PARTITIONS, replication_factor=3,
                         config={"min.insync.replicas": 2})
    return name


def sample_records(count: int) -> list[Record]:
    """Keys (some null), values, timestamps and headers (on some) a user would check."""
    return [(None if i % 7 == 0 else f"key-{i}".encode(), f"value-{i}".encode(),
             BASE_TIMESTAMP_MS + i, [("n", str(i).encode())] if i % 3 == 0 else [])
            for i in range(count)]


def read_with_rafka(cluster: Cluster, topic: str, count: int) -> list[tuple]:
    """`(partition, offset, key, value, timestamp, headers)` of the first `count` records."""
    consumer = cluster.consumer([topic], auto_offset_reset="earliest")
    found: list[tuple] = []
    try:
        deadline = time.monotonic() + 60
        while len(found) < count and time.monotonic() < deadline:
            found += [(r.partition, r.offset, r.key, r.value, r.timestamp, list(r.headers))
                      for r in consumer.poll(500)]
    finally:
        consumer.close()
    return sorted(found)


def write_with_rafka(cluster: Cluster, topic: str, records: list[Record],
                     **producer_config: object) -> list[tuple]:
    """Write with rafka's producer, record i to partition i % 3; return what a reader must see:
    `(partition, offset, key, value, timestamp, headers)`."""
    producer = cluster.producer(acks="all", **producer_config)
    written = []
    try:
        futures = [(record, producer.send(topic, value=record[1], key=record[0],
                                          partition=i % PARTITIONS, timestamp_ms=record[2],
                                          headers=record[3]))
                   for i, record in enumerate(records)]
        for (key, value, timestamp, headers), future in futures:
            metadata = future.result(60)
            written.append((metadata.partition, metadata.offset, key, value, timestamp, headers))
    finally:
        producer.close()
    return sorted(written)


# ---------------------------------------------------------------------------------- groups


class Member(Protocol):
    """One group member of some Kafka client, polling in a thread of its own and committing
    after each poll, as an application would."""

    owned: set[int]

    def values(self) -> set[bytes]: ...

    def leave(self) -> None: ...


class MemberThread(threading.Thread):
    """What a client's member shares: the thread, what it read, what it owns now. A subclass
    runs its client in `consume(stop)`, calling `saw` and setting `owned`."""

    def __init__(self, cluster: Cluster, topic: str, group: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap = cluster.bootstrap_servers()
        self.topic = topic
        self.group = group
        self.read: list[bytes] = []
        self.owned: set[int] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.consume(self.stop)
        except BaseException as error:
            self.error = error

    def consume(self, stop: threading.Event) -> None:
        raise NotImplementedError

    def values(self) -> set[bytes]:
        return set(self.read)

    def leave(self) -> None:
        self.stop.set()
        self.join(60)
        assert not self.is_alive(), "the member did not stop"
        assert self.error is None, repr(self.error)


def produce_values(cluster: Cluster, topic: str, values: set[bytes]) -> None:
    producer = cluster.producer(acks="all")
    try:
        for i, value in enumerate(sorted(values)):
            producer.send(topic, value=value, partition=i % PARTITIONS)
        producer.flush()
    finally:
        producer.close()


def group_scenario(cluster: Cluster, topic: str, group: str,
                   member: Callable[[Cluster, str, str], Member]) -> None:
    """Two members share the topic; one leaves and the other takes every partition; the group
    restarts and reads only what came after its commits; rafka sees the same commits."""
    first_batch = {f"first-{i}".encode() for i in range(60)}
    produce_values(cluster, topic, first_batch)
    first, second = member(cluster, topic, group), member(cluster, topic, group)
    try:
        wait_until(lambda: first.owned and second.owned
                   and first.owned | second.owned == set(range(PARTITIONS))
                   and not first.owned & second.owned, 90,
                   "the two members sharing the three partitions")
        wait_until(lambda: first.values() | second.values() >= first_batch, 60,
                   "every record read")
        second.leave()
        wait_until(lambda: first.owned == set(range(PARTITIONS)), 60,
                   "the remaining member owning every partition")
        more = {f"more-{i}".encode() for i in range(30)}
        produce_values(cluster, topic, more)
        wait_until(lambda: first.values() >= more, 60, "the new records, read by the one left")
    finally:
        first.leave()
        second.leave()
    assert first.values() | second.values() == first_batch | more
    last = {f"last-{i}".encode() for i in range(15)}
    produce_values(cluster, topic, last)
    restarted = member(cluster, topic, group)
    try:
        wait_until(lambda: restarted.values() >= last, 90, "the new records after the restart")
        time.sleep(1)  # time enough to read anything older, had it started too early
    finally:
        restarted.leave()
    assert restarted.values() == last
    committed = cluster.committed_offsets(group, [(topic, p) for p in range(PARTITIONS)])
    assert committed == {(topic, p): 35 for p in range(PARTITIONS)}
