"""The producer client: usable in a driver, a Ray task or an actor.

`send()` only puts the record in the accumulator (per-partition batches, `linger.ms`,
`batch.size`) and returns a future; a sender thread, as in Kafka's producer, turns ready batches
into record batches, sends them to the partition leaders' actors with several requests in flight,
and retries what fails. With idempotence (the default) each batch carries the producer id and a
per-partition sequence number, so a retry is never appended twice and the leader appends a
partition's batches in order, whatever order Ray delivers them in.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import ray

from actors.accumulator import PendingBatch, RecordAccumulator
from actors.client_config import ProducerConfig
from actors.errors import (
    BrokerUnavailableError,
    ErrorCode,
    RafkaError,
    RecordTooLargeError,
    RequestTimedOutError,
    raise_for,
)
from actors.metadata import MetadataCache
from actors.partitioner import StickyPartitioner, choose_partition
from logstore.batch import build_batch

log = logging.getLogger(__name__)

# Errors after which the batch may succeed if sent again, once metadata is refreshed.
_RETRIABLE = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER,
    ErrorCode.FENCED_LEADER_EPOCH,
    ErrorCode.UNKNOWN_LEADER_EPOCH,
    ErrorCode.NOT_ENOUGH_REPLICAS,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    ErrorCode.REQUEST_TIMED_OUT,
    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    ErrorCode.KAFKA_STORAGE_ERROR,
}


class RecordMetadata(NamedTuple):
    """Where a record was written."""

    topic: str
    partition: int
    offset: int
    timestamp: int


class _BatchOutcome:
    """The fate of one sent batch, shared by the futures of its records (cheaper than one
    concurrent.futures.Future per record)."""

    __slots__ = ("base_offset", "callbacks", "done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.base_offset = -1
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], None]] = []

    def complete(self, base_offset: int = -1, error: BaseException | None = None) -> None:
        self.base_offset, self.error = base_offset, error
        self.done.set()
        for callback in self.callbacks:
            try:
                callback()
            except Exception:
                log.exception("a send() callback raised")


class RecordFuture:
    """The result of `send()`: `result()` is the record's `RecordMetadata`, or raises."""

    __slots__ = ("_index", "_outcome", "partition", "timestamp", "topic")

    def __init__(self, topic: str, partition: int, timestamp: int) -> None:
        self.topic = topic
        self.partition = partition
        self.timestamp = timestamp
        self._outcome: _BatchOutcome | None = None
        self._index = 0

    def _bind(self, outcome: _BatchOutcome, index: int) -> None:
        self._outcome, self._index = outcome, index

    def done(self) -> bool:
        return self._outcome is not None and self._outcome.done.is_set()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        assert self._outcome is not None
        if not self._outcome.done.wait(timeout):
            raise RequestTimedOutError(
                f"record to {self.topic}-{self.partition} not acknowledged within {timeout} s"
            )
        if self._outcome.error is not None:
            raise self._outcome.error
        return RecordMetadata(
            self.topic, self.partition, self._outcome.base_offset + self._index, self.timestamp
        )

    def exception(self, timeout: float | None = None) -> BaseException | None:
        try:
            self.result(timeout)
        except BaseException as error:
            return error
        return None


class Producer:
    """Kafka's producer on rafka. Build it with `cluster.producer(acks="all", ...)`."""

    def __init__(self, namespace: str, **config: Any) -> None:
        self.config = ProducerConfig.from_kwargs(**config)
        self.metadata = MetadataCache(
            namespace, max_age_s=self.config.metadata_max_age_ms / 1000)
        self._accumulator = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            max_in_flight=self.config.max_in_flight_requests_per_connection,
            enable_idempotence=self.config.enable_idempotence,
        )
        self._sticky = StickyPartitioner()
        # Kafka asks a broker for a producer id (InitProducerId); a random 62-bit id is unique
        # enough among the producers of one cluster and needs no round trip.
        self.producer_id = secrets.randbits(62) if self.config.enable_idempotence else -1
        self.producer_epoch = 0 if self.config.enable_idempotence else -1
        self._lock = threading.Lock()
        self._wakeup = threading.Condition(self._lock)
        self._in_flight: dict[Any, PendingBatch] = {}
        # One outcome per batch, for its whole life (retries included), by batch id.
        self._outcomes: dict[int, _BatchOutcome] = {}
        self._flushing = 0
        self._closed = False
        self._sender = threading.Thread(target=self._run, name="rafka-producer", daemon=True)
        self._sender.start()

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
        """Queue one record; the future resolves to its `RecordMetadata`."""
        if self._closed:
            raise RafkaError("this producer is closed: create a new one")
        if value is not None and not isinstance(value, (bytes, bytearray)):
            raise TypeError(f"value must be bytes or None, got {type(value).__name__}: "
                            "serialise it first (e.g. json.dumps(v).encode())")
        if key is not None and not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"key must be bytes or None, got {type(key).__name__}")
        size = (len(value) if value else 0) + (len(key) if key else 0)
        if size > self.config.max_request_size:
            raise RecordTooLargeError(
                f"a record of {size} bytes is larger than max.request.size="
                f"{self.config.max_request_size}: raise it (and the topic's message.max.bytes)"
            )
        count = self.metadata.partition_count(topic)
        partition = choose_partition(
            topic, key, count, partition=partition,
            partitioner=self.config.partitioner, sticky=self._sticky,
        )
        now = int(time.time() * 1000)
        timestamp = now if timestamp_ms is None else timestamp_ms
        future = RecordFuture(topic, partition, timestamp)
        with self._lock:
            appended = self._accumulator.append(
                topic, partition, key, value, timestamp, headers, now, future
            )
            self._bind(future, appended.batch)
            # A new batch starts a linger.ms clock the sender must know of; a full one can go.
            if appended.batch_is_full or appended.new_batch_created:
                self._wakeup.notify()
        return future

    def send_batch(
        self,
        topic: str,
        values: Iterable[bytes | None],
        keys: Iterable[bytes | None] | None = None,
        *,
        partition: int | None = None,
    ) -> list[RecordFuture]:
        """Queue many records at once (one lock, one wake-up)."""
        values = list(values)
        keys = [None] * len(values) if keys is None else list(keys)
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values")
        count = self.metadata.partition_count(topic)
        now = int(time.time() * 1000)
        futures = []
        config = self.config
        with self._lock:
            for key, value in zip(keys, values, strict=True):
                if value is not None and not isinstance(value, (bytes, bytearray)):
                    raise TypeError(f"values must be bytes or None, got {type(value).__name__}")
                target = choose_partition(
                    topic, key, count, partition=partition,
                    partitioner=config.partitioner, sticky=self._sticky,
                )
                future = RecordFuture(topic, target, now)
                appended = self._accumulator.append(topic, target, key, value, now, None, now,
                                                    future)
                self._bind(future, appended.batch)
                futures.append(future)
            self._wakeup.notify()
        return futures

    def _bind(self, future: RecordFuture, batch: PendingBatch) -> None:
        """Tie a record's future to its batch's outcome (under the lock)."""
        outcome = self._outcomes.get(batch.batch_id)
        if outcome is None:
            outcome = self._outcomes[batch.batch_id] = _BatchOutcome()
        future._bind(outcome, len(batch.records) - 1)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until every request is answered."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
            self._wakeup.notify()
            try:
                while self._accumulator.has_pending() or self._in_flight:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise RequestTimedOutError(f"flush did not finish within {timeout} s")
                    self._wakeup.wait(remaining if remaining is not None else 0.1)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, then stop the sender thread."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closed = True
                self._wakeup.notify_all()
            self._sender.join(5)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -------------------------------------------------------------------------- sender

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._closed and not self._in_flight:
                    return
                now = int(time.time() * 1000)
                if self._flushing or self._closed:
                    batches = self._accumulator.drain_all(now)
                else:
                    batches = self._accumulator.ready(now)
                if not batches and not self._in_flight:
                    wait_ms = self._accumulator.next_ready_in_ms(now)
                    self._wakeup.wait(None if wait_ms is None else max(wait_ms, 1) / 1000)
                    continue
                for batch in batches:
                    self._accumulator.on_sent(batch)
                    # KIP-480: keyless records stick to a partition until its batch goes.
                    if self._sticky.current(batch.topic) == batch.partition:
                        count = self.metadata.cached_partition_count(batch.topic)
                        if count:
                            self._sticky.on_new_batch(batch.topic, count, batch.partition)
            for batch in batches:
                self._send(batch)
            self._collect(batches_pending=bool(batches))

    def _send(self, batch: PendingBatch) -> None:
        try:
            replica = self.metadata.leader_replica(batch.topic, batch.partition, wait_s=0)
            payload = build_batch(
                batch.records,
                compression=self.config.compression_type,
                producer_id=self.producer_id,
                producer_epoch=self.producer_epoch,
                base_sequence=batch.base_sequence if batch.base_sequence is not None else -1,
            )
            ref = replica.produce.remote(payload, self.config.acks, self.config.request_timeout_ms)
        except (BrokerUnavailableError, ValueError) as error:
            self._retry_or_fail(batch, error)
            return
        except Exception as error:
            self._fail(batch, error)
            return
        self._in_flight[ref] = batch

    def _collect(self, batches_pending: bool) -> None:
        if not self._in_flight:
            return
        refs = list(self._in_flight)
        timeout = 0 if batches_pending else 0.005
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=True)
        if not done and not batches_pending:
            done, _ = ray.wait(refs, num_returns=1, timeout=0.05)
        for ref in done:
            batch = self._in_flight.pop(ref)
            try:
                reply = ray.get(ref)
            except Exception as error:  # the replica's actor died: the leader moved
                self.metadata.invalidate(batch.topic)
                self._retry_or_fail(batch, BrokerUnavailableError(
                    f"the leader of {batch.topic}-{batch.partition} died before answering "
                    f"({type(error).__name__}); the record may or may not be written"))
                continue
            code = reply.get("error", 0)
            if not code:
                with self._lock:
                    self._accumulator.on_completed(batch)
                    outcome = self._outcomes.pop(batch.batch_id)
                    self._wakeup.notify_all()
                outcome.complete(reply["base_offset"])
                continue
            try:
                raise_for(reply)
            except Exception as error:
                if ErrorCode(code) in _RETRIABLE:
                    self.metadata.invalidate(batch.topic)
                    self._retry_or_fail(batch, error)
                else:
                    self._fail(batch, error)

    def _retry_or_fail(self, batch: PendingBatch, error: BaseException) -> None:
        now = int(time.time() * 1000)
        expired = now - batch.created_ms > (self.config.delivery_timeout_ms or 120_000)
        if batch.attempts > self.config.retries or expired or self._closed:
            self._fail(batch, error)
            return
        log.debug("retrying %r after %r", batch, error)
        with self._lock:
            self._accumulator.reenqueue(batch, now, self.config.retry_backoff_ms)
            self._wakeup.notify_all()

    def _fail(self, batch: PendingBatch, error: BaseException) -> None:
        with self._lock:
            self._accumulator.on_completed(batch)
            outcome = self._outcomes.pop(batch.batch_id)
            self._wakeup.notify_all()
        outcome.complete(error=error)
