"""Log compaction (cleanup.policy=compact): the cleaner, and its per-batch decisions.

:func:`iter_compaction` drives a compaction over what the log hands it: its segment list
(:class:`~rafka.logstore.local_log.LocalLog`), its producer state and its last stable offset (the
high watermark, or the start of the oldest undecided transaction below it). It builds an
offset map (key -> offset of its newest record) over the committed records, then rewrites each
cleanable segment batch by batch with :func:`clean_batch` into a ``.cleaned`` segment that is
swapped in for it. A record survives if it has no key, or it is the newest for its key and is
not a tombstone (value None) older than ``delete.retention.ms``. The records of aborted
transactions never count as newest and are removed; markers (control batches) are kept.
Offsets never change: a rebuilt batch keeps its base offset, last_offset_delta, epoch, producer
fields and the offset deltas of the records it keeps, so the log's offsets have gaps but the
next-offset arithmetic is intact.

Contract: the cleaner runs on the log owner's thread, one segment per step; the owner may
append between steps (only closed segments below the high watermark are rewritten), and a
truncation between steps ends the compaction (its offset map may name records that are gone).
The per-batch functions (:func:`clean_batch`, :func:`build_offset_map`) do no file I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import pairwise
from typing import NamedTuple

from rafka.logstore.batch import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    encode_batch,
    read_header,
    unpack_entries,
)
from rafka.logstore.local_log import LocalLog
from rafka.logstore.producer_state import ProducerStateManager
from rafka.logstore.segment import LogSegment
from rafka.logstore.transactions import AbortedTransaction, aborted_batch


class CleanedBatch(NamedTuple):
    """The outcome for one batch: ``data`` is None when the batch is dropped."""

    data: bytes | memoryview | None
    changed: bool
    records_removed: int


class SegmentCleanResult(NamedTuple):
    """One step of a compaction: what rewriting one segment removed."""

    base_offset: int
    batches_removed: int
    records_removed: int
    bytes_before: int
    bytes_after: int


class CompactionResult(NamedTuple):
    """A whole compaction: the sums of its steps."""

    segments_cleaned: int
    batches_removed: int
    records_removed: int
    bytes_before: int
    bytes_after: int

    @classmethod
    def total(cls, steps: Iterable[SegmentCleanResult]) -> CompactionResult:
        """Run ``steps`` to the end and add them up."""
        segments = batches = records = before = after = 0
        for step in steps:
            segments += 1
            batches += step.batches_removed
            records += step.records_removed
            before += step.bytes_before
            after += step.bytes_after
        return cls(segments, batches, records, before, after)


def add_to_offset_map(
    offset_map: dict[bytes, int],
    batch: memoryview,
    header: BatchHeader,
    *,
    below_offset: int,
    aborted: Sequence[AbortedTransaction] = (),
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> None:
    """Record the keys of ``batch`` (offsets below ``below_offset`` only) in ``offset_map``,
    unless it is a marker or belongs to one of the ``aborted`` transactions.

    Batches must be fed in offset order, so the last offset written for a key is its newest.
    """
    if (header.is_control or header.base_offset >= below_offset
            or aborted_batch(header, aborted)):
        return
    base = header.base_offset
    for offset_delta, _, key, _, _ in unpack_entries(batch, 0, header, max_decompressed_size):
        if key is not None and base + offset_delta < below_offset:
            offset_map[key] = base + offset_delta


def build_offset_map(
    batches: Iterable[tuple[BatchHeader, memoryview]],
    *,
    below_offset: int,
    aborted: Sequence[AbortedTransaction] = (),
) -> dict[bytes, int]:
    """Key -> newest offset over ``batches`` (in offset order), ignoring offsets >= below_offset
    and the records of ``aborted`` transactions."""
    offset_map: dict[bytes, int] = {}
    for header, view in batches:
        add_to_offset_map(offset_map, view, header, below_offset=below_offset, aborted=aborted)
    return offset_map


def clean_batch(
    batch: memoryview,
    header: BatchHeader,
    offset_map: dict[bytes, int],
    *,
    delete_horizon_ms: int,
    retain_if_empty: bool = False,
    aborted: Sequence[AbortedTransaction] = (),
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> CleanedBatch:
    """Decide what is left of one batch after compaction: nothing of a batch of one of the
    ``aborted`` transactions, every marker.

    ``delete_horizon_ms``: tombstones with a timestamp below it are removed. ``retain_if_empty``
    keeps a batch with no records left, with its header: the log asks for it for the last batch
    of a segment (so the segment still ends where the next begins) and for the last batch of an
    idempotent producer (whose sequence state a reopened log rebuilds from batch headers, as
    Kafka keeps it). Unchanged batches are returned as they are (same bytes, same CRC, same
    compression).
    """
    if header.is_control:
        return CleanedBatch(batch, False, 0)
    entries = unpack_entries(batch, 0, header, max_decompressed_size)
    # An aborted transaction's records all go.
    entries_to_check = [] if aborted_batch(header, aborted) else entries
    base = header.base_offset
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    first_ts = header.first_timestamp
    kept = []
    for entry in entries_to_check:
        offset_delta, timestamp_delta, key, value, _ = entry
        if key is not None:
            offset = base + offset_delta
            if offset_map.get(key, offset) > offset:
                continue  # a newer record with this key exists
            if value is None:
                ts = header.max_timestamp if log_append_time else first_ts + timestamp_delta
                if ts < delete_horizon_ms:
                    continue  # an expired tombstone
        kept.append(entry)
    removed = len(entries) - len(kept)
    if not removed:
        return CleanedBatch(batch, False, 0)
    if not kept and not retain_if_empty:
        return CleanedBatch(None, True, removed)
    if kept and not log_append_time:
        max_ts = first_ts + max(e[1] for e in kept)
    else:
        max_ts = header.max_timestamp
    data = encode_batch(kept, header._replace(first_timestamp=first_ts, max_timestamp=max_ts))
    return CleanedBatch(data, True, removed)


# ------------------------------------------------------------------------------- the driver


def iter_compaction(
    local_log: LocalLog,
    producers: ProducerStateManager,
    *,
    last_stable_offset: int,
    now_ms: int,
) -> Iterator[SegmentCleanResult]:
    """Compact ``local_log`` in steps, one cleanable segment per step (see the module docstring).

    Cleanable segments are the closed ones wholly below ``last_stable_offset`` whose newest
    record is at least min.compaction.lag.ms old (a prefix of the log). The offset map covers
    every committed record below it, the active segment included, so a newer committed value
    anywhere removes older ones. ``producers`` is only read: an idempotent producer's last batch
    is kept, even emptied.
    """
    config = local_log.config
    cleanable = _cleanable_segments(
        local_log.segments, last_stable_offset, now_ms - config.min_compaction_lag_ms
    )
    if not cleanable:
        return
    truncations = local_log.truncations
    aborted = [entry for segment in local_log.segments for entry in segment.txn_index.entries]
    offset_map = build_offset_map(
        _batches_below(local_log.segments, last_stable_offset),
        below_offset=last_stable_offset,
        aborted=aborted,
    )
    horizon = now_ms - config.delete_retention_ms
    for segment in cleanable:
        if local_log.truncations != truncations or segment not in local_log.segments:
            return
        result = _clean_segment(local_log, segment, producers, offset_map, horizon, aborted)
        if result is not None:
            yield result


def _cleanable_segments(
    segments: Iterable[LogSegment], last_stable_offset: int, lag_horizon_ms: int
) -> list[LogSegment]:
    """The closed segments below the last stable offset with no record newer than the horizon."""
    out = []
    for segment, following in pairwise(segments):
        if following.base_offset > last_stable_offset or segment.max_timestamp > lag_horizon_ms:
            break
        out.append(segment)
    return out


def _batches_below(
    segments: Iterable[LogSegment], offset: int
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Every batch of ``segments`` that starts below ``offset``, in offset order."""
    for segment in segments:
        if segment.base_offset >= offset:
            return
        for position, header in segment.iter_headers(0):
            if header.base_offset >= offset:
                break
            yield header, memoryview(segment.read_bytes(position, header.size))


def _clean_segment(
    local_log: LocalLog,
    segment: LogSegment,
    producers: ProducerStateManager,
    offset_map: dict[bytes, int],
    horizon: int,
    aborted: Sequence[AbortedTransaction],
) -> SegmentCleanResult | None:
    """Rewrite ``segment`` without what compaction removes; None if nothing would go."""
    cleaned: LogSegment | None = None
    batches_removed = records_removed = 0
    try:
        for position, header in segment.iter_headers(0):
            view = memoryview(segment.read_bytes(position, header.size))
            producer = producers.get(header.producer_id)
            outcome = clean_batch(
                view,
                header,
                offset_map,
                delete_horizon_ms=horizon,
                # The segment's last batch stays, even empty, so that a closed segment
                # always ends where the next begins (recovery relies on it); so does an
                # idempotent producer's last batch (its sequence state is rebuilt from it).
                retain_if_empty=header.next_offset == segment.next_offset
                or (producer is not None and producer.last_offset == header.last_offset),
                aborted=aborted,
            )
            if not outcome.changed:
                if cleaned is not None:
                    cleaned.append(header, (view,))
                continue
            if cleaned is None:
                cleaned = _start_cleaned_copy(local_log, segment, position)
            records_removed += outcome.records_removed
            if outcome.data is None:
                batches_removed += 1
            else:
                cleaned.append(read_header(outcome.data), (outcome.data,))
        if cleaned is None:
            return None
        local_log.replace_segment(segment, cleaned)
    except BaseException:
        if cleaned is not None:
            cleaned.delete()
        raise
    return SegmentCleanResult(
        segment.base_offset, batches_removed, records_removed, segment.size, cleaned.size
    )


def _start_cleaned_copy(local_log: LocalLog, segment: LogSegment, upto: int) -> LogSegment:
    """A ``.cleaned`` segment holding ``segment``'s batches before byte ``upto``."""
    cleaned = local_log.new_cleaned_segment(segment)
    # Markers are never removed, so the aborted transactions stay where they were.
    cleaned.txn_index.replace(segment.txn_index.entries)
    for position, header in segment.iter_headers(0):
        if position >= upto:
            break
        cleaned.append(header, (segment.read_bytes(position, header.size),))
    return cleaned
