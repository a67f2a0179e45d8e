"""LogLoader: what a directory holds after recovery, pass by pass."""

from __future__ import annotations

from pathlib import Path

from rafka.logstore import Log
from rafka.logstore.checkpoint import (
    HIGH_WATERMARK_FILE,
    LEADER_EPOCH_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    LogCheckpoints,
)
from rafka.logstore.epoch_cache import EpochEntry
from rafka.logstore.loader import LoadedLog, LogLoader
from tests.support.logstore import T0, batch_of, files, small_config

CONFIG = small_config(segment_bytes=600)


def _load(directory: Path) -> LoadedLog:
    return LogLoader(directory, CONFIG, LogCheckpoints(directory), now_ms=T0).load()


def _write(directory: Path, batches: int, *, epochs: tuple[int, ...] = (0,)) -> list[int]:
    """A closed log of ``batches`` batches of 5 records, its segment bases. Batch i is written
    at leader epoch ``epochs[i]``, the last one for the rest."""
    log = Log.open(directory, CONFIG)
    for i in range(batches):
        start = log.log_end_offset
        epoch = epochs[min(i, len(epochs) - 1)]
        log.append_as_leader(batch_of(5, start=start, ts=T0 + start), epoch)
    log.high_watermark = log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    log.close()
    return bases


def test_a_new_directory_gets_one_empty_segment_and_its_checkpoints(tmp_path: Path) -> None:
    loaded = _load(tmp_path / "t-0")
    assert [s.base_offset for s in loaded.segments] == [0]
    assert (loaded.log_start_offset, loaded.recovery_point, loaded.high_watermark) == (0, 0, 0)
    assert loaded.checkpointed_high_watermark is None and loaded.leader_epochs == []
    assert loaded.producer_snapshots == {0: {}}
    names = files(tmp_path / "t-0")
    assert {RECOVERY_POINT_FILE, LOG_START_OFFSET_FILE, LEADER_EPOCH_FILE} <= set(names)
    assert HIGH_WATERMARK_FILE not in names


def test_a_closed_log_loads_as_it_was_left(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    bases = _write(directory, 12, epochs=(0, 0, 3))
    loaded = _load(directory)
    assert [s.base_offset for s in loaded.segments] == bases
    assert loaded.recovery_point == loaded.segments[-1].next_offset == 60
    assert loaded.high_watermark == loaded.checkpointed_high_watermark == 60
    assert loaded.leader_epochs == [EpochEntry(0, 0), EpochEntry(3, 10)]
    assert set(loaded.producer_snapshots) == set(bases)


def test_damaged_checkpoints_are_rebuilt_or_ignored(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    _write(directory, 12, epochs=(1, 2))
    for name in (RECOVERY_POINT_FILE, HIGH_WATERMARK_FILE, LEADER_EPOCH_FILE):
        (directory / name).write_text("not a checkpoint")
    loaded = _load(directory)
    # Epochs come back from the batch headers and are written again; a high watermark that
    # cannot be read starts at the log start offset.
    assert loaded.leader_epochs == [EpochEntry(1, 0), EpochEntry(2, 5)]
    assert LogCheckpoints(directory).leader_epochs.read() == [(1, 0), (2, 5)]
    assert (loaded.high_watermark, loaded.checkpointed_high_watermark) == (0, None)
    assert LogCheckpoints(directory).recovery_point.read() == 60


def test_offsets_are_clamped_to_what_survived(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    bases = _write(directory, 12)
    checkpoints = LogCheckpoints(directory)
    checkpoints.high_watermark.write(1000)
    checkpoints.log_start_offset.write(bases[2] + 1)  # DeleteRecords moved it, then a crash
    loaded = _load(directory)
    assert (loaded.log_start_offset, loaded.high_watermark) == (bases[2] + 1, 60)
    assert loaded.leader_epochs == [EpochEntry(0, bases[2] + 1)]
    # The loader keeps the segments below the log start offset; the log deletes them as it opens.
    assert [s.base_offset for s in loaded.segments] == bases
    for segment in loaded.segments:
        segment.close()
    log = Log.open(directory, CONFIG)
    assert [s.base_offset for s in log.segments] == bases[2:]
    assert log.log_start_offset == bases[2] + 1
    log.close()
