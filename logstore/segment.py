"""One segment of a partition log: a ``.log`` file of batches, its two sparse indexes and, if
it holds an abort marker, its aborted-transactions index.

Files are named by the segment's base offset, 20 digits: ``00000000000000000000.log``,
``.index``, ``.timeindex``, ``.txnindex``. A segment only appends whole batches, in offset order;
positions are byte offsets into the ``.log`` file (int32, hence segment.bytes <= 2 GiB).

Reads use ``os.pread`` and writes ``os.pwritev`` on one descriptor, so there is no Python-level
buffer to flush before a read sees an append. Batches are framed and their headers read only
through :mod:`rafka.logstore.batch`. Not thread-safe: it relies on its owner, the segment list
(:class:`~rafka.logstore.local_log.LocalLog`), being called from one thread at a time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rafka.logstore.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    batch_size,
    check_batch,
    frame_whole_batches,
)
from rafka.logstore.checkpoint import fsync_directory
from rafka.logstore.config import LogConfig
from rafka.logstore.errors import CorruptRecordError
from rafka.logstore.index import (
    OFFSET_ENTRY,
    TIME_ENTRY,
    OffsetIndex,
    TimeIndex,
    TransactionIndex,
)
from rafka.logstore.retention import SegmentSummary

logger = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# Compaction writes ``<base>.log.cleaned`` (and index files); once complete the log file is
# renamed ``<base>.log.swap``, which marks the cleaning as done, then over ``<base>.log``.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

# Recovery reads whole batches (for the CRC) in large sequential chunks; a header-only walk of a
# segment reads smaller chunks, and a single header when batches are large.
RECOVERY_CHUNK = 1 << 20
HEADER_WALK_CHUNK = 1 << 18
LOOKUP_CHUNK = 1 << 14
# Where the last few batches appended start, by base offset. A follower or consumer at the end
# of the log asks for the base offset of a batch appended since its last fetch; found here, the
# read skips the index lookup and the scan from its entry (a 16 KiB read and a header walk:
# about 7 % of a busy leader's time at 5,000 records/s). Kept between RECENT_BATCHES and twice
# that many.
RECENT_BATCHES = 16


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(name: str) -> int | None:
    """The base offset in a segment file name, None if the name is not one."""
    stem = name.split(".", 1)[0]
    if len(stem) == 20 and stem.isdigit():
        return int(stem)
    return None


class _ScanOutcome:
    """Where a scan stopped and why (``error`` None: it reached the end cleanly)."""

    __slots__ = ("error", "valid_end")

    def __init__(self) -> None:
        self.valid_end = 0
        self.error: str | None = None


def _pread(fd: int, size: int, position: int) -> bytes:
    data = os.pread(fd, size, position)
    if len(data) == size or not data:
        return data
    parts = [data]  # a short read before EOF: rare, but allowed by POSIX
    got = len(data)
    while got < size:
        more = os.pread(fd, size - got, position + got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _scan(
    fd: int,
    start: int,
    end: int,
    outcome: _ScanOutcome,
    *,
    verify_crc: bool,
    min_offset: int,
    chunk: int,
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` of each valid batch in ``[start, end)`` of the file.

    Stops at the first batch that is torn (runs past ``end``), has an impossible length, a wrong
    magic, a bad CRC (with ``verify_crc``), inconsistent counts, or an offset below the previous
    batch's next offset; ``outcome`` then says where and why.
    """
    pos = start
    buf = b""
    view = memoryview(buf)
    buf_pos = start
    # After a big batch, expect another: read only a header instead of a whole chunk.
    big = chunk // 4
    last_size = 0
    while pos < end:
        if end - pos < LOG_OVERHEAD:
            outcome.error = f"{end - pos} bytes at the end are a torn batch"
            break
        rel = pos - buf_pos
        if rel + LOG_OVERHEAD > len(buf):
            want = HEADER_SIZE if not verify_crc and last_size > big else chunk
            buf = _pread(fd, min(want, end - pos), pos)
            view = memoryview(buf)
            buf_pos, rel = pos, 0
        try:
            size = batch_size(buf, rel)
        except CorruptRecordError:
            outcome.error = f"batch at byte {pos} has an impossible length"
            break
        if pos + size > end:
            outcome.error = (
                f"batch at byte {pos} declares {size} bytes but only {end - pos} remain "
                "(torn write)"
            )
            break
        need = size if verify_crc else HEADER_SIZE
        if rel + need > len(buf):
            # A big batch without CRC check: skip its records, read just the header.
            want = max(chunk, need) if verify_crc or size <= big else HEADER_SIZE
            buf = _pread(fd, min(want, end - pos), pos)
            view = memoryview(buf)
            buf_pos, rel = pos, 0
        try:
            header = check_batch(view, rel, verify_crc=verify_crc, strict=False)
        except CorruptRecordError as exc:
            outcome.error = f"batch at byte {pos}: {exc}"
            break
        if header.base_offset < min_offset:
            outcome.error = (
                f"batch at byte {pos} has base offset {header.base_offset}, below the previous "
                f"batch's next offset {min_offset}"
            )
            break
        yield pos, header
        min_offset = header.next_offset
        last_size = size
        pos += size
    outcome.valid_end = pos


class LogSegment:
    """A ``.log`` file with its offset and time index."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_bytes: int,
        created_ms: int,
        suffix: str = "",
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_file_name(base_offset, LOG_SUFFIX + suffix)
        self._fd: int | None = os.open(self.log_path, os.O_RDWR | os.O_CREAT, 0o644)
        self.offset_index = OffsetIndex(
            directory / segment_file_name(base_offset, INDEX_SUFFIX + suffix),
            base_offset,
            max(1, max_index_bytes // OFFSET_ENTRY.size),
        )
        self.time_index = TimeIndex(
            directory / segment_file_name(base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset,
            max(1, max_index_bytes // TIME_ENTRY.size),
        )
        self.txn_index = TransactionIndex(
            directory / segment_file_name(base_offset, TXN_INDEX_SUFFIX + suffix)
        )
        self.offset_index.touch()
        self.time_index.touch()
        self.created_ms = created_ms
        self._reset_state()

    @classmethod
    def open(
        cls,
        directory: Path,
        base_offset: int,
        config: LogConfig,
        *,
        created_ms: int,
        suffix: str = "",
    ) -> LogSegment:
        """Open (or create) the segment at ``base_offset`` with the topic's index settings."""
        return cls(
            directory,
            base_offset,
            index_interval_bytes=config.index_interval_bytes,
            max_index_bytes=config.segment_index_bytes,
            created_ms=created_ms,
            suffix=suffix,
        )

    def _reset_state(self) -> None:
        self.size = 0
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp: int | None = None
        # Clock time of the first append made to this segment by this process, if any.
        self.first_append_ms: int | None = None
        self._bytes_since_index_entry = 0
        self._recent_batches: dict[int, tuple[int, BatchHeader]] = {}
        self.offset_index.reset()
        self.time_index.reset()
        self.txn_index.reset()

    # ------------------------------------------------------------------------------ properties

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return self._fd

    @property
    def is_empty(self) -> bool:
        return self.size == 0

    @property
    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    @property
    def rolling_base_ms(self) -> int:
        """The time segment.ms counts from.

        The clock time of the segment's first append when this process made it. Kafka uses the
        first batch's record timestamp instead, which rolls a segment per batch when producers
        send old timestamps (a replay); that timestamp is only used for a segment found on disk
        at open, so a restart does not postpone rolling. Else the segment's creation time.
        """
        if self.first_append_ms is not None:
            return self.first_append_ms
        if self.first_batch_timestamp is not None and self.first_batch_timestamp >= 0:
            return self.first_batch_timestamp
        return self.created_ms

    def summary(self) -> SegmentSummary:
        return SegmentSummary(self.base_offset, self.next_offset, self.size, self.max_timestamp)

    # ---------------------------------------------------------------------------------- append

    def _account(self, position: int, header: BatchHeader, *, write_index: bool) -> None:
        """Update sizes, offsets and indexes for the batch at ``position``."""
        if self._bytes_since_index_entry > self.index_interval_bytes:
            self.offset_index.add(header.base_offset, position, write=write_index)
            # The time index says "everything before this batch is <= max_timestamp so far".
            if self.max_timestamp > self.time_index.last_timestamp:
                self.time_index.add(self.max_timestamp, header.base_offset, write=write_index)
            self._bytes_since_index_entry = 0
        size = header.size
        self._bytes_since_index_entry += size
        self.size = position + size
        self.next_offset = header.base_offset + header.last_offset_delta + 1
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = header.max_timestamp

    def append(
        self, header: BatchHeader, parts: Sequence[Any], *, now_ms: int | None = None
    ) -> None:
        """Append one batch given as buffers (e.g. a stamped header and the untouched rest)."""
        position = self.size
        if position == 0 and now_ms is not None:
            self.first_append_ms = now_ms
        written = os.pwritev(self.fd, parts, position)
        if written != header.size:
            rest = b"".join(bytes(p) for p in parts)[written:]
            offset = position + written
            while rest:
                n = os.pwrite(self.fd, rest, offset)
                rest, offset = rest[n:], offset + n
        self._account(position, header, write_index=True)
        # Appends only, not a load's walk of the file: a reload must stay as fast as it was,
        # and a reader at the end asks for what was appended since.
        recent = self._recent_batches
        recent[header.base_offset] = (position, header)
        if len(recent) > 2 * RECENT_BATCHES:
            self._recent_batches = dict(list(recent.items())[-RECENT_BATCHES:])

    # ------------------------------------------------------------------------------- scanning

    def load(
        self,
        *,
        verify_crc: bool,
        min_offset: int,
        on_batch: Callable[[BatchHeader, int], object] | None = None,
    ) -> str | None:
        """Recompute the state from the file, truncating it at the first invalid batch.

        ``on_batch`` sees each valid batch's header and position; it may add the segment's
        aborted transactions (:attr:`txn_index`), which start empty. Returns None if the whole
        file was valid, or what was wrong where it was cut. The index files are rewritten if
        they do not match the batches.
        """
        self._reset_state()
        end = os.fstat(self.fd).st_size
        outcome = _ScanOutcome()
        chunk = RECOVERY_CHUNK if verify_crc else HEADER_WALK_CHUNK
        for position, header in _scan(
            self.fd, 0, end, outcome, verify_crc=verify_crc, min_offset=min_offset, chunk=chunk
        ):
            self._account(position, header, write_index=False)
            if on_batch is not None:
                on_batch(header, position)
        if outcome.error is not None:
            logger.warning(
                "%s: %s; truncating %d bytes at byte %d",
                self.log_path,
                outcome.error,
                end - outcome.valid_end,
                outcome.valid_end,
            )
            os.ftruncate(self.fd, outcome.valid_end)
        rebuilt = [
            name
            for name, index in (
                ("offset", self.offset_index),
                ("time", self.time_index),
                ("aborted transactions", self.txn_index),
            )
            if index.sync_file()
        ]
        if rebuilt and self.size:
            logger.info("%s: rebuilt %s index from the log", self.log_path, " and ".join(rebuilt))
        return outcome.error

    def iter_headers(self, start: int = 0) -> Iterator[tuple[int, BatchHeader]]:
        """``(position, header)`` of every batch from byte ``start`` (which must be a batch)."""
        outcome = _ScanOutcome()
        yield from _scan(
            self.fd,
            start,
            self.size,
            outcome,
            verify_crc=False,
            min_offset=-1,
            chunk=LOOKUP_CHUNK,
        )
        if outcome.error is not None:
            raise CorruptRecordError(
                f"{self.log_path} is damaged at byte {outcome.valid_end}: {outcome.error}"
            )

    def find_position(self, offset: int) -> tuple[int, BatchHeader] | None:
        """The first batch whose last offset is >= ``offset``, or None if there is none."""
        recent = self._recent_batches.get(offset)
        if recent is not None:
            return recent  # a batch starting at ``offset``: the one before it ends below
        index_offset, position = self.offset_index.lookup(offset)
        for pos, header in self.iter_headers(position):
            if pos == position and position and header.base_offset != index_offset:
                # The index disagrees with the log (it is checked on open, so this means
                # the file changed under us): fall back to a scan from the start.
                logger.warning("%s: index entry for offset %d is wrong", self.log_path, offset)
                return self._find_from_start(offset)
            if header.last_offset >= offset:
                return pos, header
        return None

    def _find_from_start(self, offset: int) -> tuple[int, BatchHeader] | None:
        for pos, header in self.iter_headers(0):
            if header.last_offset >= offset:
                return pos, header
        return None

    def find_timestamp_start(self, timestamp: int) -> tuple[int, BatchHeader] | None:
        """The first batch with a max timestamp >= ``timestamp``, or None."""
        if self.max_timestamp < timestamp:
            return None
        start = self.find_position(self.time_index.lookup(timestamp))
        if start is None:
            return None
        for pos, header in self.iter_headers(start[0]):
            if header.max_timestamp >= timestamp:
                return pos, header
        return None

    # -------------------------------------------------------------------------------- reading

    def read_bytes(self, position: int, size: int) -> bytes:
        return _pread(self.fd, size, position)

    def read(
        self,
        position: int,
        first: BatchHeader,
        max_bytes: int,
        *,
        max_offset: int | None,
        whole_first: bool,
    ) -> tuple[bytes, int | None, bool]:
        """Whole batches from ``position`` (where ``first`` starts), up to ``max_bytes``.

        Returns ``(data, next_offset, reached_end)``: ``next_offset`` is the offset after the
        last batch returned (None if none), ``reached_end`` whether the read stopped only
        because the segment ended. With ``whole_first`` a first batch larger than
        ``max_bytes`` is returned whole, so a consumer always makes progress. Batches whose last
        offset is >= ``max_offset`` are not returned.
        """
        if max_offset is not None and first.last_offset >= max_offset:
            return b"", None, False
        available = self.size - position
        if first.size > max_bytes:
            if not whole_first:
                return b"", None, False
            return self.read_bytes(position, first.size), first.next_offset, (
                first.size == available
            )
        data = self.read_bytes(position, min(max_bytes, available))
        size, next_offset, stopped_by_max_offset = frame_whole_batches(data, max_offset)
        if size < len(data):
            data = data[:size]
        return data, next_offset, (not stopped_by_max_offset and position + size == self.size)

    # ------------------------------------------------------------------------------ truncation

    def truncate_to(
        self, offset: int, *, on_batch: Callable[[BatchHeader, int], object] | None = None
    ) -> int:
        """Keep only the batches whose last offset is below ``offset``, and the aborted
        transactions whose marker is; bytes removed.

        ``on_batch`` sees every kept batch and its position (the log replays producer state
        from them).
        """
        found = self.find_position(offset)
        if found is None:
            if on_batch is not None:
                for position, header in self.iter_headers(0):
                    on_batch(header, position)
            return 0
        position = found[0]
        removed = self.size - position
        kept_aborted = [e for e in self.txn_index.entries if e.last_offset < offset]
        os.ftruncate(self.fd, position)
        self.load(verify_crc=False, min_offset=-1, on_batch=on_batch)
        self.txn_index.replace(kept_aborted)
        return removed

    # ---------------------------------------------------------------------------- durability

    def flush(self) -> None:
        os.fsync(self.fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close_index_files(self) -> None:
        """Release the index descriptors of a closed segment (reopened if ever needed)."""
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.close_index_files()

    def delete(self) -> None:
        """Close and remove the files (the log first: an orphan index is harmless)."""
        self.close()
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def replace(self, old: LogSegment) -> None:
        """Take the place of ``old`` (same base offset): the crash-safe end of a compaction.

        ``self`` was written under ``.cleaned`` names. Renaming its log to ``.swap`` is the
        commit point: after a crash, recovery finishes a ``.swap`` and discards ``.cleaned``
        files. The final ``os.replace`` swaps the log files atomically.
        """
        assert old.base_offset == self.base_offset
        self.flush()
        swap = old.log_path.with_name(old.log_path.name + SWAP_SUFFIX)
        os.replace(self.log_path, swap)
        self.log_path = swap
        fsync_directory(self.directory)
        old_paths = old.offset_index.path, old.time_index.path, old.txn_index.path
        old.close()
        old.offset_index.delete()
        old.time_index.delete()
        old.txn_index.delete()
        self.offset_index.rename(old_paths[0])
        self.time_index.rename(old_paths[1])
        self.txn_index.rename(old_paths[2])
        os.replace(swap, old.log_path)
        self.log_path = old.log_path
        fsync_directory(self.directory)

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self.size})"
        )
