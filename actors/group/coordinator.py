"""Kafka's group coordinator, for Kafka clients: FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit and OffsetFetch, served by the broker's Kafka listener.

A group's coordinator is the broker that leads the group's partition of `__consumer_offsets`
(the one rafka's offset manager already uses), so its commits go through that partition's
offset manager on this broker, and a rafka consumer reads them as its own. Membership is Kafka's
classic protocol (`actors/group/classic_group.py`) or, for consumers with
`group.protocol=consumer`, Kafka 4's (KIP-848: `consumer_groups.py`), kept in memory as Kafka
keeps it in its cache (Kafka also writes it to `__consumer_offsets`; rafka does not): when the
coordinator moves, a classic group's members find the new one and join again, and a consumer
group is rebuilt there from its members' heartbeats; the committed offsets carry over.

A group id belongs to one kind of group at a time (`group_kinds.py` keeps the two apart): a
Kafka client cannot join a group that rafka's own consumers (ZooKeeper-based,
`actors/clients/group_consumer.py`) have members in, and is told so
(INCONSISTENT_GROUP_PROTOCOL); while Kafka clients are members, the coordinator keeps an
ephemeral `/consumers/<group>/kafka_members` znode, and rafka's consumers refuse to join
(`InconsistentGroupProtocolError`); a Kafka client's commit from outside any generation is
refused the same way while rafka's consumers are members. Committed offsets are shared: both
kinds store them in the same place, keyed by group id.

Only JoinGroup creates a group; a group whose last member left is forgotten (its offsets stay
with the offset manager). Other requests naming a group that is not here are answered as Kafka
answers them: UNKNOWN_MEMBER_ID, and "Dead" in DescribeGroups, or "Empty" if it has committed
offsets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from rafka.actors.errors import ErrorCode, code_of, error_reply
from rafka.actors.group.classic_group import (
    NO_MEMBER,
    Answers,
    ClassicGroup,
    JoinResult,
    SyncResult,
)
from rafka.actors.group.client_host import CLIENT_HOST
from rafka.actors.group.consumer_groups import ConsumerGroups
from rafka.actors.group.group_kinds import GroupKindFence
from rafka.actors.group.group_listing import GroupListing
from rafka.actors.messages import CommittedOffset, CommittedOffsets, ErrorReply
from rafka.actors.offsets_topic import (
    COMMIT_TIMEOUT_MS,
    OFFSETS_TOPIC,
    ensure_offsets_topic,
    offsets_partition,
)
from rafka.actors.txn.transaction_state import TRANSACTION_STATE_TOPIC
from rafka.actors.txn.view import TransactionalBrokerView
from rafka.common.clock import monotonic_ms
from rafka.common.topic_partition import TopicPartition
from rafka.wire.protocol import Api

log = logging.getLogger(__name__)

# `call(host, method, wait_ms, *arguments)`: `host.<method>(*arguments)`, however it travels.
HostCall = Callable[..., Awaitable[Any]]


# How often members' sessions and rebalance deadlines are checked.
TICK_S = 0.1



class GroupCoordinator:
    """The classic groups this broker coordinates, and the requests waiting on them."""

    def __init__(self, broker: TransactionalBrokerView, call_host: HostCall) -> None:
        self.broker = broker
        # How the offset managers' hosts are asked: the listener's way, over their data ports
        # where they serve the call, else an actor call.
        self._call_host = call_host
        self.groups: dict[str, ClassicGroup] = {}
        self._joins: dict[tuple[str, str], asyncio.Future[JoinResult]] = {}
        self._syncs: dict[tuple[str, str], asyncio.Future[SyncResult]] = {}
        self._offsets_partitions: int | None = None
        self._ticker: asyncio.Task | None = None
        # Keeps Kafka's clients and rafka's own consumers out of each other's groups.
        self._fence = GroupKindFence(broker)
        # The groups of the new protocol (KIP-848), beside the classic ones.
        self.consumer_groups = ConsumerGroups(
            broker, self._coordinator_error, self._has_classic_members, self._fence)
        # ListGroups and DescribeGroups, of both kinds.
        self.listing = GroupListing(broker, self.groups, self.consumer_groups,
                                    self.coordinates, self.committed_offsets)

    def start(self) -> None:
        self._ticker = asyncio.ensure_future(self._tick())

    async def close(self) -> None:
        self._fence.close()
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            for group_id, group in list(self.groups.items()):
                self._deliver(group_id, group.tick(monotonic_ms()))
                self._forget_if_empty(group_id)
            self.consumer_groups.tick(monotonic_ms())
            await self._fence.mark(
                {group_id for group_id, group in self.groups.items() if group.members}
                | self.consumer_groups.with_members())

    def _deliver(self, group_id: str, answers: Answers) -> None:
        for join in answers.joins:
            future = self._joins.pop((group_id, join.member_id), None)
            if future is not None and not future.done():
                future.set_result(join)
        for sync in answers.syncs:
            waiting = self._syncs.pop((group_id, sync.member_id), None)
            if waiting is not None and not waiting.done():
                waiting.set_result(sync)

    # ------------------------------------------------------------------- who coordinates

    async def partition_of(self, group_id: str) -> int | None:
        """The group's `__consumer_offsets` partition, creating the topic if it is missing."""
        if self._offsets_partitions is None:
            metadata = await self.broker.metadata([OFFSETS_TOPIC])
            if OFFSETS_TOPIC not in metadata["topics"]:
                assert self.broker.store is not None
                await asyncio.to_thread(ensure_offsets_topic, self.broker.store)
                return None  # its partitions get leaders in a moment: the client asks again
            self._offsets_partitions = len(metadata["topics"][OFFSETS_TOPIC])
        return offsets_partition(group_id, self._offsets_partitions)

    async def coordinates(self, group_id: str, membership: bool = False,
                           ) -> tuple[int, ClassicGroup | None]:
        """(0, the classic group or None if it is not here) if this broker coordinates
        `group_id`, else (error, None). `membership`: a join, sync, heartbeat or leave, which
        Kafka refuses for the empty group id (commits and fetches of offsets take it)."""
        if membership and not group_id:
            return ErrorCode.INVALID_GROUP_ID, None
        error = await self._coordinator_error(group_id)
        return error, None if error else self.groups.get(group_id)

    async def _coordinator_error(self, group_id: str) -> int:
        """0 if this broker coordinates `group_id`, else the error a client is answered."""
        partition = await self.partition_of(group_id)
        if partition is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        state = self.broker.replica_states.get(TopicPartition(OFFSETS_TOPIC, partition))
        if state is None or state.leader != self.broker.broker_id:
            self._forget(group_id)
            self.consumer_groups.forget(group_id)
            return ErrorCode.NOT_COORDINATOR
        return 0

    def _has_classic_members(self, group_id: str) -> bool:
        group = self.groups.get(group_id)
        return group is not None and not group.is_empty

    def _new_group(self, group_id: str) -> ClassicGroup | None:
        """A group for its first JoinGroup (only a join creates one); None if this broker
        coordinates group.coordinator.max.groups already."""
        config = self.broker.config
        if len(self.groups) >= config.group_coordinator_max_groups:
            log.warning("refusing to start group %r: broker %d coordinates %d groups "
                        "(group.coordinator.max.groups=%d); raise it, or delete groups no "
                        "longer used", group_id, self.broker.broker_id, len(self.groups),
                        config.group_coordinator_max_groups)
            return None
        group = self.groups[group_id] = ClassicGroup(
            group_id, initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            max_size=config.group_max_size)
        return group

    def _forget_if_empty(self, group_id: str) -> None:
        """Forget a group left with no member: Kafka keeps an empty group only for its
        offsets, which the offset manager keeps here."""
        group = self.groups.get(group_id)
        if group is not None and group.is_empty:
            del self.groups[group_id]

    def _forget(self, group_id: str) -> None:
        """The group is coordinated elsewhere now: its waiting requests hear so."""
        if self.groups.pop(group_id, None) is None:
            return
        for waiting in (self._joins, self._syncs):
            for key in [key for key in waiting if key[0] == group_id]:
                future = waiting.pop(key)
                if not future.done():
                    moved = ErrorCode.NOT_COORDINATOR
                    result = (JoinResult(key[1], moved) if waiting is self._joins
                              else SyncResult(key[1], moved))
                    future.set_result(result)  # type: ignore[arg-type]

    async def find_coordinator(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """The group's coordinator; for key type 1 (a transactional id, FindCoordinator v1+),
        its transaction coordinator: the leader of its `__transaction_state` partition."""
        if version >= 1 and request.key_type == 1:
            topic, partition = (TRANSACTION_STATE_TOPIC,
                                await self.broker.transactions.partition_of(request.key))
        elif version >= 1 and request.key_type != 0:
            return _coordinator_fields(ErrorCode.INVALID_REQUEST,
                                       f"key type {request.key_type}: 0 (group) or 1 "
                                       "(transactional id)")
        else:
            topic, partition = OFFSETS_TOPIC, await self.partition_of(request.key)
        if partition is None:
            return _coordinator_fields(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       "the coordinator is not available yet")
        metadata = await self.broker.metadata([topic])
        leader = metadata["topics"].get(topic, {}).get(partition, {}).get("leader", -1)
        endpoints = metadata["endpoints"].get(leader) or []
        if not endpoints:
            return _coordinator_fields(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                       "the coordinator is not available yet")
        host, port = endpoints[0]
        return _coordinator_fields(ErrorCode.NONE, None, leader, host, port)

    # ------------------------------------------------------------------------ membership

    async def join_group(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        error, group = await self.coordinates(request.group_id, membership=True)
        if error:
            return _join_fields(api, JoinResult(request.member_id, error))
        refused = await self._fence.refuse_if_members(request.group_id,
                                                       ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if refused or self.consumer_groups.has_members(request.group_id):
            # A consumer group (KIP-848) with members is not joined with the classic protocol.
            return _join_fields(api, JoinResult(
                request.member_id, refused or ErrorCode.INCONSISTENT_GROUP_PROTOCOL))
        group = self.groups.get(request.group_id) or self._new_group(request.group_id)
        if group is None:
            return _join_fields(api, JoinResult(request.member_id, ErrorCode.POLICY_VIOLATION))
        session_ms = request.session_timeout_ms
        member_id, immediate, answers = group.join(
            request.member_id or NO_MEMBER, client_id=request.header.client_id or "",
            client_host=CLIENT_HOST.get(), session_timeout_ms=session_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else session_ms,
            protocol_type=request.protocol_type,
            protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
            now_ms=monotonic_ms(), require_known_member_id=version >= 4,
            instance_id=request.group_instance_id if version >= 5 else None)
        if immediate is not None:
            self._deliver(request.group_id, answers)
            self._forget_if_empty(request.group_id)
            return _join_fields(api, immediate)
        future: asyncio.Future[JoinResult] = asyncio.get_running_loop().create_future()
        superseded = self._joins.get((request.group_id, member_id))
        if superseded is not None and not superseded.done():
            superseded.set_result(JoinResult(member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        self._joins[(request.group_id, member_id)] = future
        self._deliver(request.group_id, answers)
        return _join_fields(api, await future)

    async def sync_group(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        error, group = await self.coordinates(request.group_id, membership=True)
        if group is None:
            return _sync_fields(SyncResult(request.member_id,
                                           error or ErrorCode.UNKNOWN_MEMBER_ID))
        assignments = {a.member_id: bytes(a.assignment) for a in request.assignments or ()}
        immediate, answers = group.sync(
            request.member_id, request.generation_id, assignments, monotonic_ms(),
            request.group_instance_id if version >= 3 else None)
        if immediate is not None:
            self._deliver(request.group_id, answers)
            return _sync_fields(immediate)
        future: asyncio.Future[SyncResult] = asyncio.get_running_loop().create_future()
        self._syncs[(request.group_id, request.member_id)] = future
        self._deliver(request.group_id, answers)
        return _sync_fields(await future)

    async def heartbeat(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        error, group = await self.coordinates(request.group_id, membership=True)
        if group is not None:
            error = group.heartbeat(request.member_id, request.generation_id, monotonic_ms(),
                                    request.group_instance_id if version >= 3 else None)
        elif error == 0:
            error = ErrorCode.UNKNOWN_MEMBER_ID
        return {"throttle_time_ms": 0, "error_code": error}

    async def leave_group(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        leaving: list[tuple[str, str | None]] = (
            [(request.member_id, None)] if version < 3
            else [(member.member_id, member.group_instance_id) for member in request.members])
        error, group = await self.coordinates(request.group_id, membership=True)
        errors: dict[tuple[str, str | None], int] = dict.fromkeys(
            leaving, error or ErrorCode.UNKNOWN_MEMBER_ID)
        if group is not None:
            errors, answers = group.leave(leaving, monotonic_ms())
            self._deliver(request.group_id, answers)
            self._forget_if_empty(request.group_id)
        response = api.response
        return {"throttle_time_ms": 0,
                "error_code": error if version >= 3 else next(iter(errors.values()), error),
                "members": [response.MemberResponse(member_id=member, group_instance_id=instance,
                                                    error_code=code)
                            for (member, instance), code in errors.items()]}

    async def delete_groups(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Delete groups with no member, and their committed offsets (Kafka's DeleteGroups):
        NON_EMPTY_GROUP while a member remains (a Kafka client, or one of rafka's consumers),
        GROUP_ID_NOT_FOUND for a group with neither members nor offsets."""
        result = api.response.DeletableGroupResult
        results = []
        for group_id in request.groups_names:
            results.append(result(group_id=group_id,
                                  error_code=await self._delete_group(group_id)))
        return {"throttle_time_ms": 0, "results": results}

    async def _delete_group(self, group_id: str) -> int:
        error, group = await self.coordinates(group_id)
        if error:
            return error
        if ((group is not None and not group.is_empty)
                or self.consumer_groups.has_members(group_id)):
            return ErrorCode.NON_EMPTY_GROUP
        refused = await self._fence.refuse_if_members(group_id, ErrorCode.NON_EMPTY_GROUP)
        if refused:
            return refused
        forgotten = await self._ask_offset_manager(group_id, "forget_group")
        if isinstance(forgotten, ErrorReply):
            return forgotten.code
        self.groups.pop(group_id, None)
        return ErrorCode.NONE if forgotten or group is not None \
            else ErrorCode.GROUP_ID_NOT_FOUND

    async def offset_delete(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """Delete a group's committed offsets of some partitions (Kafka's OffsetDelete,
        KIP-496): those of a topic a member subscribes to stay (GROUP_SUBSCRIBED_TO_TOPIC);
        a partition that does not exist is UNKNOWN_TOPIC_OR_PARTITION. A group with neither
        members nor offsets is GROUP_ID_NOT_FOUND, one whose members are not consumers (or
        are rafka's own) NON_EMPTY_GROUP; a group's error is answered alone, as Kafka does."""
        group_id = request.group_id
        asked = [(topic.name, part.partition_index)
                 for topic in request.topics for part in topic.partitions]
        error, group = await self.coordinates(group_id, membership=True)
        subscribed: frozenset[str] = frozenset()
        if error == 0 and group is not None:
            error, subscribed = group.check_offset_deletion({topic for topic, _ in asked})
        elif error == 0 and self.consumer_groups.has_members(group_id):
            subscribed = self.consumer_groups.subscribed_topics(group_id)
        elif error == 0:
            error = await self._fence.refuse_if_members(group_id, ErrorCode.NON_EMPTY_GROUP)
        if error:
            return {"throttle_time_ms": 0, "error_code": error, "topics": []}
        known = (await self.broker.metadata(sorted({topic for topic, _ in asked})))["topics"]
        errors = {tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp[1] not in known.get(tp[0], {})
                  else ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed
                  else ErrorCode.NONE for tp in asked}
        committed = await self._ask_offset_manager(
            group_id, "delete_group_offsets",
            [list(tp) for tp, code in errors.items() if code == ErrorCode.NONE])
        if isinstance(committed, ErrorReply):
            error = committed.code
        elif committed == 0 and group is None:
            error = ErrorCode.GROUP_ID_NOT_FOUND
        if error:
            return {"throttle_time_ms": 0, "error_code": error, "topics": []}
        topics: dict[str, list[Any]] = {}
        partition = api.response.OffsetDeleteResponseTopic.OffsetDeleteResponsePartition
        for (topic, index), code in errors.items():
            topics.setdefault(topic, []).append(
                partition(partition_index=index, error_code=code))
        return {"throttle_time_ms": 0, "error_code": 0, "topics": [
            api.response.OffsetDeleteResponseTopic(name=name, partitions=parts)
            for name, parts in topics.items()]}

    # --------------------------------------------------------------------------- offsets

    async def offset_commit(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        error, group = await self.coordinates(request.group_id)
        generation = request.generation_id_or_member_epoch
        consumer_group = self.consumer_groups.groups.get(request.group_id) if not error else None
        if consumer_group is not None:
            error = consumer_group.check_commit(request.member_id, generation, monotonic_ms())
            if error == 0 and generation >= 0 and version < 9:
                error = ErrorCode.UNSUPPORTED_VERSION  # Kafka's rule for the new protocol
        elif group is not None:
            error = group.check_commit(request.member_id, generation,
                                       request.group_instance_id if version >= 7 else None)
        elif error == 0 and (generation >= 0 or request.member_id != NO_MEMBER):
            # A generation of a group no longer here, or a member of a consumer group not
            # rebuilt here yet (consumer_groups.py).
            error = self.consumer_groups.commit_from_elsewhere(
                request.group_id, request.member_id, version)
        elif error == 0:
            # Not the Kafka clients' group if rafka's own consumers are its members.
            error = await self._fence.refuse_if_members(
                request.group_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        entries = _commit_entries(request)
        if error == 0 and entries:
            error = code_of(await self._ask_offset_manager(
                request.group_id, "commit_offsets", entries, COMMIT_TIMEOUT_MS))
        topic = api.response.OffsetCommitResponseTopic
        return _commit_answer(request, error, topic, topic.OffsetCommitResponsePartition)

    async def txn_offset_commit(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """A transactional producer's commit of a group's offsets (Kafka's TxnOffsetCommit):
        written in its transaction, they count once it commits. The producer has added the
        group's partition to its transaction (AddOffsetsToTxn) first."""
        error, _group = await self.coordinates(request.group_id)
        entries = _commit_entries(request)
        if error == 0 and entries:
            error = code_of(await self._ask_offset_manager(
                request.group_id, "commit_transactional_offsets", request.producer_id,
                request.producer_epoch, entries, COMMIT_TIMEOUT_MS, request.transactional_id))
            if error == ErrorCode.INVALID_PRODUCER_EPOCH:
                error = ErrorCode.PRODUCER_FENCED
            elif error == ErrorCode.NOT_ENOUGH_REPLICAS:
                # The write's verification could not reach the transaction's coordinator (or
                # its ISR is short): what Kafka's group coordinator answers, which clients retry.
                error = ErrorCode.COORDINATOR_NOT_AVAILABLE
        topic = api.response.TxnOffsetCommitResponseTopic
        return _commit_answer(request, error, topic, topic.TxnOffsetCommitResponsePartition)

    async def offset_fetch(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        error, _group = await self.coordinates(request.group_id)
        wanted = None if request.topics is None else [
            [topic.name, index] for topic in request.topics for index in topic.partition_indexes]
        found: dict[tuple[str, int], tuple[int, str, int | None]] = {}
        if error == 0:
            reply = await self._ask_offset_manager(request.group_id, "fetch_offsets", wanted)
            error = code_of(reply)
            if isinstance(reply, CommittedOffsets):
                found = {(t, p): (offset, meta, epoch)
                         for t, p, offset, meta, epoch in reply.offsets}
        keys = [tuple(tp) for tp in wanted] if wanted is not None else sorted(found)
        response = api.response.OffsetFetchResponseTopic
        topics: dict[str, list[Any]] = {}
        # v0 and v1 have no top-level error code: a coordinator error goes in every partition,
        # or the client would read "nothing committed" and reset its position.
        partition_error = error if version < 2 else 0
        for topic, index in keys:
            offset, metadata, leader_epoch = found.get((topic, index), (-1, "", -1))
            topics.setdefault(topic, []).append(response.OffsetFetchResponsePartition(
                partition_index=index, committed_offset=offset,
                committed_leader_epoch=leader_epoch,
                metadata=metadata, error_code=partition_error))
        return {"throttle_time_ms": 0, "error_code": error,
                "topics": [response(name=name, partitions=parts)
                           for name, parts in topics.items()]}


    async def committed_offsets(self, group_id: str) -> list[CommittedOffset]:
        """The group's committed offsets, [] if it has none or they cannot be read now."""
        reply = await self._ask_offset_manager(group_id, "fetch_offsets", None)
        return reply.offsets if isinstance(reply, CommittedOffsets) else []

    async def _ask_offset_manager(self, group_id: str, method: str, *args: Any) -> Any:
        """Call `method(partition, group_id, *args)` on the host of the group's offset
        manager, here; its reply, with an error a group client reads as "find the coordinator
        again" where the partition moved or its host died."""
        partition = await self.partition_of(group_id)
        host = (None if partition is None
                else self.broker.replica_host_for(OFFSETS_TOPIC, partition))
        if host is None:
            return error_reply(ErrorCode.NOT_COORDINATOR, f"no offset manager of {group_id}")
        try:
            reply = await self._call_host(host, method, 0, partition, group_id, *args)
        except Exception as failure:  # the offset manager's host died: ask again
            log.warning("%s of group %s failed: %r", method, group_id, failure)
            return error_reply(ErrorCode.NOT_COORDINATOR, f"{method} failed: {failure!r}")
        if isinstance(reply, ErrorReply):
            return reply._replace(code=_coordinator_error(reply.code))
        return reply


def _coordinator_error(code: int) -> int:
    """A group request's answer to what the offset manager said: where the partition moved,
    the client must find the coordinator again."""
    if code in (ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
        return ErrorCode.NOT_COORDINATOR
    return code


def _commit_entries(request: Any) -> list[list[Any]]:
    """An OffsetCommit's or TxnOffsetCommit's offsets, as the offset manager takes them: the
    leader epoch where the version carries one (-1 otherwise, Kafka's "unknown")."""
    return [[topic.name, part.partition_index, part.committed_offset,
             part.committed_metadata or "", getattr(part, "committed_leader_epoch", -1)]
            for topic in request.topics for part in topic.partitions]


def _commit_answer(request: Any, error: int, topic_type: Any, partition_type: Any
                   ) -> dict[str, Any]:
    """An OffsetCommit's or TxnOffsetCommit's answer: `error` for every partition asked."""
    return {"throttle_time_ms": 0, "topics": [
        topic_type(name=topic.name, partitions=[
            partition_type(partition_index=part.partition_index, error_code=error)
            for part in topic.partitions])
        for topic in request.topics]}


def _coordinator_fields(error: int, message: str | None, node: int = -1, host: str = "",
                        port: int = -1) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": error, "error_message": message,
            "node_id": node, "host": host, "port": port}


def _join_fields(api: Api, result: JoinResult) -> dict[str, Any]:
    member = api.response.JoinGroupResponseMember
    return {"throttle_time_ms": 0, "error_code": result.error,
            "generation_id": result.generation_id, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol_name or "", "leader": result.leader,
            "skip_assignment": False, "member_id": result.member_id,
            "members": [member(member_id=member_id, group_instance_id=instance_id,
                               metadata=metadata)
                        for member_id, metadata, instance_id in result.members]}


def _sync_fields(result: SyncResult) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": result.error,
            "protocol_type": result.protocol_type, "protocol_name": result.protocol_name,
            "assignment": result.assignment}
