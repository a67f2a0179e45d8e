"""Producer state for idempotence (the idea of Kafka's ProducerStateManager).

Per producer id the log keeps the producer epoch and the metadata of the last
``BATCHES_PER_PRODUCER`` batches appended for it. That is enough to answer a retried batch with
its original offsets (a duplicate) and to refuse a batch that skips a sequence number: rafka's
producer relies on the latter to keep several in-flight requests in order (docs/guarantees.md).

The decision itself, :func:`check_sequence`, is a pure function of the producer's entry and the
incoming batch, so the leader can call it and a test can drive it without a log.

A transactional producer's entry also holds the first offset of its transaction in this log
until the transaction's marker (:mod:`rafka.logstore.transactions`); the manager knows which
transactions are undecided, and so where the last stable offset lies.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable
from typing import NamedTuple

from rafka.common.sentinels import NO_PRODUCER_ID
from rafka.common.sequences import increment_sequence
from rafka.logstore.batch import BatchHeader
from rafka.logstore.transactions import (
    AbortedTransaction,
    CompletedTransaction,
    TransactionMarker,
    marker_of,
)

# Kafka keeps five: max.in.flight.requests.per.connection is at most 5 with idempotence.
BATCHES_PER_PRODUCER = 5


class BatchMetadata(NamedTuple):
    """What the log remembers of one appended batch of a producer."""

    base_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class ProducerEntry:
    """Epoch and recent batches of one producer id."""

    __slots__ = ("batches", "coordinator_epoch", "current_txn_first_offset", "producer_epoch",
                 "producer_id")

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int,
        batches: Iterable[BatchMetadata] = (),
        current_txn_first_offset: int | None = None,
        coordinator_epoch: int = -1,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=BATCHES_PER_PRODUCER)
        # The offset of the first batch of its undecided transaction here, if it has one.
        self.current_txn_first_offset = current_txn_first_offset
        # The newest transaction coordinator epoch of its markers here: a marker of an older
        # coordinator (one that lost `__transaction_state` and sends late) is refused.
        self.coordinator_epoch = coordinator_epoch

    @property
    def last_sequence(self) -> int | None:
        return self.batches[-1].last_sequence if self.batches else None

    @property
    def last_offset(self) -> int | None:
        return self.batches[-1].last_offset if self.batches else None

    def find(self, base_sequence: int, last_sequence: int) -> BatchMetadata | None:
        """The remembered batch with exactly these sequences (a retry), if any."""
        for batch in self.batches:
            if batch.base_sequence == base_sequence and batch.last_sequence == last_sequence:
                return batch
        return None

    def copy(self) -> ProducerEntry:
        return ProducerEntry(
            self.producer_id, self.producer_epoch, self.batches, self.current_txn_first_offset,
            self.coordinator_epoch,
        )

    def _fields(self) -> tuple[int, int, list[BatchMetadata], int | None, int]:
        return (self.producer_id, self.producer_epoch, list(self.batches),
                self.current_txn_first_offset, self.coordinator_epoch)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProducerEntry) and self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"ProducerEntry(producer_id={self.producer_id}, "
            f"producer_epoch={self.producer_epoch}, batches={list(self.batches)}, "
            f"current_txn_first_offset={self.current_txn_first_offset}, "
            f"coordinator_epoch={self.coordinator_epoch})"
        )


class SequenceOutcome(enum.Enum):
    OK = "ok"
    # A retry of a batch already in the log: answer with its offsets, do not append.
    DUPLICATE = "duplicate"
    # A gap or a step back: the producer must resend in order (OutOfOrderSequenceException).
    OUT_OF_ORDER_SEQUENCE = "out_of_order_sequence"
    # An older epoch of the producer: it was fenced by a newer instance.
    INVALID_PRODUCER_EPOCH = "invalid_producer_epoch"
    # The log has no state for the producer (new to it, or removed by retention) and the batch
    # does not start at sequence 0: the producer must reset its sequences
    # (UnknownProducerIdException), because the log cannot tell a gap from a fresh start.
    UNKNOWN_PRODUCER_ID = "unknown_producer_id"


class SequenceCheck(NamedTuple):
    outcome: SequenceOutcome
    # For DUPLICATE: the batch already in the log.
    duplicate_of: BatchMetadata | None = None
    # For OUT_OF_ORDER_SEQUENCE and UNKNOWN_PRODUCER_ID: the sequence the log expected.
    expected_sequence: int | None = None


def check_sequence(
    entry: ProducerEntry | None,
    producer_epoch: int,
    base_sequence: int,
    last_sequence: int,
) -> SequenceCheck:
    """Decide whether a batch of an idempotent producer may be appended.

    ``entry`` is the log's state for the producer id (None if it has none). Kafka's rules:
    an older epoch is fenced; a newer epoch must start at sequence 0; in the same epoch a batch
    equal to one of the last five is a duplicate, and otherwise its first sequence must follow
    the last appended one.
    """
    if entry is None or not entry.batches:
        if entry is not None and producer_epoch < entry.producer_epoch:
            return SequenceCheck(SequenceOutcome.INVALID_PRODUCER_EPOCH)
        if base_sequence == 0:
            return SequenceCheck(SequenceOutcome.OK)
        return SequenceCheck(SequenceOutcome.UNKNOWN_PRODUCER_ID, expected_sequence=0)
    if producer_epoch < entry.producer_epoch:
        return SequenceCheck(SequenceOutcome.INVALID_PRODUCER_EPOCH)
    if producer_epoch > entry.producer_epoch:
        if base_sequence == 0:
            return SequenceCheck(SequenceOutcome.OK)
        return SequenceCheck(SequenceOutcome.OUT_OF_ORDER_SEQUENCE, expected_sequence=0)
    duplicate = entry.find(base_sequence, last_sequence)
    if duplicate is not None:
        return SequenceCheck(SequenceOutcome.DUPLICATE, duplicate_of=duplicate)
    assert entry.last_sequence is not None
    expected = increment_sequence(entry.last_sequence, 1)
    if base_sequence == expected:
        return SequenceCheck(SequenceOutcome.OK)
    return SequenceCheck(SequenceOutcome.OUT_OF_ORDER_SEQUENCE, expected_sequence=expected)


ProducerSnapshot = dict[int, ProducerEntry]


class ProducerStateManager:
    """The producer entries of one log, updated from batch headers on every append, and the
    transactions they have open."""

    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        # Producer id -> first offset of its undecided transaction.
        self._ongoing: dict[int, int] = {}
        # Marker offset -> transaction decided by a marker not yet known to be below the high
        # watermark (until then a new leader might not have the marker).
        self._unreplicated: dict[int, CompletedTransaction] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    @property
    def producer_ids(self) -> list[int]:
        return list(self._producers)

    def update(
        self, header: BatchHeader, batch: bytes | memoryview | None = None
    ) -> CompletedTransaction | None:
        """Account for an appended (stamped) batch; batches without producer id are ignored.

        ``batch``, the batch's bytes, is needed for a control batch only (whether its marker
        commits or aborts). Returns the transaction a marker completed, else None.
        """
        producer_id = header.producer_id
        if producer_id == NO_PRODUCER_ID or producer_id < 0:
            return None
        entry = self._producers.get(producer_id)
        if entry is None or header.producer_epoch > entry.producer_epoch:
            # A new epoch starts a fresh sequence space (a transaction it had open was ended
            # by the coordinator's marker first, or is ended by this marker).
            first_offset, coordinator_epoch = (
                (entry.current_txn_first_offset, entry.coordinator_epoch) if entry is not None
                else (None, -1))
            entry = self._producers[producer_id] = ProducerEntry(
                producer_id, header.producer_epoch, (), first_offset, coordinator_epoch
            )
        elif header.producer_epoch < entry.producer_epoch:
            # A fenced epoch cannot follow a newer one in a consistent log: ignore it.
            return None
        if header.is_control:
            return self._complete(entry, header, marker_of(header, batch))
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            )
        )
        if header.is_transactional and entry.current_txn_first_offset is None:
            entry.current_txn_first_offset = header.base_offset
            self._ongoing[producer_id] = header.base_offset
        return None

    def _complete(
        self, entry: ProducerEntry, header: BatchHeader, marker: TransactionMarker
    ) -> CompletedTransaction:
        first_offset = entry.current_txn_first_offset
        completed = CompletedTransaction(
            entry.producer_id,
            header.base_offset if first_offset is None else first_offset,
            header.base_offset,
            aborted=not marker.committed,
        )
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = max(entry.coordinator_epoch, marker.coordinator_epoch)
        self._ongoing.pop(entry.producer_id, None)
        self._unreplicated[header.base_offset] = completed
        return completed

    # ------------------------------------------------------------------- transactions

    @property
    def ongoing_transactions(self) -> dict[int, int]:
        """Producer id -> first offset, for every undecided transaction."""
        return dict(self._ongoing)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest transaction that is undecided, or decided by a marker
        at or above ``high_watermark``; None if there is none."""
        if not self._ongoing and not self._unreplicated:
            return None  # every read of a log without transactions asks: answer it at once
        for offset in [o for o in self._unreplicated if o < high_watermark]:
            del self._unreplicated[offset]
        firsts = [*self._ongoing.values(), *(t.first_offset for t in self._unreplicated.values())]
        return min(firsts) if firsts else None

    def aborted_entry(self, completed: CompletedTransaction) -> AbortedTransaction:
        """The index entry of the aborted transaction ``update`` just returned. Its last stable
        offset, where a fetch may stop looking for aborted transactions, is the first offset of
        the oldest transaction still open, else the marker's next offset."""
        return AbortedTransaction(
            completed.producer_id,
            completed.first_offset,
            completed.last_offset,
            last_stable_offset=min(self._ongoing.values(), default=completed.last_offset + 1),
        )

    # -------------------------------------------------------------------- snapshots

    def snapshot(self) -> ProducerSnapshot:
        """A copy of the state (the log keeps one per segment to rebuild after truncation)."""
        return {pid: entry.copy() for pid, entry in self._producers.items()}

    def restore(self, snapshot: ProducerSnapshot, *, at_offset: int) -> None:
        """Go back to the state ``snapshot`` was taken in, at ``at_offset``; the batches from
        there on are replayed by the caller."""
        self._producers = {pid: entry.copy() for pid, entry in snapshot.items()}
        self._ongoing = {
            pid: entry.current_txn_first_offset
            for pid, entry in self._producers.items()
            if entry.current_txn_first_offset is not None
        }
        self._unreplicated = {
            offset: completed
            for offset, completed in self._unreplicated.items()
            if offset < at_offset
        }

    def clear(self) -> None:
        self._producers = {}
        self._ongoing = {}
        self._unreplicated = {}

    def evict_below(self, log_start_offset: int) -> int:
        """Forget producers whose every remembered batch is below the log start offset, unless
        a transaction of theirs is still open.

        After retention a rebuild from the log would not know them either. Returns how many
        were removed.
        """
        gone = [
            pid
            for pid, entry in self._producers.items()
            if (entry.last_offset is None or entry.last_offset < log_start_offset)
            and entry.current_txn_first_offset is None
        ]
        for pid in gone:
            del self._producers[pid]
        return len(gone)
