"""Opening a log directory: crash recovery in numbered passes (Kafka's LogLoader).

:meth:`LogLoader.load` runs once, before the :class:`~rafka.logstore.log.Log` exists, and returns a
:class:`LoadedLog`: the segments it kept, and the offsets, producer state and leader epochs it
found in them. The passes, in order:

1. finish what a crash interrupted: a compaction whose cleaned log was complete (``.swap``) is
   swapped in; half-written files (``.cleaned``, ``.swap``, ``.tmp``, ``.deleted``) and index
   files without their log are removed;
2. read the checkpoints; a damaged one is ignored with a warning (its value is rebuilt, or a
   safe one used);
3. walk every segment's batch headers, CRC-checking from the segment holding the recovery point
   on, and rebuild producer state (open transactions included), leader epochs and any index
   that does not match (the aborted transactions too); the first damaged batch and everything
   after it are cut;
4. settle the offsets: the log start offset and high watermark within what survived, the leader
   epochs within [log start, log end];
5. make the result durable: fsync what was recovered, then write the recovery point (now the
   log end offset), the log start offset and, if they changed, the leader epochs.

Contract: nothing else touches the directory while it loads (a log is opened once, by its
replica). Segments wholly below the log start offset (a retention a crash interrupted) are kept
in the result: the log deletes them as it opens, with the same code as retention.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_right
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rafka.logstore.batch import BatchHeader
from rafka.logstore.checkpoint import (
    TMP_SUFFIX,
    CorruptCheckpointError,
    LogCheckpoints,
    OffsetCheckpoint,
    fsync_directory,
)
from rafka.logstore.config import LogConfig
from rafka.logstore.epoch_cache import EpochEntry, LeaderEpochCache
from rafka.logstore.producer_state import ProducerSnapshot, ProducerStateManager
from rafka.logstore.segment import (
    CLEANED_SUFFIX,
    INDEX_SUFFIXES,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    LogSegment,
    parse_base_offset,
)

logger = logging.getLogger(__name__)

# A file a crash left half-written, or that a deletion had started to remove.
_LEFTOVER_SUFFIXES = (CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX, ".deleted")


@dataclass
class LoadedLog:
    """What a log directory holds after recovery: everything a :class:`Log` starts from."""

    # Oldest first, never empty; the last one is active.
    segments: list[LogSegment]
    log_start_offset: int
    # Everything below it is on disk. The loader fsynced what it recovered, so it is the log end
    # offset, and it is what the recovery-point checkpoint now holds.
    recovery_point: int
    high_watermark: int
    # What the high-watermark checkpoint holds (None: missing or damaged), to rewrite it only when
    # the high watermark differs.
    checkpointed_high_watermark: int | None
    leader_epochs: list[EpochEntry]
    producers: ProducerStateManager
    # Producer state as it was at each segment's base offset.
    producer_snapshots: dict[int, ProducerSnapshot]


class _Checkpoints(NamedTuple):
    """The checkpoint files' values; None for a file that is missing or damaged."""

    recovery_point: int | None
    high_watermark: int | None
    log_start_offset: int | None
    leader_epochs: list[tuple[int, int]] | None


class _Recovered(NamedTuple):
    segments: list[LogSegment]
    # Index of the first segment whose batches were CRC-checked: it and those after it may hold
    # data that was never fsynced.
    checked_from: int
    producers: ProducerStateManager
    producer_snapshots: dict[int, ProducerSnapshot]


class LogLoader:
    """Recovers one log directory; see the module docstring for the passes."""

    def __init__(
        self, directory: Path, config: LogConfig, checkpoints: LogCheckpoints, *, now_ms: int
    ) -> None:
        self.directory = directory
        self.config = config
        self.checkpoints = checkpoints
        # Creation time of the segments opened here.
        self.now_ms = now_ms

    def load(self) -> LoadedLog:
        """Run the passes; the directory is created if it does not exist."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._finish_interrupted_operations()  # pass 1
        checkpointed = self._read_checkpoints()  # pass 2
        epoch_cache = LeaderEpochCache(checkpointed.leader_epochs or ())
        recovered = self._recover_segments(checkpointed.recovery_point, epoch_cache)  # pass 3
        segments = recovered.segments
        snapshots = recovered.producer_snapshots
        if not segments:  # pass 4 (a new directory): one empty segment at the log start offset
            base = max(checkpointed.log_start_offset or 0, 0)
            segments = [LogSegment.open(self.directory, base, self.config, created_ms=self.now_ms)]
            snapshots = {base: {}}
        log_start_offset, high_watermark = self._settle_offsets(segments, checkpointed, epoch_cache)
        end = segments[-1].next_offset
        epochs = epoch_cache.entries
        self._make_durable(  # pass 5
            segments[recovered.checked_from :],
            checkpointed,
            end=end,
            log_start_offset=log_start_offset,
            epochs=epochs,
        )
        return LoadedLog(
            segments=segments,
            log_start_offset=log_start_offset,
            recovery_point=end,
            high_watermark=high_watermark,
            checkpointed_high_watermark=checkpointed.high_watermark,
            leader_epochs=epochs,
            producers=recovered.producers,
            producer_snapshots=snapshots,
        )

    # ---------------------------------------------------- pass 1: interrupted operations

    def _finish_interrupted_operations(self) -> None:
        """Complete or undo what a crash interrupted: compaction swaps, checkpoint writes."""
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if name.endswith(LOG_SUFFIX + SWAP_SUFFIX):
                # The cleaned log was complete (renamed to .swap): finish the swap. Its indexes
                # are recomputed and rewritten in pass 3.
                target = path.with_name(name[: -len(SWAP_SUFFIX)])
                logger.info("%s: finishing an interrupted compaction swap", path)
                os.replace(path, target)
        for path in sorted(self.directory.iterdir()):
            name = path.name
            if name.endswith(_LEFTOVER_SUFFIXES):
                path.unlink()
            elif name.endswith(INDEX_SUFFIXES):
                base = parse_base_offset(name)
                log_file = path.with_name(name.split(".", 1)[0] + LOG_SUFFIX)
                if base is not None and not log_file.exists():
                    path.unlink()  # an orphan left by a crash during a segment deletion

    # -------------------------------------------------------------- pass 2: checkpoints

    def _read_checkpoints(self) -> _Checkpoints:
        try:
            epochs = self.checkpoints.leader_epochs.read()
        except CorruptCheckpointError as exc:
            logger.warning("%s; rebuilding the epoch cache from batch headers", exc)
            epochs = None
        return _Checkpoints(
            recovery_point=_read_offset(self.checkpoints.recovery_point),
            high_watermark=_read_offset(self.checkpoints.high_watermark),
            log_start_offset=_read_offset(self.checkpoints.log_start_offset),
            leader_epochs=epochs,
        )

    # ---------------------------------------------------------------- pass 3: segments

    def _recover_segments(
        self, recovery_point: int | None, epochs: LeaderEpochCache
    ) -> _Recovered:
        """Walk every segment (CRC from the recovery point's segment on); cut at the first damage.

        Producer state is rebuilt from scratch and leader epochs are added to ``epochs`` from the
        batch headers.
        """
        bases = sorted(
            b for p in self.directory.iterdir()
            if p.name.endswith(LOG_SUFFIX) and (b := parse_base_offset(p.name)) is not None
        )
        segments = [
            LogSegment.open(self.directory, base, self.config, created_ms=self.now_ms)
            for base in bases
        ]
        checked_from = 0
        if recovery_point is not None:
            checked_from = max(bisect_right(bases, recovery_point) - 1, 0)
        producers = ProducerStateManager()
        snapshots: dict[int, ProducerSnapshot] = {}
        segment: LogSegment

        def on_batch(header: BatchHeader, position: int) -> None:
            control = segment.read_bytes(position, header.size) if header.is_control else None
            completed = producers.update(header, control)
            if completed is not None and completed.aborted:
                segment.txn_index.add(producers.aborted_entry(completed), write=False)
            if header.leader_epoch >= 0:
                epochs.assign(header.leader_epoch, header.base_offset)

        next_offset = -1
        kept: list[LogSegment] = []
        for i, segment in enumerate(segments):
            if segment.base_offset < next_offset:
                logger.warning(
                    "%s overlaps the previous segment (which ends at offset %d); deleting it "
                    "and every later segment",
                    segment.log_path,
                    next_offset,
                )
                _delete_all(segments[i:])
                break
            snapshots[segment.base_offset] = producers.snapshot()
            error = segment.load(
                verify_crc=i >= checked_from,
                min_offset=max(next_offset, segment.base_offset),
                on_batch=on_batch,
            )
            kept.append(segment)
            next_offset = max(next_offset, segment.next_offset)
            following = segments[i + 1] if i + 1 < len(segments) else None
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
                if i + 1 < len(segments):
                    logger.warning(
                        "deleting %d segments after the damage in %s",
                        len(segments) - i - 1,
                        segment.log_path,
                    )
                _delete_all(segments[i + 1 :])
                break
        return _Recovered(kept, checked_from, producers, snapshots)

    # ----------------------------------------------------------------- pass 4: offsets

    @staticmethod
    def _settle_offsets(
        segments: list[LogSegment], checkpointed: _Checkpoints, epochs: LeaderEpochCache
    ) -> tuple[int, int]:
        """``(log_start_offset, high_watermark)`` within what survived; epochs trimmed to match."""
        end = segments[-1].next_offset
        log_start_offset = min(
            max(checkpointed.log_start_offset or 0, segments[0].base_offset), end
        )
        high_watermark = min(max(checkpointed.high_watermark or 0, log_start_offset), end)
        # Epochs starting past the end belong to data that did not survive.
        epochs.truncate_from_end(end + 1)
        epochs.truncate_from_start(log_start_offset)
        return log_start_offset, high_watermark

    # ---------------------------------------------------------------- pass 5: durability

    def _make_durable(
        self,
        checked: list[LogSegment],
        checkpointed: _Checkpoints,
        *,
        end: int,
        log_start_offset: int,
        epochs: list[EpochEntry],
    ) -> None:
        """fsync the segments recovery checked, then write the checkpoints that follow from them."""
        if checkpointed.leader_epochs is None or [tuple(e) for e in epochs] != (
            checkpointed.leader_epochs
        ):
            self.checkpoints.leader_epochs.write(epochs)
        if checkpointed.recovery_point is None or checkpointed.recovery_point != end:
            for segment in checked:
                segment.flush()
            fsync_directory(self.directory)
        self.checkpoints.recovery_point.write(end)
        self.checkpoints.log_start_offset.write(log_start_offset)


def _read_offset(checkpoint: OffsetCheckpoint) -> int | None:
    try:
        return checkpoint.read()
    except CorruptCheckpointError as exc:
        logger.warning("%s; ignoring it", exc)
        return None


def _delete_all(segments: list[LogSegment]) -> None:
    for segment in segments:
        segment.delete()
