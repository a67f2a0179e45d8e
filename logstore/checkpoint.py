"""Checkpoint files: small text files replaced atomically.

Format (Kafka's checkpoint layout): a version line, a count line, then one entry per line of
space-separated integers::

    0
    2
    0 0
    3 1500

A write goes to ``<name>.tmp``, is flushed and fsynced, renamed over the old file with
``os.replace`` and the directory is fsynced, so a crash leaves either the old or the new file,
never a torn one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rafka.logstore.errors import LogStoreError

VERSION = 0
TMP_SUFFIX = ".tmp"

RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"


class CorruptCheckpointError(LogStoreError):
    """A checkpoint file exists but cannot be parsed; the log falls back to a safe value."""


def fsync_directory(directory: Path) -> None:
    """Make renames and creations in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def write_checkpoint(path: Path, entries: Sequence[Sequence[int]]) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines += [" ".join(str(int(v)) for v in entry) for entry in entries]
    atomic_write(path, ("\n".join(lines) + "\n").encode("ascii"))


def read_checkpoint(path: Path, width: int) -> list[tuple[int, ...]] | None:
    """Entries of ``width`` integers, or None if the file does not exist."""
    try:
        text = path.read_bytes().decode("ascii")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path} is not an ASCII checkpoint file") from None
    lines = text.splitlines()
    try:
        version = int(lines[0])
        count = int(lines[1])
        entries = [tuple(int(v) for v in line.split()) for line in lines[2:]]
    except (ValueError, IndexError):
        raise CorruptCheckpointError(f"{path} is not a checkpoint file: {text[:80]!r}") from None
    if version != VERSION:
        raise CorruptCheckpointError(f"{path} has version {version}, expected {VERSION}")
    if count != len(entries) or any(len(e) != width for e in entries):
        raise CorruptCheckpointError(
            f"{path} declares {count} entries of {width} numbers but holds {entries!r}"
        )
    return entries


class OffsetCheckpoint:
    """A checkpoint holding one offset (recovery point, high watermark, log start offset)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, offset: int) -> None:
        write_checkpoint(self.path, [(offset,)])

    def read(self) -> int | None:
        """The stored offset, None if the file is missing; raises CorruptCheckpointError."""
        entries = read_checkpoint(self.path, 1)
        if entries is None:
            return None
        if len(entries) != 1:
            raise CorruptCheckpointError(f"{self.path} should hold one offset, holds {entries!r}")
        return entries[0][0]


class LeaderEpochCheckpoint:
    """The ``leader-epoch-checkpoint`` file: one ``epoch start_offset`` line per epoch."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, entries: Sequence[tuple[int, int]]) -> None:
        write_checkpoint(self.path, entries)

    def read(self) -> list[tuple[int, int]] | None:
        entries = read_checkpoint(self.path, 2)
        if entries is None:
            return None
        return [(e[0], e[1]) for e in entries]


class LogCheckpoints:
    """The four checkpoint files of one log directory.

    The loader reads them all at open; afterwards the recovery point is written by the segment
    list (:class:`~rafka.logstore.local_log.LocalLog`) and the others by
    :class:`~rafka.logstore.log.Log`.
    """

    def __init__(self, directory: Path) -> None:
        self.recovery_point = OffsetCheckpoint(directory / RECOVERY_POINT_FILE)
        self.high_watermark = OffsetCheckpoint(directory / HIGH_WATERMARK_FILE)
        self.log_start_offset = OffsetCheckpoint(directory / LOG_START_OFFSET_FILE)
        self.leader_epochs = LeaderEpochCheckpoint(directory / LEADER_EPOCH_FILE)
