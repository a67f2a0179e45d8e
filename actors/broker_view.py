"""What the Kafka listener, the group coordinator and the transaction coordinator need of the
broker they run in (what they need of its transaction coordinator besides is
`rafka.actors.txn.view`).

They run on the broker actor's event loop and are handed the broker itself; typing them against
this protocol instead of the `Broker` class keeps the server side out of their imports (the
broker imports them, never the reverse).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from rafka.actors.config import BrokerConfig
from rafka.actors.messages import ErrorReply, LeaderAndIsrRequest
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.store import ClusterStore


class BrokerView(Protocol):
    broker_id: int
    cluster_name: str
    config: BrokerConfig
    raw_config: dict[str, Any]
    """The settings as given, before defaults: what DescribeConfigs reports as set."""
    dynamic_config: dict[str, str]
    """The dynamic settings (`DYNAMIC_BROKER_SETTINGS`) this broker applied last, which take
    precedence over `raw_config`."""
    store: ClusterStore | None
    """The broker's ZooKeeper session; None before the broker has started."""
    replica_states: dict[TopicPartition, LeaderAndIsrRequest]
    """The last LeaderAndIsr applied for each partition this broker holds a replica of."""
    data_dir: Path
    """Where this broker's logs are (Kafka's one `log.dirs` entry)."""

    def replica_host_for(self, topic: str, partition: int) -> Any:
        """The actor handle of the host holding this broker's replica, None if it holds none."""
        ...

    async def elect_preferred_leaders(
        self, partitions: list[tuple[str, int]] | None = None,
    ) -> dict[str, Any] | ErrorReply:
        """Preferred-leader election, if this broker is the controller (NOT_CONTROLLER if not):
        `outcomes` as [topic, partition, error code]."""
        ...

    def cached_partitions(self, topic: str) -> dict[int, dict[str, Any]] | None:
        """The topic's partitions as this broker's metadata cache has them now (None if it
        does not know the topic): what clients are answered, without ZooKeeper."""
        ...

    async def describe_replicas(self, topic: str | None = None) -> list[dict[str, Any]]:
        """Every replica this broker hosts (of `topic` only, if given), as its host sees it:
        role, epochs, offsets, bytes on disk."""
        ...

    def partition_counts(self) -> dict[str, int]:
        """Every topic the metadata cache knows, with its partition count."""
        ...

    def topic_name_of(self, topic_id: str) -> str | None:
        """The name of the topic whose id (KIP-516, as text) this is, as the metadata cache
        has it; None if no topic it knows has it."""
        ...

    def topic_id_of(self, topic: str) -> str | None:
        """The topic's id (as text), as the metadata cache has it; None if unknown."""
        ...

    async def metadata(self, topics: list[str] | None = None) -> dict[str, Any]:
        """Brokers, controller and, per topic, each partition's leader, epoch, ISR, replicas."""
        ...
