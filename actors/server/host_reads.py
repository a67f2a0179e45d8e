"""What a replica host's fetches and reads share, apart from the actor class (whose every method
Ray wraps): a consumer fetch's wait on many partitions at once, a follower host's fetch in its
session, the metrics of what was served, a pipeline's table read, and the answer for a
partition not hosted here.

All of it runs on the host's event loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import (
    ErrorReply,
    FetchedRecords,
    PartitionFetch,
    ReplicaFetchPartition,
    TableRead,
)
from rafka.actors.path_trace import CONSUMER
from rafka.actors.server import leader_reads
from rafka.actors.server.fetch_session import FetchSession, FetchSessionCache
from rafka.actors.server.replica import PartitionReplica
from rafka.common.clock import wall_clock_ms
from rafka.common.topic_partition import TopicPartition
from rafka.common.waiting import wait_for_event
from rafka.logstore.batch import decode_columns

# What a replica answers a query with, when it answers it.
Answer = TypeVar("Answer")


def unknown_partition(broker_id: int, topic: str, partition: int) -> ErrorReply:
    return error_reply(
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        f"broker {broker_id} hosts no replica of {topic}-{partition} here: refresh metadata",
    )


def answer_each(
    replicas: dict[TopicPartition, PartitionReplica], broker_id: int, queries: list[Any],
    answer: Callable[[PartitionReplica, Any], Answer],
) -> list[Answer | ErrorReply]:
    """`answer(replica, query)` for each query's partition, or why it is not here."""
    answers: list[Answer | ErrorReply] = []
    for query in queries:
        replica = replicas.get(TopicPartition(query.topic, query.partition))
        answers.append(answer(replica, query) if replica is not None
                       else unknown_partition(broker_id, query.topic, query.partition))
    return answers


def fetched_size(reply: FetchedRecords | ErrorReply) -> int:
    """The bytes of records a partition's fetch reply carries (an error carries none)."""
    return len(reply.records) if isinstance(reply, FetchedRecords) else 0


class Listening:
    """Registered with many replicas for the length of a `with` block: a consumer's fetch
    waiting on many partitions wakes when any of them changes."""

    def __init__(self, replicas: list[PartitionReplica]) -> None:
        self.replicas = replicas
        self.event = asyncio.Event()

    def changed(self, replica: PartitionReplica) -> None:
        self.event.set()

    def __enter__(self) -> asyncio.Event:
        for replica in self.replicas:
            replica.listeners.add(self)
        return self.event

    def __exit__(self, *exc_info: object) -> None:
        for replica in self.replicas:
            replica.listeners.discard(self)


async def consumer_fetch(
    replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
    requests: list[PartitionFetch], max_wait_ms: int, min_bytes: int, max_bytes: int,
    read_committed: bool, followers_answer: bool,
) -> list[FetchedRecords | ErrorReply]:
    """`ReplicaHost.fetch`: each partition's batches from its offset, then a wait up to
    `max_wait_ms` until `min_bytes` are there in all. `followers_answer`: a follower replica
    answers too, up to its own high watermark (a Kafka consumer's fetch, KIP-392)."""
    started = time.perf_counter()
    hosted = [replicas.get(TopicPartition(r.topic, r.partition)) for r in requests]
    replies: list[FetchedRecords | ErrorReply] = []
    budget = max_bytes
    for request, replica in zip(requests, hosted, strict=True):
        if replica is None:
            replies.append(unknown_partition(broker_id, request.topic, request.partition))
        elif budget <= 0:  # the rest waits for the next fetch
            replies.append(leader_reads.nothing_at(replica, request.offset))
        else:
            replies.append(leader_reads.read(
                replica, request.offset, request.max_bytes, follower=False,
                read_committed=read_committed, followers_answer=followers_answer))
            budget -= fetched_size(replies[-1])
    total = max_bytes - budget
    live = [(index, replica) for index, replica in enumerate(hosted) if replica is not None]
    if total < min_bytes and live and max_wait_ms > 0:
        await wait_for_consumer_records(requests, live, replies, max_wait_ms,
                                        min_bytes - total, read_committed, followers_answer)
    count_served(replicas, ((TopicPartition(r.topic, r.partition), r.offset, reply)
                            for r, reply in zip(requests, replies, strict=True)),
                 started, replica_id=CONSUMER)
    return replies


async def wait_for_consumer_records(
    requests: list[PartitionFetch], live: list[tuple[int, PartitionReplica]],
    replies: list[FetchedRecords | ErrorReply], max_wait_ms: int, missing_bytes: int,
    read_committed: bool, followers_answer: bool = False,
) -> None:
    """Wait until `missing_bytes` more can be read (or an error is news), reading again
    only the partitions that changed."""

    def seen(replica: PartitionReplica) -> tuple[int, Any, int]:
        return replica.log.high_watermark, replica.role, replica.leader_epoch

    deadline = time.monotonic() + max_wait_ms / 1000
    states = {index: seen(replica) for index, replica in live}
    with Listening([replica for _index, replica in live]) as event:
        while missing_bytes > 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            event.clear()
            if all(seen(replica) == states[index] for index, replica in live):
                await wait_for_event(event, remaining)
            for index, replica in live:
                if seen(replica) == states[index]:
                    continue
                states[index] = seen(replica)
                request = requests[index]
                replies[index] = leader_reads.read(replica, request.offset, request.max_bytes,
                                                follower=False, read_committed=read_committed,
                                                followers_answer=followers_answer)
                if not isinstance(replies[index], FetchedRecords):
                    return  # an error is news: answer now
                missing_bytes -= fetched_size(replies[index])


def count_served(
    replicas: dict[TopicPartition, PartitionReplica],
    served: Iterable[tuple[TopicPartition, int, FetchedRecords | ErrorReply]],
    started: float, *, replica_id: int,
) -> None:
    """Metrics of a fetch, from `(partition, fetch offset, reply)` of each partition;
    `replica_id` is the follower's broker id, or `CONSUMER`.

    Records served are those from the fetch offset on, read off the reply's offsets, not by
    decoding the batches (exact except across compaction gaps, where it counts the gap).
    Latency once per topic: an idle fetch of many partitions must not cost a metric call
    for each.
    """
    elapsed_ms = (time.perf_counter() - started) * 1000
    follower = replica_id != CONSUMER
    timed: set[str] = set()
    for tp, fetch_offset, reply in served:
        replica = replicas.get(tp)
        if replica is None or not isinstance(reply, FetchedRecords):
            continue
        if tp.topic not in timed:
            timed.add(tp.topic)
            replica.metrics.fetch_latency(follower, elapsed_ms)
        if reply.records:
            replica.metrics.fetched(follower, reply.next_offset - fetch_offset,
                                    len(reply.records))
            if replica.path_trace is not None:
                replica.path_trace.answered_read(replica_id, reply.next_offset)


def read_table(
    replica: PartitionReplica | None, broker_id: int, topic: str, partition: int, start: int,
    until: int, max_bytes: int, include_headers: bool,
) -> tuple[Any, TableRead]:
    """`ReplicaHost.read_table`: the leader's records in `[start, until)`, at most about
    `max_bytes` of batches (always at least one batch), as an Arrow table with the columns of
    Spark's Kafka source, and where the read stopped."""
    from rafka.actors.record_tables import records_table  # pyarrow only where it is used

    def failed(error: ErrorReply) -> tuple[Any, TableRead]:
        return (records_table([], topic, partition, include_headers),
                TableRead(0, start, -1, -1, error))

    if replica is None:
        return failed(unknown_partition(broker_id, topic, partition))
    batches = []
    offset, budget = start, max_bytes
    while offset < until and budget > 0:
        reply = leader_reads.read(replica, offset, budget, follower=False)
        if not isinstance(reply, FetchedRecords):
            if offset == start:
                return failed(reply)
            break  # what was read stands; the caller asks again from `offset`
        if not reply.records:
            break
        batches += decode_columns(reply.records, offset, until)
        budget -= len(reply.records)
        offset = min(reply.next_offset, until)
    table = records_table(batches, topic, partition, include_headers)
    log_ = replica.log
    return table, TableRead(table.num_rows, offset, log_.high_watermark,
                            log_.log_start_offset, size_bytes=table.nbytes)


# ------------------------------------------------------------------ follower hosts' fetches

def open_replica_fetch(
    sessions: FetchSessionCache, replicas: dict[TopicPartition, PartitionReplica],
    follower_id: int, session_id: int, full: bool, partitions: list[ReplicaFetchPartition],
    removed: list[tuple[str, int]],
) -> FetchSession | ErrorReply:
    """The session of a follower host's fetch (a new one when `full`), with what the fetch
    lists and removes taken in, and each listed offset counted by its leader towards the high
    watermark and the ISR; or the error reply for a session not held here."""
    session = (sessions.open(follower_id, session_id) if full
               else sessions.sessions.get((follower_id, session_id)))
    if session is None:
        return error_reply(ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                           f"no fetch session {session_id} of broker {follower_id} here: "
                           "start a new one with a full fetch")
    session.touch(wall_clock_ms())
    for topic, partition in removed:
        tp = TopicPartition(topic, partition)
        session.remove(tp)
        sessions.unwatch(session, tp)
    watchers = sessions.watchers
    for request in partitions:
        tp = session.list(request)
        watchers.setdefault(tp, set()).add(session)
        replica = replicas.get(tp)
        if replica is not None and leader_reads.check_leader_epoch(
                replica, request.leader_epoch) is None:
            replica.isr_manager.record_follower_fetch(follower_id, request.offset,
                                                      session.clock)
    return session


def read_changed(
    session: FetchSession, replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
    answers: dict[TopicPartition, tuple[int, FetchedRecords | ErrorReply]],
    watermark_news: set[TopicPartition], budget: int, partition_max_bytes: int,
) -> int:
    """One look at the session's changed partitions: each with records or an error is
    answered (into `answers`, with its fetch offset), each with only a new high watermark
    noted in `watermark_news`. Returns the bytes left of the fetch's `budget`."""
    for tp, request in session.take_dirty():
        replica = replicas.get(tp)
        if replica is None:
            answers[tp] = (request.offset, unknown_partition(broker_id, tp.topic, tp.partition))
        elif (refused := leader_reads.check_leader_epoch(
                replica, request.leader_epoch)) is not None:
            answers[tp] = (request.offset, refused)
        elif request.offset != replica.log.log_end_offset:
            if budget <= 0:
                session.dirty.add(tp)  # the next fetch brings it
                continue
            answers[tp] = (request.offset, leader_reads.read(
                replica, request.offset, partition_max_bytes, follower=True))
            budget -= fetched_size(answers[tp][1])
        elif replica.log.high_watermark != request.high_watermark:
            # News, but not worth an answer of its own: a follower learns the high watermark
            # with its next records, as in Kafka, or when the wait is over.
            watermark_news.add(tp)
            continue
        else:
            continue
        session.answered(tp)
    return budget


async def answer_replica_fetch(
    session: FetchSession, replicas: dict[TopicPartition, PartitionReplica], broker_id: int,
    max_wait_ms: int, partition_max_bytes: int, max_bytes: int,
) -> dict[TopicPartition, tuple[int, FetchedRecords | ErrorReply]]:
    """A follower host's fetch answered, once its session has been opened: each partition with
    news (records, an error, or after `max_wait_ms` a new high watermark), with the fetch
    offset it was read for. Waits, up to `max_wait_ms`, until one has some or the session is
    woken."""
    answers: dict[TopicPartition, tuple[int, FetchedRecords | ErrorReply]] = {}
    watermark_news: set[TopicPartition] = set()
    budget = max_bytes
    deadline = time.monotonic() + max_wait_ms / 1000
    while True:
        budget = read_changed(session, replicas, broker_id, answers, watermark_news, budget,
                              partition_max_bytes)
        remaining = deadline - time.monotonic()
        if answers or remaining <= 0 or session.woken:
            break
        session.event.clear()
        if not session.dirty:
            await wait_for_event(session.event, remaining)
    for tp in watermark_news - set(answers):
        listed, replica = session.listed.get(tp), replicas.get(tp)
        if listed is None or replica is None:
            continue
        answers[tp] = (listed.offset, leader_reads.nothing_at(replica, listed.offset))
        session.answered(tp)
    session.woken = False
    return answers
