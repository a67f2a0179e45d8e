"""Checkpoint files: atomic replacement, parsing, and the log's use of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rafka.logstore import Log
from rafka.logstore.checkpoint import (
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    CorruptCheckpointError,
    OffsetCheckpoint,
    read_checkpoint,
    write_checkpoint,
)
from tests.support.logstore import batch_of, small_config


def test_write_then_read(tmp_path: Path) -> None:
    path = tmp_path / "cp"
    write_checkpoint(path, [(1, 10), (3, 25)])
    assert path.read_text() == "0\n2\n1 10\n3 25\n"
    assert read_checkpoint(path, 2) == [(1, 10), (3, 25)]
    assert read_checkpoint(tmp_path / "missing", 2) is None
    assert not list(tmp_path.glob("*.tmp"))


def test_a_crash_before_the_rename_keeps_the_old_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = OffsetCheckpoint(tmp_path / "cp")
    checkpoint.write(5)

    def crash(src: object, dst: object) -> None:
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        checkpoint.write(99)
    monkeypatch.undo()
    assert checkpoint.read() == 5  # never a torn file: the old value or the new one


@pytest.mark.parametrize(
    "content", ["", "0\n", "1\n1\n5\n", "0\n2\n5\n", "0\n1\nfive\n", "0\n1\n5 6\n"]
)
def test_corrupt_checkpoints_are_reported(tmp_path: Path, content: str) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(CorruptCheckpointError):
        OffsetCheckpoint(path).read()


def test_the_log_persists_and_reloads_its_offsets(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, small_config())
    for i in range(10):
        log.append_as_leader(batch_of(5, start=5 * i), 0)
    log.high_watermark = 30
    log.checkpoint_high_watermark()
    assert OffsetCheckpoint(directory / HIGH_WATERMARK_FILE).read() == 30
    log.close()
    assert OffsetCheckpoint(directory / RECOVERY_POINT_FILE).read() == 50
    assert OffsetCheckpoint(directory / LOG_START_OFFSET_FILE).read() == 0

    reopened = Log.open(directory, small_config())
    assert (reopened.high_watermark, reopened.recovery_point, reopened.log_end_offset) == (
        30, 50, 50
    )
    reopened.close()


def test_a_high_watermark_is_clamped_to_the_log(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, small_config())
    log.append_as_leader(batch_of(5), 0)
    log.high_watermark = 99
    assert log.high_watermark == 5
    log.close()
    OffsetCheckpoint(directory / HIGH_WATERMARK_FILE).write(1000)  # e.g. after a lost tail
    reopened = Log.open(directory, small_config())
    assert reopened.high_watermark == 5
    reopened.close()
