"""The producer's per-partition batching (Kafka's RecordAccumulator), sans-I/O.

``append`` adds records to the open batch of their partition; the sender asks ``ready`` which
batches to send. A batch closes when its estimated size reaches ``batch_size`` bytes, and is
ready when closed, ``linger_ms`` after its first record while nothing of its partition is in
flight, or at once while flushing. Time is always passed in (``now_ms``): tests drive the clock,
the actor owns the real one.

An open batch waits for its partition's requests in flight, gathering what comes meanwhile;
full batches go up to ``max_in_flight``. Each request in flight has its own connection to the
host, which works on all of them at once, so sending an open batch as soon as a slot is free (as
Kafka's producer does, whose requests queue at the broker anyway) would turn a busy partition
into many small requests, each costing every process on the replication path a wake-up
(docs/latency.md, "Why it is built this way").

The sender's loop::

    for batch in acc.ready(now_ms):        # or acc.drain_all(now_ms) to flush
        acc.on_sent(batch)                 # pops it, closes it, numbers it (idempotence)
        ... send; on success or a final error: acc.on_completed(batch)
        ... on a retriable error: acc.reenqueue(batch, now_ms, retry_backoff_ms)
    sleep at most acc.next_ready_in_ms(now_ms), or until the next append or completion

Ordering: a partition's batches leave in the order their records were appended, at most
``max_in_flight`` at once; a retried batch goes back to the front of its queue and waits until
nothing of its partition is in flight, so a retry never overtakes the batches it must come before
(with or without idempotence).

Idempotence: each partition's batches get consecutive sequence numbers (counting records, as
Kafka's do) when first sent and keep them on retry. When the leader has lost the producer's state
(``OutOfOrderSequence`` or ``UnknownProducerId`` for the oldest unacknowledged batch),
``lost_producer_state`` says so, and once nothing of the partition is in flight ``bump_epoch``
gives the partition its next epoch and numbers it from 0 (KIP-360). Epochs are per partition:
the producer id is the client's own, so one partition's bump need not wait for the others.
The epochs and numbers are a ``SequenceTracker``'s (Kafka keeps them in the producer's
TransactionManager); the accumulator hands it the batches of a partition when it must look at
them.
"""

from __future__ import annotations

import itertools
from bisect import bisect_right
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add
from typing import NamedTuple, cast

import numpy as np

from rafka.common.sentinels import MAX_PRODUCER_EPOCH
from rafka.common.sequences import decrement_sequence, increment_sequence, sequence_before
from rafka.logstore.batch import HEADER_SIZE, Header, RecordsPayload

__all__ = [
    "BATCH_OVERHEAD_BYTES",
    "HEADER_OVERHEAD_BYTES",
    "RECORD_OVERHEAD_BYTES",
    "AppendResult",
    "PendingBatch",
    "RecordAccumulator",
    "RunResult",
    "SequenceTracker",
    "batch_run_ends",
]

# Every batch carries the record batch header (docs/storage.md: base offset .. record count).
BATCH_OVERHEAD_BYTES = HEADER_SIZE
# A record's msgpack framing: the 5-element array, offset and timestamp deltas, and the key,
# value and header-array length prefixes. An estimate: exactness would cost an encode per record.
RECORD_OVERHEAD_BYTES = 16
# A header's: its 2-element array and its name's and value's length prefixes.
HEADER_OVERHEAD_BYTES = 4
_END_OF_TIME = 2**63  # a "now" after every backoff

Headers = Sequence[Header]
# One record as it waits in a batch: (key, value, timestamp_ms, headers). A plain tuple: a named
# tuple would cost more than the rest of ``append`` together.
Record = tuple[bytes | None, bytes | None, int, Headers | None]
TopicPartitionKey = tuple[str, int]

_batch_ids = itertools.count(1)


def _payload_size(key: bytes | None, value: bytes | None) -> int:
    return (len(key) if key is not None else 0) + (len(value) if value is not None else 0)


def _headers_size(headers: Headers) -> int:
    return sum(len(name) + (len(value) if value is not None else 0) + HEADER_OVERHEAD_BYTES
               for name, value in headers)


def batch_run_ends(record_sizes: np.ndarray, batch_size: int) -> list[int]:
    """Where to cut records of these sizes (as ``append`` counts them) into batches of at most
    ``batch_size`` bytes, header included, in order: the end of each run. A record larger
    than a batch travels alone, as in ``append``."""
    cumulative = np.cumsum(record_sizes)
    room = batch_size - BATCH_OVERHEAD_BYTES
    ends: list[int] = []
    start, before = 0, 0
    while start < len(cumulative):
        end = max(start + 1, int(np.searchsorted(cumulative, before + room, side="right")))
        ends.append(end)
        before = int(cumulative[end - 1])
        start = end
    return ends


@dataclass(eq=False, slots=True)
class PendingBatch:
    """The records of one partition that travel in one produce request.

    ``base_sequence`` is None until the batch is first sent (or when idempotence is off).
    Its records are either ``records``, or ``payload``: records already encoded from columns
    (``append_payload``), which arrive whole and take no more. Compared by identity.
    """

    topic: str
    partition: int
    created_ms: int
    records: list[Record] = field(default_factory=list)
    payload: RecordsPayload | None = None
    size_bytes: int = BATCH_OVERHEAD_BYTES
    attempts: int = 0
    base_sequence: int | None = None
    closed: bool = False  # takes no more records: full, sent, or retried
    retry_at_ms: int = 0  # not ready before this (retry backoff)
    in_flight: bool = False
    batch_id: int = field(default_factory=lambda: next(_batch_ids))

    @property
    def record_count(self) -> int:
        return len(self.records) if self.payload is None else self.payload.count

    @property
    def last_sequence(self) -> int | None:
        """The sequence of the last record, as the leader will remember it."""
        if self.base_sequence is None:
            return None
        return increment_sequence(self.base_sequence, self.record_count - 1)

    def __repr__(self) -> str:
        return (
            f"PendingBatch(#{self.batch_id} {self.topic}-{self.partition}, "
            f"{self.record_count} records, {self.size_bytes} B, attempts={self.attempts}, "
            f"base_sequence={self.base_sequence}, closed={self.closed}, "
            f"in_flight={self.in_flight})"
        )


class AppendResult(NamedTuple):
    """Where ``append`` put a record.

    ``batch_is_full``: the batch takes no more records and is ready to send (the sender may wake,
    and a sticky partitioner should move on). ``new_batch_created``: the record opened the batch.
    """

    batch: PendingBatch
    batch_is_full: bool
    new_batch_created: bool


class RunResult(NamedTuple):
    """Where ``append_run`` put records: ``taken`` of them, in ``batch`` from ``first_index`` on.

    ``batch.closed`` tells whether the batch is now full (a sticky partitioner should move on).
    """

    batch: PendingBatch
    first_index: int
    taken: int


class SequenceTracker:
    """The idempotence numbering of each partition of one producer id: the producer epoch its
    batches carry and the sequence its next batch starts at (what Kafka's producer keeps in its
    TransactionManager, beside the accumulator's queues).

    Sequences count records: a batch of n records starting at s is followed by one starting at
    s + n (wrapping after 2**31 - 1 to 0, as Kafka). Numbers are handed out when a batch is first
    sent, in queue order: a retry keeps its number, so the leader sees the same (producer,
    sequence) and drops a duplicate. They are taken back only from a batch the leader refused
    before appending it (``release``, ``release_batch``). Epochs move per partition
    (``next_epoch``, ``set_epoch``: KIP-360), or all at once under a new producer id
    (``start_epoch``).
    """

    def __init__(self) -> None:
        self._next: dict[TopicPartitionKey, int] = {}
        # The producer epoch of each partition bumped since (KIP-360); `_base_epoch` where
        # absent: 0, or the epoch a transactional producer's coordinator gave it.
        self._epochs: dict[TopicPartitionKey, int] = {}
        self._base_epoch = 0

    def next_sequence(self, topic: str, partition: int) -> int:
        """The sequence the next batch of the partition will start at."""
        return self._next.get((topic, partition), 0)

    def assign(self, topic: str, partition: int, record_count: int) -> int:
        """Number a batch of ``record_count`` records; returns its base sequence."""
        tp = (topic, partition)
        base = self._next.get(tp, 0)
        self._next[tp] = increment_sequence(base, record_count)
        return base

    def release(self, topic: str, partition: int, record_count: int) -> None:
        """Take back the last ``record_count`` numbers handed out (a batch the leader refused
        before appending it: see ``release_batch``)."""
        tp = (topic, partition)
        self._next[tp] = decrement_sequence(self._next.get(tp, 0), record_count)

    def start_at(self, topic: str, partition: int, sequence: int) -> None:
        """Number the partition's next batch from `sequence` (a write resumed where an
        earlier attempt of it left off: `actors.clients.sequenced_producer`)."""
        self._next[(topic, partition)] = sequence

    def reset(self, topic: str, partition: int) -> None:
        """Start the partition again at 0 (after a producer-epoch bump, KIP-360)."""
        self._next.pop((topic, partition), None)

    def reset_all(self) -> None:
        """Start every partition again at 0 (a new producer id)."""
        self._next.clear()

    def epoch(self, topic: str, partition: int) -> int:
        """The partition's producer epoch: the one ``start_epoch`` gave (0 at first) until a
        bump."""
        return self._epochs.get((topic, partition), self._base_epoch)

    def start_epoch(self, epoch: int) -> None:
        """Every partition under ``epoch``, numbered from 0 (a new producer id and epoch)."""
        self._base_epoch = epoch
        self._epochs.clear()
        self.reset_all()

    def next_epoch(self, topic: str, partition: int) -> int:
        """The epoch a bump gives the partition; ValueError when it has run out of them."""
        epoch = self.epoch(topic, partition) + 1
        if epoch > MAX_PRODUCER_EPOCH:
            raise ValueError(
                f"{topic}-{partition} ran out of producer epochs ({MAX_PRODUCER_EPOCH}): "
                "close this producer and create a new one")
        return epoch

    def set_epoch(self, topic: str, partition: int, epoch: int) -> None:
        """The partition's batches carry ``epoch`` from now on (after ``next_epoch``)."""
        self._epochs[(topic, partition)] = epoch

    @staticmethod
    def lost_producer_state(batch: PendingBatch, expected_sequence: int | None,
                            pending: Sequence[PendingBatch]) -> bool:
        """Whether the leader's OUT_OF_ORDER_SEQUENCE_NUMBER for ``batch`` means it lacks
        records no retry of ours will bring, so only a new epoch helps (KIP-360): it expects
        an earlier sequence than the batch's, and no earlier batch of the partition is still
        ``pending``. Its state was lost (the topic was deleted and created again, or retention
        removed the producer's records), or an expired batch left a gap. A leader expecting a
        later sequence has appended past the batch: resending it under a new epoch could
        write it twice, so that stays an error to retry."""
        if batch.base_sequence is None or expected_sequence is None:
            return False
        if not sequence_before(expected_sequence, batch.base_sequence):
            return False
        return all(other.batch_id > batch.batch_id for other in pending if other is not batch)

    def release_batch(self, failed: PendingBatch, pending: Sequence[PendingBatch]) -> None:
        """The leader refused ``failed`` before appending any of it (a corrupt or invalid batch,
        one too large): its sequence numbers were never used, and the partition's later batches
        (among ``pending``) move down by its record count, as in Kafka's producer
        (``adjustSequencesDueToFailedBatch``); else the leader would wait on the gap forever.

        Later batches still in flight carry their old numbers: the leader answers them
        OUT_OF_ORDER_SEQUENCE_NUMBER (it cannot append them before the gap is filled, and
        nothing fills it), and their retries carry the new ones.
        """
        if failed.base_sequence is None:
            return
        count = failed.record_count
        # Numbers are handed out in batch order (retries keep theirs, and go out in batch
        # order too), so the batches numbered after `failed` are those created after it.
        for batch in pending:
            if batch.base_sequence is not None and batch.batch_id > failed.batch_id:
                batch.base_sequence = decrement_sequence(batch.base_sequence, count)
        self.release(failed.topic, failed.partition, count)
        failed.base_sequence = None


class RecordAccumulator:
    """Per-partition queues of batches; see the module docstring for the protocol. How they
    are numbered for idempotence is its ``SequenceTracker``'s (``sequences``)."""

    def __init__(
        self,
        *,
        batch_size: int = 262_144,  # rafka's batch.size default (see actors/clients/config.py)
        linger_ms: int = 5,
        max_in_flight: int = 5,
        enable_idempotence: bool = True,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be > 0, got {batch_size}")
        if linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0, got {linger_ms}")
        if max_in_flight <= 0:
            raise ValueError(f"max_in_flight must be > 0, got {max_in_flight}")
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.max_in_flight = max_in_flight
        self.enable_idempotence = enable_idempotence
        self.sequences = SequenceTracker()
        # Insertion-ordered, so ready() answers partitions in a stable order; a partition with
        # nothing queued is dropped from it, so ready() only walks partitions with work.
        self._queues: dict[TopicPartitionKey, deque[PendingBatch]] = {}
        # Each partition's batches in flight, in the order they were sent.
        self._in_flight: dict[TopicPartitionKey, list[PendingBatch]] = {}
        self._buffered_bytes = 0

    # -- the hot path -------------------------------------------------------------------------

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int,
        headers: Headers | None,
        now_ms: int,
    ) -> AppendResult:
        """Add a record to its partition's open batch, opening one when needed.

        A record that does not fit closes the open batch and starts the next one; a record larger
        than ``batch_size`` gets a batch of its own (refusing records above
        ``max.request.size`` is the producer's job, before it gets here).
        """
        # The bytes the record adds to its batch, estimated (see RECORD_OVERHEAD_BYTES).
        size = RECORD_OVERHEAD_BYTES
        if key is not None:
            size += len(key)
        if value is not None:
            size += len(value)
        if headers:
            size += _headers_size(headers)
        tp = (topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
            batch = None
        else:
            batch = queue[-1] if queue else None
        created = False
        if batch is None or batch.closed or batch.size_bytes + size > self.batch_size:
            if batch is not None:
                batch.closed = True
            batch = PendingBatch(topic, partition, now_ms)
            queue.append(batch)
            created = True
        batch.records.append((key, value, timestamp_ms, headers))
        batch.size_bytes += size
        self._buffered_bytes += size
        if batch.size_bytes >= self.batch_size:
            batch.closed = True
        return AppendResult(batch, batch.closed, created)

    def append_run(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes | None],
        keys: Sequence[bytes | None] | None,
        start: int,
        timestamp_ms: int,
        now_ms: int,
    ) -> RunResult:
        """Append as many of ``values[start:]`` (and ``keys``, parallel, when given) as the
        partition's open batch takes, in order, without headers: the bulk form of ``append``.

        At least one record is taken. Call it again from ``start + taken``: the next call opens
        the next batch. Sizes are counted exactly as ``append`` counts them; the loop over
        records runs in C (``map``, ``accumulate``, ``zip``), which is the point of it.
        """
        tp = (topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        batch = queue[-1] if queue else None
        if batch is None or batch.closed:
            batch = PendingBatch(topic, partition, now_ms)
            queue.append(batch)
        first_index = len(batch.records)
        taken = 0
        while True:
            at = start + taken
            room = self.batch_size - batch.size_bytes
            # Size the window from the first record, twice over: computing sizes of records
            # that will not fit costs as much as appending them.
            head_size = RECORD_OVERHEAD_BYTES + _payload_size(
                keys[at] if keys is not None else None, values[at])
            end = at + max(1, min(room // RECORD_OVERHEAD_BYTES, 2 * (room // head_size)) + 1)
            window = values[at:end]
            key_window = keys[at:end] if keys is not None else None
            if key_window is None and None not in window:
                # No None in the window (just checked), which mypy cannot narrow a list by.
                sizes = map(len, cast("Sequence[bytes]", window))
            else:
                sizes = map(_payload_size, key_window or repeat(None, len(window)), window)
            cumulative = list(accumulate(map(add, sizes, repeat(RECORD_OVERHEAD_BYTES))))
            fits = bisect_right(cumulative, room)
            if fits == 0:
                if taken:
                    batch.closed = True  # the next record needs a batch of its own
                    break
                if batch.records:
                    # Not even one more fits: close this batch and start the next one.
                    batch.closed = True
                    return self.append_run(topic, partition, values, keys, start, timestamp_ms,
                                           now_ms)
                fits = 1  # a record larger than batch_size travels alone, as in append
            batch.records.extend(zip(
                key_window[:fits] if key_window is not None else repeat(None),
                window[:fits],
                repeat(timestamp_ms, fits),
                repeat(None),
            ))
            added = cumulative[fits - 1]
            batch.size_bytes += added
            self._buffered_bytes += added
            taken += fits
            if fits < len(window) or batch.size_bytes >= self.batch_size:
                batch.closed = True
                break
            if start + taken >= len(values):
                break
        return RunResult(batch, first_index, taken)

    def append_payload(self, topic: str, partition: int, payload: RecordsPayload,
                       records_size: int, now_ms: int) -> PendingBatch:
        """Queue records already encoded (``Producer.send_columns``) as a batch of their own,
        closed: ready to send. ``records_size`` is their size as ``append`` would count it.

        The partition's open batch closes too, so records appended after these cannot be
        sent before them.
        """
        tp = (topic, partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        elif queue:
            queue[-1].closed = True
        batch = PendingBatch(topic, partition, now_ms, payload=payload,
                             size_bytes=BATCH_OVERHEAD_BYTES + records_size, closed=True)
        queue.append(batch)
        self._buffered_bytes += records_size
        return batch

    # -- what to send -------------------------------------------------------------------------

    def ready(self, now_ms: int) -> list[PendingBatch]:
        """The batches to send now: closed, lingered long enough, or retries past their backoff.

        Per partition, only a prefix of its queue (order is kept) and no more than the in-flight
        limit allows. Nothing changes until ``on_sent``, so asking twice answers the same.
        """
        return list(self._sendable(now_ms, flush=False))

    def drain_all(self, now_ms: int | None = None) -> list[PendingBatch]:
        """Like ``ready`` but ignoring ``linger_ms`` (flush): every batch the limits allow now.

        Retries still wait for their backoff (unless ``now_ms`` is None: then they go at once),
        and the in-flight limit still holds: a flush calls this again as batches complete, until
        ``has_pending()`` is False.
        """
        return list(self._sendable(_END_OF_TIME if now_ms is None else now_ms, flush=True))

    def _sendable(self, now_ms: int, flush: bool) -> Iterator[PendingBatch]:
        linger = self.linger_ms
        for tp, queue in self._queues.items():
            in_flight = len(self._in_flight.get(tp, ()))
            for batch in queue:
                if in_flight >= self.max_in_flight:
                    break
                if batch.attempts:
                    # A retry waits for its backoff, and until the batches sent before it
                    # have come back, so it cannot land behind a batch it must precede.
                    if batch.retry_at_ms > now_ms or in_flight:
                        break
                elif not (batch.closed or flush
                          or (not in_flight and now_ms - batch.created_ms >= linger)):
                    # An open batch waits for its partition's requests in flight, gathering
                    # what comes meanwhile (module docstring, "A partition in flight").
                    break
                yield batch
                in_flight += 1

    def next_ready_in_ms(self, now_ms: int) -> int | None:
        """How long the sender may sleep before ``ready`` has something new by the clock alone.

        0 when something is ready now; None when nothing will become ready by waiting (empty
        queues, or every partition waits for in-flight batches): sleep until the next append or
        completion then.
        """
        wait: int | None = None
        for tp, queue in self._queues.items():
            if not queue:
                continue
            in_flight = len(self._in_flight.get(tp, ()))
            if in_flight >= self.max_in_flight:
                continue
            head = queue[0]
            if head.attempts:
                if in_flight:
                    continue
                due = head.retry_at_ms
            elif head.closed:
                return 0
            elif in_flight:
                continue  # an open batch goes when its partition's requests come back
            else:
                due = head.created_ms + self.linger_ms
            remaining = max(0, due - now_ms)
            if remaining == 0:
                return 0
            if wait is None or remaining < wait:
                wait = remaining
        return wait

    # -- the sender's reports -----------------------------------------------------------------

    def on_sent(self, batch: PendingBatch) -> None:
        """The sender is sending ``batch`` now: take it off its queue, close it, number it.

        It must be the head of its partition's queue (what ``ready`` returned, in that order).
        """
        tp = (batch.topic, batch.partition)
        queue = self._queues.get(tp)
        if not queue or queue[0] is not batch:
            raise ValueError(
                f"{batch!r} is not next in line for {tp[0]}-{tp[1]}: send batches in the order "
                "ready() returns them"
            )
        in_flight = len(self._in_flight.get(tp, ()))
        if in_flight >= self.max_in_flight:
            raise ValueError(
                f"{tp[0]}-{tp[1]} already has {in_flight} batches in flight "
                f"(max_in_flight={self.max_in_flight})"
            )
        queue.popleft()
        if not queue:
            del self._queues[tp]
        self._in_flight.setdefault(tp, []).append(batch)
        batch.closed = True
        batch.in_flight = True
        batch.attempts += 1
        self._buffered_bytes -= batch.size_bytes - BATCH_OVERHEAD_BYTES
        if self.enable_idempotence and batch.base_sequence is None:
            batch.base_sequence = self.sequences.assign(tp[0], tp[1], batch.record_count)

    def on_completed(self, batch: PendingBatch) -> None:
        """``batch`` came back for good (acknowledged, or failed without retry): free its slot.

        Calling it for a batch that is not in flight (already completed or reenqueued) does
        nothing, so the sender's success and error paths need not coordinate.
        """
        if not batch.in_flight:
            return
        batch.in_flight = False
        tp = (batch.topic, batch.partition)
        remaining = self._in_flight[tp]
        remaining.remove(batch)
        if not remaining:
            del self._in_flight[tp]

    def reenqueue(self, batch: PendingBatch, now_ms: int, backoff_ms: int) -> None:
        """Put a failed batch back for a retry, not ready before ``now_ms + backoff_ms``.

        It goes to the front of its partition's queue; when several in-flight batches fail,
        they line up in the order they were first sent (which is their sequence order), so the
        retries leave in their original order. Frees its in-flight slot.
        """
        self.on_completed(batch)
        batch.closed = True
        batch.retry_at_ms = now_ms + backoff_ms
        tp = (batch.topic, batch.partition)
        queue = self._queues.get(tp)
        if queue is None:
            queue = self._queues[tp] = deque()
        # Batches are created, and first sent, in append order, so creation order (batch_id) is
        # the order a partition's retries must keep among themselves and before unsent batches.
        index = 0
        while index < len(queue) and queue[index].batch_id < batch.batch_id:
            index += 1
        queue.insert(index, batch)
        self._buffered_bytes += batch.size_bytes - BATCH_OVERHEAD_BYTES

    # -- idempotence: the numbers are the SequenceTracker's, given the partition's batches --

    def producer_epoch(self, topic: str, partition: int) -> int:
        """The epoch the partition's batches carry: 0 (or the one `start_epoch` gave) until a
        bump, -1 without idempotence."""
        return self.sequences.epoch(topic, partition) if self.enable_idempotence else -1

    def start_epoch(self, epoch: int) -> None:
        """Every partition under `epoch`, numbered from 0 (a transactional producer's id and
        epoch, from its coordinator). Only while nothing is queued or in flight."""
        assert not self.has_pending(), "start_epoch with batches queued or in flight"
        self.sequences.start_epoch(epoch)

    def lost_producer_state(self, batch: PendingBatch, expected_sequence: int | None) -> bool:
        """Whether only a new epoch gets ``batch`` appended (``SequenceTracker``'s
        ``lost_producer_state``, against the batches pending in its partition)."""
        return self.sequences.lost_producer_state(batch, expected_sequence,
                                                  self._pending(batch.topic, batch.partition))

    def bump_epoch(self, topic: str, partition: int) -> int:
        """Give the partition its next producer epoch and number it from 0 again; returns the
        epoch. Only while nothing of the partition is in flight (see ``reset_sequences``)."""
        epoch = self.sequences.next_epoch(topic, partition)
        self.reset_sequences(topic, partition)
        self.sequences.set_epoch(topic, partition, epoch)
        return epoch

    def reset_sequences(self, topic: str, partition: int) -> None:
        """Number the partition from 0 again (after a producer-epoch bump; see module docstring).

        Queued batches lose their old numbers and get new ones, in queue order, as they are sent.
        Only allowed while nothing of the partition is in flight: an answer for a batch numbered
        under the old epoch could otherwise not be told apart.
        """
        tp = (topic, partition)
        if self._in_flight.get(tp):
            raise ValueError(
                f"{topic}-{partition} still has {len(self._in_flight[tp])} batches in flight: "
                "wait for them before resetting its sequence numbers"
            )
        self.sequences.reset(topic, partition)
        for batch in self._queues.get(tp, ()):
            batch.base_sequence = None

    def release_sequences(self, failed: PendingBatch) -> None:
        """The leader refused ``failed`` before appending any of it: give its numbers back and
        move the partition's later batches down (``SequenceTracker.release_batch``). Call
        after ``on_completed(failed)``."""
        self.sequences.release_batch(failed, self._pending(failed.topic, failed.partition))

    def _pending(self, topic: str, partition: int) -> tuple[PendingBatch, ...]:
        """The partition's batches in flight, then its queued ones."""
        tp = (topic, partition)
        return (*self._in_flight.get(tp, ()), *self._queues.get(tp, ()))

    # -- giving up ----------------------------------------------------------------------------

    def expire(self, now_ms: int, delivery_timeout_ms: int) -> list[PendingBatch]:
        """Take out queued batches older than ``delivery_timeout_ms`` (Kafka's
        ``delivery.timeout.ms``), to be failed by the producer. In-flight batches are not
        touched: their request has its own timeout.

        Only a prefix of each queue expires (order is kept). An expired batch that already had a
        sequence number leaves a gap the leader would wait on forever, so the producer must then
        bump its epoch and call ``reset_sequences`` (when the partition has nothing in flight).
        """
        expired: list[PendingBatch] = []
        for tp in list(self._queues):
            queue = self._queues[tp]
            while queue and now_ms - queue[0].created_ms >= delivery_timeout_ms:
                batch = queue.popleft()
                batch.closed = True
                self._buffered_bytes -= batch.size_bytes - BATCH_OVERHEAD_BYTES
                expired.append(batch)
            if not queue:
                del self._queues[tp]
        return expired

    def abort_all(self) -> list[PendingBatch]:
        """Take out every queued batch (closing without flushing, or a fatal error)."""
        aborted = [batch for queue in self._queues.values() for batch in queue]
        for batch in aborted:
            batch.closed = True
        self._queues.clear()
        self._buffered_bytes = 0
        return aborted

    # -- state --------------------------------------------------------------------------------

    def has_pending(self) -> bool:
        """Whether any batch is queued or in flight (a flush is done when this is False)."""
        return bool(self._queues) or bool(self._in_flight)

    def in_flight_count(self, topic: str, partition: int) -> int:
        return len(self._in_flight.get((topic, partition), ()))

    def queued_batches(self, topic: str, partition: int) -> list[PendingBatch]:
        """The partition's queue, front first (a copy)."""
        return list(self._queues.get((topic, partition), ()))

    @property
    def buffered_bytes(self) -> int:
        """Estimated record bytes waiting in queues (for ``buffer.memory``-style back-pressure)."""
        return self._buffered_bytes
