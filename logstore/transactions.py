"""Transactions in the log: commit and abort markers, and what the log remembers of them.

A transactional producer's batches carry the transactional flag. Its transaction ends in each
partition it wrote to with a *marker*: a control batch (control flag set) of one record whose
key says COMMIT or ABORT and whose value holds the coordinator's epoch, in Kafka's byte layout
(``version int16 | type int16`` and ``version int16 | coordinator_epoch int32``), so that the
Kafka listener hands them to Kafka clients as they are.

What the log derives from its batches, as Kafka's ProducerStateManager does:

* a transaction is *ongoing* from its producer's first transactional batch until its marker;
* the *first unstable offset* is the first offset of the oldest transaction not yet decided,
  or decided by a marker that is not yet below the high watermark (a marker a new leader may
  not have could still be lost, and its transaction aborted instead);
* the *last stable offset* (LSO) is the lower of that and the high watermark: a
  ``read_committed`` consumer reads up to it and no further;
* an aborted transaction is noted in the index of the segment its marker is in
  (:class:`AbortedTransaction`, Kafka's ``.txnindex`` entry), so that a ``read_committed``
  fetch can name the aborted transactions its records belong to and the consumer drops them.

Everything here is pure: the log and its segments do the I/O.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

from rafka.logstore.batch import (
    CONTROL_FLAG_MASK,
    TRANSACTIONAL_FLAG_MASK,
    BatchHeader,
    encode_batch,
    new_header,
    unpack_entries,
)
from rafka.logstore.errors import CorruptRecordError

_MARKER_KEY = struct.Struct(">hh")  # version, type
_MARKER_VALUE = struct.Struct(">hi")  # version, coordinator epoch
MARKER_VERSION = 0


class ControlType(enum.IntEnum):
    """The type of a control record, as in Kafka's ControlRecordType."""

    ABORT = 0
    COMMIT = 1


class TransactionMarker(NamedTuple):
    """The record of a control batch that ends a transaction in one partition."""

    control_type: ControlType
    coordinator_epoch: int

    @property
    def committed(self) -> bool:
        return self.control_type is ControlType.COMMIT


def build_marker_batch(
    producer_id: int,
    producer_epoch: int,
    control_type: ControlType,
    *,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """A marker batch (base offset 0, no leader epoch) for the leader to append."""
    key = _MARKER_KEY.pack(MARKER_VERSION, int(control_type))
    value = _MARKER_VALUE.pack(MARKER_VERSION, coordinator_epoch)
    return encode_batch([(0, 0, key, value, ())], new_header(
        attributes=CONTROL_FLAG_MASK | TRANSACTIONAL_FLAG_MASK, last_offset_delta=0,
        first_timestamp=timestamp_ms, max_timestamp=timestamp_ms, producer_id=producer_id,
        producer_epoch=producer_epoch))


def read_marker(batch: memoryview | bytes, header: BatchHeader) -> TransactionMarker:
    """The marker a control batch holds; :class:`CorruptRecordError` if it holds none."""
    if not header.is_control:
        raise CorruptRecordError(f"batch at offset {header.base_offset} is not a control batch")
    entries = unpack_entries(memoryview(batch), 0, header, 1 << 16)
    if len(entries) != 1:
        raise CorruptRecordError(
            f"control batch at offset {header.base_offset} holds {len(entries)} records, not 1"
        )
    _, _, key, value, _ = entries[0]
    return parse_marker(key, value)


def parse_marker(key: bytes | None, value: bytes | None) -> TransactionMarker:
    """A control record's key and value, as Kafka lays them out."""
    if key is None or len(key) < _MARKER_KEY.size:
        raise CorruptRecordError(f"control record key {key!r} is not a marker's")
    _, control_type = _MARKER_KEY.unpack_from(key)
    if control_type not in (ControlType.ABORT, ControlType.COMMIT):
        raise CorruptRecordError(f"control record type {control_type} is not COMMIT or ABORT")
    if value is None or len(value) < _MARKER_VALUE.size:
        raise CorruptRecordError(f"marker value {value!r} holds no coordinator epoch")
    _, coordinator_epoch = _MARKER_VALUE.unpack_from(value)
    return TransactionMarker(ControlType(control_type), coordinator_epoch)


UNREADABLE_MARKER = TransactionMarker(ControlType.ABORT, -1)


def marker_of(header: BatchHeader, batch: memoryview | bytes | None) -> TransactionMarker:
    """The marker of a control batch; an abort of no coordinator epoch if its record cannot
    be read (a reader that cannot tell must not count its transaction's records as
    committed)."""
    if batch is None:
        return UNREADABLE_MARKER
    try:
        return read_marker(batch, header)
    except CorruptRecordError:
        return UNREADABLE_MARKER


# ------------------------------------------------------------------------- what the log keeps


class CompletedTransaction(NamedTuple):
    """A transaction its marker ended in this partition."""

    producer_id: int
    # The offset of its first batch here (the marker's own if it wrote nothing here).
    first_offset: int
    # The marker's offset.
    last_offset: int
    aborted: bool


class AbortedTransaction(NamedTuple):
    """One entry of a segment's aborted-transactions index (Kafka's ``.txnindex``)."""

    producer_id: int
    first_offset: int
    # The offset of the abort marker.
    last_offset: int
    # The first offset no transaction was undecided below once this one was (its marker's
    # next offset if none was): a fetch whose records end below it needs no later entry.
    last_stable_offset: int


ABORTED_ENTRY = struct.Struct(">hqqqq")  # version, producer id, first, last, last stable
ABORTED_ENTRY_VERSION = 0


def serialise_aborted(entries: Iterable[AbortedTransaction]) -> bytes:
    return b"".join(ABORTED_ENTRY.pack(ABORTED_ENTRY_VERSION, *entry) for entry in entries)


def collect_aborted(
    indexes: Iterable[Sequence[AbortedTransaction]], start_offset: int, upper_bound: int
) -> list[AbortedTransaction]:
    """The aborted transactions with records in ``[start_offset, upper_bound)``.

    ``indexes`` are the aborted-transaction indexes of the segments from the one holding
    ``start_offset`` on, in order; they are read only until an entry shows that every
    transaction begun below ``upper_bound`` was decided (its last stable offset is past it).
    """
    found: list[AbortedTransaction] = []
    for entries in indexes:
        for entry in entries:
            if entry.last_offset >= start_offset and entry.first_offset < upper_bound:
                found.append(entry)
            if entry.last_stable_offset > upper_bound:
                return found
    return found


def aborted_batch(header: BatchHeader, aborted: Sequence[AbortedTransaction]) -> bool:
    """Whether a transactional data batch belongs to one of the ``aborted`` transactions.

    A producer has one transaction open at a time, so its batch is aborted if an aborted
    transaction of the same producer spans its offset.
    """
    if not header.is_transactional or header.is_control:
        return False
    offset = header.base_offset
    return any(
        entry.producer_id == header.producer_id
        and entry.first_offset <= offset <= entry.last_offset
        for entry in aborted
    )


def committed_batches(
    batches: Iterable[tuple[BatchHeader, memoryview]],
    aborted: Iterable[AbortedTransaction | tuple[int, int]],
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """The data batches of one ``read_committed`` fetch, without those of ``aborted``
    transactions (what the fetch answered: entries, or Fetch's ``(producer_id,
    first_offset)`` pairs) and without markers.

    As Kafka's consumer does: an aborted transaction applies to its producer's transactional
    batches from its first offset until the producer's abort marker.
    """
    pending = sorted((first_offset, producer_id) for producer_id, first_offset, *_ in aborted)
    next_pending = 0
    aborting: set[int] = set()
    for header, view in batches:
        while next_pending < len(pending) and pending[next_pending][0] <= header.last_offset:
            aborting.add(pending[next_pending][1])
            next_pending += 1
        if header.is_control:
            if not marker_of(header, view).committed:
                aborting.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborting:
            continue
        yield header, view
