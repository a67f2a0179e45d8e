"""The producer client: usable in a driver, a Ray task or an actor.

`send()` only puts the record in the accumulator (per-partition batches, `linger.ms`,
`batch.size`) and returns a future; the producer's `Sender` (`actors/clients/sender.py`), a
thread as in Kafka's producer, turns ready batches into record batches, sends them to the
partition leaders' replica hosts (one request per host, carrying the batches of every partition
led there) with several requests in flight, and retries what fails. With idempotence (the
default) each batch carries the producer id and a per-partition sequence number, so a retry is
never appended twice and the leader appends a partition's batches in order, whatever order Ray
delivers them in.

With a `transactional_id`, the producer is Kafka's transactional producer
(`init_transactions`, `begin_transaction`, `send_offsets_to_transaction`,
`commit_transaction`, `abort_transaction`): its id and epoch come from its transaction
coordinator (`actors/clients/transactions.py`), its batches carry the transactional flag, and
the sender adds each partition to the transaction before the first batch it sends there.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from itertools import groupby, repeat
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, overload

import numpy as np

from rafka.actors.clients.accumulator import (
    HEADER_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    PendingBatch,
    RecordAccumulator,
    _payload_size,
    batch_run_ends,
)
from rafka.actors.clients.config import ProducerConfig
from rafka.actors.clients.metadata import ClientMetadata
from rafka.actors.clients.partitioner import StickyPartitioner, choose_partition
from rafka.actors.clients.sender import BatchOutcome, Sender
from rafka.actors.clients.transactions import TransactionManager
from rafka.actors.dataport.calls import HostCalls, call_and_wait, host_calls
from rafka.actors.errors import (
    BrokerUnavailableError,
    BufferExhaustedError,
    InvalidTxnStateError,
    RafkaError,
    RecordTooLargeError,
    RequestTimedOutError,
    error_for,
    is_retriable,
)
from rafka.actors.offsets_topic import COMMIT_TIMEOUT_MS, OFFSETS_TOPIC, offsets_partition
from rafka.actors.path_trace import SentRequest
from rafka.common.clock import wall_clock_ms
from rafka.common.producer_ids import random_producer_id
from rafka.coordination.store import ClusterStore
from rafka.logstore.batch import check_headers

if TYPE_CHECKING:
    import pyarrow as pa

# How long the answer to a transaction's group offsets may be: done, or an error.
OFFSET_ANSWER_BYTES = 64 * 1024

class RecordMetadata(NamedTuple):
    """Where a record was written, and its timestamp in the log: the leader's append time on a
    topic with message.timestamp.type=LogAppendTime, else the record's own (as in Kafka)."""

    topic: str
    partition: int
    offset: int
    timestamp: int


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


class _Span(NamedTuple):
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

    def __init__(self, topic: str, timestamp: int, spans: list[_Span],
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


class Producer:
    """Kafka's producer on rafka. Build it with `cluster.producer(acks="all", ...)`.

    Threads: any number of the caller's threads may send, flush and close at once; each holds
    the producer's one lock while it touches the accumulator, the sticky partitioner and the
    batches' outcomes, which it shares with its `Sender` (whose thread does the rest: see
    `actors/clients/sender.py`). `send` blocks on the lock's `space` condition while
    buffer.memory is full, `flush` on `wakeup` until what it waits for came back. The
    transaction calls run on the caller's thread; the sender adds partitions to the
    transaction on its own.
    """

    # What sends the batches: a subclass may bring its own (`SequencedProducer`).
    _sender_type: ClassVar[type[Sender]] = Sender

    def __init__(self, namespace: str, *, zookeeper: ClusterStore | None = None,
                 **config: Any) -> None:
        self.config = ProducerConfig.from_kwargs(**config)
        # With the cluster's ZooKeeper store, metadata is read there when no broker answers.
        self.metadata = ClientMetadata(
            namespace, max_age_s=self.config.metadata_max_age_ms / 1000, zookeeper=zookeeper)
        self._accumulator = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            max_in_flight=self.config.max_in_flight_requests_per_connection,
            # Resolved to True or False by the config (None only until then).
            enable_idempotence=self.config.enable_idempotence is True,
        )
        self._sticky = StickyPartitioner()
        # Kafka asks a broker for a producer id (InitProducerId); a random 62-bit id is unique
        # enough among the producers of one cluster and needs no round trip.
        # Its epoch is per partition, in the accumulator. A transactional producer's id and
        # epoch are its coordinator's, from init_transactions.
        producer_id = random_producer_id() if self.config.enable_idempotence else -1
        self.transactions: TransactionManager | None = None
        if self.config.transactional_id is not None:
            producer_id = -1
            self.transactions = TransactionManager(
                namespace, self.metadata.broker_ids, self.config.transactional_id,
                self.config.transaction_timeout_ms, self.config.max_block_ms)
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        # Signalled when queued bytes leave the accumulator (buffer.memory back-pressure).
        self._space = threading.Condition(self._lock)
        # One outcome per batch, for its whole life (retries included), by batch id: made
        # here when a batch starts, completed and dropped by the sender.
        self._outcomes: dict[int, BatchOutcome] = {}
        self._sender = self._sender_type(
            self.config, self.metadata, accumulator=self._accumulator, sticky=self._sticky,
            outcomes=self._outcomes, transactions=self.transactions, producer_id=producer_id,
            lock=self._lock, wakeup=self._wakeup, space=self._space)
        self._sender.start()
        # A transaction's group offsets go to the group's offset manager over the producer's
        # transport, on calls of their own (made at the first): the sender's are its thread's.
        self._offset_calls: HostCalls | None = None

    @property
    def producer_id(self) -> int:
        """The id the batches carry (-1 without idempotence): the sender's, which frames them."""
        return self._sender.producer_id

    @producer_id.setter
    def producer_id(self, producer_id: int) -> None:
        self._sender.producer_id = producer_id

    # ----------------------------------------------------------------------------- API

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Sequence[tuple[str, bytes]] | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves to its `RecordMetadata`.

        Blocks while `buffer.memory` bytes wait to be sent, for up to `max.block.ms`, then
        raises `BufferExhaustedError`, as Kafka's producer does.
        """
        if self._sender.closed:
            raise RafkaError("this producer is closed: create a new one")
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"value must be bytes or None, got {type(value).__name__}: "
                            "serialise it first (e.g. json.dumps(v).encode())")
        if key is not None and not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        # Checked here, not when the batch is built on the sender thread: a batch that fails
        # to build after taking its sequence numbers would leave a gap the leader waits on.
        if timestamp_ms is not None:
            if type(timestamp_ms) is not int:
                raise TypeError(f"timestamp_ms must be an int (ms since the epoch) or None, "
                                f"got {timestamp_ms!r}")
            if timestamp_ms < 0:
                raise ValueError(f"timestamp_ms must be >= 0, got {timestamp_ms}")
        checked_headers = check_headers(headers) or None
        size = (len(value) if value else 0) + (len(key) if key else 0)
        if size > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {size} bytes is larger than max.request.size="
                f"{self.config.max_request_size}: raise it (and the topic's max.message.bytes)"
            )
        count = self._partition_count(topic)
        partition = choose_partition(
            topic, key, count, partition=partition,
            partitioner=self.config.partitioner, sticky=self._sticky,
        )
        now = wall_clock_ms()
        timestamp = now if timestamp_ms is None else timestamp_ms
        future = RecordFuture(topic, partition, timestamp)
        with self._lock:
            self._wait_for_buffer_space()
            appended = self._accumulator.append(
                topic, partition, key, value, timestamp, checked_headers, now)
            future._bind(self._outcome_of(appended.batch), len(appended.batch.records) - 1)
            # A new batch starts a linger.ms clock the sender must know of; a full one can go.
            if appended.batch_is_full or appended.new_batch_created:
                self._sender.wake()
        return future

    def send_batch(
        self,
        topic: str,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        *,
        partition: int | None = None,
    ) -> SentRecords:
        """Queue many records at once: the bulk form of `send`, for records without headers.

        Records are batched exactly as `send` would batch them, but with one lock, one wake-up
        and no per-record Python work beyond the partitioner for keyed records. The answer is a
        sequence of futures, one per value, made only when asked for.

        Like `send`, it blocks while `buffer.memory` is full; after `max.block.ms` it raises
        `BufferExhaustedError`, and the records queued before that are sent all the same.
        """
        if self._sender.closed:
            raise RafkaError("this producer is closed: create a new one")
        values = values if isinstance(values, list) else list(values)
        keys = None if keys is None else (keys if isinstance(keys, list) else list(keys))
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        self._check_batch_input(values, keys)
        count = self._partition_count(topic)
        config = self.config
        now = wall_clock_ms()
        if keys is not None and keys.count(None) == len(keys):
            keys = None  # keyless after all: the sticky partitioner applies
        if partition is not None or (keys is None and config.partitioner is None):
            target = None if partition is None else choose_partition(
                topic, None, count, partition=partition)
            order = None
            groups = [(target, values, keys)]
        else:
            # Keyed (or user-partitioned): group by partition, keeping each partition's order.
            targets = [choose_partition(topic, key, count, partitioner=config.partitioner,
                                        sticky=self._sticky)
                       for key in (keys if keys is not None else repeat(None, len(values)))]
            order = sorted(range(len(values)), key=targets.__getitem__)
            groups = []
            for target, members in groupby(order, key=targets.__getitem__):
                indexes = list(members)
                groups.append((target, [values[i] for i in indexes],
                               None if keys is None else [keys[i] for i in indexes]))
        spans: list[_Span] = []
        position = 0
        with self._lock:
            for target, group_values, group_keys in groups:
                start = 0
                while start < len(group_values):
                    self._wait_for_buffer_space()
                    chosen = target if target is not None else self._sticky.partition(topic, count)
                    run = self._accumulator.append_run(topic, chosen, group_values, group_keys,
                                                       start, now, now)
                    spans.append(_Span(position + start, run.taken, chosen,
                                       self._outcome_of(run.batch), run.first_index))
                    start += run.taken
                    if run.batch.closed:
                        # KIP-480: keyless records move to another partition once a batch is full.
                        if target is None:
                            self._sticky.on_new_batch(topic, count, chosen)
                        self._sender.wake()
                position += len(group_values)
            self._sender.wake()
        return SentRecords(topic, now, spans, order)

    def send_columns(self, topic: str, values: pa.Array, keys: pa.Array | None = None, *,
                     partition: int, headers: pa.Array | None = None) -> SentRecords:
        """Queue records given as Arrow columns, all to `partition`: the columnar form of
        `send_batch`, for pipelines (a Spark task's or a Ray Data block's columns).

        Keys and values are Arrow binary or string arrays of one length (a null is a None;
        `keys` None: no record has a key). `headers`, if any record has some, is a list of
        structs of a string `key` and a binary or string `value` per record (Spark's
        `array<struct<key, value>>`). The records are encoded into batches here, in Arrow's C
        kernels (`rafka.logstore.record_columns`), with no Python object per record; their
        timestamp is now. Blocks for `buffer.memory` as `send` does.
        """
        # pyarrow takes a third of a second to import: only columnar senders pay for it.
        from rafka.logstore.record_columns import (
            binary_lengths,
            check_headers_column,
            encode_binary_records,
            header_lengths,
            is_binary_column,
        )

        if self._sender.closed:
            raise RafkaError("this producer is closed: create a new one")
        for name, column in (("values", values), ("keys", keys)):
            if column is not None and not is_binary_column(column):
                raise TypeError(f"{name} must be an Arrow binary or string array, got "
                                f"{getattr(column, 'type', type(column).__name__)}: cast it "
                                "first (e.g. pyarrow.compute.cast(column, pyarrow.binary()))")
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        if headers is not None:
            check_headers_column(headers)
            if len(headers) != len(values):
                raise ValueError(f"{len(headers)} records' headers for {len(values)} values")
        partition = choose_partition(topic, None, self._partition_count(topic),
                                     partition=partition)
        now = wall_clock_ms()
        if not len(values):
            return SentRecords(topic, now, [], None)
        payload_sizes = binary_lengths(values)
        if keys is not None:
            payload_sizes = payload_sizes + binary_lengths(keys)
        if headers is not None:
            payload_sizes = payload_sizes + header_lengths(headers, HEADER_OVERHEAD_BYTES)
        largest = int(payload_sizes.max())
        if largest > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {largest} bytes is larger than max.request.size="
                f"{self.config.max_request_size}: raise it (and the topic's max.message.bytes)"
            )
        record_sizes = payload_sizes + RECORD_OVERHEAD_BYTES
        run_ends = batch_run_ends(record_sizes, self.config.batch_size)
        run_sizes = np.add.reduceat(record_sizes, [0, *run_ends[:-1]]).tolist()
        payloads = encode_binary_records(values, keys, now, run_ends, headers=headers)
        spans: list[_Span] = []
        position = 0
        with self._lock:
            for payload, size in zip(payloads, run_sizes, strict=True):
                self._wait_for_buffer_space()
                batch = self._accumulator.append_payload(topic, partition, payload, size, now)
                spans.append(_Span(position, payload.count, partition, self._outcome_of(batch),
                                   0))
                position += payload.count
            self._sender.wake()
        return SentRecords(topic, now, spans, None)

    # ---------------------------------------------------------------------- transactions

    def _transactional(self, operation: str) -> TransactionManager:
        if self.transactions is None:
            raise InvalidTxnStateError(
                f"{operation} needs a transactional producer: set transactional_id")
        return self.transactions

    def init_transactions(self) -> None:
        """Take this transactional id's producer id and a new epoch from its coordinator,
        fencing every older instance (and aborting the transaction one left open). Once,
        before the first transaction."""
        transactions = self._transactional("init_transactions")
        self.flush()
        producer_id, epoch = transactions.init()
        with self._lock:
            self.producer_id = producer_id
            self._accumulator.start_epoch(epoch)

    def begin_transaction(self) -> None:
        """Start a transaction: what is sent until it is committed or aborted is part of it."""
        self._transactional("begin_transaction").begin()

    def send_offsets_to_transaction(self, offsets: Mapping[tuple[str, int], int],
                                    group_id: str) -> None:
        """Commit a consumer group's offsets (`{(topic, partition): next offset}`) in the
        current transaction: they count if it commits, never if it aborts (the consume-
        transform-produce loop)."""
        transactions = self._transactional("send_offsets_to_transaction")
        transactions.add_offsets(group_id)
        partition = offsets_partition(group_id, self.metadata.partition_count(OFFSETS_TOPIC))
        entries = [[topic, index, offset, ""] for (topic, index), offset in offsets.items()]
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        if self._offset_calls is None:
            self._offset_calls = host_calls(self.config.transport, self.config.request_timeout_ms,
                                            OFFSET_ANSWER_BYTES,
                                            zookeeper=lambda: self.metadata.zookeeper)
        while True:
            try:
                name, host = self.metadata.leader_host(OFFSETS_TOPIC, partition, wait_s=1)
                reply = call_and_wait(
                    self._offset_calls, name, host, "commit_transactional_offsets",
                    (partition, group_id, transactions.producer_id, transactions.producer_epoch,
                     entries, COMMIT_TIMEOUT_MS, transactions.transactional_id),
                    self.config.request_timeout_ms / 1000)
                error = error_for(reply)
            except Exception as failure:
                if not is_retriable(failure):
                    raise
                error = failure
            if error is None:
                return
            if not is_retriable(error) or time.monotonic() > deadline:
                transactions.fail(error)
                raise error
            self.metadata.invalidate(OFFSETS_TOPIC)
            time.sleep(0.05)

    def commit_transaction(self) -> None:
        """Send what is queued, then commit: every record of the transaction becomes visible
        to read_committed consumers, and its offsets count. Raises if a send of it failed
        (abort it then)."""
        transactions = self._transactional("commit_transaction")
        self.flush()
        transactions.end(commit=True)

    def abort_transaction(self) -> None:
        """Drop the transaction: its records stay in the log but no read_committed consumer
        sees them, and its offsets never count."""
        transactions = self._transactional("abort_transaction")
        self.flush()
        transactions.end(commit=False)

    def _partition_count(self, topic: str) -> int:
        """The topic's partition count, waiting up to max.block.ms for a broker to answer, as
        Kafka's send waits for metadata: during a failover every broker may be restarting."""
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        pause = 0.05
        while True:
            try:
                return self.metadata.partition_count(topic)
            except BrokerUnavailableError:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
                time.sleep(min(pause, remaining))
                pause = min(pause * 2, 1.0)

    def _check_batch_input(self, values: list, keys: list | None) -> None:
        allowed = {bytes, bytearray, type(None)}
        for name, items in (("values", values), ("keys", keys or ())):
            wrong = sorted(t.__name__ for t in set(map(type, items)) - allowed)
            if wrong:
                raise TypeError(f"{name} must be bytes or None, got {', '.join(wrong)}: "
                                "serialise them first (e.g. json.dumps(v).encode())")
        if keys is None and None not in values:
            largest = max(map(len, values), default=0)
        else:
            largest = max(map(_payload_size, keys or repeat(None), values), default=0)
        if largest > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {largest} bytes is larger than max.request.size="
                f"{self.config.max_request_size}: raise it (and the topic's max.message.bytes)"
            )

    def _wait_for_buffer_space(self) -> None:
        """Block (under the lock) while buffer.memory is used up, as Kafka's send does, for up
        to max.block.ms: a producer faster than the cluster must not queue without bound."""
        if self._accumulator.buffered_bytes < self.config.buffer_memory:
            return
        deadline = time.monotonic() + self.config.max_block_ms / 1000
        self._wakeup.notify()  # what fills the buffer must be on its way out
        while self._accumulator.buffered_bytes >= self.config.buffer_memory:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._sender.closed:
                raise BufferExhaustedError(
                    f"{self._accumulator.buffered_bytes} bytes wait to be sent, more than "
                    f"buffer.memory={self.config.buffer_memory}, and none went out within "
                    f"max.block.ms={self.config.max_block_ms}: the cluster is slower than this "
                    "producer or unreachable; raise buffer.memory or max.block.ms, or send less"
                )
            self._space.wait(remaining)

    def _outcome_of(self, batch: PendingBatch) -> BatchOutcome:
        """The outcome shared by a batch's records (under the lock)."""
        outcome = self._outcomes.get(batch.batch_id)
        if outcome is None:
            outcome = self._outcomes[batch.batch_id] = BatchOutcome()
        return outcome

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until every request is answered."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._sender.begin_flush()
            try:
                while self._accumulator.has_pending() or self._sender.has_in_flight():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise RequestTimedOutError(f"flush did not finish within {timeout} s")
                    self._wakeup.wait(remaining if remaining is not None else 0.1)
            finally:
                self._sender.end_flush()

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender thread."""
        if self._sender.closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._sender.close()
            if self._offset_calls is not None:
                self._offset_calls.close()

    def trace_requests(self) -> list[SentRequest]:
        """From now on, note when each acknowledged batch was sent, in the list returned
        (for `rafka.actors.path_trace`'s breakdown of a record's latency; benchmarks only)."""
        return self._sender.trace_requests()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
