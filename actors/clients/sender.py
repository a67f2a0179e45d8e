"""The producer's sender: Kafka's `Sender` (clients/producer/internals/Sender.java), the
background thread that drains the accumulator's ready batches into record batches, sends them
to the partition leaders' replica hosts (one request per host, carrying the batches of every
partition led there) with several requests in flight, collects the answers, and retries or
fails each batch.

With idempotence every batch carries the producer id and its partition's sequence numbers; a
partition whose leader lost this producer's state is given a new epoch once nothing of it is in
flight (KIP-360), and a batch whose leader went silent moves to the leader the controller
elected instead as soon as the metadata names it (actors/clients/leader_moves.py). A
transactional producer's sender adds each partition to the transaction before the first batch
it sends there.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, TypedDict

from rafka.actors.clients.accumulator import PendingBatch, RecordAccumulator
from rafka.actors.clients.config import ProducerConfig
from rafka.actors.clients.leader_moves import (
    MIN_CHECK_INTERVAL_MS,
    SLOW_REQUEST_MS,
    LeaderCheck,
    SentTo,
    plan_leader_moves,
)
from rafka.actors.clients.metadata import ClientMetadata
from rafka.actors.clients.partitioner import StickyPartitioner
from rafka.actors.clients.transactions import TransactionManager
from rafka.actors.dataport.calls import host_calls
from rafka.actors.errors import (
    BrokerUnavailableError,
    CorruptRecordError,
    InvalidRecordError,
    NotLeaderError,
    OutOfOrderSequenceError,
    RafkaError,
    RecordTooLargeError,
    RequestTimedOutError,
    error_for,
    is_retriable,
)
from rafka.actors.messages import Appended, ErrorReply, PartitionProduce
from rafka.actors.path_trace import SentRequest
from rafka.common.clock import wall_clock_ms
from rafka.logstore.batch import NO_TIMESTAMP, build_batch, frame_batch

log = logging.getLogger(__name__)

# Refusals of a batch the leader checked before appending anything of it: its sequence numbers
# were never used, and go back to the partition's later batches (`release_sequences`).
_REFUSED_BEFORE_APPEND = (CorruptRecordError, InvalidRecordError, RecordTooLargeError)

# The longest the sender waits for answers before it looks at the accumulator again. A record
# that can go sooner wakes it (with transport=tcp); with transport=ray it waits out its linger
# deadline or this, whichever is first.
MAX_ANSWER_WAIT_S = 0.05


def _answer_wait_s(next_ready_in_ms: int | None) -> float:
    """How long the sender waits for answers when nothing can be sent now."""
    if next_ready_in_ms is None:
        return MAX_ANSWER_WAIT_S
    return min(max(next_ready_in_ms, 1) / 1000, MAX_ANSWER_WAIT_S)


class _Framing(TypedDict):
    """How a batch is framed: `build_batch`'s and `frame_batch`'s keyword arguments."""

    compression: str
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


@dataclass(slots=True)
class _Request:
    """A produce request in flight: the host it went to, the batches it carries, and when it
    was sent (monotonic ns): one not answered within request.timeout.ms is given up on and its
    batches retried, as Kafka's client does. `sent_to` is each batch's partition and the leader
    epoch the metadata named when it was sent, None once the batch moved to a new leader (the
    rest of the request still waits for its answer, which no longer counts for that batch)."""

    host: str
    batches: list[PendingBatch]
    sent_ns: int
    sent_to: list[SentTo | None] = field(default_factory=list)
    moved: bool = False  # some batch moved: look at `sent_to` before taking an answer


class BatchOutcome:
    """The fate of one sent batch, shared by the futures of its records (cheaper than one
    concurrent.futures.Future per record): completed once, by the sender, when the batch is
    acknowledged or fails; read by the futures, from any thread."""

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


class Sender:
    """The sender thread of one `Producer`, and the state that thread alone touches: the
    requests in flight, the host calls (their connections and answers), the retries and the
    epoch bumps.

    Threads: `start` runs the loop on the sender thread, the only one that sends, collects,
    retries and fails batches, and the only one that changes the requests in flight (outside
    the lock: `has_in_flight` only asks whether there are any, and `flush` asks again each
    time a batch comes back). The producer's threads call `wake`, `has_in_flight`,
    `begin_flush` and `end_flush` with the producer's lock held, and `close` (once, after a
    flush) and `trace_requests` without it; they read `closed` and `producer_id` without it
    too (`producer_id` changes only before anything is sent under it, in `init_transactions`).

    Shared with the `Producer`, given in the constructor and used only under its one `lock`:
    the accumulator, the sticky partitioner, the batches' outcomes (the producer makes one per
    new batch, the sender completes and drops it) and the lock's two conditions, `wakeup` (the
    sender sleeps on it when there is nothing to do; `flush` waits on it for batches to come
    back) and `space` (a send blocked on buffer.memory waits on it). The config, the metadata
    and the transaction manager are shared too, and safe to use from either thread.
    """

    def __init__(self, config: ProducerConfig, metadata: ClientMetadata, *,
                 accumulator: RecordAccumulator, sticky: StickyPartitioner,
                 outcomes: dict[int, BatchOutcome], transactions: TransactionManager | None,
                 producer_id: int, lock: threading.Lock, wakeup: threading.Condition,
                 space: threading.Condition) -> None:
        self.config = config
        self.metadata = metadata
        self.transactions = transactions
        self.producer_id = producer_id
        # Set once, by `close`: the loop ends when nothing is in flight any more.
        self.closed = False
        # The producer's, touched under its lock (see above). An outcome per batch, for its
        # whole life (retries included), by batch id.
        self._accumulator, self._sticky, self._outcomes = accumulator, sticky, outcomes
        self._lock, self._wakeup, self._space = lock, wakeup, space
        # Each request in flight, by its key (`rafka.actors.dataport.blocking_client`).
        self._in_flight: dict[Any, _Request] = {}
        self._calls = host_calls(config.transport, config.request_timeout_ms,
                                 max_answer_bytes=0, zookeeper=lambda: metadata.zookeeper)
        # Whether the sender may be waiting for answers (`_collect`), and whether it was
        # woken since: a record that can go now must not wait for an answer to come first.
        self._in_wait = False
        self._woken = False
        # Partitions whose leader lost this producer's state: a new epoch once nothing of
        # theirs is in flight (KIP-360; see actors/clients/accumulator.py).
        self._epoch_bumps: set[tuple[str, int]] = set()
        self._flushing = 0
        # Looking for leaders that moved under requests in flight, idempotent producers only
        # (`_follow_moved_leaders`).
        self._leader_check = LeaderCheck(
            SLOW_REQUEST_MS, max(config.retry_backoff_ms, MIN_CHECK_INTERVAL_MS))
        # Filled while `trace_requests` is on.
        self._request_trace: list[SentRequest] | None = None
        self._thread = threading.Thread(target=self._run, name="rafka-producer", daemon=True)

    # ------------------------------------------------------------- the producer's side

    def start(self) -> None:
        """Start the sender thread."""
        self._thread.start()

    def wake(self) -> None:
        """(Under the lock.) Something new for the sender: wake it, whether it sleeps on the
        condition or waits for answers (once per wait)."""
        self._wakeup.notify()
        if self._in_wait and not self._woken:
            self._woken = True
            self._calls.wake()

    def has_in_flight(self) -> bool:
        """(Under the lock.) Whether a request is still unanswered."""
        return bool(self._in_flight)

    def begin_flush(self) -> None:
        """(Under the lock.) Send every queued batch now, linger or not, until `end_flush`."""
        self._flushing += 1
        self.wake()

    def end_flush(self) -> None:
        """(Under the lock.) One flush less."""
        self._flushing -= 1

    def close(self) -> None:
        """Stop the sender thread once what is in flight is answered (the producer flushed
        first), then close the connections to the hosts."""
        with self._lock:
            self.closed = True
            self._wakeup.notify_all()
            self._space.notify_all()
        self._thread.join(5)
        self._calls.close()

    def trace_requests(self) -> list[SentRequest]:
        """From now on, note when each acknowledged batch was sent, in the list returned."""
        self._request_trace = []
        return self._request_trace

    # ---------------------------------------------------------------- the sender thread

    def _run(self) -> None:
        while True:
            with self._lock:
                if self.closed and not self._in_flight:
                    return
                now = wall_clock_ms()
                self._bump_epochs()
                if self._flushing or self.closed:
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
                if batches:
                    self._space.notify_all()
                # Set before the lock is let go: a record appended from now on wakes the wait
                # for answers below.
                wait_s = 0.0 if batches else _answer_wait_s(
                    self._accumulator.next_ready_in_ms(now))
                self._in_wait, self._woken = True, False
            if batches:
                self._send(batches)
            self._collect(wait_s)

    def _send(self, batches: list[PendingBatch]) -> None:
        """One produce request per leader host, carrying every batch led there."""
        if self.transactions is not None:
            batches = self._added_to_transaction(batches)
        requests: dict[str, tuple[Any, list[PendingBatch], list[PartitionProduce],
                                  list[SentTo | None]]] = {}
        for batch in batches:
            try:
                name, host = self.metadata.leader_host(batch.topic, batch.partition, wait_s=0)
                epoch = self.metadata.cached_leader_epoch(batch.topic, batch.partition)
                payload = self._encode(batch)
            except (BrokerUnavailableError, ValueError) as error:
                self._retry_or_fail(batch, error)
                continue
            except Exception as error:
                self._fail(batch, error)
                continue
            _host, carried, parts, sent_to = requests.setdefault(name, (host, [], [], []))
            carried.append(batch)
            sent_to.append(SentTo(batch.topic, batch.partition, epoch))
            parts.append(PartitionProduce(
                batch.topic, batch.partition, payload,
                None if batch.payload is None else batch.payload.record_ends))
        for name, (host, carried, parts, sent_to) in requests.items():
            sent_ns = time.monotonic_ns()
            try:
                key = self._calls.send(name, host, "produce", (
                    parts, self.config.acks, self.config.request_timeout_ms,
                    None if self.transactions is None else self.transactions.transactional_id))
            except Exception as error:
                for batch in carried:
                    self._fail(batch, error)
                continue
            self._in_flight[key] = _Request(name, carried, sent_ns, sent_to)

    def _added_to_transaction(self, batches: list[PendingBatch]) -> list[PendingBatch]:
        """The batches that may go: their partitions added to the transaction first (Kafka's
        AddPartitionsToTxn, on the sender thread); the others fail with why."""
        assert self.transactions is not None
        try:
            self.transactions.add_partitions({(b.topic, b.partition) for b in batches})
        except Exception as error:
            for batch in batches:
                self._fail(batch, error)
            return []
        return batches

    def _encode(self, batch: PendingBatch) -> bytes:
        """The record batch that carries `batch` now (its sequence numbers are assigned)."""
        framing: _Framing = {
            "compression": self.config.compression_type,
            "producer_id": self.producer_id,
            "producer_epoch": self._accumulator.producer_epoch(batch.topic, batch.partition),
            "base_sequence": batch.base_sequence if batch.base_sequence is not None else -1,
            "transactional": self.transactions is not None,
        }
        if batch.payload is not None:
            return frame_batch(batch.payload, **framing)
        # send() and send_batch() checked each record's types as it came.
        return build_batch(batch.records, checked=True, **framing)

    def _collect(self, wait_s: float) -> None:
        """Take the answers that came, waiting up to `wait_s` for one (less if a record is
        appended meanwhile that can go, with `transport=tcp`)."""
        if not self._in_flight:
            self._in_wait = False
            return
        try:
            done = self._calls.wait(list(self._in_flight), wait_s)
        finally:
            self._in_wait = False
        for key in done:
            request = self._in_flight.pop(key)
            batches = request.batches
            if request.moved:  # the answer no longer counts for the batches that moved
                batches = [batch for batch, sent in zip(batches, request.sent_to, strict=True)
                           if sent is not None]
            try:
                replies = self._calls.result(key)
            except Exception as error:
                self.metadata.forget_if_dead(request.host, error)
                for batch in batches:
                    if not is_retriable(error):  # the host raised: a bug, not a fault
                        self._fail(batch, error)
                        continue
                    # Its host died or the connection to it broke: the leaders may have moved.
                    self.metadata.invalidate(batch.topic)
                    self._retry_or_fail(batch, BrokerUnavailableError(
                        f"the leader of {batch.topic}-{batch.partition} did not answer: it died "
                        f"or the connection to it broke ({type(error).__name__}); the record "
                        "may or may not be written"))
                continue
            if request.moved:
                replies = [reply for reply, sent in zip(replies, request.sent_to, strict=True)
                           if sent is not None]
            for batch, reply in zip(batches, replies, strict=True):
                if self._request_trace is not None and isinstance(reply, Appended):
                    self._request_trace.append(SentRequest(reply.base_offset, batch.record_count,
                                                           request.sent_ns))
                self._complete(batch, reply)
        if self._in_flight and self._accumulator.enable_idempotence:
            self._follow_moved_leaders()
        self._give_up_on_silent_requests()

    def _follow_moved_leaders(self) -> None:
        """Retry at their new leaders the batches in flight to leaders the controller replaced
        (actors/clients/leader_moves.py says which may move, and why only with idempotence:
        without it they wait for request.timeout.ms in `_give_up_on_silent_requests`).

        Costs a look at the oldest request's age while answers come back promptly. Once one
        has waited `SLOW_REQUEST_MS`, the metadata is refreshed in the background, at a bounded
        rate, and the requests are looked at again whenever it learnt something.
        """
        # Requests are kept in the order they were sent: the first is the oldest.
        oldest = next(iter(self._in_flight.values()))
        if self._leader_check.due(oldest.sent_ns, time.monotonic_ns()):
            self.metadata.refresh_soon(sorted({batch.topic for request in self._in_flight.values()
                                               for batch in request.batches}))
        if not self._leader_check.news(self.metadata.generation):
            return
        topics = {part.topic for request in self._in_flight.values()
                  for part in request.sent_to if part is not None}
        plan = plan_leader_moves({key: request.sent_to for key, request in self._in_flight.items()},
                                 self.metadata.cached_leader_epochs(topics), idempotent=True)
        for key in plan.abandon:
            self._calls.abandon(key)
        for key, positions in plan.retry.items():
            request = self._in_flight[key]
            if key in plan.abandon:
                del self._in_flight[key]
            moved = []
            for index in positions:
                moved.append(request.batches[index])
                request.sent_to[index] = None
            request.moved = True
            log.info("%s have new leaders: %d batches in flight to %s go there, with their "
                     "sequence numbers", sorted({f"{b.topic}-{b.partition}" for b in moved}),
                     len(moved), request.host)
            for batch in moved:
                self._retry_or_fail(batch, NotLeaderError(
                    f"the leader of {batch.topic}-{batch.partition} did not answer, and the "
                    "controller elected another; the record may or may not be written"))

    def _give_up_on_silent_requests(self) -> None:
        """Retry the batches of requests not answered within request.timeout.ms.

        A leader's host that is paused (or cut off) answers nothing, and its partitions would
        wait for it however long it takes while another broker leads them. The request may
        still be appended when the host resumes: with idempotence the retry carries the same
        sequence numbers, and a leader that has both keeps one.
        """
        # A second of slack: the leader's own REQUEST_TIMED_OUT, at request.timeout.ms, comes
        # first whenever the leader can answer at all.
        deadline_ns = time.monotonic_ns() - (self.config.request_timeout_ms + 1000) * 1_000_000
        for key in [key for key, request in self._in_flight.items()
                    if request.sent_ns < deadline_ns]:
            self._calls.abandon(key)  # a connection that said nothing for so long goes
            request = self._in_flight.pop(key)
            for batch, sent in zip(request.batches, request.sent_to, strict=True):
                if sent is None:
                    continue  # moved to its new leader already
                self.metadata.invalidate(batch.topic)
                self._retry_or_fail(batch, RequestTimedOutError(
                    f"the leader of {batch.topic}-{batch.partition} did not answer within "
                    f"request.timeout.ms ({self.config.request_timeout_ms} ms); the record may "
                    "or may not be written"))

    def _complete(self, batch: PendingBatch, reply: Appended | ErrorReply) -> None:
        if isinstance(reply, Appended):
            with self._lock:
                self._accumulator.on_completed(batch)
                outcome = self._outcomes.pop(batch.batch_id)
                self._wakeup.notify_all()
            outcome.complete(reply.base_offset, log_append_time=reply.log_append_time)
            return
        error = error_for(reply) or RafkaError(f"a produce answer without offsets: {reply!r}")
        if is_retriable(error):
            self.metadata.invalidate(batch.topic)
            if isinstance(error, OutOfOrderSequenceError) and not self._out_of_order(
                    batch, reply.expected_sequence):
                self._fail(batch, error)
                return
            self._retry_or_fail(batch, error)
        else:
            self._fail(batch, error,
                       release_sequences=isinstance(error, _REFUSED_BEFORE_APPEND))

    def _out_of_order(self, batch: PendingBatch, expected_sequence: int | None) -> bool:
        """The leader cannot append `batch` before the sequence it expects: whether to retry
        it. Yes; and where the leader lost this producer's state, under a new epoch. Not for a
        transactional producer, whose epoch is its coordinator's: the batch fails, and with it
        the transaction (Kafka's abortable error)."""
        with self._lock:
            if self._accumulator.lost_producer_state(batch, expected_sequence):
                if self.transactions is not None:
                    return False
                self._epoch_bumps.add((batch.topic, batch.partition))
        return True

    def _bump_epochs(self) -> None:
        """A new epoch for each partition waiting for one whose batches have all come back
        (with the lock held): its retries and queued batches are numbered from 0 under it."""
        for topic, partition in list(self._epoch_bumps):
            if self._accumulator.in_flight_count(topic, partition) == 0:
                self._epoch_bumps.discard((topic, partition))
                try:
                    epoch = self._accumulator.bump_epoch(topic, partition)
                except ValueError as exhausted:  # its batches fail at delivery.timeout.ms
                    log.error("%s", exhausted)
                    continue
                log.info("%s-%d lost this producer's state: producer epoch %d, sequences from 0",
                         topic, partition, epoch)

    def _retry_or_fail(self, batch: PendingBatch, error: BaseException) -> None:
        now = wall_clock_ms()
        expired = now - batch.created_ms > (self.config.delivery_timeout_ms or 120_000)
        if batch.attempts > self.config.retries or expired or self.closed:
            self._fail(batch, error)
            return
        log.debug("retrying %r after %r", batch, error)
        with self._lock:
            self._accumulator.reenqueue(batch, now, self.config.retry_backoff_ms)
            self._wakeup.notify_all()

    def _fail(self, batch: PendingBatch, error: BaseException, *,
              release_sequences: bool = False) -> None:
        if self.transactions is not None:
            self.transactions.fail(error)
        with self._lock:
            self._accumulator.on_completed(batch)
            if release_sequences:
                self._accumulator.release_sequences(batch)
            outcome = self._outcomes.pop(batch.batch_id)
            self._wakeup.notify_all()
        outcome.complete(error=error)
