"""Log: append, read, lookups, layout on disk, rolling, truncation, flushing, followers."""

from __future__ import annotations

import itertools
import os
import struct
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.common.sentinels import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from rafka.logstore import (
    CorruptRecordError,
    FencedLeaderEpochError,
    Log,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnexpectedAppendOffsetError,
    build_batch,
    decode_batches,
    iter_batches,
    read_header,
)
from tests.support.logstore import MEDIUM, T0, FakeClock, batch_of, files, read_all, small_config


def fill(log: Log, batches: int, per_batch: int = 5, *, epoch: int = 0) -> None:
    for _ in range(batches):
        start = log.log_end_offset
        log.append_as_leader(batch_of(per_batch, start=start, ts=T0 + start), epoch)


@pytest.fixture
def log(tmp_path: Path) -> Log:
    log = Log.open(tmp_path / "orders-0", small_config())
    yield log
    log.close()


# ------------------------------------------------------------------------------ append/read


def test_append_assigns_consecutive_offsets_and_reads_them_back(log: Log) -> None:
    first = log.append_as_leader(batch_of(3), 0)
    second = log.append_as_leader(batch_of(4, start=3), 0)
    assert (first.first_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert (second.first_offset, second.last_offset) == (3, 6)
    assert log.log_end_offset == 7
    records = read_all(log)
    assert [r.offset for r in records] == list(range(7))
    assert [r.key for r in records] == [b"key-%d" % i for i in range(7)]
    assert [r.timestamp for r in records] == [T0, T0 + 1, T0 + 2, T0, T0 + 1, T0 + 2, T0 + 3]


def test_one_leader_append_may_carry_several_batches(log: Log) -> None:
    info = log.append_as_leader(batch_of(2) + batch_of(3, start=2), 0)
    assert (info.first_offset, info.last_offset, info.batch_count, info.record_count) == (
        0, 4, 2, 5
    )
    assert [h.base_offset for h, _ in iter_batches(log.read(0, 10_000).records)] == [0, 2]


def test_append_refuses_partial_batches_and_oversized_ones(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(max_message_bytes=500))
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(batch_of(2)[:-3], 0)
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(b"", 0)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(batch_of(20, value_size=100), 0)
    assert log.log_end_offset == 0
    log.close()


def test_many_segments_read_from_any_offset(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=1000))
    fill(log, 120)
    assert len(log.segments) > 20
    everything = read_all(log)
    assert [r.offset for r in everything] == list(range(600))
    for offset in (0, 1, 4, 5, 299, 300, 301, 444, 599):
        fetch = log.read(offset, 300)
        records = decode_batches(fetch.records, offset)
        # The fetch starts with the batch holding the offset, so the first record is it.
        assert records[0].offset == offset
        assert records[0].key == b"key-%d" % offset
    log.close()


@pytest.fixture(scope="module")
def varied_log(tmp_path_factory: pytest.TempPathFactory) -> Log:
    """60 batches of 1 to 9 records over several segments, shared by a hypothesis test."""
    log = Log.open(tmp_path_factory.mktemp("varied") / "t-0", small_config())
    for i in range(60):
        log.append_as_leader(batch_of(1 + i % 9, start=log.log_end_offset), 0)
    yield log
    log.close()


@MEDIUM
@given(
    offset=st.integers(min_value=0, max_value=290),  # the log ends at 291
    max_bytes=st.integers(min_value=1, max_value=3000),
)
def test_read_returns_whole_batches_within_max_bytes(
    varied_log: Log, offset: int, max_bytes: int
) -> None:
    assert varied_log.log_end_offset == 291
    fetch = varied_log.read(offset, max_bytes)
    batches = [h for h, _ in iter_batches(fetch.records)]
    assert sum(h.size for h in batches) == len(fetch.records)  # no partial batch
    assert batches[0].base_offset <= offset <= batches[0].last_offset
    if len(batches) > 1:
        assert len(fetch.records) <= max_bytes  # only a lone first batch may exceed it
    assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(batches))
    assert fetch.next_offset == batches[-1].next_offset


def test_a_first_batch_bigger_than_max_bytes_comes_whole(log: Log) -> None:
    fill(log, 3, per_batch=10)
    fetch = log.read(12, 10)
    assert [h.base_offset for h, _ in iter_batches(fetch.records)] == [10]
    assert fetch.next_offset == 20


def test_max_offset_keeps_uncommitted_batches_out(log: Log) -> None:
    fill(log, 4, per_batch=5)
    log.high_watermark = 10
    fetch = log.read(0, 10_000, max_offset=log.high_watermark)
    assert [r.offset for r in decode_batches(fetch.records)] == list(range(10))
    assert fetch.high_watermark == 10 and fetch.log_end_offset == 20
    assert log.read(10, 10_000, max_offset=10).records == b""
    assert log.read(12, 10_000, max_offset=10).records == b""


def test_reading_at_the_end_is_empty_and_outside_raises(log: Log) -> None:
    fill(log, 2)
    end = log.read(10, 1000)
    assert end.records == b"" and end.next_offset == 10
    with pytest.raises(OffsetOutOfRangeError) as above:
        log.read(11, 1000)
    assert (above.value.log_start_offset, above.value.log_end_offset) == (0, 10)
    assert "0" in str(above.value) and "10" in str(above.value)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)


# ---------------------------------------------------------------------------- layout, index


def test_layout_on_disk(tmp_path: Path) -> None:
    directory = tmp_path / "orders-3"
    log = Log.open(directory, small_config(segment_bytes=1024))
    fill(log, 10)
    bases = [s.base_offset for s in log.segments]
    log.close()
    names = files(directory)
    for base in bases:
        stem = f"{base:020d}"
        assert {f"{stem}.log", f"{stem}.index", f"{stem}.timeindex"} <= set(names)
    assert "leader-epoch-checkpoint" in names
    assert "recovery-point-offset-checkpoint" in names
    assert "replication-offset-checkpoint" in names
    assert "log-start-offset-checkpoint" in names
    assert not [n for n in names if n.endswith((".tmp", ".cleaned", ".swap"))]


def test_index_files_point_at_batches_every_interval(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, small_config(segment_bytes=100_000, index_interval_bytes=300))
    fill(log, 40)  # ~190-byte batches
    log.close()
    data = (directory / f"{0:020d}.log").read_bytes()
    positions = {pos: h for pos, h in _positions(data)}
    index = (directory / f"{0:020d}.index").read_bytes()
    assert len(index) % 8 == 0 and len(index) // 8 >= 40 * 190 // 600
    for relative, position in struct.iter_unpack(">ii", index):
        assert positions[position].base_offset == relative  # base offset 0: relative == absolute
    timeindex = (directory / f"{0:020d}.timeindex").read_bytes()
    assert len(timeindex) % 12 == 0 and len(timeindex) > 0
    entries = list(struct.iter_unpack(">qi", timeindex))
    assert [t for t, _ in entries] == sorted({t for t, _ in entries})
    for timestamp, relative in entries:
        # Every batch before the entry's offset has a max timestamp <= the entry's.
        before = [h for h in positions.values() if h.base_offset < relative]
        assert all(h.max_timestamp <= timestamp for h in before)


def _positions(data: bytes):  # type: ignore[no-untyped-def]
    pos = 0
    for header, view in iter_batches(data):
        yield pos, header
        pos += len(view)


def test_offset_for_timestamp(log: Log) -> None:
    # Timestamps that go back and forth (CreateTime is the producer's clock).
    stamps = [100, 300, 200, 500, 400, 700, 600, 900, 800, 1000] * 6
    for i, ts in enumerate(stamps):
        log.append_as_leader(build_batch([(b"k", b"v%d" % i, T0 + ts, None)]), 0)
    assert len(log.segments) >= 1
    assert log.offset_for_timestamp(T0 + 100) == 0
    assert log.offset_for_timestamp(T0 + 250) == 1  # the first record at or after 250 is 300
    assert log.offset_for_timestamp(T0 + 450) == 3
    assert log.offset_for_timestamp(T0 + 1000) == 9
    assert log.offset_for_timestamp(T0 + 1001) is None
    assert log.offset_for_timestamp(0) == 0
    assert log.offset_for_timestamp(LATEST_TIMESTAMP) == 60
    assert log.offset_for_timestamp(EARLIEST_TIMESTAMP) == 0


def test_offset_for_timestamp_across_many_segments(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=700))
    fill(log, 60)  # record timestamps T0 + offset
    assert len(log.segments) > 10
    for target in (0, 1, 137, 138, 299):
        assert log.offset_for_timestamp(T0 + target) == target
    log.close()


def test_find_offset_by_timestamp_answers_timestamps_and_epochs_as_listoffsets(
    tmp_path: Path,
) -> None:
    """Kafka's ListOffsets answers: the record's own timestamp and the leader epoch it was
    written in; MAX_TIMESTAMP (-3) the record with the largest timestamp, the first of a tie,
    also when it sits in an older segment than the newest records."""
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=700))
    # Epoch i // 10 for offset i; two records share the largest timestamp, in the first segment.
    stamps = [100, 900, 300, 900, 200] + [400 + i for i in range(40)]
    for i, ts in enumerate(stamps):
        log.append_as_leader(build_batch([(b"k", b"v%d" % i, T0 + ts, None)]), i // 10)
    assert len(log.segments) > 2
    answers = {name: log.find_offset_by_timestamp(timestamp) for name, timestamp in (
        ("max", MAX_TIMESTAMP), ("250", T0 + 250), ("latest", LATEST_TIMESTAMP),
        ("earliest", EARLIEST_TIMESTAMP), ("901", T0 + 901))}
    assert answers["max"] == (T0 + 900, 1, 0)
    assert answers["250"] == (T0 + 900, 1, 0)  # the first record at or after 250
    assert answers["latest"] == (-1, 45, 4)
    assert answers["earliest"] == (-1, 0, 0)
    assert answers["901"] is None
    # Once the newest record is the largest, MAX_TIMESTAMP finds it, with its epoch.
    log.append_as_leader(build_batch([(b"k", b"late", T0 + 950, None)]), 7)
    assert log.find_offset_by_timestamp(MAX_TIMESTAMP) == (T0 + 950, 45, 7)
    assert log.find_offset_by_timestamp(T0 + 901) == (T0 + 950, 45, 7)
    log.close()
    empty = Log.open(tmp_path / "t-1", small_config())
    assert empty.find_offset_by_timestamp(MAX_TIMESTAMP) is None
    empty.close()


# ------------------------------------------------------------------------------------ rolls


def test_roll_by_segment_bytes(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=1000))
    fill(log, 30)
    sizes = [s.size for s in log.segments]
    assert len(sizes) > 3
    assert all(size <= 1000 for size in sizes)
    assert all(size + 200 > 1000 for size in sizes[:-1])  # each closed one was full
    assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(log.segments))
    # The recovery point moves to each new segment: rolling fsyncs the old one.
    assert log.recovery_point == log.segments[-1].base_offset
    log.close()


def test_a_batch_larger_than_a_segment_gets_one_to_itself(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=200))
    log.append_as_leader(batch_of(20), 0)
    log.append_as_leader(batch_of(1), 0)
    assert [s.next_offset - s.base_offset for s in log.segments] == [20, 1]
    log.close()


def test_roll_by_segment_ms_with_an_injected_clock(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = Log.open(tmp_path / "t-0", small_config(segment_ms=60_000), clock=clock)
    fill(log, 3)
    clock.advance(60_000)
    fill(log, 1)
    assert len(log.segments) == 1  # exactly segment.ms is not over it
    clock.advance(1)
    fill(log, 1)
    assert [s.base_offset for s in log.segments] == [0, 20]
    # Old record timestamps do not make every append roll: the clock does.
    log.append_as_leader(batch_of(2, ts=0), 0)
    log.append_as_leader(batch_of(2, ts=0), 0)
    assert len(log.segments) == 2
    log.close()


def test_roll_when_the_index_is_full(tmp_path: Path) -> None:
    # Room for three offset index entries and two time index entries; every batch but a
    # segment's first adds one of each, so a segment holds three batches.
    log = Log.open(tmp_path / "t-0", small_config(segment_index_bytes=24, index_interval_bytes=1))
    fill(log, 9)
    assert len(log.segments) == 3
    assert all(s.next_offset - s.base_offset == 15 for s in log.segments)
    log.close()


def test_empty_active_segment_does_not_roll(log: Log) -> None:
    assert log.roll() == 0
    fill(log, 1)
    assert log.roll() == 5 and log.roll() == 5
    assert [s.base_offset for s in log.segments] == [0, 5]


# ------------------------------------------------------------------------------- truncation


def test_truncate_to_inside_a_batch_cuts_at_the_batch_start(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=1000))
    fill(log, 30)
    log.high_watermark = 150
    segments = len(log.segments)
    assert log.truncate_to(73)
    assert log.log_end_offset == 70
    assert len(log.segments) < segments
    assert log.high_watermark == 70
    assert [r.offset for r in read_all(log)] == list(range(70))
    assert not log.truncate_to(70) and not log.truncate_to(500)
    # Appends continue at the new end, and survive a reopen.
    info = log.append_as_leader(batch_of(5, start=70), 0)
    assert info.first_offset == 70
    log.close()
    reopened = Log.open(tmp_path / "t-0", small_config(segment_bytes=1000))
    assert [r.offset for r in read_all(reopened)] == list(range(75))
    reopened.close()


def test_truncate_to_a_segment_boundary(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=1000))
    fill(log, 30)
    boundary = log.segments[3].base_offset
    log.truncate_to(boundary)
    assert log.log_end_offset == boundary
    assert log.segments[-1].base_offset == boundary and log.segments[-1].size == 0
    fill(log, 1)
    assert [r.offset for r in read_all(log)] == list(range(boundary + 5))
    log.close()


def test_truncate_fully_and_start_at(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = Log.open(directory, small_config(segment_bytes=1000))
    fill(log, 10)
    log.truncate_fully_and_start_at(1000)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (1000, 1000, 1000)
    assert log.epoch_cache.entries == []
    assert [n for n in files(directory) if n.endswith(".log")] == [f"{1000:020d}.log"]
    with pytest.raises(OffsetOutOfRangeError):
        log.read(5, 100)
    log.append_as_follower(_stamped(batch_of(3), 1000, 4))
    assert [r.offset for r in read_all(log)] == [1000, 1001, 1002]
    log.close()
    assert Log.open(directory, small_config()).log_start_offset == 1000


# ---------------------------------------------------------------------------------- flushing


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_no_flush_policy_leaves_flushing_to_the_os(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=100_000))
    fill(log, 1)  # the first append records leader epoch 0 (a checkpoint write)
    calls = _count_fsyncs(monkeypatch)
    fill(log, 19)
    assert calls == [] and log.recovery_point == 0
    log.flush()
    assert calls and log.recovery_point == 100
    log.close()


def test_flush_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=100_000, flush_messages=12))
    fill(log, 1)  # the first append records leader epoch 0 (a checkpoint write)
    calls = _count_fsyncs(monkeypatch)
    fill(log, 1)  # 10 messages: below the threshold
    assert log.recovery_point == 0 and calls == []
    fill(log, 1)  # 15
    assert log.recovery_point == 15 and calls
    fill(log, 2)
    assert log.recovery_point == 15
    fill(log, 1)
    assert log.recovery_point == 30
    log.close()


def test_flush_ms(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    config = small_config(segment_bytes=100_000, flush_ms=1000)
    log = Log.open(tmp_path / "t-0", config, clock=clock)
    fill(log, 2)
    assert log.recovery_point == 0
    clock.advance(999)
    assert not log.maybe_flush()
    clock.advance(1)
    assert log.maybe_flush() and log.recovery_point == 10
    fill(log, 1)
    clock.advance(1000)
    fill(log, 1)  # an append after flush.ms flushes too
    assert log.recovery_point == 20
    log.close()


def test_close_flushes_and_the_log_refuses_use_afterwards(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config())
    fill(log, 2)
    log.close()
    log.close()  # idempotent
    assert log.recovery_point == 10
    with pytest.raises(LogClosedError):
        log.append_as_leader(batch_of(1), 0)
    with pytest.raises(LogClosedError):
        log.read(0, 100)


# -------------------------------------------------------------------------- leader/follower


def _stamped(batch: bytes, base_offset: int, epoch: int) -> bytes:
    from rafka.logstore import stamp_batch

    return bytes(stamp_batch(batch, base_offset, epoch))


def test_a_follower_appends_what_the_leader_wrote(tmp_path: Path) -> None:
    leader = Log.open(tmp_path / "leader" / "t-0", small_config(segment_bytes=1000))
    follower = Log.open(tmp_path / "follower" / "t-0", small_config(segment_bytes=1500))
    fill(leader, 5, epoch=1)
    fill(leader, 5, epoch=3)
    while follower.log_end_offset < leader.log_end_offset:
        fetch = leader.read(follower.log_end_offset, 700)
        follower.append_as_follower(fetch.records)
    assert read_all(follower) == read_all(leader)
    assert follower.epoch_cache.entries == leader.epoch_cache.entries
    assert follower.append_as_follower(b"") is None
    with pytest.raises(UnexpectedAppendOffsetError, match="truncate"):
        follower.append_as_follower(leader.read(10, 100).records)
    corrupt = bytearray(_stamped(batch_of(2), follower.log_end_offset, 3))
    corrupt[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bytes(corrupt))
    # A gap (the leader compacted a whole batch away) is accepted.
    gap = follower.log_end_offset + 7
    follower.append_as_follower(_stamped(batch_of(2), gap, 3))
    assert follower.log_end_offset == gap + 2
    leader.close()
    follower.close()


def test_log_append_time_topics_stamp_the_broker_time(tmp_path: Path) -> None:
    clock = FakeClock(T0 + 5000)
    log = Log.open(
        tmp_path / "t-0", small_config(message_timestamp_type="LogAppendTime"), clock=clock
    )
    info = log.append_as_leader(batch_of(3, ts=1), 0)
    assert info.log_append_time_ms == T0 + 5000
    assert [r.timestamp for r in read_all(log)] == [T0 + 5000] * 3
    header = read_header(log.read(0, 1000).records)
    assert header.timestamp_type == 1 and header.max_timestamp == T0 + 5000
    log.close()


def test_an_older_leader_epoch_is_fenced(log: Log) -> None:
    log.append_as_leader(batch_of(1), 5)
    with pytest.raises(FencedLeaderEpochError):
        log.append_as_leader(batch_of(1), 4)
    assert log.log_end_offset == 1


def test_a_config_change_applies_to_the_next_appends(tmp_path: Path) -> None:
    log = Log.open(tmp_path / "t-0", small_config(segment_bytes=100_000))
    fill(log, 5)
    assert len(log.segments) == 1
    log.update_config(small_config(segment_bytes=500))
    fill(log, 5)
    assert len(log.segments) > 3
    log.close()
