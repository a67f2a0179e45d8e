"""The group coordinator's consumer groups of the new protocol (KIP-848): ConsumerGroupHeartbeat
and ConsumerGroupDescribe, served by the broker's Kafka listener beside the classic protocol
(`coordinator.py`), on the same broker (the leader of the group's `__consumer_offsets`
partition). The protocol itself is `consumer_group.py`; this shell turns topic ids into names
and back, keeps time, and answers.

A group id is one kind at a time: a ConsumerGroupHeartbeat for a classic group with members,
or for a group of rafka's own consumers, is GROUP_ID_NOT_FOUND ("not a consumer group", as
Kafka answers without its online migration), and a JoinGroup for a consumer group with members
is INCONSISTENT_GROUP_PROTOCOL. An empty group is no kind: its committed offsets stay, and the
first member of either protocol makes it that kind, which is how Kafka 4.0 converts an empty
group when its consumers change `group.protocol`.

As for classic groups, membership is kept in memory, not written to `__consumer_offsets`: when
the coordinator moves, the new one rebuilds the group from its members' first heartbeats, which
say all they hold (`ConsumerGroup._adopt`); a member whose first heartbeat here is not a full
one is asked for one (`_ask_for_everything`).
"""

from __future__ import annotations

import struct
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from rafka.actors.errors import ErrorCode
from rafka.actors.group.client_host import CLIENT_HOST
from rafka.actors.group.consumer_group import (
    ConsumerGroup,
    Heartbeat,
    HeartbeatAnswer,
)
from rafka.actors.group.group_kinds import GroupKindFence
from rafka.actors.txn.view import TransactionalBrokerView
from rafka.common.clock import monotonic_ms
from rafka.coordination.topic_ids import topic_id_text, topic_id_uuid
from rafka.wire.protocol import Api

# `coordinates(group_id)`: 0 if this broker coordinates the group, else the error to answer.
Coordinates = Callable[[str], Awaitable[int]]
# ConsumerGroupDescribe's member types (v1): a member of the new protocol.
CONSUMER_MEMBER = 1
# How many members told to send a full heartbeat are remembered (the oldest forgotten).
MAX_ASKED = 10_000
# Kafka's "not asked" for authorized operations (INT32_MIN).
_NOT_ASKED = -(2**31)


class ConsumerGroups:
    """The consumer groups of the new protocol this broker coordinates."""

    def __init__(self, broker: TransactionalBrokerView, coordinates: Coordinates,
                 is_classic: Callable[[str], bool], fence: GroupKindFence) -> None:
        self.broker = broker
        self._coordinates = coordinates
        self._is_classic = is_classic
        self._fence = fence
        self.groups: dict[str, ConsumerGroup] = {}
        # (group id, member id) -> when the member was first told to send a full heartbeat
        # (`_ask_for_everything`), or to commit again (`commit_from_elsewhere`).
        self._asked: OrderedDict[tuple[str, str], int] = OrderedDict()
        self._commits_asked: OrderedDict[tuple[str, str], int] = OrderedDict()

    # ---------------------------------------------------------------------- the group's life

    def tick(self, now_ms: int) -> None:
        """Remove the members whose session or revocation ran out; forget empty groups."""
        for group_id, group in list(self.groups.items()):
            group.tick(now_ms)
            if group.is_empty:
                del self.groups[group_id]

    def forget(self, group_id: str) -> None:
        """The group is coordinated elsewhere now."""
        self.groups.pop(group_id, None)

    def with_members(self) -> set[str]:
        return {group_id for group_id, group in self.groups.items() if not group.is_empty}

    def has_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and not group.is_empty

    def subscribed_topics(self, group_id: str) -> frozenset[str]:
        group = self.groups.get(group_id)
        if group is None:
            return frozenset()
        return group.subscribed_topics(self.broker.partition_counts())

    # -------------------------------------------------------------------------- requests

    async def heartbeat(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        interval = self.broker.config.group_consumer_heartbeat_interval_ms
        if not request.group_id:
            return _heartbeat_fields(
                HeartbeatAnswer(ErrorCode.INVALID_REQUEST, "group id is empty"), interval)
        error = await self._coordinates(request.group_id)
        if error == 0:
            error = await self._refuse_other_kind(request.group_id)
        if error:
            message = ("the group is a classic group or a group of rafka's own consumers"
                       if error == ErrorCode.GROUP_ID_NOT_FOUND else None)
            return _heartbeat_fields(HeartbeatAnswer(error, message), interval)
        # A group not here is made for a join, or for a member of a group whose coordinator
        # moved (consumer_group.py rebuilds it); it is dropped again if it stays empty.
        group = self.groups.get(request.group_id) or self._new_group(request.group_id)
        answer = group.heartbeat(
            self._heartbeat_of(request, version, CLIENT_HOST.get()),
            self.broker.partition_counts(), monotonic_ms())
        answer = self._ask_for_everything(request, answer)
        if group.is_empty:
            self.groups.pop(request.group_id, None)
        return _heartbeat_fields(answer, interval, self._with_ids(answer.assignment),
                                 api.response)

    async def describe(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        described = api.response.DescribedGroup
        groups = []
        for group_id in request.group_ids:
            error = await self._coordinates(group_id)
            group = self.groups.get(group_id)
            if error == 0 and group is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            if error or group is None:
                message = (f"group {group_id} is not a consumer group with members"
                           if error == ErrorCode.GROUP_ID_NOT_FOUND else None)
                groups.append(described(error_code=error, error_message=message,
                                        group_id=group_id, group_state="Dead", group_epoch=-1,
                                        assignment_epoch=-1, assignor_name="", members=[],
                                        authorized_operations=_NOT_ASKED))
                continue
            groups.append(described(
                error_code=0, error_message=None, group_id=group_id,
                group_state=group.state.value, group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch, assignor_name=group.assignor_name,
                members=[self._described_member(described, group, member)
                         for member in group.members.values()],
                authorized_operations=_NOT_ASKED))
        return {"throttle_time_ms": 0, "groups": groups}

    def describe_as_classic(self, group_id: str) -> dict[str, Any] | None:
        """The group as DescribeGroups answers it (a classic tool's view): protocol type
        "consumer", the assignor as its protocol, and each member's partitions in the
        consumer protocol's assignment format; None if no such group is here."""
        group = self.groups.get(group_id)
        if group is None:
            return None
        return {"state": group.state.value, "protocol": group.assignor_name, "members": [
            (member.member_id, member.instance_id, member.client_id, member.client_host,
             encode_assignment(member.assigned)) for member in group.members.values()]}

    def commit_from_elsewhere(self, group_id: str, member_id: str, version: int) -> int:
        """The answer to an OffsetCommit from a member of a group this coordinator has no
        trace of. It may be a member of a consumer group whose coordinator moved here, not
        rebuilt yet: a v9+ commit (the new protocol's) is answered COORDINATOR_NOT_AVAILABLE,
        which clients retry, once, and for as long as the member's full heartbeat is awaited
        (`_ask_for_everything`, up to a session timeout); otherwise ILLEGAL_GENERATION, as
        for a classic group no longer here (its member joins again)."""
        key, now = (group_id, member_id), monotonic_ms()
        session_ms = self.broker.config.group_consumer_session_timeout_ms
        awaited = now - self._asked.get(key, -session_ms) < session_ms
        if version < 9 or not member_id or (key in self._commits_asked and not awaited):
            return ErrorCode.ILLEGAL_GENERATION
        _remember(self._commits_asked, key, now)
        return ErrorCode.COORDINATOR_NOT_AVAILABLE

    # ---------------------------------------------------------------------------- inside

    def _ask_for_everything(self, request: Any, answer: HeartbeatAnswer) -> HeartbeatAnswer:
        """A member this coordinator does not know, whose heartbeat does not say all it holds:
        most likely one of a group whose coordinator moved here, which the group is rebuilt
        from (`ConsumerGroup._adopt`). Once per member, it is answered
        COORDINATOR_NOT_AVAILABLE, on which clients find the coordinator again and send it a
        full heartbeat; after that, UNKNOWN_MEMBER_ID, and it joins again."""
        key = (request.group_id, request.member_id)
        if answer.error != ErrorCode.UNKNOWN_MEMBER_ID or request.member_epoch <= 0 \
                or key in self._asked:
            return answer
        _remember(self._asked, key, monotonic_ms())
        return HeartbeatAnswer(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               "the group is new to this coordinator: send a full heartbeat",
                               request.member_id)

    async def _refuse_other_kind(self, group_id: str) -> int:
        if self._is_classic(group_id):
            return ErrorCode.GROUP_ID_NOT_FOUND
        return await self._fence.refuse_if_members(group_id, ErrorCode.GROUP_ID_NOT_FOUND)

    def _new_group(self, group_id: str) -> ConsumerGroup:
        config = self.broker.config
        group = self.groups[group_id] = ConsumerGroup(
            group_id, session_timeout_ms=config.group_consumer_session_timeout_ms,
            max_size=config.group_consumer_max_size,
            assignors=tuple(config.group_consumer_assignors.split(",")))
        return group

    def _heartbeat_of(self, request: Any, version: int, client_host: str) -> Heartbeat:
        owned = None
        if request.topic_partitions is not None:
            owned = {}
            for topic in request.topic_partitions:
                name = (self.broker.topic_name_of(topic_id_text(topic.topic_id))
                        if topic.topic_id is not None else None)
                if name is not None:  # a topic deleted since: its partitions are gone
                    owned[name] = frozenset(topic.partitions)
        names = request.subscribed_topic_names
        return Heartbeat(
            member_id=request.member_id, member_epoch=request.member_epoch,
            instance_id=request.instance_id, rack_id=request.rack_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            subscribed_topic_names=None if names is None else tuple(names),
            subscribed_topic_regex=request.subscribed_topic_regex if version >= 1 else None,
            server_assignor=request.server_assignor, owned=owned,
            client_id=request.header.client_id or "", client_host=client_host)

    def _with_ids(self, assignment: Mapping[str, frozenset[int]] | None,
                  ) -> list[tuple[uuid.UUID, list[int]]] | None:
        if assignment is None:
            return None
        with_ids = []
        for topic, partitions in sorted(assignment.items()):
            topic_id = self.broker.topic_id_of(topic)
            if topic_id is not None:
                with_ids.append((topic_id_uuid(topic_id), sorted(partitions)))
        return with_ids

    def _described_member(self, described: Any, group: ConsumerGroup, member: Any) -> Any:
        member_type = described.Member
        return member_type(
            member_id=member.member_id, instance_id=member.instance_id,
            rack_id=member.rack_id, member_epoch=member.member_epoch,
            client_id=member.client_id, client_host=member.client_host,
            subscribed_topic_names=list(member.subscribed_topic_names),
            subscribed_topic_regex=member.subscribed_topic_regex,
            assignment=self._described_assignment(member_type, member.assigned),
            target_assignment=self._described_assignment(
                member_type, group.target.get(member.member_id, {})),
            member_type=CONSUMER_MEMBER)

    def _described_assignment(self, member_type: Any,
                              assignment: Mapping[str, frozenset[int]]) -> Any:
        entry = member_type.Assignment.TopicPartitions
        return member_type.Assignment(topic_partitions=[
            entry(topic_id=topic_id_uuid(topic_id), topic_name=topic,
                  partitions=sorted(partitions))
            for topic, partitions in sorted(assignment.items())
            if (topic_id := self.broker.topic_id_of(topic)) is not None])


def _heartbeat_fields(answer: HeartbeatAnswer, interval_ms: int,
                      assignment: list[tuple[uuid.UUID, list[int]]] | None = None,
                      response: Any = None) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "throttle_time_ms": 0, "error_code": answer.error, "error_message": answer.message,
        "member_id": answer.member_id, "member_epoch": answer.member_epoch,
        "heartbeat_interval_ms": interval_ms if answer.error == 0 else 0, "assignment": None}
    if assignment is not None and response is not None:
        fields["assignment"] = response.Assignment(topic_partitions=[
            response.Assignment.TopicPartitions(topic_id=topic_id, partitions=partitions)
            for topic_id, partitions in assignment])
    return fields


def _remember(asked: OrderedDict[tuple[str, str], int], key: tuple[str, str],
              now_ms: int) -> None:
    asked.setdefault(key, now_ms)
    if len(asked) > MAX_ASKED:
        asked.popitem(last=False)


def encode_assignment(assignment: Mapping[str, Iterable[int]]) -> bytes:
    """Partitions in Kafka's ConsumerProtocolAssignment, version 0 (what a classic leader's
    SyncGroup hands each member): the version, each topic and its partitions, no user data."""
    out = bytearray(struct.pack(">hi", 0, len(assignment)))
    for topic, partitions in sorted(assignment.items()):
        name = topic.encode()
        indexes = sorted(partitions)
        out += struct.pack(">h", len(name)) + name
        out += struct.pack(f">i{len(indexes)}i", len(indexes), *indexes)
    out += struct.pack(">i", -1)
    return bytes(out)
