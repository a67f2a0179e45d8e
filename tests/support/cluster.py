"""Test clusters: the brokers' config, names of a test's own, a cluster a whole module shares,
a partition's state as the cluster describes it, and what a topic holds (to each kind of
consumer, and in a replica's files)."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rafka import Cluster
from rafka.coordination.embedded import EmbeddedZooKeeper

from .zookeeper import make_chroot

# Fast failure detection, so that failover tests wait seconds, not Kafka's defaults.
TEST_BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 200,
}


def unique_name(request: pytest.FixtureRequest) -> str:
    """The test's name, cut to what a chroot or a namespace takes, and a random suffix."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name)[:60].strip("-.")
    return f"{base}-{uuid.uuid4().hex[:8]}"


def cluster_of_its_own(
    zookeeper: EmbeddedZooKeeper,
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    brokers: int = 3,
    **options: Any,
) -> Iterator[Cluster]:
    """A cluster for a whole test module, in a chroot of its own: yield from it in a
    module-scoped fixture (the tests then keep apart by using topics of their own).
    `options` go to `Cluster.start`."""
    chroot = make_chroot(zookeeper, f"{name}-{uuid.uuid4().hex[:8]}")
    config = {**TEST_BROKER_CONFIG, **options.pop("broker_config", {})}
    cluster = Cluster.start(brokers, name=name, zk=str(chroot),
                            data_dir=tmp_path_factory.mktemp(name), broker_config=config,
                            **options)
    yield cluster
    cluster.shutdown()


# The new consumer group protocol's session timeout and heartbeat interval are the broker's:
# short, so that a member killed in a test is out of its group in seconds.
CONSUMER_GROUPS_QUICKLY = {"group.consumer.session.timeout.ms": 6000,
                           "group.consumer.heartbeat.interval.ms": 500}


def module_cluster(name: str, brokers: int = 3, **options: Any) -> Any:
    """A module-scoped fixture of `cluster_of_its_own(..., name, brokers, **options)`: assign
    it to the fixture's name in the test module (`shared = module_cluster("clients")`)."""

    @pytest.fixture(scope="module")
    def cluster(zookeeper: EmbeddedZooKeeper, ray_session: None,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
        yield from cluster_of_its_own(zookeeper, tmp_path_factory, name, brokers, **options)

    return cluster


def fresh(prefix: str) -> str:
    """A name for a test's own topic or group: `prefix` and a random suffix."""
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def produce_numbered(cluster: Cluster, topic: str, count: int, start: int = 0) -> None:
    """Values "v<start>" to "v<start + count - 1>", acks=all, flushed."""
    producer = cluster.producer(acks="all")
    for i in range(start, start + count):
        producer.send(topic, value=f"v{i}".encode())
    producer.flush()
    producer.close()


def partition_state(cluster: Cluster, topic: str, partition: int) -> dict[str, Any]:
    """`topic`-`partition` as the cluster describes it: leader, epoch, replicas, ISR, offsets."""
    return cluster.describe_topic(topic)["partitions"][partition]


def stored_records(cluster: Cluster, topic: str, expected: int, timeout_s: float = 60) -> list:
    """The records of `topic`: read until `expected` are in, then a little more, so that a
    duplicate beyond them is seen too."""
    consumer = cluster.consumer([topic], auto_offset_reset="earliest")
    records = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        records += consumer.poll(500)
    records += consumer.poll(500)
    consumer.close()
    return records


def stored_count(cluster: Cluster, topic: str, partitions: int) -> int:
    """How many records `topic` holds (its partitions' high watermarks, summed)."""
    consumer = cluster.consumer()
    try:
        return sum(consumer.end_offsets([(topic, p) for p in range(partitions)]).values())
    finally:
        consumer.close()


def read_values(cluster: Cluster, topic: str, isolation_level: str, expected: int,
                timeout_s: float = 60.0) -> list[bytes]:
    """Every value a consumer of `isolation_level` reads from the start, once `expected` are in
    and a poll more brings nothing, in the order read."""
    consumer = cluster.consumer([topic], auto_offset_reset="earliest",
                                isolation_level=isolation_level)
    found: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            records = consumer.poll(500)
            found += [r.value for r in records]
            if len(found) >= expected and not records:
                break
    finally:
        consumer.close()
    return found


def log_bytes(directory: Path) -> bytes:
    """A replica's log as its segment files hold it, in offset order (read, never opened as a
    log: opening one would recover it)."""
    return b"".join(path.read_bytes() for path in sorted(directory.glob("*.log")))
