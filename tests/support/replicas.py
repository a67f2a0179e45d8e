"""Reach one partition replica on its replica host directly, bypassing the clients: for tests
that send a leader what no client would, or pause the process a replica lives in."""

from __future__ import annotations

from typing import Any

import ray

from rafka import Cluster
from rafka.actors.messages import (
    Appended,
    ErrorReply,
    FetchedRecords,
    PartitionFetch,
    PartitionProduce,
)


class ReplicaOnHost:
    """The replica of `topic`-`partition` on `broker` (its current leader if None)."""

    def __init__(self, cluster: Cluster, topic: str, partition: int,
                 broker: int | None = None) -> None:
        if broker is None:
            broker = cluster.describe_topic(topic)["partitions"][partition]["leader"]
        # The broker says, not its registration: it may be between two ZooKeeper sessions.
        handle = ray.get_actor(f"broker-{broker}", namespace=cluster.namespace)
        self.topic, self.partition, self.broker = topic, partition, broker
        self.host_name = ray.get(handle.replica_host_of.remote(topic, partition), timeout=60)
        self.host = ray.get_actor(self.host_name, namespace=cluster.namespace)

    def produce_async(self, records: bytes, acks: int = 1, timeout_ms: int = 30_000) -> Any:
        """The object ref of the host's reply list (one entry: this partition's)."""
        return self.host.produce.remote(
            [PartitionProduce(self.topic, self.partition, records)], acks, timeout_ms)

    def produce(
        self, records: bytes, acks: int = 1, timeout_ms: int = 30_000
    ) -> Appended | ErrorReply:
        return ray.get(self.produce_async(records, acks, timeout_ms), timeout=60)[0]

    def fetch(self, offset: int, max_bytes: int = 1 << 20) -> FetchedRecords | ErrorReply:
        request = PartitionFetch(self.topic, self.partition, offset, max_bytes)
        return ray.get(self.host.fetch.remote([request]), timeout=60)[0]

    def describe(self) -> dict:
        for facts in ray.get(self.host.describe.remote(self.topic), timeout=60):
            if facts["partition"] == self.partition:
                return facts
        raise LookupError(f"{self.topic}-{self.partition} is not on {self.host_name}")

    def pid(self) -> int:
        return ray.get(self.host.pid.remote(), timeout=60)
