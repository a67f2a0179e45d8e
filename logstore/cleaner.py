"""Log compaction (cleanup.policy=compact): the per-batch decisions, free of file I/O.

The log builds an offset map (key -> offset of its newest record) over its committed records,
then rewrites each closed segment batch by batch with :func:`clean_batch`. A record survives if
it has no key, or it is the newest for its key and is not a tombstone (value None) older than
``delete.retention.ms``. Offsets never change: a rebuilt batch keeps its base offset,
last_offset_delta, epoch, producer fields and the offset deltas of the records it keeps, so the
log's offsets have gaps but the next-offset arithmetic is intact.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from logstore.batch import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    encode_batch,
    unpack_entries,
)


class CleanedBatch(NamedTuple):
    """The outcome for one batch: ``data`` is None when the batch is dropped."""

    data: bytes | memoryview | None
    changed: bool
    records_removed: int


class CompactionResult(NamedTuple):
    segments_cleaned: int
    batches_removed: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def add_to_offset_map(
    offset_map: dict[bytes, int],
    batch: memoryview,
    header: BatchHeader,
    *,
    below_offset: int,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> None:
    """Record the keys of ``batch`` (offsets below ``below_offset`` only) in ``offset_map``.

    Batches must be fed in offset order, so the last offset written for a key is its newest.
    """
    if header.is_control or header.base_offset >= below_offset:
        return
    base = header.base_offset
    for offset_delta, _, key, _, _ in unpack_entries(batch, 0, header, max_decompressed_size):
        if key is not None and base + offset_delta < below_offset:
            offset_map[key] = base + offset_delta


def build_offset_map(
    batches: Iterable[tuple[BatchHeader, memoryview]], *, below_offset: int
) -> dict[bytes, int]:
    """Key -> newest offset over ``batches`` (in offset order), ignoring offsets >= below_offset."""
    offset_map: dict[bytes, int] = {}
    for header, view in batches:
        add_to_offset_map(offset_map, view, header, below_offset=below_offset)
    return offset_map


def clean_batch(
    batch: memoryview,
    header: BatchHeader,
    offset_map: dict[bytes, int],
    *,
    delete_horizon_ms: int,
    retain_if_empty: bool = False,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> CleanedBatch:
    """Decide what is left of one batch after compaction.

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
    base = header.base_offset
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    first_ts = header.first_timestamp
    kept = []
    for entry in entries:
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
    data = encode_batch(
        kept,
        base_offset=header.base_offset,
        leader_epoch=header.leader_epoch,
        attributes=header.attributes,
        last_offset_delta=header.last_offset_delta,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        codec=header.compression,
    )
    return CleanedBatch(data, True, removed)
