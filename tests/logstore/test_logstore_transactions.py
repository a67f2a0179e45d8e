"""Transactions in the log: markers, the last stable offset, the aborted-transactions index
(``.txnindex``), and what recovery, truncation, replication and compaction make of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from rafka.logstore import Log, build_batch
from rafka.logstore.batch import decode_records, iter_batches, validate_batch
from rafka.logstore.errors import CorruptRecordError, InvalidRecordError
from rafka.logstore.producer_state import ProducerStateManager
from rafka.logstore.segment import TXN_INDEX_SUFFIX
from rafka.logstore.transactions import (
    AbortedTransaction,
    ControlType,
    build_marker_batch,
    collect_aborted,
    committed_batches,
    parse_marker,
    read_marker,
)
from tests.support.logstore import T0, FakeClock, small_config

PRODUCER = 7001
OTHER = 7002


def txn_batch(producer_id: int, *values: bytes, key: bytes | None = None) -> bytes:
    return build_batch(
        [(key, value, T0, None) for value in values],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=0,
        transactional=True,
    )


def plain_batch(*values: bytes, key: bytes | None = None) -> bytes:
    return build_batch([(key, value, T0, None) for value in values])


def marker(producer_id: int, control_type: ControlType, epoch: int = 0) -> bytes:
    return build_marker_batch(
        producer_id, epoch, control_type, coordinator_epoch=3, timestamp_ms=T0
    )


def committed_values(log: Log) -> list[bytes | None]:
    """What a read_committed consumer reads from the start to the last stable offset."""
    stable = log.last_stable_offset
    fetch = log.read(log.log_start_offset, 1 << 20, max_offset=stable)
    aborted = log.aborted_transactions(log.log_start_offset, stable)
    values = []
    for header, view in committed_batches(iter_batches(fetch.records), aborted):
        values += [r.value for r in decode_records(view) if r.offset < stable]
        assert header.last_offset < stable
    return values


def open_log(path: Path, **config: object) -> Log:
    return Log.open(path, small_config(**config), clock=FakeClock())


# ------------------------------------------------------------------------------ markers


def test_a_marker_carries_its_type_and_the_coordinators_epoch_in_kafkas_layout() -> None:
    batch = marker(PRODUCER, ControlType.COMMIT)
    header, view = next(iter_batches(batch))
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.record_count) == (PRODUCER, 1)
    found = read_marker(view, header)
    assert found.committed and found.coordinator_epoch == 3
    # Kafka's ControlRecordType: version 0, ABORT 0 / COMMIT 1; value: version, epoch.
    assert parse_marker(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x05") == (ControlType.ABORT, 5)


@pytest.mark.parametrize(
    ("key", "value"),
    [(None, b"\x00" * 6), (b"\x00", b"\x00" * 6), (b"\x00\x00\x00\x09", b"\x00" * 6),
     (b"\x00\x00\x00\x01", b"\x00")],
)
def test_a_control_record_that_is_no_marker_is_refused(key: bytes | None, value: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        parse_marker(key, value)


def test_a_producer_may_not_send_a_marker() -> None:
    with pytest.raises(InvalidRecordError, match="coordinator"):
        validate_batch(marker(PRODUCER, ControlType.COMMIT), 1 << 20)


# ---------------------------------------------------------------------- producer state


def test_producer_state_tracks_each_open_transaction_from_its_first_batch() -> None:
    log_headers = iter_batches(
        txn_batch(PRODUCER, b"a", b"b") + txn_batch(OTHER, b"c") + txn_batch(PRODUCER, b"d")
    )
    producers = ProducerStateManager()
    offset = 0
    for header, _ in log_headers:
        header = header._replace(base_offset=offset)
        offset = header.next_offset
        assert producers.update(header) is None
    assert producers.ongoing_transactions == {PRODUCER: 0, OTHER: 2}
    assert producers.first_unstable_offset(high_watermark=offset) == 0

    header, view = next(iter_batches(marker(PRODUCER, ControlType.ABORT)))
    completed = producers.update(header._replace(base_offset=offset), view)
    assert completed == (PRODUCER, 0, offset, True)
    # OTHER is still open: a fetch must look past this entry for aborted transactions.
    assert producers.aborted_entry(completed) == AbortedTransaction(PRODUCER, 0, offset, 2)
    # The marker is not below the high watermark yet: still unstable from 0.
    assert producers.first_unstable_offset(high_watermark=offset) == 0
    assert producers.first_unstable_offset(high_watermark=offset + 1) == 2


def test_a_transaction_without_data_here_completes_at_its_marker() -> None:
    producers = ProducerStateManager()
    header, view = next(iter_batches(marker(PRODUCER, ControlType.COMMIT)))
    completed = producers.update(header._replace(base_offset=40), view)
    assert completed == (PRODUCER, 40, 40, False)


def test_a_producer_with_an_open_transaction_is_not_evicted_by_retention() -> None:
    producers = ProducerStateManager()
    header, _ = next(iter_batches(txn_batch(PRODUCER, b"a")))
    producers.update(header)
    assert producers.evict_below(100) == 0
    assert producers.ongoing_transactions == {PRODUCER: 0}


# ---------------------------------------------------------------------- the log's LSO


def test_the_last_stable_offset_waits_for_the_marker_to_be_replicated(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(plain_batch(b"before"), 0)
    log.append_as_leader(txn_batch(PRODUCER, b"t1", b"t2"), 0)
    log.append_as_leader(plain_batch(b"during"), 0)
    log.high_watermark = log.log_end_offset
    assert (log.high_watermark, log.last_stable_offset) == (4, 1)
    assert log.read(0, 1 << 20).last_stable_offset == 1
    assert committed_values(log) == [b"before"]

    log.append_as_leader(marker(PRODUCER, ControlType.COMMIT), 0)
    assert log.last_stable_offset == 1  # the marker (offset 4) is not below the watermark
    log.high_watermark = 5
    assert log.last_stable_offset == 5
    assert committed_values(log) == [b"before", b"t1", b"t2", b"during"]
    assert log.aborted_transactions(0, 5) == []


def test_an_aborted_transaction_is_indexed_and_dropped_by_read_committed(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(PRODUCER, b"gone-1"), 0)
    log.append_as_leader(txn_batch(OTHER, b"kept-1"), 0)
    log.append_as_leader(txn_batch(PRODUCER, b"gone-2"), 0)
    log.append_as_leader(marker(PRODUCER, ControlType.ABORT), 0)
    log.append_as_leader(plain_batch(b"plain"), 0)
    log.append_as_leader(marker(OTHER, ControlType.COMMIT), 0)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 6
    assert log.aborted_transactions(0, 6) == [AbortedTransaction(PRODUCER, 0, 3, 1)]
    assert log.aborted_transactions(4, 6) == []  # past the marker
    assert committed_values(log) == [b"kept-1", b"plain"]
    txn_index = tmp_path / f"{0:020d}{TXN_INDEX_SUFFIX}"
    assert txn_index.stat().st_size == 34  # Kafka's entry: version, pid, first, last, LSO


def test_without_transactions_no_txnindex_is_written(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(plain_batch(b"a"), 0)
    log.roll()
    log.append_as_leader(plain_batch(b"b"), 0)
    log.close()
    Log.open(tmp_path, small_config(), clock=FakeClock()).close()
    assert not list(tmp_path.glob(f"*{TXN_INDEX_SUFFIX}"))


def _aborted_across_segments(path: Path) -> Log:
    """PRODUCER's transaction starts in the first segment; its abort marker is two segments on."""
    log = open_log(path)
    log.append_as_leader(txn_batch(PRODUCER, b"gone-1"), 0)
    log.roll()
    log.append_as_leader(plain_batch(b"between"), 0)
    log.roll()
    log.append_as_leader(marker(PRODUCER, ControlType.ABORT), 0)
    log.append_as_leader(plain_batch(b"after"), 0)
    log.high_watermark = log.log_end_offset
    return log


def test_a_fetch_finds_the_aborted_transaction_whose_marker_is_in_a_later_segment(
    tmp_path: Path,
) -> None:
    log = _aborted_across_segments(tmp_path)
    assert [s.base_offset for s in log.segments] == [0, 1, 2]
    expected = [AbortedTransaction(PRODUCER, 0, 2, 3)]
    assert log.aborted_transactions(0, 1) == expected
    # It spans [0, 2]: a fetch from inside it is told of it too, one from past it is not.
    assert log.aborted_transactions(1, 2) == expected
    assert log.aborted_transactions(3, 4) == []
    assert committed_values(log) == [b"between", b"after"]


def test_reopening_rebuilds_open_transactions_and_the_txnindex(tmp_path: Path) -> None:
    log = _aborted_across_segments(tmp_path)
    log.append_as_leader(txn_batch(OTHER, b"open"), 0)
    log.high_watermark = log.log_end_offset
    log.checkpoint_high_watermark()
    lso, aborted = log.last_stable_offset, log.aborted_transactions(0, 4)
    log.close()
    assert lso == 4

    txn_index = tmp_path / f"{2:020d}{TXN_INDEX_SUFFIX}"
    for damage in (lambda: txn_index.unlink(), lambda: txn_index.write_bytes(b"garbage")):
        damage()
        reopened = open_log(tmp_path)
        assert reopened.last_stable_offset == lso
        assert reopened.aborted_transactions(0, 4) == aborted
        assert reopened.producer_state(OTHER).current_txn_first_offset == 4
        # The coordinator epoch of PRODUCER's abort marker, for fencing late markers.
        assert reopened.producer_state(PRODUCER).coordinator_epoch == 3
        reopened.close()
        assert txn_index.stat().st_size == 34


def test_truncating_below_a_marker_reopens_its_transaction(tmp_path: Path) -> None:
    log = _aborted_across_segments(tmp_path)
    assert log.truncate_to(2)  # the abort marker goes
    assert log.aborted_transactions(0, 2) == []
    assert not (tmp_path / f"{2:020d}{TXN_INDEX_SUFFIX}").exists()
    assert log.producer_state(PRODUCER).current_txn_first_offset == 0
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 0
    # The new leader's decision, replicated: a commit this time.
    log.append_as_leader(marker(PRODUCER, ControlType.COMMIT, epoch=0), 1)
    log.high_watermark = log.log_end_offset
    assert committed_values(log) == [b"gone-1", b"between"]


def test_truncation_within_the_markers_segment_keeps_earlier_entries(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(PRODUCER, b"a"), 0)
    log.append_as_leader(marker(PRODUCER, ControlType.ABORT), 0)
    log.append_as_leader(txn_batch(OTHER, b"b"), 0)
    log.append_as_leader(marker(OTHER, ControlType.ABORT), 0)
    assert len(log.aborted_transactions(0, 4)) == 2
    log.truncate_to(3)
    assert log.aborted_transactions(0, 4) == [AbortedTransaction(PRODUCER, 0, 1, 2)]
    assert log.producer_state(OTHER).current_txn_first_offset == 2


def test_a_follower_derives_the_same_transactions_from_what_it_fetches(tmp_path: Path) -> None:
    leader = _aborted_across_segments(tmp_path / "leader")
    leader.append_as_leader(txn_batch(OTHER, b"open"), 0)
    follower = open_log(tmp_path / "follower")
    offset = 0
    while offset < leader.log_end_offset:
        fetch = leader.read(offset, 1 << 20)
        follower.append_as_follower(fetch.records)
        offset = fetch.next_offset
    follower.high_watermark = leader.high_watermark = leader.log_end_offset
    assert follower.aborted_transactions(0, 5) == leader.aborted_transactions(0, 5)
    assert follower.last_stable_offset == leader.last_stable_offset == 4


def test_collect_aborted_stops_once_every_transaction_below_the_bound_was_decided() -> None:
    first = [AbortedTransaction(1, 0, 10, 11)]
    # Its last stable offset (11) is past the bound (5): no later entry can concern [0, 5).
    later = [AbortedTransaction(2, 3, 20, 21)]
    assert collect_aborted([first, later], 0, 5) == first
    assert collect_aborted([first, later], 0, 11) == first + later


# ----------------------------------------------------------------------------- compaction


def test_compaction_keeps_the_committed_value_over_a_newer_aborted_one(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact", segment_bytes=800)
    log.append_as_leader(build_batch([(b"k", b"committed", T0, None)]), 0)
    log.append_as_leader(txn_batch(PRODUCER, b"aborted", key=b"k"), 0)
    log.append_as_leader(marker(PRODUCER, ControlType.ABORT), 0)
    log.roll()
    log.append_as_leader(build_batch([(b"other", b"x", T0, None)]), 0)
    log.high_watermark = log.log_end_offset
    result = log.compact(now_ms=T0 + 10**9)
    assert result.records_removed == 1
    assert committed_values(log) == [b"committed", b"x"]
    # The marker stays, and so does the transaction's index entry.
    end = log.log_end_offset
    assert log.aborted_transactions(0, end) == [AbortedTransaction(PRODUCER, 1, 2, 3)]
    log.close()
    assert committed_values(open_log(tmp_path, cleanup_policy="compact")) == [b"committed", b"x"]


def test_compaction_leaves_an_undecided_transaction_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path, cleanup_policy="compact", segment_bytes=800)
    log.append_as_leader(txn_batch(PRODUCER, b"undecided", key=b"k"), 0)
    log.roll()
    log.append_as_leader(build_batch([(b"k", b"newer", T0, None)]), 0)
    log.roll()
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 0
    assert log.compact(now_ms=T0 + 10**9).segments_cleaned == 0


def test_records_deleted_under_an_open_transaction_move_the_stable_offset_with_them(
    tmp_path: Path,
) -> None:
    log = open_log(tmp_path)
    log.append_as_leader(txn_batch(PRODUCER, b"open-1"), 0)
    log.append_as_leader(plain_batch(b"a", b"b"), 0)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == 0
    log.delete_records_before(2)
    # Nothing below the log start can be read: the stable offset is no lower.
    assert log.last_stable_offset == 2
    assert log.producer_state(PRODUCER).current_txn_first_offset == 0  # still open
    log.append_as_leader(marker(PRODUCER, ControlType.ABORT), 0)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.log_end_offset == 4
