"""A producer's `RecordFuture` on its own: what `result` and `exception` answer before and after
its batch's outcome is known. No Ray: the outcome is completed by hand, as the sender would."""

from __future__ import annotations

import pytest

from rafka.actors.clients.producer import RecordFuture
from rafka.actors.clients.sender import BatchOutcome
from rafka.actors.errors import NotEnoughReplicasError, RequestTimedOutError


def bound_future(index: int = 2) -> tuple[RecordFuture, BatchOutcome]:
    outcome = BatchOutcome()
    future = RecordFuture("orders", 1, timestamp=1_000)
    future._bind(outcome, index)
    return future, outcome


def test_a_record_not_yet_acknowledged_times_out_and_says_which() -> None:
    future, _outcome = bound_future()
    assert not future.done()
    with pytest.raises(RequestTimedOutError, match=r"orders-1 not acknowledged within 0\.01 s"):
        future.result(0.01)
    assert isinstance(future.exception(0.01), RequestTimedOutError)


def test_an_acknowledged_record_has_its_offset_in_the_batch() -> None:
    future, outcome = bound_future(index=2)
    outcome.complete(base_offset=40)
    assert future.done() and future.exception(0) is None
    metadata = future.result(0)
    assert (metadata.topic, metadata.partition, metadata.offset) == ("orders", 1, 42)
    assert metadata.timestamp == 1_000


def test_a_failed_batch_fails_each_of_its_records_with_the_same_error() -> None:
    future, outcome = bound_future()
    error = NotEnoughReplicasError("the ISR has 1 member, min.insync.replicas is 2")
    outcome.complete(error=error)
    assert future.exception(0) is error
    with pytest.raises(NotEnoughReplicasError):
        future.result(0)
