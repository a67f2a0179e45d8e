"""The partition log: an ordered list of segments, with offsets, epochs and producer state.

``Log`` plays the part of Kafka's UnifiedLog over :class:`~logstore.segment.LogSegment`: it
assigns offsets, rolls segments, answers reads and offset lookups, recovers after a crash,
applies retention and compaction, and keeps the checkpoints (recovery point, high watermark,
log start offset, leader epochs).

Threading: a ``Log`` is not thread-safe. Its owner, the partition replica actor, is
single-threaded, so appends, reads, retention and compaction never overlap; compaction runs in
steps (:meth:`Log.iter_compaction`) between which appends proceed, and it only rewrites closed
segments.

Time: ``clock`` is a callable returning seconds since the epoch, like ``time.time`` (its
default); tests pass a fake one. Every ``now_ms`` argument is milliseconds and defaults to the
clock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from logstore.batch import (
    CONTROL_FLAG_MASK,
    HEADER_SIZE,
    INT32_MAX,
    LOG_OVERHEAD,
    MIN_LENGTH,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    check_batch,
    decode_records,
    read_header,
    stamped_prefix,
)
from logstore.checkpoint import (
    HIGH_WATERMARK_FILE,
    LEADER_EPOCH_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    TMP_SUFFIX,
    CorruptCheckpointError,
    LeaderEpochCheckpoint,
    OffsetCheckpoint,
    fsync_directory,
)
from logstore.cleaner import CompactionResult, add_to_offset_map, clean_batch
from logstore.config import LogConfig
from logstore.epoch_cache import EpochEntry, LeaderEpochCache
from logstore.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
)
from logstore.producer_state import (
    ProducerEntry,
    ProducerSnapshot,
    ProducerStateManager,
    SequenceCheck,
    check_sequence,
)
from logstore.retention import SegmentSummary, segments_to_delete
from logstore.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    parse_base_offset,
    segment_file_name,
)

logger = logging.getLogger(__name__)

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest.LATEST/EARLIEST_TIMESTAMP).
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


class AppendInfo(NamedTuple):
    """What an append (or a duplicate found in producer state) covers."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    # The leader's append time for LogAppendTime topics, -1 otherwise (as in Kafka's response).
    log_append_time_ms: int
    record_count: int
    batch_count: int
    size_in_bytes: int
    log_start_offset: int


class FetchData(NamedTuple):
    """Whole batches from a read, and the log's bounds at the time of the read."""

    records: bytes
    # Offset to fetch next: after the last batch returned, or the requested offset if none.
    next_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class SegmentCleanResult(NamedTuple):
    base_offset: int
    batches_removed: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def _split_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool
) -> list[tuple[BatchHeader, memoryview]]:
    """Frame concatenated batches, refusing a partial one (appends must be whole)."""
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    out = []
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < HEADER_SIZE:
            raise CorruptRecordError(f"{end - pos} bytes after the last whole batch")
        length = int.from_bytes(view[pos + 8 : pos + 12], "big", signed=True)
        if length < MIN_LENGTH or pos + length + LOG_OVERHEAD > end:
            raise CorruptRecordError(
                f"batch at byte {pos} declares length {length}, but {end - pos} bytes remain"
            )
        header = check_batch(view, pos, verify_crc=verify_crc, strict=False)
        out.append((header, view[pos : pos + header.size]))
        pos += header.size
    return out


class Log:
    """A partition's durable log in one directory. Create it with :meth:`Log.open`."""

    def __init__(self, directory: Path, config: LogConfig, clock: Callable[[], float]) -> None:
        self.directory = directory
        self.config = config
        self._clock = clock
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._log_start_offset = 0
        self._high_watermark = 0
        self._recovery_point = 0
        self._persisted_high_watermark: int | None = None
        self._checkpoint_lock = threading.Lock()
        self._persisted_recovery_point: int | None = None
        self._producers = ProducerStateManager()
        # Producer state as it was at each segment's base offset, to rebuild after truncation
        # by replaying one segment's headers instead of the whole log.
        self._producer_snapshots: dict[int, ProducerSnapshot] = {}
        self._closed = False
        # Bumped by truncations: a compaction in progress stops when it changes.
        self._generation = 0
        self._last_flush_ms = 0
        self._recovery_point_file = OffsetCheckpoint(directory / RECOVERY_POINT_FILE)
        self._high_watermark_file = OffsetCheckpoint(directory / HIGH_WATERMARK_FILE)
        self._log_start_file = OffsetCheckpoint(directory / LOG_START_OFFSET_FILE)
        self._epoch_file = LeaderEpochCheckpoint(directory / LEADER_EPOCH_FILE)
        self.epoch_cache = LeaderEpochCache(log_end_offset=lambda: self.log_end_offset)

    # ============================================================================== opening

    @classmethod
    def open(
        cls,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> Log:
        """Open (or create) the log in ``directory``, recovering from a crash if needed.

        Everything from the segment holding the recovery point on is re-validated batch by batch
        (CRC included); every segment's batch headers are walked to rebuild producer state and
        to check the indexes, which are rewritten if missing or wrong. The first damaged batch
        and everything after it are truncated.
        """
        log = cls(Path(directory), config or LogConfig(), clock)
        log._load()
        return log

    def _now_ms(self) -> int:
        return round(self._clock() * 1000)

    def _read_offset_checkpoint(self, checkpoint: OffsetCheckpoint) -> int | None:
        try:
            return checkpoint.read()
        except CorruptCheckpointError as exc:
            logger.warning("%s; ignoring it", exc)
            return None

    def _load(self) -> None:
        directory = self.directory
        directory.mkdir(parents=True, exist_ok=True)
        self._finish_interrupted_operations()
        recovery_point = self._read_offset_checkpoint(self._recovery_point_file)
        high_watermark = self._read_offset_checkpoint(self._high_watermark_file)
        log_start = self._read_offset_checkpoint(self._log_start_file)
        try:
            epochs = self._epoch_file.read()
        except CorruptCheckpointError as exc:
            logger.warning("%s; rebuilding the epoch cache from batch headers", exc)
            epochs = None
        self.epoch_cache = LeaderEpochCache(
            epochs or (), log_end_offset=lambda: self.log_end_offset
        )
        now_ms = self._now_ms()

        bases = sorted(
            b for p in directory.iterdir()
            if p.name.endswith(LOG_SUFFIX) and (b := parse_base_offset(p.name)) is not None
        )
        self._segments = [self._make_segment(base, now_ms) for base in bases]
        recover_from = 0
        if recovery_point is not None:
            recover_from = max(bisect_right(bases, recovery_point) - 1, 0)
        self._recover(recover_from)

        if not self._segments:
            self._segments = [self._make_segment(max(log_start or 0, 0), now_ms)]
            self._producer_snapshots = {self._segments[0].base_offset: {}}
        self._bases = [s.base_offset for s in self._segments]
        end = self.log_end_offset
        self._log_start_offset = min(max(log_start or 0, self._segments[0].base_offset), end)
        self._delete_segments_below_log_start()
        self._high_watermark = min(max(high_watermark or 0, self._log_start_offset), end)
        self._persisted_high_watermark = high_watermark

        # Epochs starting past the end belong to data that did not survive.
        self.epoch_cache.truncate_from_end(end + 1)
        self.epoch_cache.truncate_from_start(self._log_start_offset)
        if epochs is None or [tuple(e) for e in self.epoch_cache.entries] != epochs:
            self._persist_epochs(self.epoch_cache.entries)
        self.epoch_cache.on_change = self._persist_epochs

        if recovery_point is None or recovery_point != end:
            for segment in self._segments[recover_from:]:
                segment.flush()
            fsync_directory(directory)
        self._recovery_point = end
        self._write_recovery_point()
        self._write_log_start_offset()
        self._last_flush_ms = now_ms

    def _finish_interrupted_operations(self) -> None:
        """Complete or undo what a crash interrupted: compaction swaps, checkpoint writes."""
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                # The cleaned log was complete (renamed to .swap): finish the swap. Its indexes
                # are recomputed and rewritten by the load.
                target = path.with_name(name[: -len(SWAP_SUFFIX)])
                logger.info("%s: finishing an interrupted compaction swap", path)
                os.replace(path, target)
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX, ".deleted")):
                path.unlink()
            elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
                base = parse_base_offset(name)
                log_file = path.with_name(name.split(".", 1)[0] + LOG_SUFFIX)
                if base is not None and not log_file.exists():
                    path.unlink()  # an orphan left by a crash during a segment deletion

    def _make_segment(self, base_offset: int, now_ms: int, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.directory,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_bytes=self.config.segment_index_bytes,
            created_ms=now_ms,
            suffix=suffix,
        )

    def _recover(self, recover_from: int) -> None:
        """Walk every segment (CRC from ``recover_from`` on); cut at the first damage."""
        producers = ProducerStateManager()
        snapshots: dict[int, ProducerSnapshot] = {}
        epoch_cache = self.epoch_cache

        def on_batch(header: BatchHeader) -> None:
            producers.update(header)
            if header.leader_epoch >= 0:
                epoch_cache.assign(header.leader_epoch, header.base_offset)

        next_offset = -1
        kept: list[LogSegment] = []
        for i, segment in enumerate(self._segments):
            if segment.base_offset < next_offset:
                logger.warning(
                    "%s overlaps the previous segment (which ends at offset %d); deleting it "
                    "and every later segment",
                    segment.log_path,
                    next_offset,
                )
                self._delete_all(self._segments[i:])
                break
            snapshots[segment.base_offset] = producers.snapshot()
            error = segment.load(
                verify_crc=i >= recover_from,
                min_offset=max(next_offset, segment.base_offset),
                on_batch=on_batch,
            )
            kept.append(segment)
            next_offset = max(next_offset, segment.next_offset)
            following = self._segments[i + 1] if i + 1 < len(self._segments) else None
            if error is None and following is not None and following.base_offset != next_offset:
                # A closed segment always ends where the next begins (rolls start the next
                # segment at the log end, compaction keeps each segment's last batch): this
                # one lost batches at its end, e.g. a truncation at a batch boundary.
                error = (
                    f"segment ends at offset {next_offset} but the next one starts at "
                    f"{following.base_offset}"
                )
                logger.warning("%s: %s", segment.log_path, error)
            if error is not None:
                if i + 1 < len(self._segments):
                    logger.warning(
                        "deleting %d segments after the damage in %s",
                        len(self._segments) - i - 1,
                        segment.log_path,
                    )
                self._delete_all(self._segments[i + 1 :])
                break
        self._segments = kept
        self._producers = producers
        self._producer_snapshots = snapshots

    @staticmethod
    def _delete_all(segments: list[LogSegment]) -> None:
        for segment in segments:
            segment.delete()

    def _delete_segments_below_log_start(self) -> None:
        """Finish a retention that a crash interrupted (log start moved, files still there)."""
        count = segments_to_delete(
            self.segments,
            now_ms=0,
            retention_ms=-1,
            retention_bytes=-1,
            log_start_offset=self._log_start_offset,
            high_watermark=self.log_end_offset,
        )
        if count:
            self._drop_oldest(count)

    # ============================================================================ properties

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed: open it again to use it")

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Clamped to [log start offset, log end offset], as Kafka does."""
        self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)

    @property
    def recovery_point(self) -> int:
        """Every offset below this is on disk (fsynced); recovery re-checks what is above."""
        return self._recovery_point

    @property
    def segments(self) -> list[SegmentSummary]:
        """A summary of each segment, oldest first; the last one is active."""
        return [s.summary() for s in self._segments]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def closed(self) -> bool:
        return self._closed

    def update_config(self, config: LogConfig) -> None:
        """Apply a changed topic config (Kafka's dynamic topic configs).

        Rolling, retention, compaction, flushing and timestamps follow the new values from the
        next call on; existing segments keep their indexes (index.interval.bytes applies to
        the active segment from now on).
        """
        self._check_open()
        self.config = config
        self._active.index_interval_bytes = config.index_interval_bytes

    @property
    def _active(self) -> LogSegment:
        return self._segments[-1]

    # ================================================================================ append

    def append_as_leader(
        self,
        batches: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Assign offsets to one or more batches, stamp them and append them.

        The bytes must already be validated by the caller (:func:`logstore.batch.validate_batch`
        on untrusted input; idempotent producers: :meth:`check_sequence` first); here only the
        framing and headers are read. Records are never decoded: a batch is stamped with its
        base offset and ``leader_epoch`` (outside the CRC) and written as it came, except on
        LogAppendTime topics where the header gets the append time and a new CRC.
        """
        self._check_open()
        if now_ms is None:
            now_ms = self._now_ms()
        latest_epoch = self.epoch_cache.latest_epoch
        if latest_epoch is not None and leader_epoch < latest_epoch:
            raise FencedLeaderEpochError(
                f"append with leader epoch {leader_epoch} but the log is at epoch "
                f"{latest_epoch}: this replica is no longer the leader"
            )
        parsed = _split_batches(batches, verify_crc=False)
        if not parsed:
            raise CorruptRecordError("nothing to append: the request holds no batch")
        max_size = self.config.message_max_bytes
        for header, _ in parsed:
            if header.size > max_size:
                raise RecordTooLargeError(
                    f"batch of {header.size} bytes is larger than message.max.bytes={max_size}"
                )
        first_offset = offset = self.log_end_offset
        if leader_epoch >= 0:
            self.epoch_cache.assign(leader_epoch, first_offset)
        append_time = self.config.log_append_time
        max_timestamp = -1
        records = 0
        size = 0
        stamped_any_append_time = False
        for header, view in parsed:
            use_append_time = append_time or header.attributes & TIMESTAMP_TYPE_MASK
            prefix = stamped_prefix(
                header, view, offset, leader_epoch, now_ms if use_append_time else None
            )
            if use_append_time:
                stamped = read_header(prefix)
                stamped_any_append_time = True
            else:
                stamped = header._replace(base_offset=offset, leader_epoch=leader_epoch)
            self._maybe_roll(stamped, now_ms)
            self._active.append(stamped, (prefix, view[len(prefix) :]), now_ms=now_ms)
            self._producers.update(stamped)
            offset = stamped.next_offset
            max_timestamp = max(max_timestamp, stamped.max_timestamp)
            records += stamped.record_count
            size += stamped.size
        info = AppendInfo(
            first_offset,
            offset - 1,
            max_timestamp,
            now_ms if stamped_any_append_time else -1,
            records,
            len(parsed),
            size,
            self._log_start_offset,
        )
        self._after_append(now_ms)
        return info

    def append_as_follower(
        self, batches: bytes | bytearray | memoryview, *, now_ms: int | None = None
    ) -> AppendInfo | None:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        Framing and CRC are checked (as Kafka's followers do); the first batch must start at or
        after the log end offset (a gap is possible when the leader compacted), otherwise
        :class:`UnexpectedAppendOffsetError`: truncate first. Returns None for empty input.
        """
        self._check_open()
        if now_ms is None:
            now_ms = self._now_ms()
        parsed = _split_batches(batches, verify_crc=True)
        if not parsed:
            return None
        expected = self.log_end_offset
        for header, _ in parsed:
            if header.base_offset < expected:
                raise UnexpectedAppendOffsetError(
                    f"follower append of a batch at offset {header.base_offset} below the "
                    f"expected offset {expected} (log end offset {self.log_end_offset}): "
                    "truncate to the leader's epoch end offset and fetch again"
                )
            expected = header.next_offset
        first_offset = parsed[0][0].base_offset
        records = size = 0
        max_timestamp = -1
        for header, view in parsed:
            self._maybe_roll(header, now_ms)
            self._active.append(header, (view,), now_ms=now_ms)
            self._producers.update(header)
            if header.leader_epoch >= 0:
                self.epoch_cache.assign(header.leader_epoch, header.base_offset)
            records += header.record_count
            size += header.size
            max_timestamp = max(max_timestamp, header.max_timestamp)
        info = AppendInfo(
            first_offset,
            parsed[-1][0].last_offset,
            max_timestamp,
            -1,
            records,
            len(parsed),
            size,
            self._log_start_offset,
        )
        self._after_append(now_ms)
        return info

    def _maybe_roll(self, header: BatchHeader, now_ms: int) -> None:
        segment = self._active
        if segment.is_empty:
            return  # a segment always takes its first batch, however large
        if (
            segment.size + header.size > self.config.segment_bytes
            or now_ms - segment.rolling_base_ms > self.config.segment_ms
            or segment.indexes_full
            # Offsets in the index are int32 relative to the segment's base offset.
            or header.last_offset - segment.base_offset > INT32_MAX
        ):
            self.roll(now_ms=now_ms)

    def roll(self, *, now_ms: int | None = None) -> int:
        """Close the active segment (fsynced) and start a new one at the log end offset.

        Returns the new segment's base offset; an empty active segment is not rolled.
        """
        self._check_open()
        active = self._active
        if active.is_empty:
            return active.base_offset
        if now_ms is None:
            now_ms = self._now_ms()
        active.flush()
        active.close_index_files()
        base = self.log_end_offset
        segment = self._make_segment(base, now_ms)
        fsync_directory(self.directory)
        self._producer_snapshots[base] = self._producers.snapshot()
        self._segments.append(segment)
        self._bases.append(base)
        self._recovery_point = base
        self._write_recovery_point()
        return base

    # ================================================================================= flush

    def _after_append(self, now_ms: int) -> None:
        flush_messages = self.config.flush_messages
        if flush_messages is not None and (
            self.log_end_offset - self._recovery_point >= flush_messages
        ):
            self.flush(now_ms=now_ms)
        else:
            self.maybe_flush(now_ms=now_ms)

    def maybe_flush(self, *, now_ms: int | None = None) -> bool:
        """Flush if flush.ms has passed since the last flush (for the owner's timer)."""
        flush_ms = self.config.flush_ms
        if flush_ms is None or self.log_end_offset == self._recovery_point:
            return False
        if now_ms is None:
            now_ms = self._now_ms()
        if now_ms - self._last_flush_ms >= flush_ms:
            self.flush(now_ms=now_ms)
            return True
        return False

    def flush(self, *, now_ms: int | None = None) -> None:
        """fsync the active segment and its indexes; move the recovery point to the end."""
        self._check_open()
        self._active.flush()
        self._recovery_point = self.log_end_offset
        self._write_recovery_point()
        self.checkpoint_high_watermark()
        self._last_flush_ms = self._now_ms() if now_ms is None else now_ms

    def checkpoint_high_watermark(self) -> None:
        """Persist the high watermark (also done by flush and close).

        Safe to call from another thread while the log is in use: it is the one write a
        leader makes on a timer, and its fsyncs would otherwise stall every request queued
        behind it. Two at once are serialised (they share a temporary file).
        """
        with self._checkpoint_lock:
            high_watermark = self._high_watermark
            if self._persisted_high_watermark != high_watermark:
                self._high_watermark_file.write(high_watermark)
                self._persisted_high_watermark = high_watermark

    def _write_recovery_point(self) -> None:
        if self._persisted_recovery_point != self._recovery_point:
            self._recovery_point_file.write(self._recovery_point)
            self._persisted_recovery_point = self._recovery_point

    def _write_log_start_offset(self) -> None:
        self._log_start_file.write(self._log_start_offset)

    def _persist_epochs(self, entries: list[EpochEntry]) -> None:
        self._epoch_file.write(entries)

    def close(self) -> None:
        """Flush, write every checkpoint and release the files. Idempotent."""
        if self._closed:
            return
        self.flush()
        self._write_log_start_offset()
        for segment in self._segments:
            segment.close()
        self._closed = True

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ================================================================================== read

    def _out_of_range(self, what: str, offset: int) -> OffsetOutOfRangeError:
        return OffsetOutOfRangeError(
            f"{what} offset {offset} is out of range: the log holds "
            f"[{self._log_start_offset}, {self.log_end_offset}) (log start offset "
            f"{self._log_start_offset}, log end offset {self.log_end_offset}); reset the "
            "position to one of them",
            log_start_offset=self._log_start_offset,
            log_end_offset=self.log_end_offset,
        )

    def read(self, offset: int, max_bytes: int, *, max_offset: int | None = None) -> FetchData:
        """Whole batches from the one containing ``offset``, up to ``max_bytes`` in total.

        The first batch is returned whole even if larger than ``max_bytes`` (so a consumer
        always progresses). ``max_offset`` (exclusive; e.g. the high watermark for consumers)
        keeps batches whose last offset is >= it out. Reading at the log end offset returns no
        bytes; outside [log start offset, log end offset] raises OffsetOutOfRangeError.
        ``FetchData.next_offset`` is where to fetch next: after the last batch returned, the
        log end offset if compaction left nothing between ``offset`` and the end, else
        ``offset`` itself.
        """
        self._check_open()
        end = self.log_end_offset
        if offset < self._log_start_offset or offset > end:
            raise self._out_of_range("fetch", offset)
        chunks: list[bytes] = []
        next_offset = offset
        if offset < end and (max_offset is None or offset < max_offset):
            budget = max_bytes
            i = max(bisect_right(self._bases, offset) - 1, 0)
            for segment in self._segments[i:]:
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
        return FetchData(
            chunks[0] if len(chunks) == 1 else b"".join(chunks),
            next_offset,
            self._high_watermark,
            self._log_start_offset,
            end,
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The first offset whose record timestamp is >= ``timestamp_ms``; None if there is none.

        ``LATEST_TIMESTAMP`` (-1) gives the log end offset and ``EARLIEST_TIMESTAMP`` (-2) the
        log start offset, as Kafka's ListOffsets does.
        """
        self._check_open()
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.log_end_offset
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self._log_start_offset
        start = self._log_start_offset
        for segment in self._segments:
            found = segment.find_timestamp_start(timestamp_ms)
            if found is None:
                continue
            for position, header in segment.iter_headers(found[0]):
                if (
                    header.max_timestamp < timestamp_ms
                    or header.last_offset < start
                    or header.attributes & CONTROL_FLAG_MASK
                ):
                    continue
                for record in decode_records(segment.read_bytes(position, header.size)):
                    if record.offset >= start and record.timestamp >= timestamp_ms:
                        return record.offset
        return None

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for a follower (KIP-101/279); see LeaderEpochCache."""
        return self.epoch_cache.end_offset_for_epoch(leader_epoch, self.log_end_offset)

    # ============================================================================ truncation

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch whose last offset is >= ``offset`` (follower truncation).

        A batch containing ``offset`` is removed whole, so the new log end offset is the start
        of that batch. Producer state and the epoch cache follow. Returns False if there was
        nothing to remove.
        """
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return False
        if offset < self._segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        i = bisect_right(self._bases, offset) - 1
        for segment in self._segments[i + 1 :]:
            segment.delete()
            self._producer_snapshots.pop(segment.base_offset, None)
        del self._segments[i + 1 :]
        del self._bases[i + 1 :]
        segment = self._segments[i]
        self._producers.restore(self._producer_snapshots.get(segment.base_offset, {}))
        segment.truncate_to(offset, on_batch=self._producers.update)
        segment.flush()
        fsync_directory(self.directory)
        self._after_truncation()
        return True

    def _after_truncation(self) -> None:
        end = self.log_end_offset
        self._generation += 1
        self._high_watermark = min(self._high_watermark, end)
        self._recovery_point = min(self._recovery_point, end)
        self._write_recovery_point()
        if self._log_start_offset > end:
            self._log_start_offset = end
            self._write_log_start_offset()
        self.epoch_cache.truncate_from_end(end)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log, empty, at ``offset`` (a follower whose
        leader's log starts above this log's end)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        for segment in self._segments:
            segment.delete()
        self._segments = [self._make_segment(offset, self._now_ms())]
        self._bases = [offset]
        fsync_directory(self.directory)
        self._producers.clear()
        self._producer_snapshots = {offset: {}}
        self._log_start_offset = offset
        self._write_log_start_offset()
        self._high_watermark = offset
        self.checkpoint_high_watermark()
        self._recovery_point = offset
        self._write_recovery_point()
        self._generation += 1
        self.epoch_cache.clear()

    # ============================================================================= retention

    def delete_old_segments(self, *, now_ms: int | None = None) -> int:
        """Apply retention.ms and retention.bytes (cleanup.policy with "delete"); segments
        deleted. Only whole closed segments below the high watermark go; the log start offset
        moves to the first remaining offset."""
        self._check_open()
        if now_ms is None:
            now_ms = self._now_ms()
        delete = self.config.delete
        count = segments_to_delete(
            self.segments,
            now_ms=now_ms,
            retention_ms=self.config.retention_ms if delete else -1,
            retention_bytes=self.config.retention_bytes if delete else -1,
            log_start_offset=self._log_start_offset,
            high_watermark=self._high_watermark,
        )
        if count:
            self._drop_oldest(count)
        return count

    def delete_records_before(self, offset: int) -> int:
        """Kafka's DeleteRecords: move the log start offset up to ``offset`` (at most the high
        watermark) and delete the segments wholly below it. Returns the new log start offset."""
        self._check_open()
        if offset > self._high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before offset {offset}: it is above the high watermark "
                f"{self._high_watermark}",
                log_start_offset=self._log_start_offset,
                log_end_offset=self.log_end_offset,
            )
        if offset <= self._log_start_offset:
            return self._log_start_offset
        self._log_start_offset = offset
        self._write_log_start_offset()
        self._delete_segments_below_log_start()
        self.epoch_cache.truncate_from_start(offset)
        self._producers.evict_below(offset)
        return offset

    def _drop_oldest(self, count: int) -> None:
        new_start = max(self._log_start_offset, self._segments[count].base_offset)
        if new_start != self._log_start_offset:
            # Checkpoint first: after a crash, the open finishes deleting what is below it.
            self._log_start_offset = new_start
            self._write_log_start_offset()
        for segment in self._segments[:count]:
            segment.delete()
            self._producer_snapshots.pop(segment.base_offset, None)
        del self._segments[:count]
        self._bases = [s.base_offset for s in self._segments]
        fsync_directory(self.directory)
        self._high_watermark = max(self._high_watermark, new_start)
        self._recovery_point = max(self._recovery_point, new_start)
        self.epoch_cache.truncate_from_start(new_start)
        self._producers.evict_below(new_start)

    # ============================================================================ compaction

    def compact(self, *, now_ms: int | None = None) -> CompactionResult:
        """Compact every cleanable segment now; see :meth:`iter_compaction`."""
        totals = [0, 0, 0, 0, 0]
        for step in self.iter_compaction(now_ms=now_ms):
            totals[0] += 1
            totals[1] += step.batches_removed
            totals[2] += step.records_removed
            totals[3] += step.bytes_before
            totals[4] += step.bytes_after
        return CompactionResult(*totals)

    def iter_compaction(self, *, now_ms: int | None = None) -> Iterator[SegmentCleanResult]:
        """Compact in steps, one segment per step, for cleanup.policy containing "compact".

        Cleanable segments are the closed ones wholly below the high watermark whose newest
        record is at least min.compaction.lag.ms old (a prefix of the log). The offset map
        covers every record below the high watermark, the active segment included, so a newer
        committed value anywhere removes older ones. The owner may append between steps; a
        truncation between steps ends the compaction (its map may name records that are gone).
        """
        self._check_open()
        if not self.config.compact:
            return
        if now_ms is None:
            now_ms = self._now_ms()
        cleanable = self._cleanable_segments(now_ms)
        if not cleanable:
            return
        generation = self._generation
        offset_map = self._build_offset_map(self._high_watermark)
        horizon = now_ms - self.config.delete_retention_ms
        for segment in cleanable:
            if self._generation != generation or segment not in self._segments:
                return
            result = self._clean_segment(segment, offset_map, horizon)
            if result is not None:
                yield result

    def _cleanable_segments(self, now_ms: int) -> list[LogSegment]:
        horizon = now_ms - self.config.min_compaction_lag_ms
        out = []
        for segment, following in zip(self._segments, self._segments[1:], strict=False):
            if following.base_offset > self._high_watermark or segment.max_timestamp > horizon:
                break
            out.append(segment)
        return out

    def _build_offset_map(self, below_offset: int) -> dict[bytes, int]:
        offset_map: dict[bytes, int] = {}
        for segment in self._segments:
            if segment.base_offset >= below_offset:
                break
            for position, header in segment.iter_headers(0):
                if header.base_offset >= below_offset:
                    break
                view = memoryview(segment.read_bytes(position, header.size))
                add_to_offset_map(offset_map, view, header, below_offset=below_offset)
        return offset_map

    def _clean_segment(
        self, segment: LogSegment, offset_map: dict[bytes, int], horizon: int
    ) -> SegmentCleanResult | None:
        cleaned: LogSegment | None = None
        batches_removed = records_removed = 0
        try:
            for position, header in segment.iter_headers(0):
                view = memoryview(segment.read_bytes(position, header.size))
                producer = self._producers.get(header.producer_id)
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
                )
                if not outcome.changed:
                    if cleaned is not None:
                        cleaned.append(header, (view,))
                    continue
                if cleaned is None:
                    cleaned = self._start_cleaned_copy(segment, position)
                records_removed += outcome.records_removed
                if outcome.data is None:
                    batches_removed += 1
                else:
                    cleaned.append(read_header(outcome.data), (outcome.data,))
            if cleaned is None:
                return None
            cleaned.replace(segment)
        except BaseException:
            if cleaned is not None:
                cleaned.delete()
            raise
        i = self._segments.index(segment)
        self._segments[i] = cleaned
        return SegmentCleanResult(
            segment.base_offset, batches_removed, records_removed, segment.size, cleaned.size
        )

    def _start_cleaned_copy(self, segment: LogSegment, upto: int) -> LogSegment:
        """A ``.cleaned`` segment holding ``segment``'s batches before byte ``upto``."""
        for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            # A leftover from an interrupted attempt must not be appended to.
            leftover = self.directory / segment_file_name(
                segment.base_offset, suffix + CLEANED_SUFFIX
            )
            leftover.unlink(missing_ok=True)
        cleaned = self._make_segment(segment.base_offset, segment.created_ms, CLEANED_SUFFIX)
        for position, header in segment.iter_headers(0):
            if position >= upto:
                break
            cleaned.append(header, (segment.read_bytes(position, header.size),))
        return cleaned

    # ======================================================================= producer state

    def producer_state(self, producer_id: int) -> ProducerEntry | None:
        """A copy of what the log knows of ``producer_id`` (epoch and last batches)."""
        entry = self._producers.get(producer_id)
        return entry.copy() if entry is not None else None

    def last_sequence(self, producer_id: int) -> tuple[int, int] | None:
        """``(producer_epoch, last_sequence)`` of the producer's last batch, None if unknown."""
        entry = self._producers.get(producer_id)
        if entry is None or entry.last_sequence is None:
            return None
        return entry.producer_epoch, entry.last_sequence

    def check_sequence(self, header: BatchHeader) -> SequenceCheck:
        """:func:`logstore.producer_state.check_sequence` for an incoming batch's header."""
        return check_sequence(
            self._producers.get(header.producer_id),
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
        )

    def find_duplicate(
        self, producer_id: int, producer_epoch: int, base_sequence: int, last_sequence: int
    ) -> AppendInfo | None:
        """The append that already holds this producer batch (a retry), or None."""
        entry = self._producers.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch:
            return None
        batch = entry.find(base_sequence, last_sequence)
        if batch is None:
            return None
        return AppendInfo(
            batch.first_offset,
            batch.last_offset,
            batch.max_timestamp,
            -1,
            batch.last_offset - batch.first_offset + 1,
            1,
            0,
            self._log_start_offset,
        )

    def __repr__(self) -> str:
        return (
            f"Log({str(self.directory)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset if self._segments else None}, "
            f"high_watermark={self._high_watermark}, segments={len(self._segments)})"
        )
