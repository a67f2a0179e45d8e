"""LocalLog, the segment list: roll, append, read, truncate, delete, and the recovery point."""

from __future__ import annotations

from pathlib import Path

import pytest

from rafka.logstore import decode_batches, read_header, stamp_batch
from rafka.logstore.batch import BatchHeader
from rafka.logstore.checkpoint import RECOVERY_POINT_FILE, OffsetCheckpoint
from rafka.logstore.local_log import LocalLog
from rafka.logstore.segment import LogSegment
from tests.support.logstore import T0, batch_of, small_config

CONFIG = small_config(segment_bytes=600)


def _local_log(directory: Path, rolls: list[int]) -> LocalLog:
    directory.mkdir(parents=True, exist_ok=True)
    first = LogSegment.open(directory, 0, CONFIG, created_ms=T0)
    return LocalLog(
        directory,
        CONFIG,
        [first],
        recovery_point=0,
        recovery_point_file=OffsetCheckpoint(directory / RECOVERY_POINT_FILE),
        on_roll=rolls.append,
    )


def _append(local: LocalLog, records: int, now_ms: int = T0) -> BatchHeader:
    start = local.log_end_offset
    data = bytes(stamp_batch(batch_of(records, start=start, ts=T0 + start), start, 0))
    header = read_header(data)
    local.append(header, (data,), now_ms)
    return header


def _offsets(local: LocalLog, start: int = 0) -> list[int]:
    records, next_offset = local.read(start, 1 << 20, max_offset=None)
    assert next_offset == local.log_end_offset
    return [r.offset for r in decode_batches(records, start)]


def test_append_rolls_a_full_segment_and_tells_the_owner(tmp_path: Path) -> None:
    rolls: list[int] = []
    local = _local_log(tmp_path, rolls)
    for _ in range(12):
        _append(local, 5)
    bases = [s.base_offset for s in local.segments]
    assert len(bases) > 2 and rolls == bases[1:]
    assert all(s.size <= CONFIG.segment_bytes for s in local.segments)
    # A closed segment ends where the next begins.
    assert [s.next_offset for s in local.segments[:-1]] == bases[1:]
    # Each roll fsyncs the closed segment: the recovery point is the active segment's base.
    assert local.recovery_point == bases[-1]
    assert OffsetCheckpoint(tmp_path / RECOVERY_POINT_FILE).read() == bases[-1]
    assert _offsets(local) == list(range(60))
    assert _offsets(local, 23) == list(range(23, 60))


def test_read_stops_below_max_offset_and_within_max_bytes(tmp_path: Path) -> None:
    local = _local_log(tmp_path, [])
    headers = [_append(local, 5) for _ in range(12)]
    records, next_offset = local.read(0, 1 << 20, max_offset=23)
    # The batch holding offset 23 (20-24) is not returned.
    assert [r.offset for r in decode_batches(records)] == list(range(20))
    assert next_offset == 20
    records, next_offset = local.read(0, headers[0].size + 1, max_offset=None)
    assert len(records) == headers[0].size and next_offset == 5
    # A first batch larger than max_bytes comes whole.
    records, next_offset = local.read(7, 1, max_offset=None)
    assert len(records) == headers[1].size and next_offset == 10
    assert local.read(60, 100, max_offset=None) == (b"", 60)


def test_truncate_to_replays_the_kept_batches_and_lowers_the_recovery_point(
    tmp_path: Path,
) -> None:
    local = _local_log(tmp_path, [])
    for _ in range(12):
        _append(local, 5)
    bases = [s.base_offset for s in local.segments]
    target = bases[1] + 7
    kept: list[BatchHeader] = []
    removed = local.truncate_to(target, on_kept_batch=lambda header, _: kept.append(header))
    assert removed == bases[2:]
    # The batch holding the target goes whole.
    assert local.log_end_offset == target - target % 5
    assert [h.base_offset for h in kept] == list(range(bases[1], local.log_end_offset, 5))
    assert local.recovery_point == local.log_end_offset and local.truncations == 1
    assert _offsets(local) == list(range(local.log_end_offset))


def test_delete_oldest_and_start_again(tmp_path: Path) -> None:
    local = _local_log(tmp_path, [])
    for _ in range(12):
        _append(local, 5)
    bases = [s.base_offset for s in local.segments]
    assert local.delete_oldest(2) == bases[:2]
    assert [s.base_offset for s in local.segments] == bases[2:]
    assert not (tmp_path / f"{0:020d}.log").exists()
    # The log start offset moved above the recovery point: recovery never looks below it,
    # and the checkpoint follows at the next move.
    local.advance_recovery_point(bases[-1] + 3)
    assert local.recovery_point == bases[-1] + 3
    assert OffsetCheckpoint(tmp_path / RECOVERY_POINT_FILE).read() == bases[-1]
    local.flush()
    assert OffsetCheckpoint(tmp_path / RECOVERY_POINT_FILE).read() == 60
    local.truncate_fully_and_start_at(500, T0)
    assert [s.base_offset for s in local.segments] == [500]
    assert (local.log_end_offset, local.recovery_point, local.truncations) == (500, 500, 1)
    assert sorted(p.name for p in tmp_path.glob("*.log")) == [f"{500:020d}.log"]


def test_a_cleaned_segment_is_swapped_in_under_the_same_name(tmp_path: Path) -> None:
    local = _local_log(tmp_path, [])
    for _ in range(12):
        _append(local, 5)
    old = local.segments[0]
    cleaned = local.new_cleaned_segment(old)
    assert cleaned.base_offset == old.base_offset and cleaned.log_path.name.endswith(".cleaned")
    position, header = next(old.iter_headers(0))
    cleaned.append(header, (old.read_bytes(position, header.size),))
    local.replace_segment(old, cleaned)
    assert local.segments[0] is cleaned and cleaned.log_path == old.log_path
    assert not list(tmp_path.glob("*.cleaned"))
    assert _offsets(local)[:5] == list(range(5))


@pytest.mark.parametrize("config_change", [{"segment_bytes": 100}, {"segment_ms": 1}])
def test_roll_follows_a_config_change(tmp_path: Path, config_change: dict[str, int]) -> None:
    rolls: list[int] = []
    local = _local_log(tmp_path, rolls)
    _append(local, 1)
    _append(local, 1)
    assert rolls == []
    local.update_config(small_config(**config_change))
    # Three batches no longer fit in one segment, or the first append was too long ago.
    _append(local, 1, now_ms=T0 + 2)
    assert rolls == [2]


def _found_by_walking(segment: LogSegment, offset: int) -> tuple[int, BatchHeader] | None:
    for position, header in segment.iter_headers(0):
        if header.last_offset >= offset:
            return position, header
    return None


def test_a_segment_finds_every_offset_where_a_walk_of_its_batches_does(tmp_path: Path) -> None:
    """`find_position` answers the last batches appended from memory (RECENT_BATCHES): after
    appends, a truncation that puts batches of another size at the same offsets, and a reload,
    it must agree with a walk of the file for every offset, near the end or not."""
    from rafka.logstore.segment import RECENT_BATCHES

    config = small_config(segment_bytes=1 << 20)

    def append(segment: LogSegment, records: int) -> None:
        start = segment.next_offset
        data = bytes(stamp_batch(batch_of(records, start=start, ts=T0 + start), start, 0))
        segment.append(read_header(data), (data,))

    def agrees(segment: LogSegment) -> None:
        for offset in range(segment.next_offset + 2):
            assert segment.find_position(offset) == _found_by_walking(segment, offset), offset

    many = LogSegment.open(tmp_path, 0, config, created_ms=T0)
    for i in range(3 * RECENT_BATCHES):
        append(many, 1 + i % 4)
    agrees(many)
    many.close()
    reopened = LogSegment.open(tmp_path, 0, config, created_ms=T0)
    assert reopened.load(verify_crc=True, min_offset=-1) is None
    agrees(reopened)
    reopened.close()

    # Batches of 4 (starting at 0, 4, ... 44), cut at 20, then batches of 3 from there: offsets
    # 24, 28, 36 and 40 start no batch any more.
    (tmp_path / "few").mkdir()
    few = LogSegment.open(tmp_path / "few", 0, config, created_ms=T0)
    for _ in range(12):
        append(few, 4)
    few.truncate_to(21)
    assert few.next_offset == 20
    for _ in range(10):
        append(few, 3)
    agrees(few)
    few.close()
