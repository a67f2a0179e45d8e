"""The consumer client: fetches from partition leaders, up to their high watermark only.

One fetch carries every partition that is ready to be fetched and led on one replica host
(Kafka's fetch per broker); each partition with nothing buffered keeps one long-poll fetch in
flight (`fetch.max.wait.ms`, `fetch.min.bytes`), so the next batch is on its way while the caller
processes this one. A partition that becomes ready while a fetch to its host waits does not wait
behind it: it goes in a fetch of its own round, with the others ready then.

A fetch's records wait in its own buffer (Kafka's completed fetch) until
`poll` hands them out, in slices of up to `max.poll.records`, so a poll costs what it returns,
however much is buffered. Records come back in offset order per partition; `seek` moves a
position, and the fetch in flight for it and the records buffered for it are dropped.

A fetch to a leader that went silent (its process paused, its node cut off) is not waited on
for request.timeout.ms: once it is overdue, the metadata is refreshed in the background, and a
partition whose leader epoch went up since is fetched from the new leader at its position
(`_follow_moved_leaders`, actors/clients/leader_moves.py).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from rafka.actors.clients.config import ConsumerConfig
from rafka.actors.clients.leader_moves import (
    MIN_CHECK_INTERVAL_MS,
    SLOW_REQUEST_MS,
    LeaderCheck,
    SentTo,
    moved_partitions,
)
from rafka.actors.clients.metadata import ClientMetadata
from rafka.actors.dataport.calls import call_and_wait, host_calls
from rafka.actors.dataport.frames import LIST_OFFSETS
from rafka.actors.errors import (
    BrokerUnavailableError,
    OffsetOutOfRangeError,
    RafkaError,
    error_for,
    is_retriable,
    raise_for,
)
from rafka.actors.messages import (
    ErrorReply,
    FetchedRecords,
    ListedOffset,
    OffsetQuery,
    PartitionFetch,
)
from rafka.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.store import ClusterStore
from rafka.logstore.batch import decode_batches, iter_batches
from rafka.logstore.transactions import committed_batches

log = logging.getLogger(__name__)

# How long a ListOffsets may wait for its leader's answer before it is asked again.
LIST_OFFSETS_TIMEOUT_S = 30.0


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


@dataclass(slots=True)
class _CompletedFetch:
    """The records of one fetch of one partition, handed out from ``index`` on; once all are
    out, the partition's position moves to ``next_offset`` (past any compaction gap)."""

    tp: TopicPartition
    records: list[ConsumerRecord]
    next_offset: int
    index: int = 0


class NoOffsetForPartitionError(RafkaError):
    """auto.offset.reset=none and the partition has no position: seek first."""




class Consumer:
    """Kafka's consumer on rafka, without a group: `assign` partitions, then `poll`.

    Groups (`cluster.consumer(topics, group=...)`) subscribe and rebalance on top of this.
    """

    def __init__(self, namespace: str, *, zookeeper: ClusterStore | None = None,
                 **config: Any) -> None:
        self.config = ConsumerConfig.from_kwargs(**config)
        self._read_committed = self.config.isolation_level == "read_committed"
        # With the cluster's ZooKeeper store, metadata is read there when no broker answers.
        self.metadata = ClientMetadata(
            namespace, max_age_s=self.config.metadata_max_age_ms / 1000, zookeeper=zookeeper)
        # The next offset to hand to the caller (Kafka's position), and the next to fetch, which
        # runs ahead of it by what is buffered.
        self._positions: dict[TopicPartition, int | None] = {}
        self._fetch_positions: dict[TopicPartition, int] = {}
        # Each fetch in flight: the host it went to and the (partition, offset) it asked for;
        # and the fetch each partition waits on (a partition sought meanwhile leaves it).
        self._in_flight: dict[Any, tuple[str, list[tuple[TopicPartition, int]]]] = {}
        # When each fetch in flight was sent (monotonic ns, in the order sent), and the leader
        # epoch the metadata named for each partition waiting on one: a fetch to a leader the
        # controller replaced is given up on (`_follow_moved_leaders`).
        self._sent_ns: dict[Any, int] = {}
        self._fetched_under: dict[TopicPartition, int] = {}
        self._leader_check = LeaderCheck(self.config.fetch_max_wait_ms + SLOW_REQUEST_MS,
                                         MIN_CHECK_INTERVAL_MS)
        self._calls = host_calls(self.config.transport, self.config.request_timeout_ms,
                                 self.config.fetch_max_bytes,
                                 zookeeper=lambda: self.metadata.zookeeper)
        self._fetching: dict[TopicPartition, Any] = {}
        # At most one per partition: a partition is fetched again once its records are out.
        self._completed: deque[_CompletedFetch] = deque()
        self._paused: set[TopicPartition] = set()
        self._closed = False

    # --------------------------------------------------------------------- assignment

    def assign(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Read exactly these partitions (replacing any earlier assignment)."""
        wanted = [TopicPartition(topic, partition) for topic, partition in partitions]
        for tp in wanted:
            if type(tp.partition) is not int:
                raise TypeError(f"a partition is an int, got {tp.partition!r} for {tp.topic}")
            count = self.metadata.partition_count(tp.topic)
            if not 0 <= tp.partition < count:
                self.metadata.invalidate(tp.topic)  # the topic may have grown since
                count = self.metadata.partition_count(tp.topic)
            if not 0 <= tp.partition < count:
                raise ValueError(f"{tp.topic} has partitions 0..{count - 1}, not {tp.partition}")
        self._positions = {tp: self._positions.get(tp) for tp in wanted}
        self._drop_fetches(lambda tp: tp not in self._positions)
        self._fetch_positions = {tp: offset for tp, offset in self._fetch_positions.items()
                                 if tp in self._positions}

    def assign_topics(self, topics: Iterable[str]) -> None:
        """Read every partition of these topics."""
        self.assign(
            (topic, partition)
            for topic in topics
            for partition in range(self.metadata.partition_count(topic))
        )

    def assignment(self) -> set[TopicPartition]:
        return set(self._positions)

    def pause(self, *partitions: tuple[str, int]) -> None:
        self._paused.update(TopicPartition(*tp) for tp in partitions)
        self._drop_fetches(lambda tp: tp in self._paused)

    def resume(self, *partitions: tuple[str, int]) -> None:
        self._paused.difference_update(TopicPartition(*tp) for tp in partitions)

    # ---------------------------------------------------------------------- positions

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Read `topic`-`partition` from `offset` next (rewind or skip)."""
        tp = TopicPartition(topic, partition)
        if tp not in self._positions:
            raise ValueError(f"{topic}-{partition} is not assigned to this consumer")
        if type(offset) is not int or offset < 0:
            raise ValueError(f"offset must be a non-negative int, got {offset!r}")
        self._positions[tp] = offset
        self._fetch_positions.pop(tp, None)
        self._drop_fetches(lambda candidate: candidate == tp)

    def seek_to_beginning(self, *partitions: tuple[str, int]) -> None:
        targets = [TopicPartition(*tp) for tp in partitions] or list(self._positions)
        for tp, offset in self.beginning_offsets(targets).items():
            self.seek(tp.topic, tp.partition, offset)

    def seek_to_end(self, *partitions: tuple[str, int]) -> None:
        targets = [TopicPartition(*tp) for tp in partitions] or list(self._positions)
        for tp, offset in self.end_offsets(targets).items():
            self.seek(tp.topic, tp.partition, offset)

    def position(self, topic: str, partition: int) -> int:
        tp = TopicPartition(topic, partition)
        position = self._positions.get(tp)
        if position is None:
            position = self._reset(tp)
        return position

    def _drop_fetches(self, predicate: Any) -> None:
        for tp in [tp for tp in self._fetching if predicate(tp)]:
            del self._fetching[tp]
        # A fetch none of whose partitions is still waiting on it frees its host at once.
        for key, (_host, parts) in list(self._in_flight.items()):
            if not any(self._fetching.get(tp) is key for tp, _offset in parts):
                del self._in_flight[key]
                self._sent_ns.pop(key, None)
                self._calls.abandon(key)
        for tp in [tp for tp in self._fetch_positions if predicate(tp)]:
            del self._fetch_positions[tp]
        self._completed = deque(fetch for fetch in self._completed if not predicate(fetch.tp))

    # ------------------------------------------------------------------------ offsets

    def _list_offsets(self, tp: TopicPartition, timestamp_ms: int) -> int | None:
        """Ask the leader, retrying what may pass (no leader yet, a leader still learning its
        high watermark) for up to default.api.timeout.ms, as Kafka's consumer does."""
        deadline = time.monotonic() + self.config.default_api_timeout_ms / 1000
        while True:
            name = None
            try:
                name, host = self.metadata.leader_host(tp.topic, tp.partition, wait_s=10)
                reply: ListedOffset | ErrorReply = call_and_wait(
                    self._calls, name, host, LIST_OFFSETS,
                    ([OffsetQuery(tp.topic, tp.partition, timestamp_ms, self._read_committed)],),
                    LIST_OFFSETS_TIMEOUT_S)[0]
                return raise_for(reply).offset
            except Exception as error:
                if name is not None:
                    self.metadata.forget_if_dead(name, error)
                if not is_retriable(error):
                    raise
                last_error = error
            self.metadata.invalidate(tp.topic)
            if time.monotonic() > deadline:
                # Exception.add_note is 3.11+; on the 3.10 target the log carries the why.
                log.warning("list offsets for %s-%d still failing after default.api.timeout.ms "
                            "(%d ms): %s", tp.topic, tp.partition,
                            self.config.default_api_timeout_ms, last_error)
                raise last_error
            time.sleep(0.1)

    def _list_bound_offset(self, tp: TopicPartition, timestamp_ms: int) -> int:
        """The log start (EARLIEST_TIMESTAMP) or high watermark (LATEST_TIMESTAMP) offset, which
        a leader always has, unlike the offset of a timestamp no record reaches."""
        offset = self._list_offsets(tp, timestamp_ms)
        if offset is None:
            raise RafkaError(f"{tp.topic}-{tp.partition}: the leader listed no offset for "
                             f"timestamp {timestamp_ms}")
        return offset

    def beginning_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        return {TopicPartition(*tp): self._list_bound_offset(TopicPartition(*tp),
                                                             EARLIEST_TIMESTAMP)
                for tp in partitions}

    def end_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[TopicPartition, int]:
        """The high watermark of each partition: the offset after the last readable record."""
        return {TopicPartition(*tp): self._list_bound_offset(TopicPartition(*tp), LATEST_TIMESTAMP)
                for tp in partitions}

    def offsets_for_times(
        self, timestamps: Mapping[tuple[str, int], int]
    ) -> dict[TopicPartition, int | None]:
        """The first offset at or after each timestamp (ms); None where no record is that new."""
        return {TopicPartition(*tp): self._list_offsets(TopicPartition(*tp), ts)
                for tp, ts in timestamps.items()}

    def _reset(self, tp: TopicPartition) -> int:
        policy = self.config.auto_offset_reset
        if policy == "none":
            raise NoOffsetForPartitionError(
                f"{tp.topic}-{tp.partition} has no position and auto.offset.reset=none: "
                "seek() first, or use earliest/latest"
            )
        position = self._list_bound_offset(
            tp, EARLIEST_TIMESTAMP if policy == "earliest" else LATEST_TIMESTAMP)
        self._positions[tp] = position
        return position

    # --------------------------------------------------------------------------- poll

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Records from the assigned partitions, waiting up to `timeout_ms` for some."""
        if self._closed:
            raise RafkaError("this consumer is closed")
        limit = max_records or self.config.max_poll_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._start_fetches()
            if self._in_flight:
                # Nothing to hand out: wait for the first fetch to answer, looking at the
                # leaders now and then (a fetch to one that went silent never answers).
                wait_s = 0 if self._completed else min(max(deadline - time.monotonic(), 0),
                                                       MIN_CHECK_INTERVAL_MS / 1000)
                for key in self._calls.wait(list(self._in_flight), wait_s):
                    self._complete(key)
                if self._in_flight:
                    self._follow_moved_leaders()
            if self._completed or time.monotonic() >= deadline:
                # Even with nothing: fetches failing fast must not hold poll() forever.
                break
            if not self._in_flight:
                time.sleep(max(min(deadline - time.monotonic(), 0.05), 0))
        return self._hand_out(limit)

    def _follow_moved_leaders(self) -> None:
        """Give up the fetches of partitions whose leader the controller replaced since they
        were sent: the next round fetches them from the new leader, at the same position.
        Nothing to undo: a fetch is a read, and its answer, should it come, is dropped.

        Costs a look at the oldest fetch's age while fetches come back within
        fetch.max.wait.ms; past that, the metadata is refreshed in the background (at a bounded
        rate), and the partitions looked at whenever it learnt something."""
        if self._leader_check.due(next(iter(self._sent_ns.values())), time.monotonic_ns()):
            self.metadata.refresh_soon(sorted({tp.topic for tp in self._fetching}))
        if not self._leader_check.news(self.metadata.generation):
            return
        sent = [SentTo(tp.topic, tp.partition, self._fetched_under.get(tp, -1))
                for tp in self._fetching]
        moved = moved_partitions(sent, self.metadata.cached_leader_epochs(
            {part.topic for part in sent}))
        if not moved:
            return
        log.info("%s have new leaders: fetching from them, not waiting for the old ones",
                 sorted(f"{topic}-{partition}" for topic, partition in moved))
        for tp in [tp for tp in self._fetching if (tp.topic, tp.partition) in moved]:
            del self._fetching[tp]
        # A fetch none of whose partitions waits on it any more goes, its connection with it.
        for key, (_host, parts) in list(self._in_flight.items()):
            if not any(self._fetching.get(tp) is key for tp, _offset in parts):
                del self._in_flight[key]
                del self._sent_ns[key]
                self._calls.abandon(key)

    def _hand_out(self, limit: int) -> list[ConsumerRecord]:
        """Up to `limit` buffered records, oldest fetch first, moving positions past them."""
        records: list[ConsumerRecord] = []
        while self._completed and len(records) < limit:
            fetch = self._completed[0]
            end = fetch.index + limit - len(records)
            taken = fetch.records[fetch.index:end]
            records += taken
            fetch.index += len(taken)
            if fetch.index < len(fetch.records):
                self._positions[fetch.tp] = taken[-1].offset + 1
            else:
                self._completed.popleft()
                self._positions[fetch.tp] = fetch.next_offset
        return records

    def _start_fetches(self) -> None:
        buffered = {fetch.tp for fetch in self._completed}
        wanted: dict[str, tuple[Any, list[tuple[TopicPartition, int]]]] = {}
        for tp in self._positions:
            if tp in self._fetching or tp in self._paused or tp in buffered:
                continue
            committed_position = self._positions[tp]
            if committed_position is None:
                committed_position = self._reset(tp)
            position = self._fetch_positions.get(tp, committed_position)
            try:
                name, host = self.metadata.leader_host(tp.topic, tp.partition)
            except BrokerUnavailableError:
                continue  # no leader now: try again on the next round
            self._fetched_under[tp] = self.metadata.cached_leader_epoch(tp.topic, tp.partition)
            wanted.setdefault(name, (host, []))[1].append((tp, position))
        config = self.config
        for name, (host, parts) in wanted.items():
            requests = [PartitionFetch(tp.topic, tp.partition, position,
                                       config.max_partition_fetch_bytes)
                        for tp, position in parts]
            key = self._calls.send(
                name, host, "fetch",
                (requests, config.fetch_max_wait_ms, config.fetch_min_bytes,
                 config.fetch_max_bytes, self._read_committed),
                timeout_s=(config.fetch_max_wait_ms + config.request_timeout_ms) / 1000)
            self._in_flight[key] = (name, parts)
            self._sent_ns[key] = time.monotonic_ns()
            for tp, _position in parts:
                self._fetching[tp] = key

    def _complete(self, key: Any) -> None:
        host, parts = self._in_flight.pop(key)
        del self._sent_ns[key]
        current = [(index, tp, position) for index, (tp, position) in enumerate(parts)
                   if self._fetching.get(tp) is key]
        for _index, tp, _position in current:
            del self._fetching[tp]
        try:
            replies = self._calls.result(key)
        except Exception as error:
            if not current:
                return  # sought elsewhere meanwhile: its failure is nobody's
            self.metadata.forget_if_dead(host, error)
            if not is_retriable(error):  # the host raised: a bug, not a fault to wait out
                raise
            log.debug("fetch of %s failed (%r): asking for the leaders again",
                      [f"{tp.topic}-{tp.partition}" for _index, tp, _position in current], error)
            for _index, tp, _position in current:
                self.metadata.invalidate(tp.topic)
            return
        if not current:
            return  # sought elsewhere meanwhile
        for index, tp, position in current:
            self._on_fetched(tp, replies[index])
            self._complete_partition(tp, position, replies[index])

    def _on_fetched(self, tp: TopicPartition, reply: FetchedRecords | ErrorReply) -> None:
        """Every partition's fetch reply, before it is handled (group members read the high
        watermark off it for their lag)."""

    def _complete_partition(self, tp: TopicPartition, position: int,
                            reply: FetchedRecords | ErrorReply) -> None:
        if tp not in self._positions or self._fetch_positions.get(
            tp, self._positions[tp]
        ) != position:
            return  # sought elsewhere meanwhile
        error = error_for(reply)
        if error is not None:
            if is_retriable(error):
                self.metadata.invalidate(tp.topic)
                return
            if isinstance(error, OffsetOutOfRangeError) and (
                    self.config.auto_offset_reset != "none"):
                self._positions[tp] = None  # reset by auto.offset.reset at the next poll
                self._fetch_positions.pop(tp, None)
                return
            raise error
        # error_for found no error, so the reply is the records, not an error.
        assert isinstance(reply, FetchedRecords)
        fetched = reply
        if not fetched.records:
            return
        batches = fetched.records
        if fetched.aborted_transactions:
            # Only the batches of committed transactions (and of none) reach poll().
            batches = b"".join(view for _header, view in committed_batches(
                iter_batches(batches), fetched.aborted_transactions))
        records = decode_batches(batches, min_offset=position,
                                 topic_partition=tp, record_type=ConsumerRecord)
        # After the last batch, not the last record: compaction leaves gaps at batch ends.
        self._completed.append(_CompletedFetch(tp, records, fetched.next_offset))
        self._fetch_positions[tp] = fetched.next_offset

    def close(self) -> None:
        if self._closed:  # a second close() does nothing, as a file's
            return
        self._closed = True
        self._in_flight.clear()
        self._sent_ns.clear()
        self._calls.close()
        self._fetching.clear()
        self._completed.clear()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
