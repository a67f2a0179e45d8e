"""Where a record's time goes between `send` and `poll`: issue 26's breakdown per hop.

With tracing on, each process on one partition's path notes when things happen to its records,
on Linux's CLOCK_MONOTONIC (`time.monotonic_ns`), which every process of a machine shares:

* the producer: when it sent each batch in a produce request (`Producer.trace_requests`);
* the leader's replica (`PathTrace`): when each produce request reached it and when its batch
  was in the log; up to which offset it answered each read, a follower's or a consumer's;
  each follower position it learned from a fetch; each move of the high watermark;
* each follower's replica (`PathTrace` too): when each batch it fetched was in its log.

`hop_breakdown` lays these events along each record's way and says how long each hop took.
The hops add up to the record's whole latency, from when it was due to when `poll` returned
it. Tracing is for benchmarks: one machine (the clock), one partition, and at most
`MAX_EVENTS` events of each kind.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from rafka.common.errors import RafkaError

# Kafka's replica id of a consumer's fetch.
CONSUMER = -1
MAX_EVENTS = 500_000

# A record's way, in order; each hop ends where the next begins.
HOPS = (
    "late",                      # due -> the producer got to it (the sender's own lag)
    "accumulator",               # -> its batch went out in a produce request (send(), linger)
    "produce_call",              # -> the request reached the leader's replica (Ray, the host)
    "leader_append",             # -> the batch was in the leader's log (checks, append)
    "follower_fetch_answered",   # -> the leader answered the follower's fetch with it
    "follower_append",           # -> the batch was in the follower's log (Ray back, append)
    "follower_next_fetch",       # -> the follower's next fetch told the leader it has it
    "high_watermark",            # -> the high watermark passed it
    "consumer_fetch_answered",   # -> the leader answered a consumer's fetch with it
    "delivery",                  # -> `poll` returned it (Ray back, decoding, the consumer)
)


class TracedRecord(NamedTuple):
    """What the benchmark knows of one record: its offset, when it was due, when the
    producer got to it, and when `poll` returned it (monotonic ns)."""

    offset: int
    due_ns: int
    started_ns: int
    polled_ns: int


class SentRequest(NamedTuple):
    """A batch the producer sent and had acknowledged: its offsets, and when it went out."""

    base_offset: int
    record_count: int
    sent_ns: int


class PathTrace:
    """The events of one replica, in the order they happened (see the module docstring)."""

    def __init__(self) -> None:
        # (received, appended, first offset, last offset)
        self.appends: list[tuple[int, int, int, int]] = []
        self.reads: list[tuple[int, int, int]] = []            # (replica id, next offset, t)
        self.positions: list[tuple[int, int, int]] = []        # (follower, offset, t)
        self.high_watermarks: list[tuple[int, int]] = []       # (high watermark, t)
        self.fetched_appends: list[tuple[int, int]] = []       # (log end offset, t)
        self.overflowed = False

    def _room(self, events: list) -> bool:
        if len(events) < MAX_EVENTS:
            return True
        self.overflowed = True
        return False

    def appended(self, received_ns: int, first_offset: int, last_offset: int) -> None:
        """The leader appended the records `first_offset` to `last_offset` from a request that
        reached it at `received_ns`."""
        if self._room(self.appends):
            self.appends.append((received_ns, time.monotonic_ns(), first_offset, last_offset))

    def answered_read(self, replica_id: int, next_offset: int) -> None:
        """The leader answered a read of `replica_id` (`CONSUMER` for a consumer) with records
        up to `next_offset`."""
        if self._room(self.reads):
            self.reads.append((replica_id, next_offset, time.monotonic_ns()))

    def follower_at(self, follower_id: int, offset: int) -> None:
        """A follower's fetch said it holds every record before `offset`."""
        if self._room(self.positions):
            self.positions.append((follower_id, offset, time.monotonic_ns()))

    def high_watermark_moved(self, high_watermark: int) -> None:
        if self._room(self.high_watermarks):
            self.high_watermarks.append((high_watermark, time.monotonic_ns()))

    def appended_fetched(self, log_end_offset: int) -> None:
        """A follower appended what it fetched; its log now ends at `log_end_offset`."""
        if self._room(self.fetched_appends):
            self.fetched_appends.append((log_end_offset, time.monotonic_ns()))

    def events(self) -> dict[str, Any]:
        """Every event, as plain lists (what a replica host returns)."""
        return {"appends": self.appends, "reads": self.reads, "positions": self.positions,
                "high_watermarks": self.high_watermarks,
                "fetched_appends": self.fetched_appends, "overflowed": self.overflowed}


class TraceIncompleteError(RafkaError, ValueError):
    """A trace dropped events (more than `MAX_EVENTS` of a kind): its breakdown would be
    wrong. Trace a shorter run."""


def _first_beyond(events: Sequence[Sequence[int]], offsets: np.ndarray) -> np.ndarray:
    """For each offset, the time of the first of the `(value, time)` events whose value (an
    offset that only grows, such as a log end or a high watermark) passed it; -1 where none
    did."""
    values, times = _columns(events, 2)
    if not len(values):
        return np.full(len(offsets), -1, dtype=np.int64)
    reached = np.maximum.accumulate(np.asarray(values, dtype=np.int64))
    index = np.searchsorted(reached, offsets, side="right")
    at = np.append(np.asarray(times, dtype=np.int64), -1)
    return at[index]


def _columns(rows: Sequence[Sequence[int]], width: int) -> list[np.ndarray]:
    table = np.asarray(rows, dtype=np.int64).reshape(-1, width)
    return [table[:, column] for column in range(width)]


def hop_breakdown(
    records: Sequence[TracedRecord],
    requests: Sequence[SentRequest],
    leader: Mapping[str, Any],
    followers: Mapping[int, Mapping[str, Any]],
) -> dict[str, np.ndarray]:
    """Each hop's duration in ms (`HOPS`), one value per record whose whole way the events
    show; records they do not show (sent before tracing began, say) are left out. Each
    record's hops add up to its latency, `polled_ns - due_ns`.

    `leader` and `followers` (by broker id) are `PathTrace.events()` of the partition's
    replicas, whose tracing began before the producer's: a record the producer's trace shows
    was then seen whole by the replicas. The follower a record waited for is the one whose
    fetch moved the high watermark past it: the last of the followers that had it when the
    high watermark moved.
    """
    for events in (leader, *followers.values()):
        if events["overflowed"]:
            raise TraceIncompleteError("a replica's trace dropped events: trace a shorter run")
    if not records:
        return {hop: np.empty(0) for hop in HOPS}
    offset, due, started, polled = (np.asarray(column, dtype=np.int64)
                                    for column in zip(*records, strict=True))

    # The producer's request of each record.
    bases, counts, sent = _columns(sorted(requests), 3)
    request = np.searchsorted(bases, offset, side="right") - 1
    known = (request >= 0) & (offset < bases[request] + counts[request])
    request_sent = np.where(known, sent[request], -1)

    # The leader's append of each record.
    received, appended, firsts, lasts = _columns(leader["appends"], 4)
    append = np.searchsorted(lasts, offset, side="left")
    traced = np.append(firsts, np.iinfo(np.int64).max)[append] <= offset
    leader_received = np.where(traced, np.append(received, -1)[append], -1)
    leader_appended = np.where(traced, np.append(appended, -1)[append], -1)

    high_watermark = _first_beyond(leader["high_watermarks"], offset)
    reads = leader["reads"]
    consumer_reads = [(next_offset, at) for reader, next_offset, at in reads
                      if reader == CONSUMER]
    consumer_answered = _first_beyond(consumer_reads, offset)

    # Per follower: answered, appended there, and its next fetch's position at the leader.
    waited_for = np.full((3, len(offset)), -1, dtype=np.int64)
    for follower_id, events in followers.items():
        answered = _first_beyond(
            [(next_offset, at) for reader, next_offset, at in reads if reader == follower_id],
            offset)
        follower_appended = _first_beyond(events["fetched_appends"], offset)
        position = _first_beyond(
            [(at_offset, at) for follower, at_offset, at in leader["positions"]
             if follower == follower_id], offset)
        # The latest position that came no later than the high watermark's move.
        later = (position >= 0) & (position <= high_watermark) & (position > waited_for[2])
        waited_for[:, later] = np.stack([answered, follower_appended, position])[:, later]

    path = np.stack([due, started, request_sent, leader_received, leader_appended,
                     *waited_for, high_watermark, consumer_answered, polled])
    hops = np.diff(path[:, np.all(path >= 0, axis=0)], axis=0) / 1e6
    return {hop: hops[index] for index, hop in enumerate(HOPS)}
