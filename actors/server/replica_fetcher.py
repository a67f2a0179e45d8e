"""ReplicaFetcher: the follower side of replication between two replica hosts.

A follower host runs one fetcher per leader host it follows. One request serves every
partition the two hosts share, each with its own fetch offset and leader epoch, as Kafka's
replica fetcher threads do per pair of brokers; the leader host answers as soon as any of them
has records, or after `replica.fetch.wait.max.ms` (less while a partition backs off after an
error, so that it is listed again when its backoff ends: `fetch_wait_ms`). The request lists
only the partitions whose fetch state changed, in a fetch session the leader keeps
(`rafka.actors.server.fetch_session`).
It goes over a TCP connection the fetcher keeps to the leader host's data port
(`rafka.actors.dataport.server`), or, with `replica.fetch.transport=ray`, as an actor call; so do
the rarer requests (truncation's epoch queries, and the wake-up of a held fetch, on a connection
of its own). Over TCP the leader host's address is asked of Ray once, or, when Ray cannot say,
read from where its broker published it in ZooKeeper; nothing else on the path waits on Ray.

A partition that starts following (a new leader epoch) first truncates where the leader's epochs
say (KIP-101, with KIP-279's extra rounds, `rafka.actors.server.replication.follower_truncation`),
asked for all such partitions in one request.

The fetcher runs on its host's event loop and only touches replicas between two awaits, so a
reply is applied only to a replica still following that leader at that epoch.
"""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from rafka.actors.config import BrokerConfig
from rafka.actors.dataport import frames
from rafka.actors.dataport.async_client import LeaderConnection, PublishedAddress
from rafka.actors.errors import ErrorCode, code_of
from rafka.actors.messages import (
    EpochEndOffset,
    EpochQuery,
    ErrorReply,
    FetchedRecords,
    ReplicaFetchPartition,
    ReplicaFetchResponse,
)
from rafka.actors.server.replica import FOLLOWER, PartitionReplica
from rafka.actors.server.replication import follower_truncation
from rafka.common.topic_partition import TopicPartition
from rafka.logstore.errors import LogStoreError

log = logging.getLogger(__name__)

# A wake-up's answer says only that it was taken.
WAKE_ANSWER_BYTES = 64


def fetch_wait_ms(max_wait_ms: int, backoffs: list[float], now: float) -> int:
    """How long the leader may hold the next fetch: `replica.fetch.wait.max.ms`, or until the
    soonest of `backoffs` (monotonic s) still ahead ends. A partition backing off after an
    error (its leader not ready yet, as when a topic is new) is left out of fetches until
    then, and one held the whole wait would keep it out that long."""
    ahead = [until - now for until in backoffs if until > now]
    if not ahead:
        return max_wait_ms
    return min(max_wait_ms, math.ceil(min(ahead) * 1000))


def _error_text(reply: ErrorReply) -> str:
    try:
        code: object = ErrorCode(reply.code).name
    except ValueError:  # a code this process does not know
        code = reply.code
    return f"{code}: {reply.message}"[:300]


@dataclass
class _Following:
    replica: PartitionReplica
    leader_epoch: int
    # After an error for this partition alone: not fetched again before then (monotonic s).
    backoff_until: float = 0.0
    # When the leader last sent it records or a new high watermark (monotonic s; None: never),
    # and what went wrong last: what `describe` tells of a follower that lags.
    answered_at: float | None = None
    last_error: str | None = None

    @property
    def current(self) -> bool:
        return self.replica.role == FOLLOWER and self.replica.leader_epoch == self.leader_epoch


class ReplicaFetcher:
    """Fetches every partition this host follows on one leader host, in one fetch session."""

    def __init__(
        self,
        leader_host: str,
        broker_id: int,
        config: BrokerConfig,
        handle: Callable[[str], Awaitable[Any]],
        forget_if_dead: Callable[[str, BaseException], None],
        published: Callable[[str], PublishedAddress] | None = None,
    ) -> None:
        self.leader_host = leader_host
        self.broker_id = broker_id
        self.config = config
        self._handle = handle
        self._forget_if_dead = forget_if_dead
        self.partitions: dict[TopicPartition, _Following] = {}
        # The session: what the leader holds of it, what to list next time (changed or
        # answered), what to tell it is gone, and whether to start it over with a full list.
        self.session_id = secrets.randbits(62)
        self._full = True
        self._in_session: set[TopicPartition] = set()
        self._to_list: set[TopicPartition] = set()
        self._removed: set[TopicPartition] = set()
        self._untruncated: set[TopicPartition] = set()
        self._task: asyncio.Task | None = None
        # When the leader last answered a fetch (monotonic s): for `describe_fetching`.
        self._answered_at: float | None = None
        self._waking: asyncio.Future | None = None
        # Whether a fetch waits at the leader: a partition that starts following wakes it, so
        # that it is listed at once rather than after replica.fetch.wait.max.ms.
        self._waiting = False
        self._woken = False
        # The kept connection to the leader host (replica.fetch.transport=tcp), or None to
        # fetch by actor calls. Over it, nothing on the fetch path asks Ray once the leader's
        # address is known, and that may come from ZooKeeper (`published`).
        # The wake-ups of a held fetch have a connection of their own, since that fetch
        # holds this one.
        def connection() -> LeaderConnection | None:
            if config.replica_fetch_transport != "tcp":
                return None
            return LeaderConnection(config.replica_socket_timeout_ms / 1000,
                                    lambda: self._handle(self.leader_host),
                                    None if published is None else published(leader_host))

        self._connection, self._wake_connection = connection(), connection()
        self._answer_timeout_s = (config.replica_fetch_wait_max_ms
                                  + config.replica_socket_timeout_ms) / 1000
        # An answer holds at most the response's bytes, and one batch beyond it per partition
        # (a partition's first batch always goes): a generous bound on a frame.
        self._max_answer_bytes = max(4 * config.replica_fetch_response_max_bytes,
                                     64 * 1024 * 1024)

    def add(self, replica: PartitionReplica) -> None:
        """Follow `replica`'s partition at its current leader epoch (truncating first)."""
        tp = replica.tp
        self.partitions[tp] = _Following(replica, replica.leader_epoch)
        self._untruncated.add(tp)
        self._removed.discard(tp)
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        elif self._waiting and not self._woken:
            self._woken = True
            self._waking = asyncio.ensure_future(self._wake_session())

    async def _wake_session(self) -> None:
        try:
            if self._wake_connection is None:
                leader = await self._handle(self.leader_host)
                leader.wake_session.remote(self.broker_id, self.session_id)
            else:
                await self._wake_connection.call(
                    frames.WAKE_SESSION, (self.broker_id, self.session_id),
                    self.config.replica_socket_timeout_ms / 1000, WAKE_ANSWER_BYTES)
        except Exception as error:  # the leader's host is gone: the fetch fails anyway
            log.debug("could not wake the fetch from %s: %r", self.leader_host, error)

    def remove(self, tp: TopicPartition) -> None:
        if self.partitions.pop(tp, None) is None:
            return
        self._untruncated.discard(tp)
        self._to_list.discard(tp)
        if tp in self._in_session:
            self._in_session.discard(tp)
            self._removed.add(tp)

    def describe_fetching(self, tp: TopicPartition) -> dict[str, Any] | None:
        """How fetching `tp` goes (None: this fetcher does not fetch it): for `describe`."""
        following = self.partitions.get(tp)
        if following is None:
            return None
        now = time.monotonic()
        return {
            "leader_host": self.leader_host,
            "truncating": tp in self._untruncated,
            # The session's last answered fetch, if this partition was in it by then.
            "fetched_s_ago": (None if tp not in self._in_session or self._answered_at is None
                              else round(now - self._answered_at, 1)),
            "records_s_ago": (None if following.answered_at is None
                              else round(now - following.answered_at, 1)),
            "backing_off_s": round(max(0.0, following.backoff_until - now), 1),
            "last_error": following.last_error,
            "fetcher_running": self._task is not None and not self._task.done(),
        }

    def stop(self) -> None:
        self.partitions.clear()
        if self._task is not None:
            self._task.cancel()
        self._close_connections()

    def _close_connections(self) -> None:
        for connection in (self._connection, self._wake_connection):
            if connection is not None:
                connection.close()

    async def _run(self) -> None:
        try:
            while True:
                try:
                    await self._fetch_while_following()
                    return
                except asyncio.CancelledError:
                    raise
                except Exception:
                    # A bug, not a failed fetch (those are handled where they happen): this
                    # fetcher is the only one its partitions have, and nothing else would
                    # start it again while their leader epoch stays, so it goes on.
                    log.exception("the fetcher of broker %d from %s failed; starting its "
                                  "session again", self.broker_id, self.leader_host)
                    self._close_connections()
                    self._restart_session()
                    self._untruncated.update(self.partitions)
                    await asyncio.sleep(self.config.replica_fetch_backoff_ms / 1000)
        finally:
            self._close_connections()  # nothing left to fetch from this leader host

    async def _fetch_while_following(self) -> None:
        backoff_s = self.config.replica_fetch_backoff_ms / 1000
        while self.partitions or self._removed:
            try:
                leader: Any = (None if self._connection is not None
                               else await self._handle(self.leader_host))
                await self._truncate(leader)
                listing, backoffs = self._listing()
                removed = [(tp.topic, tp.partition) for tp in self._removed]
                if not listing and not self._in_session and not removed:
                    await asyncio.sleep(backoff_s)  # all truncating or backing off
                    continue
                self._waiting, self._woken = True, False
                arguments = (self.broker_id, self.session_id, self._full, listing, removed,
                              fetch_wait_ms(self.config.replica_fetch_wait_max_ms, backoffs,
                                            time.monotonic()),
                              self.config.replica_fetch_max_bytes,
                              self.config.replica_fetch_response_max_bytes)
                try:
                    if self._connection is None:
                        reply = await leader.replica_fetch.remote(*arguments)
                    else:
                        reply = await self._connection.fetch(
                            arguments, self._answer_timeout_s, self._max_answer_bytes)
                finally:
                    self._waiting = False
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the leader's host died or is not there yet
                log.debug("fetch from %s failed: %r", self.leader_host, error)
                for following in self.partitions.values():
                    following.last_error = f"fetch failed: {error!r}"[:300]
                # The wake-ups' connection goes too: to a host that went silent it is as
                # stale as the fetch's, and idle, nothing else would find out.
                self._close_connections()
                self._forget_if_dead(self.leader_host, error)
                self._restart_session()
                await asyncio.sleep(backoff_s)
                continue
            if code_of(reply) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self._restart_session()
                continue
            self._answered_at = time.monotonic()
            self._full = False
            self._removed.difference_update(TopicPartition(topic, partition)
                                            for topic, partition in removed)
            for request in listing:
                tp = TopicPartition(request.topic, request.partition)
                self._to_list.discard(tp)
                if tp in self.partitions:
                    self._in_session.add(tp)
                    self.partitions[tp].last_error = None  # an error answered sets it again
            fetched: ReplicaFetchResponse = reply
            for answer in fetched.partitions:
                tp = TopicPartition(answer.topic, answer.partition)
                self._apply(tp, answer.fetch_offset, answer.reply)
                if tp in self.partitions:
                    self._to_list.add(tp)  # answered: listed again, with where it is now

    def _restart_session(self) -> None:
        # A new id, as Kafka's full fetch asks for a new session: a fetch this follower gave
        # up on may still reach the leader (a paused host reads its backlog when it resumes),
        # and under the old id it would replace the session that replaced it.
        self.session_id = secrets.randbits(62)
        self._full = True
        self._in_session.clear()
        self._removed.clear()

    def _listing(self) -> tuple[list[ReplicaFetchPartition], list[float]]:
        """What the next fetch lists: every partition ready to fetch (full) or those changed
        or answered since the last fetch, unless backing off; and when the backoffs of those
        left out, and of those still to truncate, end (monotonic s)."""
        now = time.monotonic()
        candidates = self.partitions if self._full else self._to_list
        listing = []
        backing_off = []
        for tp in candidates:
            following = self.partitions.get(tp)
            if following is None or tp in self._untruncated or not following.current:
                continue
            if following.backoff_until > now:
                backing_off.append(tp)
                continue
            log_ = following.replica.log
            listing.append(ReplicaFetchPartition(tp.topic, tp.partition, log_.log_end_offset,
                                                 following.leader_epoch, log_.high_watermark))
        if self._full:
            self._to_list = set(backing_off)  # listed once their backoff is over
        backoffs = [self.partitions[tp].backoff_until for tp in backing_off]
        backoffs += [self.partitions[tp].backoff_until for tp in self._untruncated
                     if tp in self.partitions]
        return listing, backoffs

    def _apply(self, tp: TopicPartition, fetch_offset: int,
               reply: FetchedRecords | ErrorReply) -> None:
        following = self.partitions.get(tp)
        if following is None or not following.current:
            return
        replica = following.replica
        if replica.log.log_end_offset != fetch_offset:
            return  # truncated meanwhile: this reply was read for an offset we left
        if isinstance(reply, FetchedRecords):
            try:
                replica.append_from_leader(reply)
            except LogStoreError as error:
                log.warning("%s-%d on broker %d could not append what its leader sent (%s): "
                            "truncating and fetching again", tp.topic, tp.partition,
                            self.broker_id, error)
                following.last_error = f"append failed: {error}"[:300]
                self._untruncated.add(tp)
                return
            following.answered_at, following.last_error = time.monotonic(), None
            return
        following.last_error = _error_text(reply)
        if reply.code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if replica.log.log_end_offset < reply.log_start_offset:
                replica.log.truncate_fully_and_start_at(reply.log_start_offset)
            else:
                self._untruncated.add(tp)
            return
        following.backoff_until = time.monotonic() + self.config.replica_fetch_backoff_ms / 1000

    async def _epoch_ends(self, leader: Any, queries: list[EpochQuery]
                          ) -> list[EpochEndOffset | ErrorReply]:
        """The leader's OffsetsForLeaderEpoch: over the kept connection, or an actor call."""
        if self._connection is None:
            return await leader.offsets_for_leader_epoch.remote(queries)
        return await self._connection.call(frames.OFFSETS_FOR_LEADER_EPOCH, (queries,),
                                           self._answer_timeout_s, self._max_answer_bytes)

    async def _truncate(self, leader: Any) -> None:
        """KIP-101 for every partition that has just started following: one request a round."""
        asking = {
            tp: self.partitions[tp].replica.log.epoch_cache.latest_epoch
            for tp in self._untruncated if tp in self.partitions
        }
        self._untruncated &= set(self.partitions)
        while asking:
            # A partition whose log knows no epoch has nothing the leader could disagree with
            # beyond its high watermark: Kafka truncates it to the high watermark.
            for tp in [tp for tp, epoch in asking.items() if epoch is None]:
                del asking[tp]
                following = self.partitions.get(tp)
                if following is not None and following.current:
                    self._truncate_to(tp, following, min(following.replica.log.high_watermark,
                                                         following.replica.log.log_end_offset))
            if not asking:
                return
            queries = [EpochQuery(tp.topic, tp.partition, epoch, self.partitions[tp].leader_epoch)
                       for tp, epoch in asking.items()
                       if tp in self.partitions and epoch is not None]  # Nones left above
            answers = await self._epoch_ends(leader, queries)
            next_round = {}
            for query, answer in zip(queries, answers, strict=True):
                tp = TopicPartition(query.topic, query.partition)
                following = self.partitions.get(tp)
                if (following is None or not following.current
                        or following.leader_epoch != query.current_leader_epoch):
                    continue
                if isinstance(answer, ErrorReply):
                    following.last_error = f"truncation: {_error_text(answer)}"
                    following.backoff_until = (time.monotonic()
                                               + self.config.replica_fetch_backoff_ms / 1000)
                    continue
                log_ = following.replica.log
                decision = follower_truncation(
                    (answer.leader_epoch, answer.end_offset),
                    log_.end_offset_for_epoch,
                    log_.log_end_offset,
                    log_.high_watermark,
                )
                if decision.offset is not None:
                    self._truncate_to(tp, following, decision.offset)
                else:
                    next_round[tp] = decision.ask_epoch
            asking = next_round

    def _truncate_to(self, tp: TopicPartition, following: _Following, offset: int) -> None:
        replica = following.replica
        if offset < replica.log.log_end_offset:
            log.info("%s-%d on broker %d truncates to %d (leader epoch %d)", replica.topic,
                     replica.partition, self.broker_id, offset, following.leader_epoch)
            replica.log.truncate_to(offset)
        self._untruncated.discard(tp)
        self._to_list.add(tp)


class ReplicaFetcherManager:
    """A host's fetchers, one per leader host it follows (Kafka's ReplicaFetcherManager): each
    following replica is fetched by its leader host's. On the host's event loop."""

    def __init__(self, broker_id: int, config: BrokerConfig,
                 handle: Callable[[str], Awaitable[Any]],
                 forget_if_dead: Callable[[str, BaseException], None],
                 published: Callable[[str], PublishedAddress] | None = None) -> None:
        self.broker_id = broker_id
        self.config = config
        self._handle = handle
        self._forget_if_dead = forget_if_dead
        self._published = published
        self.fetchers: dict[str, ReplicaFetcher] = {}

    def role_changed(self, replica: PartitionReplica) -> None:
        """Fetch the replica from its leader host if it follows, by no fetcher otherwise."""
        self.remove(replica.tp)
        if replica.role == FOLLOWER and replica.leader_host is not None:
            fetcher = self.fetchers.get(replica.leader_host)
            if fetcher is None:
                fetcher = self.fetchers[replica.leader_host] = ReplicaFetcher(
                    replica.leader_host, self.broker_id, self.config, self._handle,
                    self._forget_if_dead, self._published)
            fetcher.add(replica)

    def remove(self, tp: TopicPartition) -> None:
        for fetcher in self.fetchers.values():
            fetcher.remove(tp)

    def describe_fetching(self, tp: TopicPartition) -> dict[str, Any] | None:
        """How fetching `tp` goes, if a fetcher fetches it."""
        for fetcher in self.fetchers.values():
            state = fetcher.describe_fetching(tp)
            if state is not None:
                return state
        return None

    def stop(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.stop()
        self.fetchers.clear()
