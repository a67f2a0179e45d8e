"""A leader's offsets and epoch stamped on incoming batches, and a follower's offsets checked:
Kafka's LogValidator, for the two ways into a :class:`~rafka.logstore.log.Log`.

Records are never decoded here: the bytes were validated before (``batch.validate_batch``), and
only the framing and the headers are read. A batch is stamped with its base offset and leader
epoch (outside the CRC) and kept as it came, except on LogAppendTime topics, where its header
gets the append time and a new CRC.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rafka.logstore.batch import (
    NO_TIMESTAMP,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    read_header,
    stamped_prefix,
)
from rafka.logstore.config import LogConfig
from rafka.logstore.errors import RecordTooLargeError, UnexpectedAppendOffsetError

# A batch ready to be written: its final header and its bytes, in parts written in order.
StampedBatch = tuple[BatchHeader, Sequence[Any]]


def assign_offsets(
    parsed: Sequence[tuple[BatchHeader, memoryview]],
    first_offset: int,
    leader_epoch: int,
    config: LogConfig,
    now_ms: int,
) -> tuple[list[StampedBatch], int]:
    """The leader's batches numbered from ``first_offset`` and stamped with ``leader_epoch``,
    and the log append time to answer (``NO_TIMESTAMP`` unless a batch took it).

    Refuses a batch larger than max.message.bytes before stamping any.
    """
    max_size = config.max_message_bytes
    for header, _ in parsed:
        if header.size > max_size:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes is larger than max.message.bytes={max_size}"
            )
    offset = first_offset
    topic_uses_append_time = config.log_append_time
    log_append_time_ms = NO_TIMESTAMP
    stamped: list[StampedBatch] = []
    for header, view in parsed:
        use_append_time = topic_uses_append_time or header.attributes & TIMESTAMP_TYPE_MASK
        prefix = stamped_prefix(
            header, view, offset, leader_epoch, now_ms if use_append_time else None
        )
        if use_append_time:
            stamped_header = read_header(prefix)
            log_append_time_ms = now_ms
        else:
            stamped_header = header._replace(base_offset=offset, leader_epoch=leader_epoch)
        # The stamped prefix, then the rest of the batch as it came: no copy of the records.
        stamped.append((stamped_header, (prefix, view[len(prefix) :])))
        offset = stamped_header.next_offset
    return stamped, log_append_time_ms


def check_follower_offsets(
    parsed: Sequence[tuple[BatchHeader, memoryview]], log_end_offset: int
) -> None:
    """A follower's batches must each start at or after where the one before ends, the first
    at or after ``log_end_offset`` (a gap is possible when the leader compacted)."""
    expected = log_end_offset
    for header, _ in parsed:
        if header.base_offset < expected:
            raise UnexpectedAppendOffsetError(
                f"follower append of a batch at offset {header.base_offset} below the "
                f"expected offset {expected} (log end offset {log_end_offset}): "
                "truncate to the leader's epoch end offset and fetch again"
            )
        expected = header.next_offset
