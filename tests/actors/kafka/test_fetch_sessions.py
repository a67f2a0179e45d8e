"""Kafka clients' fetch sessions (KIP-227), as pure logic: what a fetch in a session reads, what
its answer tells, how sessions open, end and are evicted. The wire tests are in
tests/kafka_clients/test_fetch_sessions.py."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.errors import ErrorCode
from rafka.actors.kafka.fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    FetchContext,
    FetchSessionLayer,
    KafkaFetchSessions,
    PartitionAnswer,
    kept_in_session,
    next_epoch,
)
from rafka.actors.messages import FetchedRecords
from rafka.wire.protocol import APIS

FETCH = APIS[ApiKey.Fetch]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def fetch(topic: str, partition: int, offset: int) -> tuple[tuple[str, int], None, Any]:
    return ((topic, partition), None, FETCH.request.FetchTopic.FetchPartition(
        partition=partition, fetch_offset=offset, partition_max_bytes=1024))


def quiet(high_watermark: int = 10) -> PartitionAnswer:
    return PartitionAnswer(ErrorCode.NONE, high_watermark, high_watermark, 0, False)


def opened(cache: KafkaFetchSessions, *fetches: Any) -> int:
    """A full fetch that opens a session; its id."""
    context = cache.begin(INVALID_SESSION_ID, INITIAL_EPOCH, list(fetches), [])
    assert isinstance(context, FetchContext)
    answered = context.answer({key: quiet() for key, _, _ in fetches})
    assert context.session_id != INVALID_SESSION_ID
    assert answered == {key for key, _, _ in fetches}
    return context.session_id


def test_an_incremental_fetch_reads_the_whole_session_and_tells_only_what_changed() -> None:
    cache = KafkaFetchSessions(max_sessions=10)
    session_id = opened(cache, fetch("a", 0, 5), fetch("a", 1, 7), fetch("b", 0, 0))

    # The client lists only a partition whose position moved.
    context = cache.begin(session_id, next_epoch(INITIAL_EPOCH), [fetch("a", 1, 9)], [])
    assert isinstance(context, FetchContext) and context.incremental
    assert [(key, part.fetch_offset) for key, _, part in context.reads] == [
        (("a", 0), 5), (("a", 1), 9), (("b", 0), 0)]
    answers = {("a", 0): quiet(), ("a", 1): quiet(),
               ("b", 0): PartitionAnswer(ErrorCode.NONE, 12, 12, 0, True)}
    assert context.answer(answers) == {("b", 0)} and context.session_id == session_id

    # A new high watermark is told once, with or without records.
    context = cache.begin(session_id, 2, [], [])
    assert isinstance(context, FetchContext)
    answers = {("a", 0): quiet(11), ("a", 1): quiet(), ("b", 0): quiet(12)}
    assert context.answer(answers) == {("a", 0)}
    context = cache.begin(session_id, 3, [], [])
    assert isinstance(context, FetchContext)
    assert context.answer({("a", 0): quiet(11), ("a", 1): quiet(), ("b", 0): quiet(12)}) \
        == set()


def test_answered_partitions_go_to_the_back_so_none_starves() -> None:
    cache = KafkaFetchSessions(max_sessions=10)
    session_id = opened(cache, fetch("a", 0, 0), fetch("a", 1, 0), fetch("a", 2, 0))
    context = cache.begin(session_id, 1, [], [])
    assert isinstance(context, FetchContext)
    context.answer({("a", 0): PartitionAnswer(ErrorCode.NONE, 20, 20, 0, True),
                    ("a", 1): quiet(), ("a", 2): quiet()})
    context = cache.begin(session_id, 2, [], [])
    assert isinstance(context, FetchContext)
    assert [key for key, _, _ in context.reads] == [("a", 1), ("a", 2), ("a", 0)]


def test_an_error_is_always_told_and_the_watermarks_after_it_too() -> None:
    cache = KafkaFetchSessions(max_sessions=10)
    session_id = opened(cache, fetch("a", 0, 0))
    moved = PartitionAnswer(ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1, -1, False)
    for epoch in (1, 2):
        context = cache.begin(session_id, epoch, [], [])
        assert isinstance(context, FetchContext)
        assert context.answer({("a", 0): moved}) == {("a", 0)}
    context = cache.begin(session_id, 3, [], [])
    assert isinstance(context, FetchContext)
    assert context.answer({("a", 0): quiet()}) == {("a", 0)}


def test_a_wrong_epoch_or_an_unknown_session_is_refused_whole() -> None:
    cache = KafkaFetchSessions(max_sessions=10)
    session_id = opened(cache, fetch("a", 0, 0))
    assert cache.begin(session_id, 2, [], []) == ErrorCode.INVALID_FETCH_SESSION_EPOCH
    assert cache.begin(session_id + 1, 1, [], []) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    # A refused fetch leaves the session as it was: its next epoch still works.
    assert isinstance(cache.begin(session_id, 1, [], []), FetchContext)


def test_the_final_epoch_closes_the_session_and_opens_none() -> None:
    cache = KafkaFetchSessions(max_sessions=10)
    session_id = opened(cache, fetch("a", 0, 0))
    context = cache.begin(session_id, FINAL_EPOCH, [fetch("a", 0, 3)], [])
    assert isinstance(context, FetchContext) and not context.incremental
    assert context.answer({("a", 0): quiet()}) == {("a", 0)}
    assert context.session_id == INVALID_SESSION_ID and not cache.sessions
    assert cache.begin(session_id, 1, [], []) == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_a_full_fetch_with_a_session_id_replaces_that_session() -> None:
    cache = KafkaFetchSessions(max_sessions=10)
    old = opened(cache, fetch("a", 0, 0))
    context = cache.begin(old, INITIAL_EPOCH, [fetch("b", 0, 0)], [])
    assert isinstance(context, FetchContext)
    context.answer({("b", 0): quiet()})
    assert list(cache.sessions) == [context.session_id] and context.session_id != old


def test_forgotten_partitions_leave_and_an_emptied_session_ends() -> None:
    cache = KafkaFetchSessions(max_sessions=10)
    session_id = opened(cache, fetch("a", 0, 0), fetch("a", 1, 0))
    context = cache.begin(session_id, 1, [fetch("c", 0, 4)], [("a", 0)])
    assert isinstance(context, FetchContext)
    assert [key for key, _, _ in context.reads] == [("a", 1), ("c", 0)]
    # A partition added to the session is told the first time, whatever it holds.
    assert context.answer({("a", 1): quiet(), ("c", 0): quiet()}) == {("c", 0)}

    context = cache.begin(session_id, 2, [], [("a", 1), ("c", 0)])
    assert isinstance(context, FetchContext) and not context.reads
    assert context.answer({}) == set()
    assert context.session_id == INVALID_SESSION_ID and not cache.sessions


def test_a_full_cache_evicts_a_stale_session_then_a_smaller_one_then_none() -> None:
    clock = Clock()
    cache = KafkaFetchSessions(max_sessions=2, eviction_s=120, clock=clock,
                               rng=random.Random(7))
    small = opened(cache, fetch("a", 0, 0))
    large = opened(cache, fetch("b", 0, 0), fetch("b", 1, 0), fetch("b", 2, 0))

    # Full, nothing stale, and the newcomer no larger than the smallest: no session for it.
    context = cache.begin(INVALID_SESSION_ID, INITIAL_EPOCH, [fetch("c", 0, 0)], [])
    assert isinstance(context, FetchContext)
    context.answer({("c", 0): quiet()})
    assert context.session_id == INVALID_SESSION_ID
    assert set(cache.sessions) == {small, large} and cache.evicted == 0

    # A larger newcomer takes the smallest session's slot.
    two = opened(cache, fetch("d", 0, 0), fetch("d", 1, 0))
    assert set(cache.sessions) == {large, two} and cache.evicted == 1

    # A session unused for the eviction time goes first, whatever its size.
    clock.now += 60
    assert isinstance(cache.begin(two, 1, [], []), FetchContext)
    clock.now += 61
    newest = opened(cache, fetch("e", 0, 0))
    assert set(cache.sessions) == {two, newest} and cache.evicted == 2


def test_no_slots_means_no_sessions() -> None:
    cache = KafkaFetchSessions(max_sessions=0)
    context = cache.begin(INVALID_SESSION_ID, INITIAL_EPOCH, [fetch("a", 0, 0)], [])
    assert isinstance(context, FetchContext)
    assert context.answer({("a", 0): quiet()}) == {("a", 0)}
    assert context.session_id == INVALID_SESSION_ID


def test_the_epoch_wraps_to_one() -> None:
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(2**31 - 1) == 1


class RecordingHandler:
    """Fetch's handler as the layer sees it: answers every partition it is asked for, records
    on those named in `with_records`, and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[list[tuple[str, int, int]]] = []
        self.with_records: set[tuple[str, int]] = set()
        # Partitions whose answer names a preferred read replica (KIP-392): news to a session.
        self.news: set[tuple[str, int]] = set()

    async def __call__(self, api: Any, version: int, request: Any) -> dict[str, Any]:
        asked = [(topic.topic, part.partition, part.fetch_offset)
                 for topic in request.topics for part in topic.partitions]
        self.asked.append(asked)
        replies = {(topic, partition): FetchedRecords(
            b"x" if (topic, partition) in self.with_records else b"", offset,
            high_watermark=10, log_start_offset=0, log_end_offset=10, last_stable_offset=10)
            for topic, partition, offset in asked}
        # As KafkaApis.handle_fetch does: answer only what the session keeps.
        kept = kept_in_session(replies, self.news)
        data = api.response.FetchableTopicResponse
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [
            data(topic=topic.topic, partitions=[data.PartitionData(
                partition_index=part.partition, error_code=0, high_watermark=10,
                last_stable_offset=10, log_start_offset=0,
                records=b"x" if (topic.topic, part.partition) in self.with_records else b"")
                for part in topic.partitions if (topic.topic, part.partition) in kept])
            for topic in request.topics]}


def request(session_id: int, epoch: int, listed: dict[str, list[tuple[int, int]]],
            forgotten: dict[str, list[int]] | None = None) -> Any:
    topic = FETCH.request.FetchTopic
    return FETCH.request(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=session_id, session_epoch=epoch,
        topics=[topic(topic=name, partitions=[topic.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=1024)
            for partition, offset in parts]) for name, parts in listed.items()],
        forgotten_topics_data=[FETCH.request.ForgottenTopic(topic=name, partitions=parts)
                               for name, parts in (forgotten or {}).items()],
        rack_id="")


def test_the_layer_asks_the_handler_for_the_whole_session_and_answers_what_changed() -> None:
    handler = RecordingHandler()
    layer = FetchSessionLayer(KafkaFetchSessions(max_sessions=10), lambda _id: None)
    fetch_in_session = layer.wrap(handler)

    async def run() -> None:
        full = await fetch_in_session(FETCH, 12, request(0, 0, {"a": [(0, 0), (1, 0)]}))
        session_id = full["session_id"]
        assert session_id != 0
        assert [(t.topic, [p.partition_index for p in t.partitions])
                for t in full["responses"]] == [("a", [0, 1])]

        handler.with_records = {("a", 1)}
        incremental = await fetch_in_session(
            FETCH, 12, request(session_id, 1, {"b": [(0, 3)]}, forgotten={"a": [0]}))
        assert handler.asked[-1] == [("a", 1, 0), ("b", 0, 3)]
        assert incremental["session_id"] == session_id
        assert [(t.topic, [p.partition_index for p in t.partitions])
                for t in incremental["responses"] if t.partitions] == [("a", [1]), ("b", [0])]

        # Nothing changed, but the leader sends the client to a follower for a-1: told.
        handler.with_records, handler.news = set(), {("a", 1)}
        redirected = await fetch_in_session(FETCH, 12, request(session_id, 2, {}))
        assert [(t.topic, [p.partition_index for p in t.partitions])
                for t in redirected["responses"] if t.partitions] == [("a", [1])]

        stale = await fetch_in_session(FETCH, 12, request(session_id, 1, {}))
        assert stale["error_code"] == ErrorCode.INVALID_FETCH_SESSION_EPOCH
        assert stale["responses"] == [] and len(handler.asked) == 3

    asyncio.run(run())
