"""What the controller shares with the helpers that carry out parts of its work.

The `Controller` keeps one picture of the cluster, rebuilt from ZooKeeper; the
`PartitionStateMachine`, the `PreferredLeaderElector`, the `Reassigner` and the `TopicDeleter`
read and change it (the `ControllerBrokerRequestBatch` reads it to build requests), and write
through the controller's fence, on the controller's one event task. `ControllerContext` names
what they use of it, so the sharing is deliberate and the imports go one way (the helpers do not
import the controller).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from rafka.actors.config import TopicConfig
from rafka.actors.controller.channel import ControllerChannel
from rafka.actors.controller.events import ControllerEvent
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.models import (
    BrokerInfo,
    ControllerFence,
    PartitionState,
    TopicAssignment,
    Versioned,
)
from rafka.coordination.partition_state import PartitionStateStore
from rafka.coordination.store import ClusterStore


class PartitionStateWriter(Protocol):
    """What the helpers use of the controller's `PartitionStateMachine` (which takes a
    `ControllerContext` itself, so it is named here by what it does, not imported)."""

    async def write_state(self, tp: TopicPartition, new_state: PartitionState) -> bool: ...


class ControllerContext(Protocol):
    """What the controller's helpers (`PartitionStateMachine`, `PreferredLeaderElector`,
    `Reassigner`, `TopicDeleter`) read and write of it: its picture of the cluster, its fenced
    ZooKeeper writes (partition states through its `PartitionStateMachine`) and its channel to
    the brokers. The `Controller` is one; they run on its event task, so nothing here changes
    under them."""

    broker_id: int
    epoch: int
    fence: ControllerFence
    store: ClusterStore
    admin: TopicAdmin
    partition_states: PartitionStateStore
    channel: ControllerChannel
    events: asyncio.Queue[ControllerEvent]
    live: dict[int, BrokerInfo]
    assignments: dict[str, TopicAssignment]
    configs: dict[str, TopicConfig]
    # Each topic's config as written, which LeaderAndIsr carries to the replicas.
    raw_configs: dict[str, dict[str, str]]
    states: dict[TopicPartition, Versioned[PartitionState]]
    # Topics being deleted whose replicas are not all gone yet.
    deleting: set[str]
    assignment_versions: dict[str, int]

    @property  # read-only, so that the controller's `PartitionStateMachine` is one
    def partition_state_machine(self) -> PartitionStateWriter: ...

    async def zk(self, function: Any, *args: Any, **kwargs: Any) -> Any: ...

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]: ...

    async def load_topic(self, topic: str) -> None: ...

    async def send_leader_and_isr(self, partitions: set[TopicPartition]) -> None: ...

    def update_metadata(self, partitions: set[TopicPartition] | None = None,
                        deleted: tuple[str, ...] = ()) -> None: ...

    def forget_topic(self, topic: str) -> None: ...
