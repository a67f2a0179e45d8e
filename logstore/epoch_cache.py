"""Leader epoch cache: which leader epoch started at which offset (Kafka KIP-101 / KIP-279).

A follower that learns of a new leader asks it for the end offset of the follower's latest
epoch and truncates to it before fetching, so replicas never diverge. The cache is an ordered
list of ``(epoch, start_offset)`` with both strictly increasing. It is pure: persistence goes
through the ``on_change`` callback (the log writes ``leader-epoch-checkpoint``).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from typing import NamedTuple

from rafka.common.sentinels import UNDEFINED_EPOCH, UNDEFINED_OFFSET


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch -> start offset, with the lookups a leader and a follower need."""

    def __init__(
        self,
        entries: Iterable[tuple[int, int]] = (),
        *,
        log_end_offset: Callable[[], int] | None = None,
        on_change: Callable[[list[EpochEntry]], None] | None = None,
    ) -> None:
        self._entries: list[EpochEntry] = []
        for epoch, start_offset in entries:
            self._assign(epoch, start_offset)
        self._log_end_offset = log_end_offset
        self.on_change = on_change

    # --------------------------------------------------------------------------------- queries

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int | None:
        return self._entries[-1].epoch if self._entries else None

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int | None:
        """The epoch under which ``offset`` was written, None if before the first entry."""
        i = bisect_right([e.start_offset for e in self._entries], offset) - 1
        return self._entries[i].epoch if i >= 0 else None

    def end_offset_for_epoch(
        self, requested_epoch: int, log_end_offset: int | None = None
    ) -> tuple[int, int]:
        """``(epoch, end_offset)`` for a follower's OffsetsForLeaderEpoch request (KIP-279).

        * the requested epoch is the latest: ``(epoch, log_end_offset)``;
        * otherwise the largest known epoch <= the requested one, and as end offset the start
          offset of the first epoch above the requested one;
        * requested below every known epoch: ``(requested_epoch, start of the first epoch)``;
        * requested above every known epoch, or an empty cache:
          ``(UNDEFINED_EPOCH, UNDEFINED_OFFSET)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            if log_end_offset is None:
                if self._log_end_offset is None:
                    raise ValueError("end_offset_for_epoch needs the log end offset")
                log_end_offset = self._log_end_offset()
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        end_offset = self._entries[higher].start_offset
        if higher == 0:
            return requested_epoch, end_offset
        return self._entries[higher - 1].epoch, end_offset

    # ------------------------------------------------------------------------------- mutations

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; True if the cache changed.

        No-op when the epoch is already known to start at or before ``start_offset`` (every
        batch of an epoch calls this). A new epoch replaces any entry it contradicts (an entry
        with an epoch >= it or a start offset >= its start): the newest assignment wins, as
        in Kafka.
        """
        changed = self._assign(epoch, start_offset)
        if changed and self.on_change is not None:
            self.on_change(self.entries)
        return changed

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            return False
        entries = self._entries
        if entries:
            latest = entries[-1]
            if latest.epoch == epoch and latest.start_offset <= start_offset:
                return False
            i = bisect_left([e.epoch for e in entries], epoch)
            if i < len(entries) and entries[i].epoch == epoch and (
                entries[i].start_offset <= start_offset
            ):
                # A batch of an older epoch below a later epoch's start: already recorded.
                return False
            while entries and (
                entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset
            ):
                entries.pop()
        entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop epochs that start at or after ``end_offset`` (the log was truncated there)."""
        before = len(self._entries)
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        return self._changed(before != len(self._entries))

    def truncate_from_start(self, start_offset: int) -> bool:
        """Forget epochs wholly below the new log start offset.

        The epoch that contains ``start_offset`` is kept and now starts there, so lookups for
        it still answer.
        """
        entries = self._entries
        i = bisect_right([e.start_offset for e in entries], start_offset)
        if i == 0:
            return False
        kept = entries[i - 1]
        new = [EpochEntry(kept.epoch, start_offset), *entries[i:]]
        changed = new != entries
        self._entries = new
        return self._changed(changed)

    def clear(self) -> bool:
        changed = bool(self._entries)
        self._entries = []
        return self._changed(changed)

    def _changed(self, changed: bool) -> bool:
        if changed and self.on_change is not None:
            self.on_change(self.entries)
        return changed

    def __repr__(self) -> str:
        return f"LeaderEpochCache({[tuple(e) for e in self._entries]})"
