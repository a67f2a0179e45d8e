"""Retention: the pure decision, and the log deleting segments and moving its start."""

from __future__ import annotations

from pathlib import Path

import pytest

from rafka.logstore import Log, OffsetOutOfRangeError, SegmentSummary, decide_retention
from rafka.logstore.retention import segments_below_log_start
from tests.support.logstore import T0, FakeClock, batch_of, read_all, small_config

DAY = 24 * 3600 * 1000


def summaries(*specs: tuple[int, int, int]) -> list[SegmentSummary]:
    """(base_offset, size, max_timestamp) per segment; next offsets follow the bases."""
    out = []
    for i, (base, size, ts) in enumerate(specs):
        nxt = specs[i + 1][0] if i + 1 < len(specs) else base + 10
        out.append(SegmentSummary(base, nxt, size, ts))
    return out


def decide(segments: list[SegmentSummary], **kwargs: int) -> int:
    args = {
        "now_ms": 10 * DAY,
        "retention_ms": -1,
        "retention_bytes": -1,
        "log_start_offset": 0,
        "high_watermark": 10**9,
    }
    args.update(kwargs)
    return decide_retention(segments, **args).delete


def test_time_retention_deletes_an_old_prefix_never_the_active_segment() -> None:
    segs = summaries((0, 100, 1 * DAY), (10, 100, 2 * DAY), (20, 100, 9 * DAY), (30, 100, 1 * DAY))
    assert decide(segs, retention_ms=7 * DAY) == 2
    # The active (last) segment is old too, but it stays.
    assert decide(segs[3:], retention_ms=7 * DAY) == 0
    # A newer segment stops the prefix even if an older-looking one follows it.
    assert decide(segs, retention_ms=-1) == 0
    # Exactly retention.ms old is not yet expired.
    assert decide(segs, retention_ms=9 * DAY) == 0


def test_size_retention_keeps_the_log_at_or_above_the_limit() -> None:
    segs = summaries((0, 100, 0), (10, 100, 0), (20, 100, 0), (30, 50, 0))
    assert decide(segs, retention_bytes=150) == 2  # 350 -> 150
    assert decide(segs, retention_bytes=151) == 1  # 350 -> 250: one more would go below
    assert decide(segs, retention_bytes=0) == 3


def test_nothing_at_or_above_the_high_watermark_goes() -> None:
    segs = summaries((0, 100, 0), (10, 100, 0), (20, 100, 0))
    assert decide(segs, retention_bytes=0, high_watermark=15) == 1
    assert decide(segs, retention_bytes=0, high_watermark=9) == 0


def test_segments_below_the_log_start_offset_go() -> None:
    segs = summaries((0, 100, 10 * DAY), (10, 100, 10 * DAY), (20, 100, 10 * DAY))
    assert decide(segs, log_start_offset=15) == 1
    assert decide(segs, log_start_offset=20) == 2


def _filled_log(directory: Path, clock: FakeClock, **config: object) -> Log:
    log = Log.open(directory, small_config(segment_bytes=1024, **config), clock=clock)
    for i in range(20):
        # Record time follows the clock: one hour per batch.
        log.append_as_leader(batch_of(5, start=5 * i, ts=clock.ms), 0)
        clock.advance(3600 * 1000)
    log.high_watermark = log.log_end_offset
    return log


def test_log_retention_by_time(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = _filled_log(tmp_path / "t-0", clock, retention_ms=5 * 3600 * 1000)
    before = log.segments
    assert len(before) > 4
    deleted = log.delete_old_segments()
    after = log.segments
    assert deleted == len(before) - len(after) > 0
    horizon = clock.ms - 5 * 3600 * 1000
    assert all(s.max_timestamp < horizon for s in before[:deleted])
    assert after[0].max_timestamp >= horizon or len(after) == 1
    assert log.log_start_offset == after[0].base_offset
    assert [r.offset for r in read_all(log)] == list(range(log.log_start_offset, 100))
    with pytest.raises(OffsetOutOfRangeError) as raised:
        log.read(log.log_start_offset - 1, 1000)
    assert raised.value.log_start_offset == log.log_start_offset
    assert str(log.log_start_offset) in str(raised.value) and "100" in str(raised.value)
    log.close()
    assert Log.open(tmp_path / "t-0", small_config(), clock=clock).log_start_offset == (
        after[0].base_offset
    )


def test_log_retention_by_size(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = _filled_log(tmp_path / "t-0", clock, retention_ms=-1, retention_bytes=3000)
    assert log.size_in_bytes > 3000
    log.delete_old_segments()
    assert log.size_in_bytes >= 3000
    assert log.size_in_bytes - log.segments[0].size < 3000
    log.close()


def test_compact_only_logs_ignore_time_and_size_retention(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = _filled_log(tmp_path / "t-0", clock, retention_ms=1, cleanup_policy="compact")
    assert log.delete_old_segments() == 0
    log.close()


def test_delete_records_before_moves_the_log_start(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = _filled_log(tmp_path / "t-0", clock, retention_ms=-1)
    segments = len(log.segments)
    log.high_watermark = 60
    with pytest.raises(OffsetOutOfRangeError, match="high watermark"):
        log.delete_records_before(61)
    assert log.delete_records_before(33) == 33
    assert log.log_start_offset == 33
    assert len(log.segments) < segments and log.segments[0].base_offset <= 33
    with pytest.raises(OffsetOutOfRangeError):
        log.read(32, 100)
    # The first batch still holds 30-34; a consumer only sees 33 on.
    assert read_all(log)[0].offset == 33
    assert log.offset_for_timestamp(0) == 33
    log.close()
    reopened = Log.open(tmp_path / "t-0", small_config(), clock=clock)
    assert reopened.log_start_offset == 33
    reopened.close()


def test_below_the_log_start_ignores_time_and_size() -> None:
    segs = summaries((0, 100, 0), (10, 100, 0), (20, 100, 0))
    assert segments_below_log_start(segs, log_start_offset=9) == 0
    assert segments_below_log_start(segs, log_start_offset=10) == 1
    # The active segment stays, even when the log start offset is at the log end.
    assert segments_below_log_start(segs, log_start_offset=30) == 2


def test_retention_says_when_the_high_watermark_alone_keeps_segments(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    log = _filled_log(tmp_path / "t-0", clock, retention_ms=-1, retention_bytes=3000)
    end = log.log_end_offset
    log.high_watermark = 0  # a follower yet to hear of the leader's high watermark
    assert log.delete_old_segments() == 0
    assert log.retention_awaits_high_watermark
    log.high_watermark = end
    assert log.delete_old_segments() > 0
    assert not log.retention_awaits_high_watermark
    log.close()
