"""The producer's batching: sizes, linger, in-flight limits, retries in order, sequence numbers."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.actors.clients.accumulator import (
    BATCH_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    PendingBatch,
    RecordAccumulator,
    SequenceTracker,
    batch_run_ends,
)
from rafka.logstore.batch import RecordsPayload

VALUE = b"v" * 84  # with a 0-byte key: 100 bytes per record, overhead included


def _acc(**kwargs: int | bool) -> RecordAccumulator:
    options: dict = {"batch_size": 1000, "linger_ms": 10, "max_in_flight": 5}
    options.update(kwargs)
    return RecordAccumulator(**options)


def _fill(acc: RecordAccumulator, count: int, partition: int = 0, now: int = 0) -> list:
    return [acc.append("t", partition, b"", VALUE, now, None, now) for _ in range(count)]


def _send(acc: RecordAccumulator, batches: list[PendingBatch]) -> list[PendingBatch]:
    for batch in batches:
        acc.on_sent(batch)
    return batches


def _added_bytes(key: bytes | None, value: bytes | None, headers: list | None) -> int:
    """What one record adds to an empty accumulator's batch and buffered bytes."""
    acc = _acc()
    result = acc.append("t", 0, key, value, 0, headers, 0)
    assert result.batch.size_bytes == BATCH_OVERHEAD_BYTES + acc.buffered_bytes
    return acc.buffered_bytes


def test_a_record_counts_its_key_value_headers_and_overhead() -> None:
    assert _added_bytes(None, None, None) == RECORD_OVERHEAD_BYTES
    assert _added_bytes(b"k", b"vv", None) == RECORD_OVERHEAD_BYTES + 3
    assert _added_bytes(b"k", b"vv", [("trace", b"123")]) > RECORD_OVERHEAD_BYTES + 3 + 8
    assert _added_bytes(b"", VALUE, []) == 100


def test_records_of_a_partition_share_a_batch_until_it_is_full() -> None:
    acc = _acc()
    results = _fill(acc, 20)
    # 61 bytes of header + 9 records of 100 bytes fit in 1000; the tenth starts a new batch.
    first = results[0].batch
    assert [r.batch is first for r in results[:9]] == [True] * 9
    assert results[9].batch is not first and results[9].new_batch_created
    assert first.closed and first.record_count == 9
    assert first.size_bytes == BATCH_OVERHEAD_BYTES + 900 <= acc.batch_size
    assert [r.new_batch_created for r in results[:2]] == [True, False]
    assert first.records[0] == (b"", VALUE, 0, None)


def _append_runs(acc: RecordAccumulator, values: list, keys: list | None, partition: int = 0):
    runs, start = [], 0
    while start < len(values):
        run = acc.append_run("t", partition, values, keys, start, 7, 0)
        runs.append(run)
        start += run.taken
    return runs


@settings(max_examples=200)
@given(
    batch_size=st.integers(min_value=1, max_value=3000),
    records=st.lists(
        st.tuples(st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=700)),
        min_size=1, max_size=60),
    keyed=st.booleans(),
)
def test_append_run_batches_exactly_as_appending_one_by_one(batch_size, records, keyed) -> None:
    one_by_one, bulk = _acc(batch_size=batch_size), _acc(batch_size=batch_size)
    if not keyed:
        records = [(None, value) for _, value in records]
    for key, value in records:
        one_by_one.append("t", 0, key, value, 7, None, 0)
    keys = [key for key, _ in records] if keyed else None
    runs = _append_runs(bulk, [value for _, value in records], keys)

    def shape(acc):
        return [(b.records, b.size_bytes, b.closed) for b in acc.queued_batches("t", 0)]

    assert shape(bulk) == shape(one_by_one)
    assert bulk.buffered_bytes == one_by_one.buffered_bytes
    # Each run says where its records went: together they cover the input, in order.
    assert sum(run.taken for run in runs) == len(records)
    placed = [run.batch.records[run.first_index + i][:2] for run in runs for i in range(run.taken)]
    assert placed == [(key if keyed else None, value) for key, value in records]


@settings(max_examples=80, deadline=None)
@given(
    batch_size=st.integers(min_value=1, max_value=3000),
    lengths=st.lists(st.integers(min_value=0, max_value=700), min_size=1, max_size=60),
)
def test_batch_run_ends_cut_where_appending_one_by_one_would(batch_size, lengths) -> None:
    acc = _acc(batch_size=batch_size)
    for length in lengths:
        acc.append("t", 0, None, b"v" * length, 7, None, 0)
    counts = [batch.record_count for batch in acc.queued_batches("t", 0)]
    ends = batch_run_ends(np.array(lengths) + RECORD_OVERHEAD_BYTES, batch_size)
    assert ends == list(np.cumsum(counts))


def test_an_encoded_payload_is_a_closed_batch_of_its_own_after_the_open_one() -> None:
    acc = _acc()
    _fill(acc, 3)
    payload = RecordsPayload(b"...", 40, 5, 5)
    batch = acc.append_payload("t", 0, payload, 4000, now_ms=0)
    later = acc.append("t", 0, b"", VALUE, 0, None, 0).batch
    queue = acc.queued_batches("t", 0)
    # The open batch closed, so nothing appended later can leave before the payload.
    assert queue == [queue[0], batch, later] and queue[0].closed and batch.closed
    assert batch.record_count == 40 and batch.size_bytes == BATCH_OVERHEAD_BYTES + 4000
    assert acc.buffered_bytes == 3 * 100 + 4000 + 100
    _send(acc, acc.drain_all(0))
    # Sequence numbers count the payload's records like any others.
    assert [b.base_sequence for b in queue] == [0, 3, 43]
    assert batch.last_sequence == 42


def test_append_run_closes_a_full_batch_so_the_next_run_opens_another() -> None:
    acc = _acc()
    first = acc.append_run("t", 0, [VALUE] * 25, None, 0, 0, 0)
    assert first.taken == 9 and first.first_index == 0 and first.batch.closed
    second = acc.append_run("t", 0, [VALUE] * 25, None, 9, 0, 0)
    assert second.batch is not first.batch and second.taken == 9
    last = acc.append_run("t", 0, [VALUE] * 25, None, 18, 0, 0)
    assert last.taken == 7 and not last.batch.closed  # room for two more: it lingers
    follow = acc.append_run("t", 0, [VALUE] * 3, None, 0, 0, 0)
    assert follow.batch is last.batch and follow.first_index == 7 and follow.taken == 2


def test_a_record_that_fills_the_batch_reports_it_full() -> None:
    acc = _acc(batch_size=BATCH_OVERHEAD_BYTES + 300)
    results = _fill(acc, 3)
    assert [r.batch_is_full for r in results] == [False, False, True]
    assert acc.ready(now_ms=0) == [results[0].batch]  # full: no need to wait for linger


def test_a_record_bigger_than_batch_size_gets_a_batch_of_its_own() -> None:
    acc = _acc(batch_size=500)
    small = acc.append("t", 0, b"k", b"x", 0, None, 0)
    big = acc.append("t", 0, b"k", b"x" * 2000, 0, None, 0)
    after = acc.append("t", 0, b"k", b"x", 0, None, 0)
    assert big.batch is not small.batch and big.batch is not after.batch
    assert big.batch.record_count == 1 and big.batch_is_full
    assert small.batch.closed and not after.batch.closed


def test_partitions_batch_separately() -> None:
    acc = _acc()
    a = acc.append("t", 0, None, b"a", 0, None, 0)
    b = acc.append("t", 1, None, b"b", 0, None, 0)
    c = acc.append("u", 0, None, b"c", 0, None, 0)
    assert len({id(a.batch), id(b.batch), id(c.batch)}) == 3
    assert (b.batch.topic, b.batch.partition) == ("t", 1)


def test_an_open_batch_waits_for_linger_ms_after_its_first_record() -> None:
    acc = _acc(linger_ms=10)
    acc.append("t", 0, None, b"a", 0, None, now_ms=100)
    acc.append("t", 0, None, b"b", 0, None, now_ms=108)  # a later record does not restart it
    assert acc.ready(now_ms=109) == []
    assert acc.next_ready_in_ms(now_ms=104) == 6
    assert acc.next_ready_in_ms(now_ms=109) == 1
    [batch] = acc.ready(now_ms=110)
    assert batch.record_count == 2
    assert acc.next_ready_in_ms(now_ms=110) == 0


def test_linger_zero_sends_at_once() -> None:
    acc = _acc(linger_ms=0)
    acc.append("t", 0, None, b"a", 0, None, now_ms=5)
    assert len(acc.ready(now_ms=5)) == 1


def test_next_ready_in_ms_is_none_when_waiting_cannot_help() -> None:
    acc = _acc(max_in_flight=1)
    assert acc.next_ready_in_ms(0) is None  # nothing queued
    _fill(acc, 20)  # two full batches, one open
    assert acc.next_ready_in_ms(0) == 0
    acc.on_sent(acc.ready(0)[0])
    assert acc.next_ready_in_ms(0) is None  # the partition waits for its one in-flight batch


def test_drain_all_ignores_linger_but_not_the_in_flight_limit() -> None:
    acc = _acc(linger_ms=1_000_000, max_in_flight=2)
    _fill(acc, 30)  # three full batches and an open one with 3 records
    _fill(acc, 1, partition=1)
    assert [(b.partition, b.record_count) for b in acc.ready(0)] == [(0, 9), (0, 9)]
    drained = acc.drain_all(0)
    assert [(b.partition, b.record_count) for b in drained] == [(0, 9), (0, 9), (1, 1)]


def test_ready_is_a_question_and_on_sent_takes_the_batch() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 3)
    assert acc.ready(0) == acc.ready(0)
    [batch] = acc.ready(0)
    acc.on_sent(batch)
    assert acc.ready(0) == [] and acc.in_flight_count("t", 0) == 1
    assert batch.closed and batch.in_flight and batch.attempts == 1
    # A record appended now opens a new batch: a sent batch never changes.
    result = acc.append("t", 0, None, b"late", 0, None, 0)
    assert result.batch is not batch and batch.record_count == 3


def test_never_more_than_max_in_flight_per_partition() -> None:
    acc = _acc(max_in_flight=5, linger_ms=0)
    _fill(acc, 9 * 7)  # seven full batches
    _fill(acc, 1, partition=1)
    ready = acc.ready(0)
    assert sum(b.partition == 0 for b in ready) == 5
    _send(acc, ready)
    assert acc.ready(0) == []
    with pytest.raises(ValueError, match=r"next in line|in flight"):
        acc.on_sent(acc.queued_batches("t", 0)[0])
    acc.on_completed(ready[0])
    assert len(acc.ready(0)) == 1
    assert acc.in_flight_count("t", 0) == 4


def test_batches_must_be_sent_in_queue_order() -> None:
    acc = _acc()
    _fill(acc, 20)
    first, second = acc.ready(0)
    with pytest.raises(ValueError, match="not next in line"):
        acc.on_sent(second)
    acc.on_sent(first)
    acc.on_sent(second)


def test_sequences_number_records_per_partition_in_send_order() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 20)  # batches of 9, 9, 2
    _fill(acc, 4, partition=1)
    sent = _send(acc, acc.ready(0))
    for batch in sent:
        acc.on_completed(batch)
    sent += _send(acc, acc.ready(0))  # the open batch of 2 went once the full ones came back
    seqs = [(b.partition, b.base_sequence, b.last_sequence) for b in sent]
    assert seqs == [(0, 0, 8), (0, 9, 17), (1, 0, 3), (0, 18, 19)]
    assert acc.sequences.next_sequence("t", 0) == 20


def test_an_open_batch_waits_for_its_partitions_requests_in_flight_a_full_one_does_not() -> None:
    """A partition in flight: at linger.ms 0 a batch that is not full waits for the answer to
    its partition's last request, gathering the records that come meanwhile; full batches go
    up to max.in.flight; another partition's batch is not held; a flush holds nothing."""
    acc = _acc(linger_ms=0)
    _fill(acc, 1)
    [first] = _send(acc, acc.ready(0))
    _fill(acc, 3, now=1)
    _fill(acc, 1, partition=1, now=1)
    assert [b.partition for b in acc.ready(1)] == [1]
    assert acc.next_ready_in_ms(1) == 0  # partition 1's batch
    _send(acc, acc.ready(1))
    assert acc.next_ready_in_ms(1) is None  # woken by an answer, not by the clock
    _fill(acc, 7, now=2)  # partition 0's open batch fills up (9 records) and goes
    [full] = acc.ready(2)
    assert full.record_count == 9 and full.closed
    _send(acc, [full])
    _fill(acc, 2, now=3)
    assert acc.ready(3) == []
    assert [b.record_count for b in acc.drain_all(3)] == [3]  # flushing
    acc.on_completed(first)
    assert acc.ready(3) == []  # the full batch is still out
    acc.on_completed(full)
    [gathered] = acc.ready(3)
    assert gathered.record_count == 3


def test_without_idempotence_batches_carry_no_sequence() -> None:
    acc = _acc(linger_ms=0, enable_idempotence=False)
    _fill(acc, 3)
    [batch] = _send(acc, acc.ready(0))
    assert batch.base_sequence is None and batch.last_sequence is None


def test_a_retried_batch_goes_back_to_the_front_and_keeps_its_sequence() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9)
    [failed] = _send(acc, acc.ready(0))
    _fill(acc, 2, now=5)  # a younger batch queues meanwhile
    acc.reenqueue(failed, now_ms=10, backoff_ms=100)
    assert acc.in_flight_count("t", 0) == 0
    queue = acc.queued_batches("t", 0)
    assert queue[0] is failed and queue[1].record_count == 2
    assert acc.ready(now_ms=50) == []  # backing off; the younger batch may not overtake it
    assert acc.next_ready_in_ms(now_ms=50) == 60
    [retry] = _send(acc, acc.ready(now_ms=110))
    assert retry is failed
    assert (retry.base_sequence, retry.attempts) == (0, 2)
    assert acc.ready(now_ms=110) == []  # the younger, open batch waits for the retry's answer
    acc.on_completed(retry)
    [younger] = _send(acc, acc.ready(now_ms=110))
    assert younger.base_sequence == 9


def test_failed_batches_line_up_in_their_original_order_whatever_the_failure_order() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9 * 4 + 1)  # four full batches, and an open one that waits for them
    sent = _send(acc, acc.ready(0))
    assert len(sent) == 4
    for batch in (sent[2], sent[0], sent[3], sent[1]):  # answers come back in any order
        acc.reenqueue(batch, now_ms=0, backoff_ms=0)
    assert acc.queued_batches("t", 0)[:4] == sent


def test_a_retry_waits_until_nothing_of_its_partition_is_in_flight() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9 * 3 + 1)  # three full batches, and an open one that waits for them
    first, second, third = _send(acc, acc.ready(0))
    acc.reenqueue(second, now_ms=0, backoff_ms=0)
    assert acc.ready(0) == []  # first and third are still out
    acc.on_completed(first)
    assert acc.ready(0) == []
    acc.reenqueue(third, now_ms=0, backoff_ms=0)  # e.g. OutOfOrderSequence behind second
    assert acc.ready(0) == [second]  # one retry at a time, oldest first
    acc.on_sent(second)
    acc.on_completed(second)
    assert acc.ready(0) == [third]


def test_on_completed_is_harmless_for_a_batch_not_in_flight() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9 * 2 + 1)  # two full batches, and an open one that waits for them
    first, second = _send(acc, acc.ready(0))
    acc.reenqueue(first, now_ms=0, backoff_ms=0)
    acc.on_completed(first)  # the error path also "completes" it: no double release
    acc.on_completed(second)
    acc.on_completed(second)
    assert acc.in_flight_count("t", 0) == 0
    assert acc.queued_batches("t", 0)[0] is first


def test_reset_sequences_renumbers_queued_batches_from_zero() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9 * 2 + 1)  # two full batches, and an open one that waits for them
    first, second = _send(acc, acc.ready(0))
    acc.reenqueue(second, now_ms=0, backoff_ms=0)
    with pytest.raises(ValueError, match="in flight"):
        acc.reset_sequences("t", 0)
    acc.on_completed(first)
    acc.reset_sequences("t", 0)  # the producer bumped its epoch
    assert second.base_sequence is None
    [again] = _send(acc, acc.ready(0))
    assert again is second and again.base_sequence == 0


def test_a_leader_that_lost_the_producers_state_gets_a_new_epoch_numbered_from_zero() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9 * 2)
    for _ in range(2):  # sequences 0 and 9, acknowledged (the open one goes second)
        for batch in _send(acc, acc.ready(0)):
            acc.on_completed(batch)
    _fill(acc, 9 * 2 + 1, now=1)
    lost, behind = _send(acc, acc.ready(1))
    assert (lost.base_sequence, behind.base_sequence) == (18, 27)
    # The topic was deleted and created again: its new leader expects sequence 0 of us.
    assert acc.lost_producer_state(lost, expected_sequence=0)
    assert not acc.lost_producer_state(behind, expected_sequence=0)  # `lost` comes first
    acc.reenqueue(lost, now_ms=2, backoff_ms=0)
    with pytest.raises(ValueError, match="in flight"):
        acc.bump_epoch("t", 0)  # `behind` may still be answered under the old epoch
    acc.reenqueue(behind, now_ms=2, backoff_ms=0)
    assert acc.bump_epoch("t", 0) == 1
    assert (acc.producer_epoch("t", 0), acc.producer_epoch("t", 1)) == (1, 0)
    again = _send(acc, acc.ready(3))
    assert again == [lost]  # one retry at a time, oldest first
    acc.on_completed(lost)
    [then] = _send(acc, acc.ready(3))
    assert then is behind
    assert (lost.base_sequence, behind.base_sequence) == (0, 9)


def test_only_a_gap_before_the_oldest_pending_batch_calls_for_a_new_epoch() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9)
    [batch] = _send(acc, acc.ready(0))
    assert batch.base_sequence == 0
    # The leader has appended past it (the batch may be written already): no new epoch.
    assert not acc.lost_producer_state(batch, expected_sequence=40)
    assert not acc.lost_producer_state(batch, expected_sequence=None)
    # Across the wrap: a leader expecting 2**31 - 5 lacks what comes before sequence 4.
    batch.base_sequence = 4
    assert acc.lost_producer_state(batch, expected_sequence=2**31 - 5)


def test_producer_epochs_run_out_at_kafkas_int16() -> None:
    acc = _acc(linger_ms=0)
    for epoch in range(1, 2**15):
        assert acc.bump_epoch("t", 0) == epoch
    with pytest.raises(ValueError, match="new one"):
        acc.bump_epoch("t", 0)


def test_expire_takes_out_only_old_queued_batches_in_order() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9, now=0)
    [in_flight] = _send(acc, acc.ready(0))
    _fill(acc, 9, now=10)
    _fill(acc, 9, now=50)
    expired = acc.expire(now_ms=120, delivery_timeout_ms=100)
    assert [b.created_ms for b in expired] == [10]
    assert in_flight.in_flight
    assert [b.created_ms for b in acc.queued_batches("t", 0)] == [50]


def test_abort_all_empties_the_queues() -> None:
    acc = _acc()
    _fill(acc, 12)
    _fill(acc, 1, partition=2)
    aborted = acc.abort_all()
    assert sum(b.record_count for b in aborted) == 13
    assert not acc.has_pending() and acc.buffered_bytes == 0


def test_has_pending_and_buffered_bytes_follow_the_batches() -> None:
    acc = _acc(linger_ms=0)
    assert not acc.has_pending()
    _fill(acc, 3)
    assert acc.has_pending() and acc.buffered_bytes == 300
    [batch] = _send(acc, acc.ready(0))
    assert acc.has_pending() and acc.buffered_bytes == 0  # in flight still counts as pending
    acc.reenqueue(batch, now_ms=0, backoff_ms=0)
    assert acc.buffered_bytes == 300
    acc.on_sent(batch)
    acc.on_completed(batch)
    assert not acc.has_pending()


@pytest.mark.parametrize("options", [{"batch_size": 0}, {"linger_ms": -1}, {"max_in_flight": 0}])
def test_nonsense_settings_are_refused(options: dict) -> None:
    with pytest.raises(ValueError):
        RecordAccumulator(**options)


def test_sequence_numbers_wrap_like_kafkas() -> None:
    tracker = SequenceTracker()
    tracker._next[("t", 0)] = 2**31 - 3  # near the end of the int32 space
    assert tracker.assign("t", 0, 5) == 2**31 - 3
    assert tracker.next_sequence("t", 0) == 2  # -3 + 5 wraps past 2**31 - 1 to 0
    tracker.reset("t", 0)
    assert tracker.next_sequence("t", 0) == 0


def test_a_batch_refused_before_its_append_hands_its_sequences_to_the_later_ones() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 9 * 3 + 1)  # three full batches, and an open one that waits for them
    first, refused, third = _send(acc, acc.ready(0))
    _fill(acc, 2)  # queued, not yet numbered
    assert [b.base_sequence for b in (first, refused, third)] == [0, 9, 18]
    acc.on_completed(refused)  # the leader said CORRUPT_MESSAGE: nothing of it was appended
    acc.release_sequences(refused)
    assert (first.base_sequence, third.base_sequence) == (0, 9)
    assert acc.sequences.next_sequence("t", 0) == 18
    # The third, still in flight with its old number, comes back out of order and is resent
    # with the new one; the queued batch follows it without a gap.
    acc.on_completed(first)
    acc.reenqueue(third, now_ms=0, backoff_ms=0)
    [again] = _send(acc, acc.ready(0))
    assert (again, again.base_sequence) == (third, 9)
    acc.on_completed(again)
    [queued] = _send(acc, acc.ready(0))
    assert queued.base_sequence == 18


def test_the_tracker_moves_one_partitions_epoch_or_all_of_them() -> None:
    tracker = SequenceTracker()
    tracker.assign("t", 0, 3)
    tracker.assign("t", 1, 4)
    epoch = tracker.next_epoch("t", 0)
    assert (epoch, tracker.epoch("t", 0)) == (1, 0)  # asking does not bump
    tracker.reset("t", 0)
    tracker.set_epoch("t", 0, epoch)
    assert (tracker.epoch("t", 0), tracker.next_sequence("t", 0)) == (1, 0)
    assert (tracker.epoch("t", 1), tracker.next_sequence("t", 1)) == (0, 4)
    tracker.start_epoch(7)  # a new producer id and epoch: every partition from 0
    assert [tracker.epoch("t", p) for p in (0, 1)] == [7, 7]
    assert [tracker.next_sequence("t", p) for p in (0, 1)] == [0, 0]


def test_released_sequences_wrap_back_below_zero() -> None:
    tracker = SequenceTracker()
    tracker.assign("t", 0, 2**31 - 2)
    assert tracker.assign("t", 0, 5) == 2**31 - 2
    tracker.release("t", 0, 5)
    assert tracker.next_sequence("t", 0) == 2**31 - 2


# -- the whole protocol against a leader that dedupes and enforces order ----------------------


class _Leader:
    """Appends a batch only when its sequence is the next expected; drops exact duplicates;
    refuses outright, before looking at its sequence, a batch holding a poisoned record (as a
    leader refuses a malformed batch)."""

    def __init__(self, poisoned: set[bytes]) -> None:
        self.log: dict[int, list[bytes]] = defaultdict(list)
        self.next_sequence: dict[int, int] = defaultdict(int)
        self.poisoned = poisoned

    def produce(self, batch: PendingBatch) -> str:
        if any(value in self.poisoned for _, value, _, _ in batch.records):
            return "refused"
        expected = self.next_sequence[batch.partition]
        if batch.base_sequence == expected:
            self.log[batch.partition].extend(value for _, value, _, _ in batch.records)
            self.next_sequence[batch.partition] += batch.record_count
            return "ok"
        if batch.base_sequence is not None and batch.base_sequence < expected:
            return "duplicate"  # already appended: acknowledge without appending again
        return "out_of_order"


@settings(max_examples=60)
@given(st.data())
def test_every_record_lands_once_and_in_order_despite_failures_and_reordering(
    data: st.DataObject,
) -> None:
    acc = RecordAccumulator(
        batch_size=data.draw(st.integers(min_value=100, max_value=600), label="batch_size"),
        linger_ms=5,
        max_in_flight=data.draw(st.integers(min_value=1, max_value=5), label="max_in_flight"),
    )
    poisoned: set[bytes] = set()
    refused: set[bytes] = set()
    leader = _Leader(poisoned)
    appended: dict[int, list[bytes]] = defaultdict(list)
    in_flight: list[PendingBatch] = []
    now = 0
    counter = 0

    def answer(batch: PendingBatch, fate: str) -> None:
        in_flight.remove(batch)
        if fate == "lost_request":  # never reached the leader
            acc.reenqueue(batch, now, 3)
            return
        outcome = leader.produce(batch)
        if outcome == "out_of_order" or fate == "lost_answer":  # appended, but we never heard
            acc.reenqueue(batch, now, 3)
        elif outcome == "refused":  # what the producer does with CORRUPT_MESSAGE and the like
            acc.on_completed(batch)
            acc.release_sequences(batch)
            refused.update(value for _, value, _, _ in batch.records)
        else:
            acc.on_completed(batch)

    steps = data.draw(st.integers(min_value=1, max_value=120), label="steps")
    for _ in range(steps):
        action = data.draw(st.sampled_from(["append", "append", "tick", "send", "answer"]))
        if action == "append":
            partition = data.draw(st.integers(min_value=0, max_value=2))
            value = f"{counter}:".encode() * data.draw(st.integers(min_value=1, max_value=15))
            counter += 1
            if data.draw(st.integers(min_value=0, max_value=9), label="poison") == 0:
                poisoned.add(value)
            acc.append("t", partition, None, value, now, None, now)
            appended[partition].append(value)
        elif action == "tick":
            now += data.draw(st.integers(min_value=0, max_value=10))
        elif action == "send":
            for batch in acc.ready(now):
                acc.on_sent(batch)
                in_flight.append(batch)
        elif in_flight:
            batch = data.draw(st.sampled_from(in_flight))  # answers arrive in any order
            answer(batch, data.draw(st.sampled_from(["ok", "ok", "lost_request", "lost_answer"])))
        assert all(acc.in_flight_count("t", p) <= acc.max_in_flight for p in range(3))

    # Flush: everything must get through once the failures stop.
    for _ in range(10_000):
        if not acc.has_pending():
            break
        for batch in acc.drain_all(now):
            acc.on_sent(batch)
            in_flight.append(batch)
        if in_flight:
            answer(in_flight[-1], "ok")  # newest first: the worst order for sequencing
        now += 3
    assert not acc.has_pending()
    assert refused >= poisoned
    assert {p: leader.log[p] for p in appended} == {
        p: [value for value in values if value not in refused] for p, values in appended.items()}


def test_drain_all_without_a_clock_sends_retries_at_once() -> None:
    acc = _acc(linger_ms=0)
    _fill(acc, 2)
    [batch] = _send(acc, acc.ready(0))
    acc.reenqueue(batch, now_ms=0, backoff_ms=10_000)
    assert acc.drain_all(now_ms=0) == []
    assert acc.drain_all() == [batch]
