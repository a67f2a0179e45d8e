"""The segments of one log directory, oldest first, the last one active (Kafka's LocalLog).

:class:`LocalLog` rolls, appends to the active segment, reads across segments, truncates,
deletes the oldest segments and flushes, and keeps the recovery point that goes with flushing.
It knows where each segment starts and ends, and nothing of what the offsets mean: it never
assigns offsets, checks epochs or tracks producers, and it never decides what to delete or to
compact. That is :class:`~rafka.logstore.log.Log`'s job, and the cleaner's.

Contract:

* there is always at least one segment; a closed segment ends where the next begins;
* everything below :attr:`LocalLog.recovery_point` is on disk (fsynced); rolls and flushes move
  it up, truncations down, and each move is written to the recovery-point checkpoint;
* not thread-safe: it relies on its owner (the :class:`~rafka.logstore.log.Log`, hence the replica
  actor) calling it from one thread at a time;
* ``on_roll`` is told the base offset of each new segment before anything is appended to it
  (the log snapshots producer state there).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rafka.logstore.batch import HEADER_SIZE, INT32_MAX, BatchHeader, decode_records
from rafka.logstore.checkpoint import OffsetCheckpoint, fsync_directory
from rafka.logstore.config import LogConfig
from rafka.logstore.retention import SegmentSummary
from rafka.logstore.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    LogSegment,
    segment_file_name,
)


class LocalLog:
    """The segment list of one directory; see the module docstring for the contract."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        segments: list[LogSegment],
        *,
        recovery_point: int,
        recovery_point_file: OffsetCheckpoint,
        on_roll: Callable[[int], None],
    ) -> None:
        """Take over ``segments`` (as the loader left them, never empty) and ``recovery_point``
        (the value ``recovery_point_file`` holds)."""
        self.directory = directory
        self.config = config
        self._segments = segments
        # Base offsets, for bisecting.
        self._bases = [s.base_offset for s in segments]
        self._recovery_point = recovery_point
        self._persisted_recovery_point = recovery_point
        self._recovery_point_file = recovery_point_file
        self._on_roll = on_roll
        # Bumped by every truncation: a compaction in progress stops when it changes.
        self.truncations = 0

    # ------------------------------------------------------------------------------ state

    @property
    def segments(self) -> Sequence[LogSegment]:
        """The segments, oldest first; the last one is active. Not to be modified."""
        return self._segments

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    def summaries(self) -> list[SegmentSummary]:
        """A summary of each segment, oldest first, for retention decisions."""
        return [s.summary() for s in self._segments]

    def update_config(self, config: LogConfig) -> None:
        """Roll by the new settings from now on; index.interval.bytes applies to the active
        segment from now on, and existing indexes stay as they are."""
        self.config = config
        self.active_segment.index_interval_bytes = config.index_interval_bytes

    def segment_for(self, offset: int) -> LogSegment:
        """The segment that holds ``offset`` (the first one for offsets below it)."""
        return self._segments[self._index_of(offset)]

    def segments_from(self, offset: int) -> Sequence[LogSegment]:
        """The segment that holds ``offset`` and every later one."""
        return self._segments[self._index_of(offset) :]

    def _index_of(self, offset: int) -> int:
        return max(bisect_right(self._bases, offset) - 1, 0)

    # ----------------------------------------------------------------------------- append

    def append(self, header: BatchHeader, parts: Sequence[Any], now_ms: int) -> None:
        """Append one batch (given as buffers) to the active segment, rolling first if needed."""
        if self._should_roll(header, now_ms):
            self.roll(now_ms)
        self._segments[-1].append(header, parts, now_ms=now_ms)

    def _should_roll(self, header: BatchHeader, now_ms: int) -> bool:
        segment = self._segments[-1]
        if segment.is_empty:
            return False  # a segment always takes its first batch, however large
        return (
            segment.size + header.size > self.config.segment_bytes
            or now_ms - segment.rolling_base_ms > self.config.segment_ms
            or segment.indexes_full
            # Offsets in the index are int32 relative to the segment's base offset.
            or header.last_offset - segment.base_offset > INT32_MAX
        )

    def roll(self, now_ms: int) -> int:
        """Close the active segment (fsynced) and start a new one at the log end offset.

        Returns the new segment's base offset; an empty active segment is not rolled.
        """
        active = self._segments[-1]
        if active.is_empty:
            return active.base_offset
        active.flush()
        active.close_index_files()
        base = self.log_end_offset
        segment = LogSegment.open(self.directory, base, self.config, created_ms=now_ms)
        fsync_directory(self.directory)
        self._on_roll(base)
        self._segments.append(segment)
        self._bases.append(base)
        self._set_recovery_point(base)
        return base

    # ------------------------------------------------------------------------------- read

    def read(
        self, offset: int, max_bytes: int, *, max_offset: int | None
    ) -> tuple[bytes, int]:
        """Whole batches from the one holding ``offset``, across segments, up to ``max_bytes``.

        ``offset`` must lie in [first segment's base, log end offset]. The first batch is
        returned whole even if larger than ``max_bytes``; batches whose last offset is >=
        ``max_offset`` are not returned. Returns ``(records, next_offset)``, ``next_offset``
        being where to read next: after the last batch returned, the log end offset if nothing
        is left between ``offset`` and the end (compaction), else ``offset`` itself.
        """
        end = self.log_end_offset
        chunks: list[bytes] = []
        next_offset = offset
        if offset < end and (max_offset is None or offset < max_offset):
            budget = max_bytes
            for segment in self._segments[self._index_of(offset) :]:
                found = segment.find_position(offset)
                if found is None:
                    continue
                position, first = found
                data, segment_next, reached_end = segment.read(
                    position, first, budget, max_offset=max_offset, whole_first=not chunks
                )
                if data:
                    chunks.append(data)
                    budget -= len(data)
                    assert segment_next is not None
                    next_offset = segment_next
                if not reached_end or budget < HEADER_SIZE:
                    break
            else:
                if not chunks:
                    # Compaction removed everything from ``offset`` to the end: tell the
                    # consumer to continue at the end rather than poll the gap forever.
                    next_offset = end
        return (chunks[0] if len(chunks) == 1 else b"".join(chunks)), next_offset

    def offset_for_timestamp(self, timestamp_ms: int, *, min_offset: int,
                             ) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record at or above ``min_offset`` whose
        timestamp is >= ``timestamp_ms``."""
        for segment in self._segments:
            found = segment.find_timestamp_start(timestamp_ms)
            if found is None:
                continue
            for position, header in segment.iter_headers(found[0]):
                if (
                    header.max_timestamp < timestamp_ms
                    or header.last_offset < min_offset
                    or header.is_control
                ):
                    continue
                for record in decode_records(segment.read_bytes(position, header.size)):
                    if record.offset >= min_offset and record.timestamp >= timestamp_ms:
                        return record.timestamp, record.offset
        return None

    def max_timestamp_and_offset(self, *, min_offset: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the record with the largest timestamp at or above
        ``min_offset``, the first of them if several share it (Kafka's MAX_TIMESTAMP)."""
        best: tuple[int, int] | None = None
        for segment in self._segments:
            if segment.max_timestamp < 0 or (best is not None
                                             and segment.max_timestamp <= best[0]):
                continue  # each segment knows its largest timestamp: skip those not larger
            for position, header in segment.iter_headers(0):
                if (header.is_control or header.last_offset < min_offset
                        or (best is not None and header.max_timestamp <= best[0])):
                    continue
                for record in decode_records(segment.read_bytes(position, header.size)):
                    if record.offset >= min_offset and (best is None or record.timestamp > best[0]):
                        best = (record.timestamp, record.offset)
        return best

    # ------------------------------------------------------------------------ durability

    def flush(self) -> None:
        """fsync the active segment and its indexes; move the recovery point to the end."""
        self._segments[-1].flush()
        self._set_recovery_point(self.log_end_offset)

    def advance_recovery_point(self, offset: int) -> None:
        """Raise the recovery point to ``offset`` if it is below: the log start offset moved
        there, and recovery never needs to look below it. Written with the next move."""
        self._recovery_point = max(self._recovery_point, offset)

    def _set_recovery_point(self, offset: int) -> None:
        self._recovery_point = offset
        if self._persisted_recovery_point != offset:
            self._recovery_point_file.write(offset)
            self._persisted_recovery_point = offset

    def close(self) -> None:
        """Release every segment's files (no flush: the log flushes before)."""
        for segment in self._segments:
            segment.close()

    # ----------------------------------------------------------------- truncate and delete

    def truncate_to(
        self, offset: int, *, on_kept_batch: Callable[[BatchHeader, bytes | None], object]
    ) -> list[int]:
        """Remove every batch whose last offset is >= ``offset``; the base offsets of the
        segments deleted.

        ``offset`` must lie in [first segment's base, log end offset). The segment holding it is
        cut at the start of the batch holding it, and ``on_kept_batch`` sees each of that
        segment's remaining batches (the log replays producer state from them), with the bytes
        of each control batch (None for the others: their records are not needed).
        """
        i = self._index_of(offset)
        removed = self._segments[i + 1 :]
        for segment in removed:
            segment.delete()
        del self._segments[i + 1 :]
        del self._bases[i + 1 :]
        segment = self._segments[i]
        segment.truncate_to(
            offset,
            on_batch=lambda header, position: on_kept_batch(
                header, segment.read_bytes(position, header.size) if header.is_control else None
            ),
        )
        segment.flush()
        fsync_directory(self.directory)
        self._set_recovery_point(min(self._recovery_point, self.log_end_offset))
        self.truncations += 1
        return [s.base_offset for s in removed]

    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        """Delete every segment and start again, empty, at ``offset``."""
        for segment in self._segments:
            segment.delete()
        self._segments = [LogSegment.open(self.directory, offset, self.config, created_ms=now_ms)]
        self._bases = [offset]
        fsync_directory(self.directory)
        self._set_recovery_point(offset)
        self.truncations += 1

    def delete_oldest(self, count: int) -> list[int]:
        """Delete the ``count`` oldest segments (never the active one); their base offsets."""
        removed = self._segments[:count]
        for segment in removed:
            segment.delete()
        del self._segments[:count]
        del self._bases[:count]
        fsync_directory(self.directory)
        return [s.base_offset for s in removed]

    # -------------------------------------------------------------------- for the cleaner

    def new_cleaned_segment(self, segment: LogSegment) -> LogSegment:
        """An empty ``.cleaned`` segment to rewrite ``segment`` into (same base offset)."""
        for suffix in (LOG_SUFFIX, *INDEX_SUFFIXES):
            # A leftover from an interrupted attempt must not be appended to.
            leftover = self.directory / segment_file_name(
                segment.base_offset, suffix + CLEANED_SUFFIX
            )
            leftover.unlink(missing_ok=True)
        return LogSegment.open(
            self.directory,
            segment.base_offset,
            self.config,
            created_ms=segment.created_ms,
            suffix=CLEANED_SUFFIX,
        )

    def replace_segment(self, old: LogSegment, cleaned: LogSegment) -> None:
        """Swap ``cleaned`` in for ``old``, files and list entry (see LogSegment.replace)."""
        cleaned.replace(old)
        self._segments[self._segments.index(old)] = cleaned
