"""Helpers of the actor tests: waiting, and fault injection. The cluster fixtures are in the
root conftest, shared with the reliability suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import ray
from kazoo.client import KazooClient

from rafka import Cluster

from ..conftest import TEST_BROKER_CONFIG  # noqa: F401 - re-exported for the tests here


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
    # No session id while the broker's client is between connections: wait for one.
    session = wait_until(
        lambda: (found := ray.get(broker.zookeeper_session.remote(), timeout=30))["session_id"]
        and found, 30, f"broker {broker_id} to have a ZooKeeper session")
    imposter = KazooClient(
        hosts=session["servers"], client_id=(session["session_id"], session["password"])
    )
    imposter.start(timeout=15)
    imposter.stop()
    imposter.close()


def partition_state(cluster: Cluster, topic: str, partition: int) -> dict[str, Any]:
    return cluster.describe_topic(topic)["partitions"][partition]
