"""A consumer in a group, as Kafka's ZooKeeper-era high-level consumer (docs/consumer-groups.md).

Each member registers an ephemeral `/consumers/<g>/ids/<member>`, watches the group's members,
the brokers and the partition counts of its topics, and on any change computes the group's
assignment itself (every member computes the same one, from the same sorted members and
partitions). Ownership is the ephemeral owner znode `/consumers/<g>/owners/<t>/<p>`: a member
reads a partition only while it holds that znode, so no partition has two readers in a group.

The rebalance is incremental: a member releases only the partitions that move away from it
(committing their offsets first) and claims only those that move to it, retrying a claim until
the previous owner lets go. Partitions that stay keep flowing. It all happens inside `poll()`,
on the caller's thread, as in Kafka's consumer; watches only raise a flag.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import ray

from rafka.actors.clients.assignors import Subscription, resolve_assignor
from rafka.actors.clients.consumer import Consumer, ConsumerRecord
from rafka.actors.clients.metadata import ClientMetadata
from rafka.actors.dataport.blocking_client import HostConnectionError
from rafka.actors.dataport.calls import call_and_wait, host_calls
from rafka.actors.dataport.frames import COMMIT_OFFSETS, FETCH_OFFSETS
from rafka.actors.errors import (
    BrokerUnavailableError,
    CommitFailedError,
    is_retriable,
    raise_for,
)
from rafka.actors.messages import ErrorReply, FetchedRecords
from rafka.actors.metrics import ConsumerLag
from rafka.actors.offsets_topic import (
    OFFSETS_TOPIC,
    ensure_offsets_topic,
    offsets_partition,
)
from rafka.common.topic_partition import PartitionKey, TopicPartition
from rafka.common.waiting import wait_until
from rafka.coordination.admin import TopicAdmin
from rafka.coordination.errors import CoordinationError
from rafka.coordination.groups import GroupStore
from rafka.coordination.security import ClusterCredentials
from rafka.coordination.store import ClusterStore, SessionEvent
from rafka.coordination.validation import validate_group_id
from rafka.coordination.watches import ClusterWatches

log = logging.getLogger(__name__)

PartitionsCallback = Callable[[set[TopicPartition]], object]
T = TypeVar("T")

# `host.<method>(*arguments)` of the host called `name`, answered within `timeout_s`.
HostCall = Callable[[str, Any, str, tuple[Any, ...], float], Any]


def call_by_ray(_name: str, host: Any, method: str, arguments: tuple[Any, ...],
                timeout_s: float) -> Any:
    """A `HostCall` as an actor call: for callers without a transport of their own."""
    return ray.get(getattr(host, method).remote(*arguments), timeout=timeout_s)

# How often a member retries claiming a partition its previous owner has not released yet.
CLAIM_RETRY_S = 0.1

# How often a member reads a partition's high watermark back from a fetch reply, for the lag
# metric. The reply was already read once by the fetch path; reading it again copies its records,
# so not on every fetch: the lag is at most this much staler than the position.
LAG_REFRESH_S = 1.0


def new_member_id(client_id: str) -> str:
    """Kafka's ZooKeeper-era consumer id (`<client>_<host>-<time>-<uuid>`), time first after the
    client id, so that the members of one client id sort in the order they joined."""
    return f"{client_id or 'consumer'}-{time.time_ns():020d}-{socket.gethostname()}-" \
           f"{uuid.uuid4().hex[:8]}"


def offset_manager(metadata: ClientMetadata, group: str, wait_s: float
                   ) -> tuple[str, Any, int]:
    """The replica host that manages `group`'s offsets (it leads the group's partition of
    `__consumer_offsets`): its name and actor, and that partition."""
    partition = offsets_partition(group, metadata.partition_count(OFFSETS_TOPIC))
    name, host = metadata.leader_host(OFFSETS_TOPIC, partition, wait_s=wait_s)
    return name, host, partition


def _ask_offset_manager(
    metadata: ClientMetadata,
    group: str,
    timeout_s: float,
    ask: Callable[[str, Any, int, float], T],
    *,
    refused: Callable[[Exception], Exception] | None,
    timed_out: Callable[[Exception], Exception],
) -> T:
    """`ask(manager, partition, deadline)` of `group`'s offset manager, again (after a metadata
    refresh, since the manager may have moved) while it fails retriably and `timeout_s` allows;
    `refused(error)` is raised for an error that is not retriable (the error itself if None),
    `timed_out(error)` when time is up."""
    deadline = time.monotonic() + timeout_s
    while True:
        name = None
        try:
            name, manager, partition = offset_manager(
                metadata, group, wait_s=max(0.0, deadline - time.monotonic()))
            return ask(name, manager, partition, deadline)
        except Exception as error:
            if name is not None:
                metadata.forget_if_dead(name, error)
            if not is_retriable(error):
                if refused is None:
                    raise
                raise refused(error) from error
            metadata.invalidate(OFFSETS_TOPIC)
            if time.monotonic() >= deadline:
                raise timed_out(error) from error
            time.sleep(0.1)


def fetch_committed(
    metadata: ClientMetadata, group: str, partitions: Iterable[tuple[str, int]], timeout_s: float,
    call: HostCall = call_by_ray,
) -> dict[TopicPartition, int | None]:
    """A group's committed offsets from its offset manager (None where none is committed),
    asked with `call`."""
    wanted = [TopicPartition(*tp) for tp in partitions]

    def ask(name: str, manager: Any, partition: int, deadline: float
            ) -> dict[TopicPartition, int | None]:
        # A replica host still starting (a new offsets topic) answers late, not never: like a
        # commit, wait for it only as long as is left, then ask again.
        reply = raise_for(call(name, manager, FETCH_OFFSETS,
                               (partition, group, [list(tp) for tp in wanted]),
                               max(0.1, deadline - time.monotonic())))
        stored = {TopicPartition(entry.topic, entry.partition): entry.offset
                  for entry in reply.offsets}
        return {tp: stored.get(tp) for tp in wanted}

    return _ask_offset_manager(
        metadata, group, timeout_s, ask, refused=None,
        timed_out=lambda error: BrokerUnavailableError(
            f"group {group}: no offset manager answered within {timeout_s} s"))


def store_committed(
    metadata: ClientMetadata, group: str, offsets: Mapping[PartitionKey, int], timeout_s: float,
    call: HostCall = call_by_ray,
) -> None:
    """Commit a group's offsets through its offset manager, with `call`; CommitFailedError if
    not in time."""
    entries = [[topic, partition, offset, ""] for (topic, partition), offset in offsets.items()]

    def ask(name: str, manager: Any, partition: int, deadline: float) -> None:
        remaining_ms = int(max(0.1, deadline - time.monotonic()) * 1000)
        raise_for(call(name, manager, COMMIT_OFFSETS, (partition, group, entries, remaining_ms),
                       timeout_s))

    _ask_offset_manager(
        metadata, group, timeout_s, ask,
        refused=lambda error: CommitFailedError(f"group {group}: commit failed: {error}"),
        timed_out=lambda error: CommitFailedError(
            f"group {group}: commit of {len(entries)} offsets did not complete "
            f"within {timeout_s} s ({error}); the records may be read again"))


class GroupConsumer(Consumer):
    """`cluster.consumer(topics, group=...)`: subscribe, rebalance, commit."""

    def __init__(
        self,
        namespace: str,
        zk_address: str,
        cluster_name: str,
        topics: Iterable[str],
        *,
        on_partitions_revoked: PartitionsCallback | None = None,
        on_partitions_assigned: PartitionsCallback | None = None,
        zk_credentials: ClusterCredentials | str | None = None,
        **config: Any,
    ) -> None:
        super().__init__(namespace, **config)
        if not self.config.group_id:
            raise ValueError("a group consumer needs group_id")
        self.group = validate_group_id(self.config.group_id)
        self.topics = sorted(set(topics))
        if not self.topics:
            raise ValueError("subscribe to at least one topic")
        self.member_id = new_member_id(self.config.client_id)
        self.assignor = resolve_assignor(self.config.partition_assignment_strategy)
        self.on_partitions_revoked = on_partitions_revoked
        self.on_partitions_assigned = on_partitions_assigned
        self.store = ClusterStore(
            zk_address, cluster_name, session_timeout_ms=self.config.session_timeout_ms,
            credentials=zk_credentials,
        ).start()
        self.groups = GroupStore(self.store)
        self.admin = TopicAdmin(self.store)
        self.metadata.zookeeper = self.store
        self._owned: set[TopicPartition] = set()
        self._target: set[TopicPartition] = set()
        self._rebalance_needed = threading.Event()
        # The group's commits and offset fetches go over the consumer's transport (its data
        # port connections, with `transport=tcp`), on calls of their own, since they come from
        # the commit thread as well as the caller's: one at a time.
        self._offset_calls = host_calls(self.config.transport, self.config.request_timeout_ms,
                                        self.config.fetch_max_bytes,
                                        zookeeper=lambda: self.metadata.zookeeper)
        self._offset_calls_lock = threading.Lock()
        # One worker: asynchronous commits are stored one after another, in order.
        self._async_commits = ThreadPoolExecutor(max_workers=1,
                                                 thread_name_prefix="rafka-commit")
        self._rebalance_needed.set()
        self._suspended = False
        self._last_claim_try = 0.0
        self._last_auto_commit = time.monotonic()
        self._pending_commits: list[Any] = []
        self.lag = ConsumerLag(self.group)
        self._high_watermark_read_at: dict[TopicPartition, float] = {}
        try:
            for topic in self.topics:
                self.metadata.partition_count(topic)  # UnknownTopicError now, not later
            if self.config.offsets_storage == "kafka":
                ensure_offsets_topic(self.store)
            self.store.add_session_listener(self._on_session)
            # InconsistentGroupProtocolError while Kafka clients are members of the group.
            self.registration = self.groups.register_member(
                self.group, self.member_id, dict.fromkeys(self.topics, 1),
                on_registered=self._rebalance_needed.set,
                on_unregistered=self._lose_everything,
            )
        except BaseException:  # a consumer that could not join holds no session or thread
            self._async_commits.shutdown(wait=False)
            self.store.close()
            self._offset_calls.close()
            super().close()
            raise
        watches = ClusterWatches(self.store)
        self._watches = [
            watches.watch_group_members(self.group, lambda _m: self._rebalance_needed.set()),
            watches.watch_broker_ids(lambda _b: self._rebalance_needed.set()),
            *(watches.watch_topic_assignment(topic, lambda _a: self._rebalance_needed.set())
              for topic in self.topics),
        ]

    # ------------------------------------------------------------------ session events

    def _on_session(self, event: SessionEvent) -> None:
        # While disconnected our owner znodes may be expiring: read nothing until we know.
        if event is SessionEvent.SUSPENDED:
            self._suspended = True
        elif event in (SessionEvent.RECONNECTED, SessionEvent.CONNECTED):
            self._suspended = False
            self._rebalance_needed.set()

    def _lose_everything(self) -> None:
        """Our session expired: the owner znodes are gone, and others may read our partitions."""
        self._owned = set()
        self._target = set()
        self._rebalance_needed.set()

    # ------------------------------------------------------------------------- rebalance

    def _compute_target(self) -> set[TopicPartition]:
        members = {m: Subscription(sub.subscription) for m, sub in
                   self.groups.members(self.group).items()}
        if self.member_id not in members:
            return set()
        topics = sorted(set().union(*(s.topics for s in members.values())))
        partitions = {}
        for topic in topics:
            try:
                partitions[topic] = self.admin.read_assignment(topic).value.partition_count
            except CoordinationError:
                continue  # deleted, or not created yet
        current: dict[str, list[TopicPartition]] = {m: [] for m in members}
        for topic in topics:
            for partition, owner in self.groups.owners(self.group, topic).items():
                if owner in current:
                    current[owner].append(TopicPartition(topic, partition))
        assignment = self.assignor.assign(members, partitions, current)
        return {TopicPartition(*tp) for tp in assignment.get(self.member_id, ())}

    def _rebalance(self) -> None:
        self._rebalance_needed.clear()
        try:
            target = self._compute_target()
        except CoordinationError as error:
            log.warning("group %s: rebalance postponed: %s", self.group, error)
            self._rebalance_needed.set()
            return
        revoked = self._owned - target
        if revoked:
            if self.on_partitions_revoked is not None:
                self.on_partitions_revoked(set(revoked))
            if self.config.enable_auto_commit:
                self._commit_quietly(self._consumed(revoked))
            self._owned -= revoked
            self._assign_owned()
            for tp in revoked:
                self.groups.release_partition(self.group, tp.topic, tp.partition,
                                              self.member_id)
        self._target = target
        self._claim_pending()

    def _claim_pending(self) -> None:
        self._last_claim_try = time.monotonic()
        claimed = set()
        for tp in sorted(self._target - self._owned):
            if self.groups.try_claim_partition(self.group, tp.topic, tp.partition,
                                               self.member_id):
                claimed.add(tp)
        if not claimed:
            return
        try:
            committed = self.committed(claimed)
        except BrokerUnavailableError as error:
            # Reading from a guessed position could skip or repeat records: keep the claims
            # (claiming again is harmless) and take the partitions up at the next retry, as
            # Kafka's poll returns nothing while the committed offsets are not in.
            log.warning("group %s: committed offsets not available yet: %s", self.group, error)
            return
        self._owned |= claimed
        self._assign_owned()
        for tp in claimed:
            offset = committed.get(tp)
            if offset is not None:
                self.seek(tp.topic, tp.partition, offset)
        if self.on_partitions_assigned is not None:
            self.on_partitions_assigned(set(claimed))

    def _assign_owned(self) -> None:
        super().assign(sorted(self._owned))

    def _maintained_and_settled(self) -> bool:
        self._maintain()
        return not self._suspended and bool(self._owned)

    def _maintain(self) -> None:
        if self._suspended:
            return
        if self._rebalance_needed.is_set():
            self._rebalance()
        elif self._target - self._owned and (
            time.monotonic() - self._last_claim_try > CLAIM_RETRY_S
        ):
            self._claim_pending()
        if (
            self.config.enable_auto_commit
            and time.monotonic() - self._last_auto_commit > self.config.auto_commit_interval_ms
            / 1000
        ):
            self._last_auto_commit = time.monotonic()
            self.commit_async()

    # ----------------------------------------------------------------------------- API

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        raise TypeError("a group consumer's partitions are assigned by its group; "
                        "use a consumer without group= to assign partitions yourself")

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Take part in the group (rebalance, claim, auto-commit), then fetch."""
        deadline = time.monotonic() + timeout_ms / 1000
        try:
            # Nothing to read until this member owns partitions: take part in the group (one
            # turn if it has settled already), a little at a time until it does.
            wait_until(self._maintained_and_settled, timeout_ms / 1000, "the group to settle",
                       interval_s=0.05)
        except TimeoutError:
            return []
        remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
        records = super().poll(remaining_ms, max_records)
        self.lag.update(self._positions)
        return records

    def _on_fetched(self, tp: TopicPartition, reply: FetchedRecords | ErrorReply) -> None:
        if not self.lag.on:
            return
        now = time.monotonic()
        if now - self._high_watermark_read_at.get(tp, -LAG_REFRESH_S) < LAG_REFRESH_S:
            return
        self._high_watermark_read_at[tp] = now
        if isinstance(reply, FetchedRecords):
            self.lag.high_watermarks[tp] = reply.high_watermark

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member owns (and reads) now."""
        return set(self._owned)

    def _consumed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: position for tp in partitions
                if (position := self._positions.get(tp)) is not None}

    def commit(
        self, offsets: Mapping[tuple[str, int], int] | None = None, timeout_s: float = 10.0
    ) -> None:
        """Commit (synchronously) the position of every owned partition, or `offsets`.

        Raises CommitFailedError if it does not complete in time, or names a partition this
        member no longer owns (the group rebalanced: another member may have read it).
        """
        by_partition = (self._consumed(self._owned) if offsets is None
                        else {TopicPartition(*tp): offset for tp, offset in offsets.items()})
        foreign = set(by_partition) - self._owned
        if foreign:
            raise CommitFailedError(
                f"cannot commit {sorted(foreign)}: this member no longer owns them (the group "
                "rebalanced); their records may be read again by their new owner"
            )
        if by_partition:
            self._store_offsets(by_partition, timeout_s)

    def commit_async(self, offsets: Mapping[tuple[str, int], int] | None = None) -> None:
        """Commit without waiting; a failure is logged (the next commit covers it).

        Commits are stored in the order they were asked for, as Kafka's go over one
        connection in order: an earlier commit landing last would move the offset back.
        """
        self._async_commits.submit(
            self._commit_quietly, self._consumed(self._owned) if offsets is None
            else {TopicPartition(*tp): offset for tp, offset in offsets.items()})

    def _commit_quietly(self, offsets: Mapping[TopicPartition, int]) -> None:
        try:
            if offsets:
                self._store_offsets({TopicPartition(*tp): o for tp, o in offsets.items()}, 10.0)
        except Exception as error:
            log.warning("group %s: commit of %s failed: %s", self.group, dict(offsets), error)

    def _store_offsets(self, offsets: Mapping[TopicPartition, int], timeout_s: float) -> None:
        if self.config.offsets_storage == "zookeeper":
            for tp, offset in offsets.items():
                self.groups.commit_offset(self.group, tp.topic, tp.partition, offset)
            return
        store_committed(self.metadata, self.group, offsets, timeout_s, self._call_offset_manager)

    def _call_offset_manager(self, name: str, host: Any, method: str,
                             arguments: tuple[Any, ...], timeout_s: float) -> Any:
        # An asynchronous commit still waiting on a silent manager holds the calls: wait for it
        # only as long as this request may take.
        if not self._offset_calls_lock.acquire(timeout=timeout_s):
            raise HostConnectionError(f"{name}: an earlier offsets request is still unanswered")
        try:
            return call_and_wait(self._offset_calls, name, host, method, arguments, timeout_s)
        finally:
            self._offset_calls_lock.release()

    def committed(
        self, partitions: Iterable[tuple[str, int]], timeout_s: float = 10.0
    ) -> dict[TopicPartition, int | None]:
        """The group's committed offset of each partition (None where nothing is committed)."""
        wanted = [TopicPartition(*tp) for tp in partitions]
        if self.config.offsets_storage == "zookeeper":
            found = {}
            for tp in wanted:
                versioned = self.groups.read_offset(self.group, tp.topic, tp.partition)
                found[tp] = None if versioned is None else versioned.value
            return found
        return fetch_committed(self.metadata, self.group, wanted, timeout_s,
                               self._call_offset_manager)

    def close(self, *, commit: bool | None = None) -> None:
        """Leave the group: commit (with auto-commit), release everything, unregister."""
        if self._closed:
            return
        self._async_commits.shutdown(wait=True)  # what was asked for goes first
        if commit if commit is not None else self.config.enable_auto_commit:
            self._commit_quietly(self._consumed(self._owned))
        for watch in self._watches:
            watch.cancel()
        for tp in self._owned:
            # Closing the session below removes the claim anyway.
            with contextlib.suppress(CoordinationError):
                self.groups.release_partition(self.group, tp.topic, tp.partition,
                                              self.member_id)
        self._owned = set()
        self.registration.unregister()
        self.store.close()
        self._offset_calls.close()
        super().close()
