"""ListGroups and DescribeGroups, for the groups of both protocols this broker coordinates
(`coordinator.py`): classic groups with their protocol, consumer groups (KIP-848) with type
"consumer" and, to a tool that asks DescribeGroups, each member's partitions in the classic
consumer protocol's assignment format; a group with only committed offsets is "Empty"."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rafka.actors.group.classic_group import ClassicGroup, GroupState
from rafka.actors.group.consumer_groups import ConsumerGroups
from rafka.actors.messages import CommittedOffset
from rafka.actors.offsets_topic import OFFSETS_TOPIC
from rafka.actors.txn.view import TransactionalBrokerView
from rafka.wire.protocol import Api


class GroupListing:
    """The group coordinator's answers to ListGroups and DescribeGroups.

    `coordinates(group_id)`: (0, the classic group or None) where this broker coordinates
    the group, else (error, None); `committed_offsets(group_id)`: its offsets."""

    def __init__(self, broker: TransactionalBrokerView, classic: Mapping[str, ClassicGroup],
                 consumer_groups: ConsumerGroups,
                 coordinates: Callable[[str], Awaitable[tuple[int, ClassicGroup | None]]],
                 committed_offsets: Callable[[str], Awaitable[list[CommittedOffset]]]) -> None:
        self.broker = broker
        self.classic = classic
        self.consumer_groups = consumer_groups
        self.coordinates = coordinates
        self.committed_offsets = committed_offsets

    async def list_groups(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """The groups this broker coordinates (Kafka's admin clients ask every broker): those
        with members, and those with only committed offsets, "Empty" as in Kafka."""
        wanted = set(request.states_filter or ()) if version >= 4 else set()
        # v5 filters by type too (KIP-848), case aside, as Kafka compares them.
        types = {kind.lower() for kind in request.types_filter or ()} if version >= 5 else set()
        listed = {group_id: (group.protocol_type or "", group.state.value, "classic")
                  for group_id, group in self.classic.items()}
        for group_id, consumer_group in self.consumer_groups.groups.items():
            listed[group_id] = ("consumer", consumer_group.state.value, "consumer")
        for group_id in await self._groups_with_offsets():
            listed.setdefault(group_id, ("", GroupState.EMPTY.value, "classic"))
        entry = api.response.ListedGroup
        return {"throttle_time_ms": 0, "error_code": 0, "groups": [
            entry(group_id=group_id, protocol_type=protocol_type, group_state=state,
                  group_type=kind)
            for group_id, (protocol_type, state, kind) in sorted(listed.items())
            if (not wanted or state in wanted) and (not types or kind in types)]}

    async def _groups_with_offsets(self) -> set[str]:
        """The groups with committed offsets in the `__consumer_offsets` partitions led here."""
        led = [tp.partition for tp, state in self.broker.replica_states.items()
               if tp.topic == OFFSETS_TOPIC and state.leader == self.broker.broker_id]
        replies = await asyncio.gather(
            *(self.broker.replica_host_for(OFFSETS_TOPIC, p).offset_groups.remote(p)
              for p in led), return_exceptions=True)
        return {group for reply in replies if isinstance(reply, list) for group in reply}

    async def describe_groups(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        described = api.response.DescribedGroup
        results = []
        for group_id in request.groups:
            error, group = await self.coordinates(group_id)
            members = []
            modern = None if error else self.consumer_groups.describe_as_classic(group_id)
            if modern is not None:  # a consumer group (KIP-848), as a classic tool reads it
                results.append(described(
                    error_code=0, error_message=None, group_id=group_id,
                    group_state=modern["state"], protocol_type="consumer",
                    protocol_data=modern["protocol"], members=[described.DescribedGroupMember(
                        member_id=member_id, group_instance_id=instance_id,
                        client_id=client_id, client_host=client_host, member_metadata=b"",
                        member_assignment=assignment)
                        for member_id, instance_id, client_id, client_host, assignment
                        in modern["members"]]))
                continue
            if group is not None:
                members = [described.DescribedGroupMember(
                    member_id=m.member_id, group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=(m.metadata_for(group.protocol_name)
                                     if group.protocol_name else b""),
                    member_assignment=m.assignment) for m in group.members.values()]
                state = group.state.value
            elif error == 0 and await self.committed_offsets(group_id):
                state = GroupState.EMPTY.value  # offsets, no members: Kafka's "Empty"
            else:
                state = "Dead"
            results.append(described(
                error_code=error, error_message=None, group_id=group_id, group_state=state,
                protocol_type=(group.protocol_type or "") if group is not None else "",
                protocol_data=(group.protocol_name or "") if group is not None else "",
                members=members))
        return {"throttle_time_ms": 0, "groups": results}
