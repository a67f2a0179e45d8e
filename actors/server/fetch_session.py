"""Fetch sessions between a follower host and a leader host, after Kafka's KIP-227.

Two hosts share hundreds of partitions; a follower host that listed them all in every fetch,
and a leader host that looked at them all every time, would spend an idle cluster's CPU on
partitions where nothing happens. In a session the follower lists a partition only when its
fetch state changed (new records appended, a new high watermark, a new leader epoch) or when the
leader answered for it last time; the leader remembers the rest, and is told by the partitions
themselves (`PartitionReplica.listeners`) which ones changed, so both sides do work in
proportion to what changes, not to what they share.

A session is the follower's (`session_id`, chosen by it); the leader answers
FETCH_SESSION_ID_NOT_FOUND to an incremental fetch of a session it does not hold (it restarted,
or dropped the session when idle), and the follower starts again with a full list.

What a session skips for an unlisted partition the leader still owes the replication arithmetic:
the follower fetched it, at its last listed offset, at the session's time (`FetchClock`; see
`LeaderState.before_append`).
"""

from __future__ import annotations

import asyncio
import builtins
import time

from rafka.actors.messages import ReplicaFetchPartition
from rafka.actors.server.replication import FetchClock
from rafka.common.topic_partition import TopicPartition


class FetchSession:
    """The leader host's side of one follower host's session."""

    def __init__(self, follower_id: int, session_id: int) -> None:
        self.follower_id = follower_id
        self.session_id = session_id
        self.clock = FetchClock()
        self.last_used = time.monotonic()
        # Every partition in the session, and, for those the follower is not yet due to list
        # again, the state it last listed.
        self.members: set[TopicPartition] = set()
        self.listed: dict[TopicPartition, ReplicaFetchPartition] = {}
        # Partitions that changed since the session last looked at them.
        self.dirty: set[TopicPartition] = set()
        self.event = asyncio.Event()
        # The follower has a partition to list: its waiting fetch (or the next) answers now.
        self.woken = False

    def touch(self, now_ms: int) -> None:
        self.clock.last_fetch_ms = now_ms
        self.last_used = time.monotonic()

    def list(self, request: ReplicaFetchPartition) -> TopicPartition:
        tp = TopicPartition(request.topic, request.partition)
        self.members.add(tp)
        self.listed[tp] = request
        self.dirty.add(tp)
        return tp

    def remove(self, tp: TopicPartition) -> None:
        self.members.discard(tp)
        self.listed.pop(tp, None)
        self.dirty.discard(tp)

    def answered(self, tp: TopicPartition) -> None:
        """The follower lists a partition again after an answer about it."""
        self.listed.pop(tp, None)

    def wake(self) -> None:
        self.woken = True
        self.event.set()

    def mark(self, tp: TopicPartition) -> None:
        if tp in self.listed:
            self.dirty.add(tp)
            self.event.set()

    def take_dirty(self) -> builtins.list[tuple[TopicPartition, ReplicaFetchPartition]]:
        """The changed partitions the follower waits to hear about; clears the marks."""
        dirty, self.dirty = self.dirty, set()
        return [(tp, self.listed[tp]) for tp in dirty if tp in self.listed]
