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


# A fetch session nobody used for this long is dropped (Kafka evicts idle sessions too).
SESSION_IDLE_TIMEOUT_S = 120.0


class FetchSessionCache:
    """A leader host's fetch sessions (Kafka's FetchSessionCache), and which of them carry each
    partition, so that a partition's change wakes those (`watchers`). On the host's event loop.
    """

    def __init__(self) -> None:
        self.sessions: dict[tuple[int, int], FetchSession] = {}
        self.watchers: dict[TopicPartition, set[FetchSession]] = {}
        # Wakes of sessions whose full fetch has not arrived yet (monotonic s when woken): the
        # session starts woken. The wake is an actor call, the fetch may come over the data
        # port, and either may come first.
        self._early_wakes: dict[tuple[int, int], float] = {}

    def open(self, follower_id: int, session_id: int) -> FetchSession:
        """The session a full fetch starts, in place of the one of that id, if any."""
        key = (follower_id, session_id)
        # A wake meant for this fetch may have come before it, to the session it replaces
        # or to none yet: it still answers this fetch at once.
        woken = self._early_wakes.pop(key, None) is not None
        session = self.sessions.get(key)
        if session is not None:
            woken = woken or session.woken
            self.close(session)
        session = self.sessions[key] = FetchSession(follower_id, session_id)
        session.woken = woken
        return session

    def wake(self, follower_id: int, session_id: int) -> None:
        """Answer the session's waiting fetch now (or, if that fetch has not arrived yet, as
        soon as it does)."""
        session = self.sessions.get((follower_id, session_id))
        if session is not None:
            session.wake()
        else:
            self._early_wakes[(follower_id, session_id)] = time.monotonic()

    def unwatch(self, session: FetchSession, tp: TopicPartition) -> None:
        watchers = self.watchers.get(tp)
        if watchers is not None:
            watchers.discard(session)
            if not watchers:
                del self.watchers[tp]

    def close(self, session: FetchSession) -> None:
        for tp in list(session.members):
            self.unwatch(session, tp)
        self.sessions.pop((session.follower_id, session.session_id), None)
        session.event.set()

    def drop_idle(self) -> None:
        """Sessions of followers that stopped fetching (a host that died, a broker that went):
        their follower starts a new one if it comes back."""
        limit = time.monotonic() - SESSION_IDLE_TIMEOUT_S
        for session in [s for s in self.sessions.values() if s.last_used < limit]:
            self.close(session)
        for key in [key for key, woken_at in self._early_wakes.items() if woken_at < limit]:
            del self._early_wakes[key]
