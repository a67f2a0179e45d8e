"""One kind of group per group id: Kafka's clients (the `GroupCoordinator`) and rafka's own
consumers (ZooKeeper-based, `actors/clients/group_consumer.py`) kept out of each other's groups.

Both sides look at ZooKeeper. While Kafka clients are members of a group here, the
`GroupKindFence` keeps an ephemeral `/consumers/<group>/kafka_members` mark on it, and rafka's
consumers refuse to join (`GroupStore.register_member`); a Kafka client's request for a group
that rafka's consumers are members of is refused, as a watch on their znodes says, so no request
reads ZooKeeper itself.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from rafka.actors.errors import ErrorCode
from rafka.actors.txn.view import TransactionalBrokerView
from rafka.coordination.errors import CoordinationError
from rafka.coordination.groups import GroupStore
from rafka.coordination.store import ClusterStore
from rafka.coordination.validation import is_valid_group_id
from rafka.coordination.watches import ClusterWatches

log = logging.getLogger(__name__)

MAX_WATCHED_GROUPS = 1000
# How long a request waits for ZooKeeper to say who a group's members are, the first time.
MEMBERS_WAIT_S = 10.0


class GroupKindFence:
    """The group coordinator's side of the fence: its marks, and its watches on rafka's
    consumer groups."""

    def __init__(self, broker: TransactionalBrokerView) -> None:
        self.broker = broker
        # The groups marked in ZooKeeper as having Kafka-protocol members (see `mark`).
        self._marked: set[str] = set()
        # Whether rafka's own consumers are members of a group, kept by a watch per group id
        # asked about (the oldest dropped past MAX_WATCHED_GROUPS): no request reads ZooKeeper.
        self._zookeeper_members: OrderedDict[str, ZooKeeperMembers] = OrderedDict()

    def close(self) -> None:
        for members in self._zookeeper_members.values():
            members.watch.cancel()
        self._zookeeper_members.clear()

    async def mark(self, with_members: set[str]) -> None:
        """Keep ZooKeeper's mark on each group with Kafka-protocol members here
        (`with_members`), so that rafka's own consumers refuse to join it
        (`GroupStore.register_member`)."""
        store = GroupStore(self.broker.store) if self.broker.store is not None else None
        if store is None or with_members == self._marked:
            return
        for group_id in with_members - self._marked:
            try:
                await asyncio.to_thread(store.mark_kafka_group, group_id, self.broker.broker_id)
                self._marked.add(group_id)
            except CoordinationError as error:  # tried again on the next tick
                log.warning("could not mark group %s as Kafka's: %s", group_id, error)
        for group_id in self._marked - with_members:
            try:
                await asyncio.to_thread(store.unmark_kafka_group, group_id)
                self._marked.discard(group_id)
            except CoordinationError as error:
                log.warning("could not unmark group %s: %s", group_id, error)

    async def refuse_if_members(self, group_id: str, refusal: int) -> int:
        """`refusal` if rafka's own consumers are members of the group, as a watch on their
        znodes says (set up the first time the group is asked about), else 0;
        COORDINATOR_NOT_AVAILABLE while ZooKeeper has not said."""
        if not is_valid_group_id(group_id):
            return ErrorCode.NONE  # not a znode name: no consumer of rafka's can have it
        members = self._zookeeper_members.get(group_id)
        if members is None:
            assert self.broker.store is not None
            members = self._zookeeper_members[group_id] = ZooKeeperMembers(
                self.broker.store, group_id)
            if len(self._zookeeper_members) > MAX_WATCHED_GROUPS:
                _oldest, dropped = self._zookeeper_members.popitem(last=False)
                dropped.watch.cancel()
        else:
            self._zookeeper_members.move_to_end(group_id)
        try:
            found = await asyncio.wait_for(members.current(), MEMBERS_WAIT_S)
        except TimeoutError:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        return refusal if found else ErrorCode.NONE


class ZooKeeperMembers:
    """The member ids of a group of rafka's own consumers, kept current by a watch."""

    def __init__(self, store: ClusterStore, group_id: str) -> None:
        loop = asyncio.get_running_loop()
        self._known = loop.create_future()
        self.members: set[str] = set()

        def deliver(members: set[str]) -> None:  # on kazoo's thread
            loop.call_soon_threadsafe(self._update, members)

        self.watch = ClusterWatches(store).watch_group_members(group_id, deliver)

    def _update(self, members: set[str]) -> None:
        self.members = members
        if not self._known.done():
            self._known.set_result(None)

    async def current(self) -> set[str]:
        await asyncio.shield(self._known)
        return self.members
