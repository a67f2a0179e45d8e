"""The partition log: offsets, leader epochs, producer state and the high watermark over segments.

``Log`` plays the part of Kafka's UnifiedLog and is the log store's public face. It is built
from parts that each have their own module:

* :class:`~rafka.logstore.loader.LogLoader` recovers the directory when :meth:`Log.open` runs;
* :class:`~rafka.logstore.local_log.LocalLog` is the segment list (roll, append, read, truncate,
  delete, flush) and keeps the recovery point;
* :mod:`rafka.logstore.validator` stamps a leader's offsets and epoch on incoming batches and
  checks a follower's offsets (Kafka's LogValidator);
* :mod:`rafka.logstore.cleaner` compacts, :mod:`rafka.logstore.retention` decides what retention
  deletes.

``Log`` itself hands out offsets (the validator stamps them), fences stale leader epochs, keeps
the leader epoch cache, producer state, the high watermark and the log start offset, applies
the flush policy, and writes the checkpoints other than the recovery point.

Threading: a ``Log`` is not thread-safe, and neither is anything under it. Its owner, the
partition replica actor, is single-threaded, so appends, reads, retention and compaction never
overlap; compaction runs in steps (:meth:`Log.iter_compaction`) between which appends proceed.
The one exception is :meth:`Log.checkpoint_high_watermark`, which another thread may call.

Time: ``clock`` is a callable returning seconds since the epoch, like ``time.time`` (its
default); tests pass a fake one. Every ``now_ms`` argument is milliseconds and defaults to the
clock.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from rafka.common.sentinels import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    UNDEFINED_EPOCH,
)
from rafka.logstore import cleaner
from rafka.logstore.batch import (
    NO_TIMESTAMP,
    BatchHeader,
    split_batches,
)
from rafka.logstore.checkpoint import LogCheckpoints
from rafka.logstore.cleaner import CompactionResult, SegmentCleanResult
from rafka.logstore.config import LogConfig
from rafka.logstore.epoch_cache import EpochEntry, LeaderEpochCache
from rafka.logstore.errors import (
    CorruptRecordError,
    FencedLeaderEpochError,
    LogClosedError,
    OffsetOutOfRangeError,
)
from rafka.logstore.loader import LoadedLog, LogLoader
from rafka.logstore.local_log import LocalLog
from rafka.logstore.producer_state import ProducerEntry, SequenceCheck, check_sequence
from rafka.logstore.retention import SegmentSummary, decide_retention, segments_below_log_start
from rafka.logstore.transactions import AbortedTransaction, collect_aborted
from rafka.logstore.validator import StampedBatch, assign_offsets, check_follower_offsets


class AppendInfo(NamedTuple):
    """What an append (or a duplicate found in producer state) covers."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    # The leader's append time for LogAppendTime topics, NO_TIMESTAMP (-1) otherwise (as in
    # Kafka's produce response).
    log_append_time_ms: int
    record_count: int
    batch_count: int
    size_in_bytes: int
    log_start_offset: int


class TimestampAndOffset(NamedTuple):
    """A ListOffsets answer: the record's timestamp (NO_TIMESTAMP for the log's ends), its
    offset, and the leader epoch it was written in (UNDEFINED_EPOCH if the log has none)."""

    timestamp: int
    offset: int
    leader_epoch: int


class FetchData(NamedTuple):
    """Whole batches from a read, and the log's bounds at the time of the read."""

    records: bytes
    # Offset to fetch next: after the last batch returned, or the requested offset if none.
    next_offset: int
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int


class Log:
    """A partition's durable log in one directory. Create it with :meth:`Log.open`.

    Why this class is large: it is the one owner of the offsets that must move together -- the
    log start offset, the high watermark, the log end offset (its segment list's), the leader
    epochs and the producer state -- and every public method (append, truncate, retention,
    deletion of records, compaction) moves several of them at once, in an order a crash must
    survive. The parts that stand alone are already out, along Kafka's seams: the segment list
    (``LocalLog``), recovery (``LogLoader``), offset stamping (``validator``, Kafka's
    LogValidator), producer state (``ProducerStateManager``), the epoch cache, retention's
    decisions and the cleaner. What is left is UnifiedLog's own bookkeeping; splitting it
    further would spread each of those moves over several classes sharing the same fields.
    """

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        clock: Callable[[], float],
        checkpoints: LogCheckpoints,
        loaded: LoadedLog,
        *,
        opened_ms: int,
    ) -> None:
        """Take over what ``LogLoader`` recovered; :meth:`Log.open` does both."""
        self.directory = directory
        # The segment list holds the same object (update_config changes both); an attribute,
        # not a property reading it there, because every append reads it.
        self.config = config
        self._clock = clock
        self._checkpoints = checkpoints
        self._local = LocalLog(
            directory,
            config,
            loaded.segments,
            recovery_point=loaded.recovery_point,
            recovery_point_file=checkpoints.recovery_point,
            on_roll=self._snapshot_producers,
        )
        self._log_start_offset = loaded.log_start_offset
        self._high_watermark = loaded.high_watermark
        self._persisted_high_watermark = loaded.checkpointed_high_watermark
        self._high_watermark_lock = threading.Lock()
        # Whether the last retention run left segments only the high watermark kept.
        self.retention_awaits_high_watermark = False
        self._producers = loaded.producers
        # Producer state as it was at each segment's base offset, to rebuild after truncation
        # by replaying one segment's headers instead of the whole log.
        self._producer_snapshots = loaded.producer_snapshots
        self.epoch_cache = LeaderEpochCache(
            loaded.leader_epochs,
            log_end_offset=lambda: self.log_end_offset,
            on_change=self._persist_epochs,
        )
        self._last_flush_ms = opened_ms
        self._closed = False

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
        and everything after it are truncated (see :mod:`rafka.logstore.loader`).
        """
        path = Path(directory)
        config = config or LogConfig()
        now_ms = _to_ms(clock())
        checkpoints = LogCheckpoints(path)
        loaded = LogLoader(path, config, checkpoints, now_ms=now_ms).load()
        log = cls(path, config, clock, checkpoints, loaded, opened_ms=now_ms)
        # Finish a retention that a crash interrupted (log start moved, files still there).
        log._delete_segments_below_log_start()
        return log

    def _now_ms(self) -> int:
        return _to_ms(self._clock())

    # ============================================================================ properties

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed: open it again to use it")

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._local.log_end_offset

    @property
    def high_watermark(self) -> int:
        return self._high_watermark

    @high_watermark.setter
    def high_watermark(self, offset: int) -> None:
        """Clamped to [log start offset, log end offset], as Kafka does."""
        self._high_watermark = min(max(offset, self._log_start_offset), self.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: where ``read_committed`` consumers stop. The high watermark, or the
        first offset of an undecided transaction below it (a transaction is decided once its
        marker is below the high watermark)."""
        first_unstable = self._producers.first_unstable_offset(self._high_watermark)
        if first_unstable is None:
            return self._high_watermark
        return max(min(first_unstable, self._high_watermark), self._log_start_offset)

    @property
    def recovery_point(self) -> int:
        """Every offset below this is on disk (fsynced); recovery re-checks what is above."""
        return self._local.recovery_point

    @property
    def segments(self) -> list[SegmentSummary]:
        """A summary of each segment, oldest first; the last one is active."""
        return self._local.summaries()

    @property
    def size_in_bytes(self) -> int:
        return self._local.size_in_bytes

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
        self._local.update_config(config)

    # ================================================================================ append

    def append_as_leader(
        self,
        batches: bytes | bytearray | memoryview,
        leader_epoch: int,
        *,
        now_ms: int | None = None,
    ) -> AppendInfo:
        """Assign offsets to one or more batches, stamp them and append them.

        The bytes must already be validated by the caller
        (:func:`rafka.logstore.batch.validate_batch` on untrusted input; idempotent producers:
        :meth:`check_sequence` first); here only the framing and headers are read. Records are never
        decoded: :func:`~rafka.logstore.validator.assign_offsets` stamps each batch with its base
        offset and ``leader_epoch``.
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
        parsed = split_batches(batches, verify_crc=False)
        if not parsed:
            raise CorruptRecordError("nothing to append: the request holds no batch")
        stamped, log_append_time_ms = assign_offsets(
            parsed, self.log_end_offset, leader_epoch, self.config, now_ms)
        return self._append(stamped, now_ms, log_append_time_ms=log_append_time_ms)

    def append_as_follower(
        self, batches: bytes | bytearray | memoryview, *, now_ms: int | None = None
    ) -> AppendInfo | None:
        """Append batches fetched from the leader, keeping their offsets and epochs.

        Framing and CRC are checked (as Kafka's followers do), and the offsets
        (:func:`~rafka.logstore.validator.check_follower_offsets`): a batch below the log end
        offset raises :class:`UnexpectedAppendOffsetError`; truncate first. Returns None for
        empty input.
        """
        self._check_open()
        if now_ms is None:
            now_ms = self._now_ms()
        parsed = split_batches(batches, verify_crc=True)
        if not parsed:
            return None
        check_follower_offsets(parsed, self.log_end_offset)
        return self._append(
            [(header, (view,)) for header, view in parsed], now_ms, log_append_time_ms=NO_TIMESTAMP
        )

    def _append(
        self,
        batches: list[StampedBatch],
        now_ms: int,
        *,
        log_append_time_ms: int,
    ) -> AppendInfo:
        """Write batches whose headers are final (offsets and epochs assigned), in order, and
        account for them: producer state, leader epochs, the flush policy. Both append paths
        end here."""
        max_timestamp = NO_TIMESTAMP
        record_count = size = 0
        for header, parts in batches:
            self._local.append(header, parts, now_ms)
            control = b"".join(map(bytes, parts)) if header.is_control else None
            completed = self._producers.update(header, control)
            if completed is not None and completed.aborted:
                # The marker is in the active segment: its index notes the transaction.
                self._local.active_segment.txn_index.add(self._producers.aborted_entry(completed))
            if header.leader_epoch >= 0:
                self.epoch_cache.assign(header.leader_epoch, header.base_offset)
            max_timestamp = max(max_timestamp, header.max_timestamp)
            record_count += header.record_count
            size += header.size
        info = AppendInfo(
            first_offset=batches[0][0].base_offset,
            last_offset=batches[-1][0].last_offset,
            max_timestamp=max_timestamp,
            log_append_time_ms=log_append_time_ms,
            record_count=record_count,
            batch_count=len(batches),
            size_in_bytes=size,
            log_start_offset=self._log_start_offset,
        )
        self._after_append(now_ms)
        return info

    def roll(self, *, now_ms: int | None = None) -> int:
        """Close the active segment (fsynced) and start a new one at the log end offset.

        Returns the new segment's base offset; an empty active segment is not rolled.
        """
        self._check_open()
        return self._local.roll(self._now_ms() if now_ms is None else now_ms)

    def _snapshot_producers(self, base_offset: int) -> None:
        """Called by the segment list when it starts a segment at ``base_offset``."""
        self._producer_snapshots[base_offset] = self._producers.snapshot()

    # ================================================================================= flush

    def _after_append(self, now_ms: int) -> None:
        flush_messages = self.config.flush_messages
        if flush_messages is not None and (
            self.log_end_offset - self._local.recovery_point >= flush_messages
        ):
            self.flush(now_ms=now_ms)
        else:
            self.maybe_flush(now_ms=now_ms)

    def maybe_flush(self, *, now_ms: int | None = None) -> bool:
        """Flush if flush.ms has passed since the last flush (for the owner's timer)."""
        flush_ms = self.config.flush_ms
        if flush_ms is None or self.log_end_offset == self._local.recovery_point:
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
        self._local.flush()
        self.checkpoint_high_watermark()
        self._last_flush_ms = self._now_ms() if now_ms is None else now_ms

    def checkpoint_high_watermark(self) -> None:
        """Persist the high watermark (also done by flush and close).

        Safe to call from another thread while the log is in use: it is the one write a
        leader makes on a timer, and its fsyncs would otherwise stall every request queued
        behind it. Two at once are serialised (they share a temporary file).
        """
        with self._high_watermark_lock:
            high_watermark = self._high_watermark
            if self._persisted_high_watermark != high_watermark:
                self._checkpoints.high_watermark.write(high_watermark)
                self._persisted_high_watermark = high_watermark

    def _write_log_start_offset(self) -> None:
        self._checkpoints.log_start_offset.write(self._log_start_offset)

    def _persist_epochs(self, entries: list[EpochEntry]) -> None:
        self._checkpoints.leader_epochs.write(entries)

    def close(self) -> None:
        """Flush, write every checkpoint and release the files. Idempotent."""
        if self._closed:
            return
        self.flush()
        self._write_log_start_offset()
        self._local.close()
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
        records, next_offset = self._local.read(offset, max_bytes, max_offset=max_offset)
        return FetchData(records, next_offset, self._high_watermark, self._log_start_offset, end,
                         self.last_stable_offset)

    def aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTransaction]:
        """The aborted transactions with records in ``[start_offset, upper_bound)``, for a
        ``read_committed`` fetch of that range (Kafka's Fetch answers them so the consumer
        drops those records)."""
        self._check_open()
        return collect_aborted(
            (segment.txn_index.entries for segment in self._local.segments_from(start_offset)),
            start_offset,
            upper_bound,
        )

    def offset_for_timestamp(self, timestamp_ms: int) -> int | None:
        """The offset :meth:`find_offset_by_timestamp` finds, None if it finds none."""
        found = self.find_offset_by_timestamp(timestamp_ms)
        return None if found is None else found.offset

    def find_offset_by_timestamp(self, timestamp_ms: int) -> TimestampAndOffset | None:
        """What Kafka's ListOffsets answers for ``timestamp_ms``, before the high watermark's
        bound (the caller's): ``LATEST_TIMESTAMP`` (-1) the log end offset,
        ``EARLIEST_TIMESTAMP`` (-2) the log start offset (neither with a timestamp),
        ``MAX_TIMESTAMP`` (-3) the record with the largest timestamp, and any other value the
        first record whose timestamp is >= it; each with the leader epoch it was written in.
        None if no record matches."""
        self._check_open()
        if timestamp_ms == LATEST_TIMESTAMP:
            offset, timestamp = self.log_end_offset, NO_TIMESTAMP
        elif timestamp_ms == EARLIEST_TIMESTAMP:
            offset, timestamp = self._log_start_offset, NO_TIMESTAMP
        else:
            found = (self._local.max_timestamp_and_offset(min_offset=self._log_start_offset)
                     if timestamp_ms == MAX_TIMESTAMP
                     else self._local.offset_for_timestamp(timestamp_ms,
                                                           min_offset=self._log_start_offset))
            if found is None:
                return None
            timestamp, offset = found
        epoch = self.epoch_cache.epoch_for_offset(offset)
        return TimestampAndOffset(timestamp, offset,
                                  UNDEFINED_EPOCH if epoch is None else epoch)

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
        if offset < self._local.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return True
        # Producer state at the start of the segment that is cut, then its kept batches replayed.
        kept_base = self._local.segment_for(offset).base_offset
        self._producers.restore(self._producer_snapshots.get(kept_base, {}), at_offset=kept_base)
        for base in self._local.truncate_to(offset, on_kept_batch=self._producers.update):
            self._producer_snapshots.pop(base, None)
        end = self.log_end_offset
        self._high_watermark = min(self._high_watermark, end)
        if self._log_start_offset > end:
            self._log_start_offset = end
            self._write_log_start_offset()
        self.epoch_cache.truncate_from_end(end)
        return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything and restart the log, empty, at ``offset`` (a follower whose
        leader's log starts above this log's end)."""
        self._check_open()
        if offset < 0:
            raise ValueError(f"cannot start a log at negative offset {offset}")
        self._local.truncate_fully_and_start_at(offset, self._now_ms())
        self._producers.clear()
        self._producer_snapshots = {offset: {}}
        self._log_start_offset = offset
        self._write_log_start_offset()
        self._high_watermark = offset
        self.checkpoint_high_watermark()
        self.epoch_cache.clear()

    # ============================================================================= retention

    def delete_old_segments(self, *, now_ms: int | None = None) -> int:
        """Apply retention.ms and retention.bytes (cleanup.policy with "delete"); segments
        deleted. Only whole closed segments below the high watermark go; the log start offset
        moves to the first remaining offset. Any policy deletes the segments below the log
        start offset."""
        self._check_open()
        self.retention_awaits_high_watermark = False
        if not self.config.delete:
            return self._delete_segments_below_log_start()
        count, self.retention_awaits_high_watermark = decide_retention(
            self._local.summaries(),
            now_ms=self._now_ms() if now_ms is None else now_ms,
            retention_ms=self.config.retention_ms,
            retention_bytes=self.config.retention_bytes,
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

    def _delete_segments_below_log_start(self) -> int:
        """Delete the segments the log start offset has left behind; how many."""
        count = segments_below_log_start(
            self._local.summaries(), log_start_offset=self._log_start_offset
        )
        if count:
            self._drop_oldest(count)
        return count

    def _drop_oldest(self, count: int) -> None:
        new_start = max(self._log_start_offset, self._local.segments[count].base_offset)
        if new_start != self._log_start_offset:
            # Checkpoint first: after a crash, the open finishes deleting what is below it.
            self._log_start_offset = new_start
            self._write_log_start_offset()
        for base in self._local.delete_oldest(count):
            self._producer_snapshots.pop(base, None)
        self._high_watermark = max(self._high_watermark, new_start)
        self._local.advance_recovery_point(new_start)
        self.epoch_cache.truncate_from_start(new_start)
        self._producers.evict_below(new_start)

    # ============================================================================ compaction

    def compact(self, *, now_ms: int | None = None) -> CompactionResult:
        """Compact every cleanable segment now; see :meth:`iter_compaction`."""
        return CompactionResult.total(self.iter_compaction(now_ms=now_ms))

    def iter_compaction(self, *, now_ms: int | None = None) -> Iterator[SegmentCleanResult]:
        """Compact in steps, one segment per step, for cleanup.policy containing "compact".

        The cleaner (:func:`rafka.logstore.cleaner.iter_compaction`) rewrites the closed segments
        below the last stable offset whose records are at least min.compaction.lag.ms old. The
        owner may append between steps; a truncation between steps ends the compaction.
        """
        self._check_open()
        if not self.config.compact:
            return
        yield from cleaner.iter_compaction(
            self._local,
            self._producers,
            last_stable_offset=self.last_stable_offset,
            now_ms=self._now_ms() if now_ms is None else now_ms,
        )

    # ======================================================================= producer state

    def producer_state(self, producer_id: int) -> ProducerEntry | None:
        """A copy of what the log knows of ``producer_id`` (epoch and last batches)."""
        entry = self._producers.get(producer_id)
        return entry.copy() if entry is not None else None

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer, at this epoch, has a transaction here that no marker ended."""
        entry = self._producers.get(producer_id)
        return (entry is not None and entry.producer_epoch == producer_epoch
                and entry.current_txn_first_offset is not None)

    def producers(self) -> list[ProducerEntry]:
        """Copies of what the log knows of every producer whose batches it still holds."""
        entries = (self._producers.get(producer_id) for producer_id in self._producers.producer_ids)
        return [entry.copy() for entry in entries if entry is not None]

    def last_sequence(self, producer_id: int) -> tuple[int, int] | None:
        """``(producer_epoch, last_sequence)`` of the producer's last batch, None if unknown."""
        entry = self._producers.get(producer_id)
        if entry is None or entry.last_sequence is None:
            return None
        return entry.producer_epoch, entry.last_sequence

    def check_sequence(self, header: BatchHeader) -> SequenceCheck:
        """:func:`rafka.logstore.producer_state.check_sequence` for an incoming batch's header."""
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
            first_offset=batch.first_offset,
            last_offset=batch.last_offset,
            max_timestamp=batch.max_timestamp,
            log_append_time_ms=NO_TIMESTAMP,
            record_count=batch.last_offset - batch.first_offset + 1,
            batch_count=1,
            size_in_bytes=0,  # nothing is written again
            log_start_offset=self._log_start_offset,
        )

    def __repr__(self) -> str:
        return (
            f"Log({str(self.directory)!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, high_watermark={self._high_watermark}, "
            f"segments={len(self._local.segments)})"
        )


def _to_ms(seconds: float) -> int:
    return round(seconds * 1000)
