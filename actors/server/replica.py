"""PartitionReplica: one replica of one partition, an object hosted by a ReplicaHost actor.

A replica owns its log and its role. As leader it appends produce requests (the whole produce
path is here: checks, sequence gate, append, acknowledgement waits) and moves the high watermark
(the arithmetic is `rafka.actors.server.replication.LeaderState`); its collaborators do the rest:
`isr_manager` (what each follower holds, the ISR and its writes), `leader_reads` (reads of
consumers and followers, the offsets queries) and `txn_markers`. As follower it is fed by its host's
replica fetcher (`rafka.actors.server.replica_fetcher`), which pulls from the leader's host for
every partition the two hosts share; the replica only appends what arrives and truncates where the
leader epochs say (KIP-101).

Who leads, at which epochs, comes from the controller (LeaderAndIsr); the decision of what to
do with such a request is `rafka.actors.server.replication.apply_leader_and_isr`, a pure function.
The replica runs on its host's event loop alone, so the log needs no locks; two calls may still run
in either order, which is why idempotent produce requests are ordered by their sequence
numbers, not by arrival.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from rafka.actors.config import BrokerConfig, TopicConfig
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import (
    Appended,
    ErrorReply,
    FetchedRecords,
    LeaderAndIsrRequest,
    ReplicaRole,
)
from rafka.actors.metrics import ReplicaMetrics
from rafka.actors.path_trace import PathTrace
from rafka.actors.server.isr_manager import IsrManager, IsrWriter
from rafka.actors.server.replication import (
    AcksAllOutcome,
    LeaderAndIsrDecision,
    LeaderState,
    acks_all_outcome,
    apply_leader_and_isr,
)
from rafka.actors.server.txn_verification import TransactionVerifier, VerifyTransaction
from rafka.common.clock import wall_clock_ms
from rafka.common.topic_partition import TopicPartition
from rafka.common.waiting import wait_for_event
from rafka.logstore.batch import split_batches, validate_batches
from rafka.logstore.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogStoreError,
    RecordTooLargeError,
)
from rafka.logstore.log import AppendInfo, Log
from rafka.logstore.producer_state import SequenceOutcome
from rafka.wire.records import UnsupportedCompressionError, from_kafka

log = logging.getLogger(__name__)

LEADER, FOLLOWER, OFFLINE = ReplicaRole.LEADER, ReplicaRole.FOLLOWER, ReplicaRole.OFFLINE

# How long a leader holds an idempotent batch that arrived ahead of its predecessor (Ray may run
# two calls of one producer out of order, and a Kafka listener sends an idempotent producer's
# requests on connections of their own) before answering OUT_OF_ORDER_SEQUENCE_NUMBER.
REORDER_WAIT_S = 2.0


def log_maintenance_interval_ms(config: TopicConfig) -> int:
    """How often a replica's log is retained, compacted and flushed (`maintain_log`)."""
    return min(config.log.segment_ms, 30_000)


# What reading a producer's batches may refuse them for, and the error each answers with.
_BATCH_ERROR_CODES = {UnsupportedCompressionError: ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                      RecordTooLargeError: ErrorCode.MESSAGE_TOO_LARGE,
                      CorruptRecordError: ErrorCode.CORRUPT_MESSAGE,
                      InvalidRecordError: ErrorCode.INVALID_RECORD}
_BATCH_ERRORS = tuple(_BATCH_ERROR_CODES)


def _batch_error_reply(error: Exception) -> ErrorReply:
    """The reply to batches refused as read (the first of the error's kinds it is)."""
    code = next(code for kind, code in _BATCH_ERROR_CODES.items() if isinstance(error, kind))
    return error_reply(code, str(error))


class ChangeListener(Protocol):
    """Told of every change of a replica's log, high watermark or role."""

    def changed(self, replica: PartitionReplica) -> None: ...



class PartitionReplica:
    """One replica of one partition, on the broker whose disk holds its log."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        log_dir: Path,
        topic_config: dict[str, Any],
        broker_config: BrokerConfig,
        write_isr: IsrWriter,
        verify_transaction: VerifyTransaction | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.tp = TopicPartition(topic, partition)
        self.broker_id = broker_id
        self.config = TopicConfig.from_dict(topic_config)
        self.broker_config = broker_config
        self.log_dir = log_dir
        self.log = Log.open(log_dir, self.config.log)

        self.role = OFFLINE
        self.leader_id = -1
        self.leader_host: str | None = None
        self.leader_epoch = -1
        self.controller_epoch = -1
        self.zk_version = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.leader_state: LeaderState | None = None

        # Set and replaced on every change of log, high watermark or role: waiters wake up and
        # look again (a broadcast, where an asyncio.Condition would need its lock held). What
        # waits on many partitions at once (a fetch) is told through `listeners` instead.
        self._changed: asyncio.Event | None = None
        self.listeners: set[ChangeListener] = set()
        self.isr_manager = IsrManager(self, write_isr)
        self.transaction_verifier = TransactionVerifier(verify_transaction)
        self.next_maintenance_ms = wall_clock_ms() + log_maintenance_interval_ms(self.config)
        self.metrics = ReplicaMetrics(topic, partition, broker_id)
        # Set while a benchmark traces this partition's path (`rafka.actors.path_trace`).
        self.path_trace: PathTrace | None = None

    # ------------------------------------------------------------------ waiting and waking

    def notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
        self._changed = asyncio.Event()
        for listener in self.listeners:
            listener.changed(self)

    async def _wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._changed is None:
                self._changed = asyncio.Event()
            await wait_for_event(self._changed, remaining)
        return True

    def not_leader(self) -> ErrorReply:
        return error_reply(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}"
            + (f"; broker {self.leader_id} is" if self.leader_id >= 0 else "")
            + ": refresh metadata and send to the leader",
            leader=self.leader_id if self.leader_id >= 0 else None,
        )

    # --------------------------------------------------------------------- control plane

    def leader_and_isr(self, request: LeaderAndIsrRequest) -> ErrorReply | None:
        """The controller's word on who leads, at which epochs (Kafka's LeaderAndIsr); None
        once applied (or if it already was)."""
        decision = apply_leader_and_isr(
            request,
            broker_id=self.broker_id,
            role=self.role,
            leader_id=self.leader_id,
            leader_epoch=self.leader_epoch,
            controller_epoch=self.controller_epoch,
            zk_version=self.zk_version,
        )
        if decision is LeaderAndIsrDecision.STALE_CONTROLLER:
            return error_reply(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {request.controller_epoch} is older than "
                f"{self.controller_epoch}: ignored",
            )
        if decision is LeaderAndIsrDecision.ALREADY_APPLIED:
            # Not partition state but the broker's reading of the leader's registration: a
            # resend that names the leader's host where the first could not is taken.
            if self.role == FOLLOWER and request.leader_host is not None:
                self.leader_host = request.leader_host
            return None
        self.controller_epoch = request.controller_epoch
        self.replicas = tuple(request.replicas)
        old_isr, self.isr = set(self.isr), tuple(request.isr)
        self.zk_version = request.zk_version
        self.leader_host = request.leader_host
        if decision is LeaderAndIsrDecision.BECOME_LEADER:
            if self.role == LEADER:
                # The controller may change our ISR (it drops dead brokers itself, bumping the
                # epoch): count that as the leader's own shrinks and expands are, so the metric
                # shows every ISR change of a partition whoever wrote it.
                if old_isr - set(self.isr):
                    self.metrics.isr_changed("shrink")
                if set(self.isr) - old_isr:
                    self.metrics.isr_changed("expand")
            self._become_leader(request.leader_epoch)
        else:
            self._become_follower(request.leader, request.leader_epoch)
        return None

    def _become_leader(self, leader_epoch: int) -> None:
        self.role = LEADER
        self.transaction_verifier.clear()
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        # The epoch starts at the log end: a follower asking where it ends learns it here.
        self.log.epoch_cache.assign(self.leader_epoch, self.log.log_end_offset)
        self.leader_state = LeaderState.become_leader(
            self.broker_id,
            self.replicas,
            self.isr,
            self.leader_epoch,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.log.high_watermark,
            now_ms=wall_clock_ms(),
        )
        self.advance_high_watermark()
        self.report_under_replicated()
        self.notify()

    def _become_follower(self, leader_id: int, leader_epoch: int) -> None:
        self.role = FOLLOWER if leader_id >= 0 else OFFLINE
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.leader_state = None
        self.report_under_replicated()
        self.notify()

    def go_offline(self, reason: str | None = None) -> None:
        """Lead and follow nothing until the controller says otherwise: the broker lost its
        ZooKeeper session, or an ISR write showed that someone else moved the partition."""
        if reason:
            log.warning("%s-%d on broker %d steps down: %s", self.topic, self.partition,
                        self.broker_id, reason)
        self.role = OFFLINE
        self.leader_state = None
        self.report_under_replicated()
        self.notify()

    def report_under_replicated(self) -> None:
        # Only the leader reports its partition (as Kafka's UnderReplicatedPartitions): a
        # follower or an offline replica reports 0, so summing over brokers counts each once.
        self.metrics.under_replicated(self.role == LEADER and len(self.isr) < len(self.replicas))

    # ------------------------------------------------------------------------ leader side

    def advance_high_watermark(self) -> None:
        state = self.leader_state
        if state is not None and state.advance_high_watermark(self.log.log_end_offset):
            self.log.high_watermark = state.high_watermark
            if self.path_trace is not None:
                self.path_trace.high_watermark_moved(state.high_watermark)
            self.notify()

    async def produce(
        self, records: bytes, acks: int = -1, timeout_ms: int = 30_000, *,
        record_ends: bytes | None = None, transactional_id: str | None = None,
    ) -> Appended | ErrorReply:
        """Append one producer batch (or several) as leader; reply with the base offset.
        `record_ends`: where the producer says each record of a single batch ends
        (`PartitionProduce`); `transactional_id`: a transactional producer's."""
        return await self._produce(
            acks, timeout_ms, lambda: self._checked_batches(records, record_ends),
            transactional_id)

    async def produce_kafka(
        self, records: bytes, acks: int = -1, timeout_ms: int = 30_000,
        transactional_id: str | None = None,
    ) -> Appended | ErrorReply:
        """`produce` for a Kafka client's batches, converted here (`rafka.wire.records`), in
        the host that owns the partition rather than on the broker's event loop."""
        return await self._produce(acks, timeout_ms, lambda: self._converted_batches(records),
                                   transactional_id)

    async def _produce(
        self, acks: int, timeout_ms: int,
        read_batches: Callable[[], tuple[bytes, list[Any]] | ErrorReply],
        transactional_id: str | None,
    ) -> Appended | ErrorReply:
        """A produce whose batches `read_batches` checks (and converts): refused, or appended."""
        started = time.perf_counter()
        received_ns = time.monotonic_ns() if self.path_trace is not None else 0
        refusal = self._produce_refusal(acks, timeout_ms)
        checked = refusal if refusal is not None else read_batches()
        if isinstance(checked, ErrorReply):
            reply: Appended | ErrorReply = checked
        else:
            checked_records, headers = checked
            reply = await self._append_checked(checked_records, headers, acks, timeout_ms,
                                               received_ns, transactional_id)
        # Every request is timed, refused ones too, as Kafka's request metrics do.
        self.metrics.produce_latency((time.perf_counter() - started) * 1000)
        return reply

    def _produce_refusal(self, acks: int, timeout_ms: int) -> ErrorReply | None:
        """Why a produce is refused before its records are even read (None: it is not)."""
        if not isinstance(timeout_ms, (int, float)):
            # Before the append: acks=all would only trip on it afterwards, batch in the log.
            raise TypeError(f"timeout_ms must be a number, got {type(timeout_ms).__name__}")
        if type(acks) is not int or acks not in (0, 1, -1):
            return error_reply(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}: use 0, 1 or -1")
        if self.role != LEADER:
            return self.not_leader()
        return None

    # Every record decoded and checked, not only the CRC: a CRC proves the bytes are the ones
    # the client sent, not that they are records; one malformed record stored would fail
    # every consumer that reads that far.

    def _checked_batches(self, records: bytes, record_ends: bytes | None,
                         ) -> tuple[bytes, list] | ErrorReply:
        """The batches and their headers, each record checked (or the error reply)."""
        try:
            return records, validate_batches(records, self.config.log.max_message_bytes,
                                             require_keys=self.config.log.compact,
                                             record_ends=record_ends)
        except _BATCH_ERRORS as error:
            return _batch_error_reply(error)

    def _converted_batches(self, records: bytes) -> tuple[bytes, list] | ErrorReply:
        """A Kafka client's batches in this log's format, with their headers (or the error
        reply)."""
        try:
            # Bounded by max.message.bytes as the client sent it, and checked as read (the
            # converted batch may come out a few bytes larger, and is not refused for it).
            converted = from_kafka(records, self.config.log.max_message_bytes,
                                   require_keys=self.config.log.compact)
            return converted, [header for header, _ in split_batches(converted,
                                                                     verify_crc=False)]
        except _BATCH_ERRORS as error:
            return _batch_error_reply(error)

    async def _append_checked(
        self, records: bytes, headers: list, acks: int, timeout_ms: int, received_ns: int,
        transactional_id: str | None = None,
    ) -> Appended | ErrorReply:
        """Append batches already checked (`headers` theirs) as leader, and acknowledge."""
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            return error_reply(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas "
                f"{list(self.isr)}, fewer than min.insync.replicas="
                f"{self.config.min_insync_replicas}: wait for followers to catch up",
            )
        epoch = self.leader_epoch
        first = headers[0]
        guard = first.is_transactional and await self.transaction_verifier.check(
            self.log, first, transactional_id, *self.tp)
        if isinstance(guard, ErrorReply):
            return guard
        if first.producer_id >= 0:
            duplicate = await self._sequence_gate(headers)
            if isinstance(duplicate, ErrorReply):
                return duplicate
            if duplicate is not None:
                return await self.acknowledge(acks, duplicate[0], duplicate[1], -1, timeout_ms)
        if self.role != LEADER or self.leader_epoch != epoch:
            return self.not_leader()
        if guard and (refused := self.transaction_verifier.refused_append(self.log, first, guard)):
            return refused
        info = self.append_as_leader(records)
        if isinstance(info, ErrorReply):
            return info
        # Counted once appended (Kafka's MessagesInPerSec), whatever the acks wait brings; the
        # record count comes from the batch headers, already parsed, never from the records.
        self.metrics.produced(sum(header.record_count for header in headers), len(records))
        if self.path_trace is not None:
            self.path_trace.appended(received_ns, info.first_offset, info.last_offset)
        self.advance_high_watermark()
        self.notify()
        return await self.acknowledge(
            acks, info.first_offset, info.last_offset, info.log_append_time_ms, timeout_ms
        )

    def append_as_leader(self, records: bytes) -> AppendInfo | ErrorReply:
        """Append checked batches to the log at this leader's epoch (or the error reply); the
        caller moves the high watermark and acknowledges."""
        if self.leader_state is not None:
            self.leader_state.before_append(self.log.log_end_offset)
        try:
            return self.log.append_as_leader(records, self.leader_epoch)
        except LogStoreError as error:
            return error_reply(ErrorCode.KAFKA_STORAGE_ERROR, f"append failed: {error}")

    async def _sequence_gate(self, headers: list) -> ErrorReply | tuple[int, int] | None:
        """Let an idempotent batch through only in sequence order.

        Returns None to append, `(first, last)` offsets of the batch already appended (a retry),
        or an error reply.
        """
        header = headers[0]
        deadline = time.monotonic() + REORDER_WAIT_S
        while True:
            check = self.log.check_sequence(header)
            if check.outcome is SequenceOutcome.OK:
                return None
            if check.outcome is SequenceOutcome.DUPLICATE:
                batch = check.duplicate_of
                assert batch is not None, "a DUPLICATE check names the batch it duplicates"
                return batch.first_offset, batch.last_offset
            if check.outcome is SequenceOutcome.INVALID_PRODUCER_EPOCH:
                return error_reply(
                    ErrorCode.INVALID_PRODUCER_EPOCH,
                    f"producer {header.producer_id} epoch {header.producer_epoch} is fenced by "
                    "a newer one: close this producer",
                )
            expected = check.expected_sequence
            if expected is not None and header.base_sequence < expected:
                return error_reply(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {header.producer_id}: batch sequence {header.base_sequence}, "
                    f"expected {expected}",
                    expected_sequence=expected,
                )
            # Ahead of its turn (also a new producer's batch before its first): wait for the
            # batches before it, which are on their way.
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self.role != LEADER:
                return error_reply(
                    ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {header.producer_id}: batch sequence {header.base_sequence} "
                    f"arrived, but {check.expected_sequence} never did: resend in order",
                    expected_sequence=check.expected_sequence,
                )
            before = self.log.log_end_offset

            def log_grew_or_not_leader(before: int = before) -> bool:
                return self.log.log_end_offset != before or self.role != LEADER

            await self._wait_until(log_grew_or_not_leader, remaining)

    async def acknowledge(
        self, acks: int, first: int, last: int, append_time_ms: int, timeout_ms: int
    ) -> Appended | ErrorReply:
        reply = Appended(first, last, append_time_ms, self.log.log_start_offset)
        if acks != -1:
            return reply
        epoch = self.leader_epoch
        min_isr = self.config.min_insync_replicas

        def outcome() -> AcksAllOutcome:
            return acks_all_outcome(self.log.high_watermark, last, len(self.isr), min_isr)

        await self._wait_until(
            lambda: (
                outcome() is not AcksAllOutcome.WAIT
                or self.role != LEADER
                or self.leader_epoch != epoch
            ),
            timeout_ms / 1000,
        )
        if self.role != LEADER or self.leader_epoch != epoch:
            return self.not_leader()
        settled = outcome()
        if settled is AcksAllOutcome.ACKNOWLEDGE:
            return reply
        if settled is AcksAllOutcome.NOT_ENOUGH_REPLICAS_AFTER_APPEND:
            return error_reply(
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                f"appended at {first}, but the ISR is {list(self.isr)}, fewer than "
                f"min.insync.replicas={min_isr}: not acknowledged; the producer retries it",
            )
        return error_reply(
            ErrorCode.REQUEST_TIMED_OUT,
            f"appended at {first}, not replicated to the ISR {list(self.isr)} within "
            f"{timeout_ms} ms",
        )

    # ---------------------------------------------------------------------- follower side

    def append_from_leader(self, fetched: FetchedRecords) -> None:
        """What the leader sent for this partition: records up to its log end, and its high
        watermark, which is how a follower learns it (as in Kafka)."""
        if fetched.records:
            self.log.append_as_follower(fetched.records)
            if self.path_trace is not None:
                self.path_trace.appended_fetched(self.log.log_end_offset)
        self.log.high_watermark = min(fetched.high_watermark, self.log.log_end_offset)
        # The leader's records deleted (DeleteRecords) go here too, as far as this log is known
        # to hold the same records (its high watermark).
        if fetched.log_start_offset > self.log.log_start_offset:
            self.log.delete_records_before(min(fetched.log_start_offset,
                                               self.log.high_watermark))
        self.notify()

    # ------------------------------------------------------------------------ both sides

    def stop(self) -> None:
        """Stop serving (on the host's loop): waiters wake and find the replica offline."""
        self.isr_manager.cancel()
        self.role = OFFLINE
        self.leader_state = None
        self.notify()

    def release(self, delete: bool = False) -> None:
        """Close the log (flushing it), and with `delete` remove it from disk (topic deletion).
        Blocking file work: the host runs it on a thread, after `stop`."""
        if not self.log.closed:
            self.log.close()
        if delete:
            shutil.rmtree(self.log_dir, ignore_errors=True)
