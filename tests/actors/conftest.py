"""Fixtures of the actor tests: a real rafka cluster (broker actors on the session's Ray, in this
test's ZooKeeper chroot and its own Ray namespace), and fault injection."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import ray
from kazoo.client import KazooClient

from actors import Cluster
from coordination.embedded import ZooKeeperAddress

# Fast failure detection, so that failover tests wait seconds, not Kafka's defaults.
TEST_BROKER_CONFIG = {
    "zookeeper.session.timeout.ms": 4000,
    "replica.lag.time.max.ms": 3000,
    "replica.fetch.wait.max.ms": 200,
}


@pytest.fixture
def start_cluster(
    zk_address: ZooKeeperAddress, ray_session: None, tmp_path
) -> Iterator[Callable[..., Cluster]]:
    """Start clusters in this test's chroot; every one is shut down afterwards."""
    clusters: list[Cluster] = []

    def start(brokers: int = 3, **options: Any) -> Cluster:
        config = {**TEST_BROKER_CONFIG, **options.pop("broker_config", {})}
        name = options.pop("name", f"t{uuid.uuid4().hex[:10]}")
        cluster = Cluster.start(
            brokers,
            name=name,
            zk=str(zk_address),
            data_dir=tmp_path / name,
            broker_config=config,
            **options,
        )
        clusters.append(cluster)
        return cluster

    yield start
    for cluster in clusters:
        cluster.shutdown()


@pytest.fixture
def cluster(start_cluster: Callable[..., Cluster]) -> Cluster:
    """Three brokers."""
    return start_cluster(3)


def wait_until(condition: Callable[[], Any], timeout_s: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what or condition}")
        time.sleep(0.1)


def expire_broker_session(cluster: Cluster, broker_id: int) -> None:
    """Expire a broker's ZooKeeper session on the server: join it with its id and password,
    then close it (ZooKeeper's classic way to force expiry)."""
    broker = ray.get_actor(f"broker-{broker_id}", namespace=cluster.namespace)
    session = ray.get(broker.zookeeper_session.remote(), timeout=30)
    imposter = KazooClient(
        hosts=session["servers"], client_id=(session["session_id"], session["password"])
    )
    imposter.start(timeout=15)
    imposter.stop()
    imposter.close()


def partition_state(cluster: Cluster, topic: str, partition: int) -> dict[str, Any]:
    return cluster.describe_topic(topic)["partitions"][partition]
