"""What the controller shares with the helpers that carry out parts of its work.

The `Controller` keeps one picture of the cluster, rebuilt from ZooKeeper; the `Reassigner` and
the `TopicDeleter` read and change it, and write through the controller's fence, on the
controller's one event task. `ControllerContext` names what they use of it, so the sharing is
deliberate and the imports go one way (the helpers do not import the controller).
"""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

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


class ControllerContext(Protocol):
    """What the controller's helpers (`Reassigner`, `TopicDeleter`) read and write of it: its
    picture of the cluster, its fenced ZooKeeper writes and its channel to the brokers. The
    `Controller` is one; they run on its event task, so nothing here changes under them."""

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
    states: dict[TopicPartition, Versioned[PartitionState]]
    # Topics being deleted whose replicas are not all gone yet.
    deleting: set[str]
    _assignment_versions: dict[str, int]

    async def _zk(self, function: Any, *args: Any, **kwargs: Any) -> Any: ...

    def _replicas(self, tp: TopicPartition) -> tuple[int, ...]: ...

    async def _write_state(self, tp: TopicPartition, new_state: PartitionState) -> bool: ...

    async def _send_leader_and_isr(self, partitions: set[TopicPartition]) -> None: ...

    def _update_metadata(self, partitions: set[TopicPartition] | None = None,
                         deleted: tuple[str, ...] = ()) -> None: ...

    def _forget_topic(self, topic: str) -> None: ...
