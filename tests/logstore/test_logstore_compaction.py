"""Compaction: newest value per key, tombstones, offsets kept, steps, crash-safe swaps."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rafka.logstore import Log, Record, build_batch, decode_batches
from rafka.logstore.segment import SWAP_SUFFIX
from tests.support.logstore import SMALL, T0, FakeClock, files, read_all, small_config

HOUR = 3600 * 1000


def compact_config(**overrides: object) -> object:
    values: dict[str, object] = {
        "cleanup_policy": "compact",
        "segment_bytes": 800,
        "delete_retention_ms": HOUR,
    }
    values.update(overrides)
    return small_config(**values)


def append(
    log: Log, records: list[tuple[bytes | None, bytes | None, int]], **kwargs: object
) -> None:
    log.append_as_leader(build_batch([(k, v, ts, None) for k, v, ts in records], **kwargs), 0)


def expected_after_compaction(
    everything: list[Record], cleaned_below: int, committed_below: int, horizon: int
) -> list[Record]:
    """The model: below ``cleaned_below`` keep keyless records and the newest per key
    (newest among records below ``committed_below``), minus tombstones older than ``horizon``."""
    newest = {
        r.key: r.offset for r in everything if r.key is not None and r.offset < committed_below
    }
    kept = []
    for r in everything:
        if r.offset < cleaned_below and r.key is not None:
            if newest.get(r.key, r.offset) > r.offset:
                continue
            if r.value is None and r.timestamp < horizon:
                continue
        kept.append(r)
    return kept


@SMALL
@given(
    writes=st.lists(
        st.tuples(
            st.none() | st.sampled_from([b"a", b"b", b"c", b"d", b"e"]),
            st.booleans(),  # tombstone?
            st.integers(min_value=0, max_value=4 * HOUR),  # age
        ),
        min_size=1,
        max_size=80,
    ),
    per_batch=st.integers(min_value=1, max_value=6),
    codec=st.sampled_from(["none", "zstd", "gzip"]),
)
def test_compaction_matches_the_model(
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[bytes | None, bool, int]],
    per_batch: int,
    codec: str,
) -> None:
    clock = FakeClock(T0 + 10 * HOUR)
    log = Log.open(tmp_path_factory.mktemp("c") / "t-0", compact_config(), clock=clock)
    records = [
        (key, None if tombstone and key else b"v%d" % i, clock.ms - age)
        for i, (key, tombstone, age) in enumerate(writes)
    ]
    for i in range(0, len(records), per_batch):
        append(log, records[i : i + per_batch], compression=codec)
    log.high_watermark = log.log_end_offset
    before = read_all(log)
    cleaned_below = log.segments[-1].base_offset  # every closed segment is cleanable
    log.compact()
    after = read_all(log)
    assert after == expected_after_compaction(
        before, cleaned_below, log.high_watermark, clock.ms - HOUR
    )
    # Offsets never change: every survivor is the very record that had its offset.
    by_offset = {r.offset: r for r in before}
    assert all(by_offset[r.offset] == r for r in after)
    assert log.log_end_offset == before[-1].offset + 1
    log.close()


def _keyed_log(directory: Path, clock: FakeClock, rounds: int = 12, **config: object) -> Log:
    log = Log.open(directory, compact_config(**config), clock=clock)
    for i in range(rounds):
        append(log, [(b"k%d" % (j % 3), b"round-%d" % i, clock.ms) for j in range(3)])
    return log


def _committed_keyed_log(directory: Path, clock: FakeClock, rounds: int = 12,
                         **config: object) -> Log:
    """A keyed log with every record below the high watermark, so compaction may clean them."""
    log = _keyed_log(directory, clock, rounds, **config)
    log.high_watermark = log.log_end_offset
    return log


def test_newest_value_per_key_survives_and_offsets_keep_their_gaps(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _committed_keyed_log(tmp_path / "t-0", clock)
    size_before = log.size_in_bytes
    result = log.compact()
    assert result.segments_cleaned > 0 and result.records_removed > 0
    assert log.size_in_bytes < size_before
    records = read_all(log)
    # The closed segments kept nothing: each key's newest value is in the active segment.
    active_base = log.segments[-1].base_offset
    assert all(r.offset >= active_base for r in records)
    assert [r.offset for r in records] == list(range(active_base, 36))
    # A consumer reading from an offset inside a gap gets the next surviving record.
    assert read_all(log, start=1, max_bytes=100)[0].offset == active_base
    assert log.log_end_offset == 36
    log.close()


def test_tombstones_expire_after_delete_retention(tmp_path: Path) -> None:
    clock = FakeClock()
    log = Log.open(tmp_path / "t-0", compact_config(segment_bytes=300), clock=clock)
    append(log, [(b"old", b"1", clock.ms), (b"gone", b"1", clock.ms)])
    append(log, [(b"gone", None, clock.ms)])  # tombstone, will be an hour old
    clock.advance(HOUR + 1)
    append(log, [(b"recent", b"1", clock.ms), (b"fresh", b"1", clock.ms)])
    append(log, [(b"fresh", None, clock.ms)])  # tombstone, brand new
    append(log, [(None, b"keyless", clock.ms)])
    log.roll()
    append(log, [(b"tail", b"1", clock.ms)])
    log.high_watermark = log.log_end_offset
    log.compact()
    kept = {(r.key, r.value) for r in read_all(log)}
    assert (b"gone", None) not in kept and (b"gone", b"1") not in kept  # expired tombstone
    assert (b"fresh", None) in kept and (b"fresh", b"1") not in kept  # tombstone kept for now
    assert (None, b"keyless") in kept
    assert {(b"old", b"1"), (b"recent", b"1"), (b"tail", b"1")} <= kept
    clock.advance(HOUR + 1)
    log.compact()
    assert (b"fresh", None) not in {(r.key, r.value) for r in read_all(log)}
    log.close()


def test_uncommitted_and_recent_segments_are_left_alone(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _keyed_log(tmp_path / "t-0", clock)
    log.high_watermark = 0
    assert log.compact().segments_cleaned == 0  # nothing committed
    # Committed up to the end of the first segment only: a newer value above the high
    # watermark does not remove a committed one (it could still be truncated away).
    log.high_watermark = log.segments[1].base_offset
    first_segment = [r for r in read_all(log) if r.offset < log.segments[1].base_offset]
    log.compact()
    assert [r for r in read_all(log) if r.offset < log.segments[1].base_offset] == [
        r for r in first_segment
        if r.offset >= max(o.offset for o in first_segment if o.key == r.key)
    ]
    log.close()
    lagged = Log.open(tmp_path / "lag", compact_config(min_compaction_lag_ms=HOUR), clock=clock)
    for i in range(12):
        append(lagged, [(b"k", b"%d" % i, clock.ms)] * 3)
    lagged.high_watermark = lagged.log_end_offset
    assert lagged.compact().segments_cleaned == 0
    clock.advance(HOUR)
    assert lagged.compact().segments_cleaned > 0
    lagged.close()


def _log_after_one_compaction_step(tmp_path: Path) -> tuple[Log, FakeClock, Iterator[object]]:
    """A committed keyed log whose compaction has taken its first step and waits for the next."""
    clock = FakeClock()
    log = _committed_keyed_log(tmp_path / "t-0", clock, rounds=20)
    steps = log.iter_compaction()
    next(steps)
    return log, clock, steps


def test_appends_continue_between_compaction_steps(tmp_path: Path) -> None:
    log, clock, steps = _log_after_one_compaction_step(tmp_path)
    append(log, [(b"k0", b"during", clock.ms)])  # the owner appends between two steps
    for _ in steps:
        append(log, [(b"k9", b"during", clock.ms)])
    append(log, [(b"k1", b"after", clock.ms)])
    records = read_all(log)
    assert [r.offset for r in records] == sorted({r.offset for r in records})
    assert records[-1].value == b"after" and records[-1].offset == log.log_end_offset - 1
    latest = {r.key: r.value for r in records}
    assert latest[b"k0"] == b"during" and latest[b"k1"] == b"after"
    log.close()


def test_a_truncation_between_steps_stops_the_compaction(tmp_path: Path) -> None:
    log, _clock, steps = _log_after_one_compaction_step(tmp_path)
    log.truncate_to(log.segments[-2].base_offset)
    assert list(steps) == []
    log.close()


def test_delete_only_logs_are_not_compacted(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _committed_keyed_log(tmp_path / "t-0", clock, cleanup_policy="delete")
    assert log.compact().segments_cleaned == 0
    assert len(read_all(log)) == 36
    log.close()


def test_an_idempotent_producers_last_batch_survives_as_an_empty_batch(tmp_path: Path) -> None:
    clock = FakeClock()
    directory = tmp_path / "t-0"
    log = Log.open(directory, compact_config(), clock=clock)
    log.append_as_leader(
        build_batch([(b"k", b"from producer 7", clock.ms, None)], producer_id=7,
                    producer_epoch=0, base_sequence=0),
        0,
    )
    log.roll()
    append(log, [(b"k", b"newer", clock.ms)])
    log.high_watermark = log.log_end_offset
    log.compact()
    assert [r.value for r in read_all(log)] == [b"newer"]
    log.close()
    reopened = Log.open(directory, compact_config(), clock=clock)
    assert reopened.last_sequence(7) == (0, 0)  # still known after the rebuild
    reopened.close()


def test_compaction_survives_a_crash_at_the_swap(tmp_path: Path) -> None:
    clock = FakeClock()
    log = _committed_keyed_log(tmp_path / "live", clock)
    log.flush()
    before = tmp_path / "before"
    shutil.copytree(tmp_path / "live", before)  # the disk just before the swap
    log.compact()
    compacted = read_all(log)
    log.close()
    # Crash after the cleaned log was renamed .swap (the commit point): recovery finishes it.
    first = f"{0:020d}.log"
    shutil.copy(tmp_path / "live" / first, before / (first + SWAP_SUFFIX))
    shutil.copy(tmp_path / "live" / first, before / (first + ".cleaned"))
    (before / f"{0:020d}.index").write_bytes(b"\x01" * 8)  # the old index, now stale
    recovered = Log.open(before, compact_config(), clock=clock)
    first_segment = [r for r in read_all(recovered) if r.offset < recovered.segments[1].base_offset]
    assert first_segment == [r for r in compacted if r.offset < recovered.segments[1].base_offset]
    assert not [n for n in files(before) if n.endswith((SWAP_SUFFIX, ".cleaned"))]
    recovered.close()


def test_compaction_keeps_follower_replication_working(tmp_path: Path) -> None:
    clock = FakeClock()
    leader = _committed_keyed_log(tmp_path / "leader", clock)
    leader.compact()
    follower = Log.open(tmp_path / "follower", compact_config(), clock=clock)
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read(follower.log_end_offset, 300).records)
    assert read_all(follower) == read_all(leader)
    leader.close()
    follower.close()


def test_a_segment_compacted_to_nothing_keeps_an_empty_last_batch(tmp_path: Path) -> None:
    clock = FakeClock()
    directory = tmp_path / "t-0"
    log = Log.open(directory, compact_config(), clock=clock)
    append(log, [(b"k", None, clock.ms - 2 * HOUR)])  # an expired tombstone...
    append(log, [(b"j", None, clock.ms - 2 * HOUR)])  # ...and another, each alone in a batch
    log.roll()
    log.high_watermark = log.log_end_offset
    assert log.compact().batches_removed == 1
    # The consumer moves past the emptied segment: an empty batch still ends at offset 2.
    fetch = log.read(0, 1000)
    assert decode_batches(fetch.records) == [] and fetch.next_offset == 2
    assert log.segments[0].next_offset == log.segments[1].base_offset == 2
    append(log, [(b"k", b"new", clock.ms)])
    assert [r.offset for r in read_all(log)] == [2]
    log.close()
    reopened = Log.open(directory, compact_config(), clock=clock)  # no hole seen at recovery
    assert [r.offset for r in read_all(reopened)] == [2]
    reopened.close()


def test_clean_batch_keeps_offset_deltas_and_header_fields() -> None:
    from rafka.logstore import iter_batches, read_header, stamp_batch
    from rafka.logstore.cleaner import build_offset_map, clean_batch

    batch = stamp_batch(
        build_batch(
            [(b"a", b"1", T0, None), (b"b", b"1", T0 + 1, None), (b"a", b"2", T0 + 2, None),
             (b"c", b"1", T0 + 3, None)],
            compression="lz4", producer_id=3, producer_epoch=1, base_sequence=10,
        ),
        100,
        7,
    )
    later = stamp_batch(build_batch([(b"c", b"2", T0 + 9, None)]), 104, 7)
    offset_map = build_offset_map(iter_batches(batch + later), below_offset=105)
    assert offset_map == {b"a": 102, b"b": 101, b"c": 104}
    header = read_header(batch)
    outcome = clean_batch(memoryview(batch), header, offset_map, delete_horizon_ms=0)
    assert outcome.changed and outcome.records_removed == 2
    cleaned = read_header(outcome.data)
    assert [r.offset for r in decode_batches(outcome.data)] == [101, 102]  # a gap at 100
    assert (cleaned.base_offset, cleaned.leader_epoch, cleaned.last_offset_delta) == (100, 7, 3)
    assert (cleaned.producer_id, cleaned.producer_epoch, cleaned.base_sequence) == (3, 1, 10)
    assert cleaned.compression == header.compression and cleaned.record_count == 2
    assert cleaned.max_timestamp == T0 + 2
    untouched = clean_batch(memoryview(later), read_header(later), offset_map, delete_horizon_ms=0)
    assert not untouched.changed and bytes(untouched.data) == later
