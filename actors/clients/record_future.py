"""What `Producer.send`, `send_batch` and `send_columns` answer: a `RecordFuture` per record (a
`SentRecords` sequence of them for a bulk send), resolving to the record's `RecordMetadata`.

The records of one batch share one `BatchOutcome`, which the producer's sender completes when
the leader answers for the batch; the futures only read it, from any thread.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple, overload

from rafka.actors.errors import RequestTimedOutError
from rafka.logstore.batch import NO_TIMESTAMP


class RecordMetadata(NamedTuple):
    """Where a record was written, and its timestamp in the log: the leader's append time on a
    topic with message.timestamp.type=LogAppendTime, else the record's own (as in Kafka)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class BatchOutcome:
    """The fate of one sent batch, shared by the futures of its records (cheaper than one
    concurrent.futures.Future per record)."""

    __slots__ = ("base_offset", "done", "error", "log_append_time")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.base_offset = -1
        # The leader's stamp on a LogAppendTime topic; -1 otherwise, and for a retry the leader
        # recognised as a duplicate (it does not keep the first append's time), where the
        # record's own timestamp stands.
        self.log_append_time = NO_TIMESTAMP
        self.error: BaseException | None = None

    def complete(self, base_offset: int = -1, error: BaseException | None = None,
                 log_append_time: int = NO_TIMESTAMP) -> None:
        self.base_offset, self.error = base_offset, error
        self.log_append_time = log_append_time
        self.done.set()


class RecordFuture:
    """The result of `send()`: `result()` is the record's `RecordMetadata`, or raises."""

    __slots__ = ("_index", "_outcome", "partition", "timestamp", "topic")

    def __init__(self, topic: str, partition: int, timestamp: int) -> None:
        self.topic = topic
        self.partition = partition
        self.timestamp = timestamp
        self._outcome: BatchOutcome | None = None
        self._index = 0

    def _bind(self, outcome: BatchOutcome, index: int) -> None:
        self._outcome, self._index = outcome, index

    def done(self) -> bool:
        return self._outcome is not None and self._outcome.done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        outcome = self._outcome
        assert outcome is not None
        # is_set() first: Event.wait takes a lock even when the event is set.
        if not outcome.done.is_set() and not outcome.done.wait(timeout):
            raise RequestTimedOutError(
                f"record to {self.topic}-{self.partition} not acknowledged within {timeout} s"
            )
        if outcome.error is not None:
            raise outcome.error
        timestamp = self.timestamp if outcome.log_append_time < 0 else outcome.log_append_time
        return RecordMetadata(self.topic, self.partition, outcome.base_offset + self._index,
                              timestamp)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        outcome = self._outcome
        if outcome is not None and outcome.done.is_set():
            return outcome.error
        try:
            self.result(timeout)
        except BaseException as error:
            return error
        return None



class RecordSpan(NamedTuple):
    """Records ``start .. start + count`` of a `send_batch` call (in partition order) went to
    ``partition``, into the batch of ``outcome`` from ``first_index`` on."""

    start: int
    record_count: int
    partition: int
    outcome: BatchOutcome
    first_index: int


class SentRecords(Sequence[RecordFuture]):
    """What `send_batch` answers: one `RecordFuture` per value, in the order given.

    The futures are made when indexed, not when sent: a million of them would cost more than
    sending the records.
    """

    def __init__(self, topic: str, timestamp: int, spans: list[RecordSpan],
                 order: list[int] | None) -> None:
        self._topic = topic
        self._timestamp = timestamp
        self._spans = spans
        self._starts = [span.start for span in spans]
        # Where each value sits once grouped by partition (None: not regrouped). `order` lists
        # the values' indexes in grouped order; this is its inverse.
        self._position: list[int] | None = None
        if order is not None:
            self._position = [0] * len(order)
            for at, index in enumerate(order):
                self._position[index] = at
        self._length = sum(span.record_count for span in spans)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> RecordFuture: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordFuture]: ...

    def __getitem__(self, index: int | slice) -> RecordFuture | list[RecordFuture]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._length))]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"record {index} of {self._length}")
        at = index if self._position is None else self._position[index]
        span = self._spans[bisect_right(self._starts, at) - 1]
        future = RecordFuture(self._topic, span.partition, self._timestamp)
        future._bind(span.outcome, span.first_index + at - span.start)
        return future

    def done(self) -> bool:
        """Whether every record is acknowledged or has failed."""
        return all(span.outcome.done.is_set() for span in self._spans)

    def partition_counts(self, timeout: float | None = None) -> dict[int, int]:
        """How many of the records each partition took, once all are acknowledged; raises
        the first failure (after `timeout` s, `RequestTimedOutError`), without making a future
        per record."""
        deadline = None if timeout is None else time.monotonic() + timeout
        counts: dict[int, int] = {}
        for span in self._spans:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not span.outcome.done.wait(left):
                raise RequestTimedOutError(f"records to {self._topic}-{span.partition} not "
                                           f"acknowledged within {timeout} s")
            if span.outcome.error is not None:
                raise span.outcome.error
            counts[span.partition] = counts.get(span.partition, 0) + span.record_count
        return counts

