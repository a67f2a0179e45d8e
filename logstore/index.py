"""The indexes of a segment: the sparse offset and time indexes, and the aborted transactions.

The sparse ones are kept in memory (arrays, searched with bisect) and mirrored in append-only
files of fixed-width big-endian entries:

* ``.index``: relative offset int32 + position int32 -- the base offset of a batch and its byte
  position in the ``.log`` file;
* ``.timeindex``: timestamp int64 + relative offset int32 -- ``(T, O)`` means "every batch
  before offset O has a max timestamp <= T", so a lookup for ``t`` may start at the ``O`` of the
  last entry with ``T < t``.

``.txnindex`` (:class:`TransactionIndex`, Kafka's) holds the transactions whose abort marker
is in the segment (:class:`~rafka.logstore.transactions.AbortedTransaction`); it exists only
for a segment with one.

A segment adds one entry to each sparse index (at most) per appended batch, once
``index.interval.bytes`` have been written since the previous entry. The entries are therefore
a pure function of the batches in the segment (and, for ``.txnindex``, of the log before it);
on open they are recomputed from the batch headers and a file that differs (missing,
truncated, garbled) is rewritten, so index files never need to be trusted.
"""

from __future__ import annotations

import os
import struct
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from pathlib import Path

from rafka.logstore.transactions import AbortedTransaction, serialise_aborted

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class _IndexFile:
    """An append-only file of fixed-width entries, opened lazily."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def touch(self) -> None:
        """Create the file if missing (Kafka always has both index files beside a log)."""
        if self._fd is None:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def append(self, data: bytes) -> None:
        os.write(self._open(), data)

    def read(self) -> bytes | None:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return None

    def sync(self, expected: bytes) -> bool:
        """Make the file hold exactly `expected`; True if it had to be rewritten."""
        if self.read() == expected:
            return False
        self.replace_content(expected)
        return True

    def replace_content(self, data: bytes) -> None:
        fd = self._open()
        os.ftruncate(fd, 0)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def flush(self) -> None:
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class _Index:
    """What both indexes do with their file (Kafka's AbstractIndex): sparse entries of two
    signed 64-bit numbers, a key that only grows and its value, kept in memory and written
    as a subclass packs them (`_pack`)."""

    def __init__(self, path: Path, base_offset: int, max_entries: int) -> None:
        self.base_offset = base_offset
        self.max_entries = max_entries
        self._file = _IndexFile(path)
        self._keys = array("q")
        self._values = array("q")

    @property
    def path(self) -> Path:
        return self._file.path

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._keys, self._values, strict=True))

    def _pack(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _add(self, key: int, value: int, write: bool) -> None:
        self._keys.append(key)
        self._values.append(value)
        if write:
            self._file.append(self._pack(key, value))

    def reset(self) -> None:
        """Forget the in-memory entries (before recomputing them from the segment)."""
        self._keys = array("q")
        self._values = array("q")

    def serialise(self) -> bytes:
        return b"".join(self._pack(key, value)
                        for key, value in zip(self._keys, self._values, strict=True))

    def sync_file(self) -> bool:
        """Make the file equal to the in-memory entries; True if it had to be rewritten."""
        return self._file.sync(self.serialise())

    def touch(self) -> None:
        self._file.touch()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def rename(self, path: Path) -> None:
        self._file.rename(path)

    def delete(self) -> None:
        self._file.delete()


class OffsetIndex(_Index):
    """Batch base offset -> position, sparse (keys offsets, values positions)."""

    def add(self, offset: int, position: int, *, write: bool = True) -> None:
        """Add an entry (offsets and positions strictly increase); ``write`` mirrors it to disk."""
        self._add(offset, position, write)

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(offset, position)`` of the last entry at or below ``offset``; the start if none."""
        i = bisect_right(self._keys, offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self._keys[i], self._values[i]

    def _pack(self, key: int, value: int) -> bytes:
        return OFFSET_ENTRY.pack(key - self.base_offset, value)


class TimeIndex(_Index):
    """Running max timestamp -> offset from which a timestamp search may start, sparse (keys
    timestamps, values offsets)."""

    @property
    def last_timestamp(self) -> int:
        return self._keys[-1] if self._keys else -1

    def add(self, timestamp: int, offset: int, *, write: bool = True) -> None:
        """Add an entry; timestamps strictly increase, offsets never decrease."""
        self._add(timestamp, offset, write)

    def lookup(self, timestamp: int) -> int:
        """An offset such that every batch before it has max timestamp < ``timestamp``."""
        i = bisect_left(self._keys, timestamp) - 1
        if i < 0:
            return self.base_offset
        return self._values[i]

    def _pack(self, key: int, value: int) -> bytes:
        return TIME_ENTRY.pack(key, value - self.base_offset)


class TransactionIndex:
    """The aborted transactions whose marker is in one segment, in marker order.

    The log adds an entry as it appends an abort marker; opening a log recomputes them from
    the batches (the file is rewritten if it differs, removed if there is none), as for the
    other indexes.
    """

    def __init__(self, path: Path) -> None:
        self._file = _IndexFile(path)
        self.entries: list[AbortedTransaction] = []

    @property
    def path(self) -> Path:
        return self._file.path

    def add(self, entry: AbortedTransaction, *, write: bool = True) -> None:
        self.entries.append(entry)
        if write:
            self._file.append(serialise_aborted((entry,)))

    def reset(self) -> None:
        self.entries = []

    def replace(self, entries: Iterable[AbortedTransaction]) -> None:
        """Hold exactly ``entries``, on disk too."""
        self.entries = list(entries)
        self.sync_file()

    def sync_file(self) -> bool:
        """Make the file equal to the in-memory entries; True if it had to be rewritten."""
        expected = serialise_aborted(self.entries)
        if expected:
            return self._file.sync(expected)
        if self._file.read() is None:
            return False
        self._file.delete()
        return True

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def rename(self, path: Path) -> None:
        if self._file.path.exists():
            self._file.rename(path)
        else:
            self._file.path = path

    def delete(self) -> None:
        self._file.delete()
