"""Fetch sessions for Kafka clients (KIP-227): which partitions a fetch reads, and which of
their answers go back to the client (no I/O here: the handler it wraps does the reading).

A consumer of many partitions would otherwise list them all in every fetch, and be answered
about them all, though most have nothing new. In a session the client lists only what changed
on its side (a new fetch offset, a partition added; `forgotten_topics_data` for one dropped) and
the broker answers only what changed on its side: records, a new high watermark, last stable or
log start offset, or an error. Each side remembers the rest.

The request's metadata (`session_id`, `session_epoch`) says what the client wants:

* epoch -1 (FINAL_EPOCH): a full fetch with no session, after closing `session_id` if given;
* epoch 0 (INITIAL_EPOCH): a full fetch that opens a session if the cache has a slot (or can
  evict one); the answer carries its id, or 0 if none was made;
* any other epoch: an incremental fetch of session `session_id`, which must be that session's
  next epoch (else INVALID_FETCH_SESSION_EPOCH; an unknown id is FETCH_SESSION_ID_NOT_FOUND,
  and the client starts again with a full fetch).

A full cache (`max.incremental.fetch.session.cache.slots`) makes room as Kafka's does: first by
evicting a session unused for `EVICTION_S`, else the smallest session if it is smaller than the
new one. The layer around Fetch's handler (`FetchSessionLayer`) turns an incremental request
into the whole session's fetch, so the checks (ACLs) and the replica hosts see every partition
read, every time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from rafka.actors.errors import ErrorCode
from rafka.actors.messages import ErrorReply, FetchedRecords
from rafka.coordination.topic_ids import topic_id_text
from rafka.wire.protocol import Api

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
_MAX_EPOCH = 2**31 - 1
# Kafka's FetchSessionCache takes a session unused this long before any other.
EVICTION_S = 120.0


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`, as both sides count it (it wraps to 1, never to 0 or -1)."""
    return 1 if epoch == _MAX_EPOCH else epoch + 1


TopicPartitionKey = tuple[str, int]


@dataclass
class CachedPartition:
    """A partition in a session: the client's last fetch of it (a FetchPartition, with its
    offset and byte limit), and what the client was last told of it."""

    topic_id: Any
    fetch: Any
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1


@dataclass(frozen=True)
class PartitionAnswer:
    """What a fetch found for one partition, as far as a session cares."""

    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    has_records: bool


class ClientFetchSession:
    """One Kafka client's session: its partitions, in the order they are read (a partition
    that was answered goes to the back, so that a fetch filled by the first ones starves none).
    The sessions between rafka's own hosts are another protocol (`actors/server/fetch_session.py`:
    the follower names its session, and the leader is told which partitions changed)."""

    def __init__(self, session_id: int, now: float) -> None:
        self.session_id = session_id
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.partitions: dict[TopicPartitionKey, CachedPartition] = {}
        self.last_used = now

    def update(self, fetches: Iterable[tuple[TopicPartitionKey, Any, Any]],
               forgotten: Iterable[TopicPartitionKey]) -> None:
        """Take the client's new fetch offsets (and partitions), and drop what it forgot."""
        for key, topic_id, fetch in fetches:
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = CachedPartition(topic_id, fetch)
            else:
                cached.fetch, cached.topic_id = fetch, topic_id
        for key in forgotten:
            self.partitions.pop(key, None)


def _must_answer(cached: CachedPartition, answer: PartitionAnswer) -> bool:
    """Whether an incremental answer tells the client of this partition, remembering what it
    tells. An error is always told, and forgets the watermarks so that they are told again."""
    if answer.error_code != ErrorCode.NONE:
        cached.high_watermark = cached.last_stable_offset = cached.log_start_offset = -1
        return True
    changed = (answer.has_records or cached.high_watermark != answer.high_watermark
               or cached.last_stable_offset != answer.last_stable_offset
               or cached.log_start_offset != answer.log_start_offset)
    _remember(cached, answer)
    return changed


def _remember(cached: CachedPartition, answer: PartitionAnswer) -> None:
    cached.high_watermark = answer.high_watermark
    cached.last_stable_offset = answer.last_stable_offset
    cached.log_start_offset = answer.log_start_offset


class FetchContext:
    """One fetch's view of its session: the partitions to read (`reads`), then, from what was
    read, the ones to answer (`answer`) and the session id the answer carries (`session_id`)."""

    def __init__(self, reads: list[tuple[TopicPartitionKey, Any, Any]],
                 session: ClientFetchSession | None = None,
                 cache: KafkaFetchSessions | None = None) -> None:
        self.reads = reads
        self.session = session
        # A full fetch with epoch 0 opens a session in `cache`, if it can.
        self._cache = cache
        # The session id the answer carries (a full fetch's is known once it is answered).
        self.session_id = INVALID_SESSION_ID if session is None else session.session_id

    @property
    def incremental(self) -> bool:
        return self.session is not None

    def answer(self, answers: dict[TopicPartitionKey, PartitionAnswer]
               ) -> set[TopicPartitionKey]:
        """The partitions whose answers go back to the client (a full fetch's all); a full
        fetch with epoch 0 opens its session here, and `session_id` names it."""
        if self.session is None:
            session = None if self._cache is None else self._cache.open_session(self.reads)
            if session is not None:
                self.session_id = session.session_id
                for key, cached in session.partitions.items():
                    if key in answers:
                        _remember(cached, answers[key])
            return set(answers)
        partitions = self.session.partitions
        kept = {key for key, answer in answers.items()
                if key in partitions and _must_answer(partitions[key], answer)}
        for key in kept:  # to the back of the session's order
            partitions[key] = partitions.pop(key)
        return kept


class KafkaFetchSessions:
    """A broker's fetch sessions with Kafka clients, at most `max_sessions` of them."""

    def __init__(self, max_sessions: int, eviction_s: float = EVICTION_S,
                 clock: Callable[[], float] = time.monotonic,
                 rng: random.Random | None = None) -> None:
        self.max_sessions = max_sessions
        self.eviction_s = eviction_s
        self._clock = clock
        self._rng = rng or random.Random()
        self.sessions: dict[int, ClientFetchSession] = {}
        self.evicted = 0

    def begin(self, session_id: int, epoch: int,
              fetches: list[tuple[TopicPartitionKey, Any, Any]],
              forgotten: list[TopicPartitionKey]) -> FetchContext | int:
        """The context of a fetch with this metadata, listing `fetches` ((topic, partition),
        topic id, FetchPartition) and `forgotten`; or the error code that answers it whole."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.sessions.pop(session_id, None)
            return FetchContext(fetches, cache=self if epoch == INITIAL_EPOCH else None)
        session = self.sessions.get(session_id)
        if session is None:
            return ErrorCode.FETCH_SESSION_ID_NOT_FOUND
        if session.epoch != epoch:
            return ErrorCode.INVALID_FETCH_SESSION_EPOCH
        session.update(fetches, forgotten)
        if not session.partitions:  # nothing left to fetch: the session ends
            del self.sessions[session_id]
            return FetchContext([])
        session.epoch = next_epoch(session.epoch)
        session.last_used = self._clock()
        reads = [(key, cached.topic_id, cached.fetch)
                 for key, cached in session.partitions.items()]
        return FetchContext(reads, session)

    def open_session(self, reads: list[tuple[TopicPartitionKey, Any, Any]]
                     ) -> ClientFetchSession | None:
        """A new session of these partitions, if there is a slot or one can be freed."""
        if not reads:
            return None
        now = self._clock()
        if len(self.sessions) >= self.max_sessions and not self._evict_for(len(reads), now):
            return None
        session_id = self._new_id()
        session = self.sessions[session_id] = ClientFetchSession(session_id, now)
        session.update(reads, ())
        return session

    def _evict_for(self, size: int, now: float) -> bool:
        if not self.sessions:
            return False
        stalest = min(self.sessions.values(), key=lambda session: session.last_used)
        if now - stalest.last_used > self.eviction_s:
            victim = stalest
        else:
            smallest = min(self.sessions.values(),
                           key=lambda session: (len(session.partitions), session.session_id))
            if len(smallest.partitions) >= size:
                return False
            victim = smallest
        del self.sessions[victim.session_id]
        self.evicted += 1
        return True

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randint(1, 2**31 - 1)
            if session_id not in self.sessions:
                return session_id


Handler = Callable[[Api, int, Any], Awaitable[Any]]

# The fetch context of the Fetch request being handled, if it has one: the handler answers
# only the partitions it keeps (`kept_in_session`), so that an incremental fetch builds no
# answer for the partitions it leaves out.
CURRENT_FETCH: ContextVar[FetchContext | None] = ContextVar("CURRENT_FETCH", default=None)


def answer_of(reply: FetchedRecords | ErrorReply) -> PartitionAnswer:
    """What a replica host's reply to a fetch tells a session."""
    if isinstance(reply, FetchedRecords):
        return PartitionAnswer(ErrorCode.NONE, reply.high_watermark, reply.last_stable_offset,
                               reply.log_start_offset, bool(reply.records))
    return PartitionAnswer(reply.code, reply.high_watermark, -1, reply.log_start_offset, False)


def kept_in_session(replies: dict[TopicPartitionKey, FetchedRecords | ErrorReply],
                    news: Collection[TopicPartitionKey] = ()
                    ) -> dict[TopicPartitionKey, FetchedRecords | ErrorReply]:
    """The replies of the fetch being handled that its answer carries: in a session, those
    the client does not know yet (all of them, outside one or in a full fetch), and `news`,
    partitions whose answer says something no reply shows (a preferred read replica)."""
    context = CURRENT_FETCH.get()
    if context is None:
        return replies
    kept = context.answer({key: answer_of(reply) for key, reply in replies.items()})
    return {key: reply for key, reply in replies.items() if key in kept or key in news}


class FetchSessionLayer:
    """Fetch's handler, in sessions: a request is made the whole session's before the checks
    and the handler see it, and the handler cuts its answer to what the client does not know
    yet (`CURRENT_FETCH`)."""

    def __init__(self, sessions: KafkaFetchSessions,
                 topic_name_of: Callable[[str], str | None]) -> None:
        self.sessions = sessions
        self._topic_name_of = topic_name_of

    def wrap(self, handler: Handler) -> Handler:
        async def in_session(api: Api, version: int, request: Any) -> Any:
            if version < _FIRST_SESSION_VERSION or (request.session_id == INVALID_SESSION_ID
                                                    and request.session_epoch == FINAL_EPOCH):
                return await handler(api, version, request)  # no session, nor one to close
            fetches = [((topic.topic, part.partition), topic.topic_id, part)
                       for topic in request.topics if topic.topic for part in topic.partitions]
            context = self.sessions.begin(request.session_id, request.session_epoch, fetches,
                                          self._forgotten(version, request))
            if isinstance(context, int):
                return {"throttle_time_ms": 0, "error_code": context,
                        "session_id": INVALID_SESSION_ID, "responses": []}
            if context.incremental:
                # A topic named by an id no topic has stays as it came: its handler answers it.
                request.topics = _fetch_topics(api, context.reads) + [
                    topic for topic in request.topics if not topic.topic]
            token = CURRENT_FETCH.set(context)
            try:
                fields = await handler(api, version, request)
            finally:
                CURRENT_FETCH.reset(token)
            fields["session_id"] = context.session_id
            return fields

        return in_session

    def _forgotten(self, version: int, request: Any) -> list[TopicPartitionKey]:
        forgotten = []
        for topic in request.forgotten_topics_data or ():
            name = (self._topic_name_of(topic_id_text(topic.topic_id))
                    if version >= _FIRST_TOPIC_ID_VERSION else topic.topic)
            if name:
                forgotten += [(name, partition) for partition in topic.partitions]
        return forgotten


# Fetch v7 brought sessions; v13 names topics, forgotten ones too, by id.
_FIRST_SESSION_VERSION = 7
_FIRST_TOPIC_ID_VERSION = 13


def _fetch_topics(api: Api, reads: list[tuple[TopicPartitionKey, Any, Any]]) -> list[Any]:
    """The request's topics for these reads, in their order (a topic may come back more than
    once, when the session's order interleaves it with another)."""
    topics: list[Any] = []
    for (name, _), topic_id, fetch in reads:
        if not topics or topics[-1].topic != name:
            topics.append(api.request.FetchTopic(topic=name, topic_id=topic_id, partitions=[]))
        topics[-1].partitions.append(fetch)
    return topics
