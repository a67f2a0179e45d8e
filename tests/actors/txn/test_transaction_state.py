"""The transaction coordinator's state machine (`actors/txn/transaction_state.py`), pure:
epochs, fencing, the states a transaction goes through, and its record in
`__transaction_state`."""

from __future__ import annotations

import itertools

import pytest

from rafka.actors.errors import ErrorCode
from rafka.actors.txn import transaction_state as txn
from rafka.actors.txn.transaction_state import (
    TransactionMetadata,
    TxnState,
)
from rafka.common.sentinels import MAX_PRODUCER_EPOCH

ID = "payments-1"
TIMEOUT = 60_000


def producer_ids() -> itertools.count:
    return itertools.count(1000)


def started(ids: itertools.count | None = None) -> TransactionMetadata:
    ids = ids or producer_ids()
    transition = txn.init_producer_id(None, ID, TIMEOUT, 0, ids.__next__)
    assert transition.ok and transition.new is not None
    return transition.new


def ongoing(partitions=(("orders", 0), ("orders", 1)), now: int = 100) -> TransactionMetadata:
    first = started()
    transition = txn.add_partitions(first, first.producer_id, first.producer_epoch,
                                    partitions, now)
    assert transition.ok and transition.new is not None
    return transition.new


def test_a_new_id_gets_a_producer_id_at_epoch_0_and_each_init_bumps_the_epoch() -> None:
    ids = producer_ids()
    first = started(ids)
    assert (first.producer_id, first.producer_epoch, first.state) == (1000, 0, TxnState.EMPTY)
    again = txn.init_producer_id(first, ID, TIMEOUT, 5, ids.__next__)
    assert again.ok and again.new is not None
    assert (again.new.producer_id, again.new.producer_epoch) == (1000, 1)


def test_an_exhausted_epoch_takes_a_new_producer_id() -> None:
    worn = TransactionMetadata(ID, 999, MAX_PRODUCER_EPOCH - 1, TIMEOUT)
    transition = txn.init_producer_id(worn, ID, TIMEOUT, 0, producer_ids().__next__)
    assert transition.new is not None
    assert (transition.new.producer_id, transition.new.producer_epoch) == (1000, 0)


@pytest.mark.parametrize("timeout_ms", [0, -1, txn.MAX_TRANSACTION_TIMEOUT_MS + 1])
def test_a_timeout_outside_the_brokers_bounds_is_refused(timeout_ms: int) -> None:
    transition = txn.init_producer_id(None, ID, timeout_ms, 0, producer_ids().__next__)
    assert transition.error == ErrorCode.INVALID_TRANSACTION_TIMEOUT and transition.new is None


def test_init_while_a_transaction_is_open_aborts_it_with_a_bumped_epoch() -> None:
    current = ongoing()
    transition = txn.init_producer_id(current, ID, TIMEOUT, 200, producer_ids().__next__)
    assert transition.error == ErrorCode.CONCURRENT_TRANSACTIONS
    assert transition.new is not None
    assert transition.new.state is TxnState.PREPARE_ABORT
    assert transition.new.producer_epoch == current.producer_epoch + 1
    assert transition.new.partitions == current.partitions  # where the markers go


def test_the_old_epoch_is_fenced_and_a_stranger_is_refused() -> None:
    current = ongoing()
    fenced = txn.add_partitions(current, current.producer_id, current.producer_epoch - 1,
                                [("orders", 2)], 300)
    assert fenced.error == ErrorCode.PRODUCER_FENCED
    stranger = txn.end_transaction(current, current.producer_id + 1, current.producer_epoch,
                                   True, 300)
    assert stranger.error == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert txn.end_transaction(None, 1, 0, True, 300).error == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING)


def test_a_transaction_goes_from_ongoing_through_prepare_to_complete() -> None:
    current = ongoing()
    assert current.state is TxnState.ONGOING and current.started_ms == 100
    same = txn.add_partitions(current, current.producer_id, current.producer_epoch,
                              [("orders", 0)], 150)
    assert same.ok and same.new is None  # nothing to write
    ended = txn.end_transaction(current, current.producer_id, current.producer_epoch, True, 200)
    assert ended.ok and ended.new is not None and ended.new.state is TxnState.PREPARE_COMMIT
    # While the markers are written, the producer's next requests wait.
    assert txn.add_partitions(ended.new, current.producer_id, current.producer_epoch,
                              [("orders", 3)], 210).error == ErrorCode.CONCURRENT_TRANSACTIONS
    retry = txn.end_transaction(ended.new, current.producer_id, current.producer_epoch, True,
                                210)
    assert retry.error == ErrorCode.CONCURRENT_TRANSACTIONS
    done = txn.complete(ended.new, 300)
    assert (done.state, done.partitions, done.started_ms) == (
        TxnState.COMPLETE_COMMIT, frozenset(), -1)
    # A retried commit after it completed is answered as it was; an abort is not.
    assert txn.end_transaction(done, done.producer_id, done.producer_epoch, True, 310).ok
    assert txn.end_transaction(done, done.producer_id, done.producer_epoch, False,
                               310).error == ErrorCode.INVALID_TXN_STATE
    following = txn.add_partitions(done, done.producer_id, done.producer_epoch,
                                   [("orders", 3)], 400)
    assert following.new is not None and following.new.started_ms == 400


def test_a_leader_learns_whether_its_partition_is_in_the_ongoing_transaction() -> None:
    """KIP-890's verify-only AddPartitionsToTxn, as Kafka's coordinator answers it."""
    current = ongoing()
    pid, epoch = current.producer_id, current.producer_epoch
    assert txn.verify_partitions(current, pid, epoch, [("orders", 0), ("orders", 7)]) == {
        ("orders", 0): ErrorCode.NONE, ("orders", 7): ErrorCode.TRANSACTION_ABORTABLE}
    assert txn.verify_partitions(current, pid, epoch - 1, [("orders", 0)]) == (
        ErrorCode.PRODUCER_FENCED)
    assert txn.verify_partitions(current, pid + 1, epoch, [("orders", 0)]) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    assert txn.verify_partitions(None, pid, epoch, [("orders", 0)]) == (
        ErrorCode.INVALID_PRODUCER_ID_MAPPING)
    ending = txn.end_transaction(current, pid, epoch, True, 200).new
    assert ending is not None
    assert txn.verify_partitions(ending, pid, epoch, [("orders", 0)]) == (
        ErrorCode.CONCURRENT_TRANSACTIONS)
    # Once the transaction is over, none of its partitions is in a transaction any more.
    assert txn.verify_partitions(txn.complete(ending, 300), pid, epoch, [("orders", 0)]) == {
        ("orders", 0): ErrorCode.TRANSACTION_ABORTABLE}


def test_an_abandoned_transaction_expires_into_an_abort_that_fences_its_producer() -> None:
    current = ongoing(now=100)
    assert not current.expired(100 + TIMEOUT)
    assert current.expired(100 + TIMEOUT + 1)
    aborting = txn.expire(current, 100 + TIMEOUT + 1, producer_ids().__next__)
    assert aborting.state is TxnState.PREPARE_ABORT
    assert aborting.producer_epoch == current.producer_epoch + 1
    late = txn.end_transaction(aborting, current.producer_id, current.producer_epoch, True, 0)
    assert late.error == ErrorCode.PRODUCER_FENCED


def test_listing_filters_by_state_producer_and_duration_as_kafka_does() -> None:
    quiet = started(itertools.count(2000))  # no transaction yet: its start is -1, as Kafka's
    busy = ongoing(now=1_000)
    other = TransactionMetadata("other", 7, 0, TIMEOUT, TxnState.COMPLETE_ABORT)
    every = [quiet, busy, other]

    def chosen(states=(), producers=(), duration=-1, now=5_000):
        unknown, picked = txn.select_listed(every, states, producers, duration, now)
        return unknown, [t.producer_id for t in picked]

    ids = [quiet.producer_id, busy.producer_id, 7]
    assert chosen() == ([], ids)
    assert chosen(states=["Ongoing", "CompleteAbort"]) == ([], ids[1:])
    # A state Kafka knows that rafka never reaches matches nothing; an unknown one is named.
    assert chosen(states=["PrepareEpochFence"]) == ([], [])
    assert chosen(states=["Ongoing", "Sleeping"]) == (["Sleeping"], [busy.producer_id])
    assert chosen(producers=[7, 12345]) == ([], [7])
    # Running longer than the duration (started at 1,000, now 5,000): 3,999 ms yes, 4,000 no.
    assert chosen(duration=3_999) == ([], ids)
    assert chosen(duration=4_000) == ([], [quiet.producer_id, 7])
