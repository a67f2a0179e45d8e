"""PartitionReplica: one Ray actor per topic, partition and broker, owning that replica's log.

As leader it appends produce requests, answers fetches from consumers and followers, keeps the
ISR and moves the high watermark (the arithmetic is `actors.replication.LeaderState`). As
follower it pulls from the leader's actor and truncates where the leader epochs say (KIP-101).

It is an async actor: long-poll fetches and acks=all produce requests wait on the event loop
while others run. Everything runs on that one loop, so the log needs no locks; but two calls from
one caller may run in either order, which is why idempotent produce requests are ordered by their
sequence numbers, not by arrival.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray

from actors.config import BrokerConfig, TopicConfig
from actors.errors import ErrorCode, error_reply
from actors.metrics import ReplicaMetrics
from actors.naming import broker_name, replica_name
from actors.offset_manager import (
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    OffsetCache,
    encode_commit,
)
from actors.replication import (
    AcksAllOutcome,
    LeaderState,
    acks_all_outcome,
    follower_truncation,
)
from logstore.batch import build_batch, decode_batches, validate_batches
from logstore.errors import (
    CorruptRecordError,
    InvalidRecordError,
    LogStoreError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from logstore.log import Log
from logstore.producer_state import SequenceOutcome

log = logging.getLogger(__name__)

LEADER, FOLLOWER, OFFLINE = "leader", "follower", "offline"

# How long a leader holds an idempotent batch that arrived ahead of its predecessor (Ray may run
# two calls of one producer out of order) before answering OUT_OF_ORDER_SEQUENCE_NUMBER.
REORDER_WAIT_S = 2.0


def _now_ms() -> int:
    return int(time.time() * 1000)


class PartitionReplica:
    """One replica of one partition. Created by its broker, pinned to the broker's node."""

    def __init__(
        self,
        topic: str,
        partition: int,
        broker_id: int,
        log_dir: str,
        topic_config: dict[str, Any],
        broker_config: dict[str, Any],
        namespace: str,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.namespace = namespace
        self.config = TopicConfig.from_dict(topic_config)
        self.broker_config = BrokerConfig.from_dict(broker_config)
        self.log_dir = Path(log_dir)
        self.log = Log.open(self.log_dir, self.config.log)

        self.role = OFFLINE
        self.leader_id = -1
        self.leader_epoch = -1
        self.controller_epoch = -1
        self.zk_version = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.leader_state: LeaderState | None = None

        # Set and replaced on every change of log, high watermark or role: waiters wake up and
        # look again (a broadcast, where an asyncio.Condition would need its lock held).
        self._changed: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._isr_write_in_progress = False
        self._handles: dict[str, Any] = {}
        # On `__consumer_offsets` the leader is the offset manager of the groups mapped here.
        self.offsets: OffsetCache | None = None
        self.metrics = ReplicaMetrics(topic, partition, broker_id)
        # Everything allocated so far (Ray, the modules, the opened log) lives as long as the
        # process: out of the collector's sight, a full collection no longer walks it, which
        # otherwise stalls every request behind it for tens of milliseconds every few seconds.
        gc.freeze()

    # ------------------------------------------------------------------ waiting and waking

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_until(self, predicate: Callable[[], bool], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._changed is None:
                self._changed = asyncio.Event()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), remaining)
        return True

    def _handle(self, name: str) -> Any:
        handle = self._handles.get(name)
        if handle is None:
            handle = ray.get_actor(name, namespace=self.namespace)
            self._handles[name] = handle
        return handle

    def _forget(self, name: str) -> None:
        self._handles.pop(name, None)

    def _not_leader(self) -> dict[str, Any]:
        return error_reply(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {self.broker_id} is not the leader of {self.topic}-{self.partition}"
            + (f"; broker {self.leader_id} is" if self.leader_id >= 0 else "")
            + ": refresh metadata and send to the leader",
            leader=self.leader_id if self.leader_id >= 0 else None,
        )

    # --------------------------------------------------------------------- control plane

    async def leader_and_isr(self, state: dict[str, Any]) -> dict[str, Any]:
        """The controller's word on who leads, at which epochs (Kafka's LeaderAndIsr)."""
        if state["controller_epoch"] < self.controller_epoch:
            return error_reply(
                ErrorCode.STALE_CONTROLLER_EPOCH,
                f"controller epoch {state['controller_epoch']} is older than "
                f"{self.controller_epoch}: ignored",
            )
        if state["leader_epoch"] < self.leader_epoch or (
            state["leader_epoch"] == self.leader_epoch
            and self.role != OFFLINE
            and state["leader"] == self.leader_id
            and state.get("zk_version", -1) <= self.zk_version
        ):
            # Already applied (the controller resends on failover): nothing to do.
            return {"error": 0, "role": self.role}
        self.controller_epoch = state["controller_epoch"]
        self.replicas = tuple(state["replicas"])
        old_isr, self.isr = set(self.isr), tuple(state["isr"])
        self.zk_version = state.get("zk_version", -1)
        if state["leader"] == self.broker_id:
            if self.role == LEADER:
                # The controller may change our ISR (it drops dead brokers itself, bumping the
                # epoch): count that as the leader's own shrinks and expands are, so the metric
                # shows every ISR change of a partition whoever wrote it.
                if old_isr - set(self.isr):
                    self.metrics.isr_changed("shrink")
                if set(self.isr) - old_isr:
                    self.metrics.isr_changed("expand")
            self._become_leader(state)
        else:
            self._become_follower(state)
        return {"error": 0, "role": self.role}

    def _spawn(self, work) -> None:
        self._tasks = [task for task in self._tasks if not task.done()]
        self._tasks.append(asyncio.ensure_future(work))

    def _cancel_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    def _become_leader(self, state: dict[str, Any]) -> None:
        self._cancel_tasks()
        now = _now_ms()
        self.role = LEADER
        self.leader_id = self.broker_id
        self.leader_epoch = state["leader_epoch"]
        # The epoch starts at the log end: a follower asking where it ends learns it here.
        self.log.epoch_cache.assign(self.leader_epoch, self.log.log_end_offset)
        self.leader_state = LeaderState.become_leader(
            self.broker_id,
            self.replicas,
            self.isr,
            self.leader_epoch,
            log_end_offset=self.log.log_end_offset,
            high_watermark=self.log.high_watermark,
            now_ms=now,
        )
        self._advance_high_watermark()
        self._report_under_replicated()
        if self.topic == OFFSETS_TOPIC:
            self._load_offsets()
        self._spawn(self._maintain_isr())
        self._spawn(self._maintain_log())
        self._notify()

    def _become_follower(self, state: dict[str, Any]) -> None:
        self._cancel_tasks()
        self.offsets = None
        self.role = FOLLOWER if state["leader"] >= 0 else OFFLINE
        self.leader_id = state["leader"]
        self.leader_epoch = state["leader_epoch"]
        self.leader_state = None
        self._report_under_replicated()
        if self.role == FOLLOWER:
            self._spawn(self._follow(self.leader_id, self.leader_epoch))
        self._spawn(self._maintain_log())
        self._notify()

    async def fence(self) -> None:
        """The broker lost its ZooKeeper session: lead nothing until the controller says so."""
        self._cancel_tasks()
        self.role = OFFLINE
        self.leader_state = None
        self._report_under_replicated()
        self._notify()

    def _step_down(self, reason: str) -> None:
        log.warning("%s-%d on broker %d steps down: %s", self.topic, self.partition,
                    self.broker_id, reason)
        self._cancel_tasks()
        self.role = OFFLINE
        self.leader_state = None
        self._report_under_replicated()
        self._notify()

    def _report_under_replicated(self) -> None:
        # Only the leader reports its partition (as Kafka's UnderReplicatedPartitions): a
        # follower or an offline replica reports 0, so summing over brokers counts each once.
        self.metrics.under_replicated(self.role == LEADER and len(self.isr) < len(self.replicas))

    # ------------------------------------------------------------------------ leader side

    def _advance_high_watermark(self) -> None:
        state = self.leader_state
        if state is not None and state.advance_high_watermark(self.log.log_end_offset):
            self.log.high_watermark = state.high_watermark
            self._notify()

    async def produce(self, records: bytes, acks: int = -1, timeout_ms: int = 30_000) -> dict:
        """Append one producer batch (or several) as leader; reply with the base offset."""
        started = time.perf_counter()
        reply = await self._produce(records, acks, timeout_ms)
        # Every request is timed, refused ones too, as Kafka's request metrics do.
        self.metrics.produce_latency((time.perf_counter() - started) * 1000)
        return reply

    async def _produce(self, records: bytes, acks: int, timeout_ms: int) -> dict:
        if not isinstance(timeout_ms, (int, float)):
            # Before the append: acks=all would only trip on it afterwards, batch in the log.
            raise TypeError(f"timeout_ms must be a number, got {type(timeout_ms).__name__}")
        if type(acks) is not int or acks not in (0, 1, -1):
            return error_reply(ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks}: use 0, 1 or -1")
        if self.role != LEADER:
            return self._not_leader()
        try:
            headers = validate_batches(
                records, self.config.log.message_max_bytes, verify_records=False
            )
        except RecordTooLargeError as error:
            return error_reply(ErrorCode.MESSAGE_TOO_LARGE, str(error))
        except (CorruptRecordError, InvalidRecordError) as error:
            return error_reply(ErrorCode.CORRUPT_MESSAGE, str(error))
        if acks == -1 and len(self.isr) < self.config.min_insync_replicas:
            return error_reply(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replicas "
                f"{list(self.isr)}, fewer than min.insync.replicas="
                f"{self.config.min_insync_replicas}: wait for followers to catch up",
            )
        epoch = self.leader_epoch
        first = headers[0]
        if first.producer_id >= 0:
            duplicate = await self._sequence_gate(headers)
            if isinstance(duplicate, dict):
                return duplicate
            if duplicate is not None:
                return await self._acknowledge(acks, duplicate[0], duplicate[1], -1, timeout_ms)
            if self.role != LEADER or self.leader_epoch != epoch:
                return self._not_leader()
        try:
            info = self.log.append_as_leader(records, self.leader_epoch)
        except LogStoreError as error:
            return error_reply(ErrorCode.KAFKA_STORAGE_ERROR, f"append failed: {error}")
        # Counted once appended (Kafka's MessagesInPerSec), whatever the acks wait brings; the
        # record count comes from the batch headers, already parsed, never from the records.
        self.metrics.produced(sum(header.record_count for header in headers), len(records))
        self._advance_high_watermark()
        self._notify()
        return await self._acknowledge(
            acks, info.first_offset, info.last_offset, info.log_append_time_ms, timeout_ms
        )

    async def _sequence_gate(self, headers: list) -> dict | tuple[int, int] | None:
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
            await self._wait_until(
                lambda before=before: self.log.log_end_offset != before or self.role != LEADER,
                remaining,
            )

    async def _acknowledge(
        self, acks: int, first: int, last: int, append_time_ms: int, timeout_ms: int
    ) -> dict:
        reply = {"error": 0, "base_offset": first, "last_offset": last,
                 "log_append_time": append_time_ms,
                 "log_start_offset": self.log.log_start_offset}
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
            return self._not_leader()
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

    async def fetch(
        self,
        offset: int,
        max_bytes: int = 1_048_576,
        *,
        replica_id: int = -1,
        leader_epoch: int = -1,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> dict:
        """Whole batches from `offset`: up to the high watermark for consumers, up to the log
        end for followers (`replica_id` >= 0). Waits up to `max_wait_ms` for `min_bytes`."""
        started = time.perf_counter()
        reply = await self._fetch(offset, max_bytes, replica_id, leader_epoch, max_wait_ms,
                                  min_bytes)
        data = reply.get("records")
        # Records served: those from `offset` on (a consumer drops the ones before it in the
        # first batch), read off the reply's offsets, not by decoding the batches. Exact
        # except across compaction gaps, where it counts the gap too.
        count = reply["next_offset"] - offset if data else 0
        self.metrics.fetched(replica_id >= 0, count, len(data) if data else 0,
                             (time.perf_counter() - started) * 1000)
        return reply

    async def _fetch(
        self, offset: int, max_bytes: int, replica_id: int, leader_epoch: int,
        max_wait_ms: int, min_bytes: int,
    ) -> dict:
        if self.role != LEADER:
            return self._not_leader()
        if leader_epoch >= 0 and leader_epoch != self.leader_epoch:
            code = (
                ErrorCode.FENCED_LEADER_EPOCH
                if leader_epoch < self.leader_epoch
                else ErrorCode.UNKNOWN_LEADER_EPOCH
            )
            return error_reply(code, f"leader epoch {leader_epoch}, this leader is at "
                                     f"{self.leader_epoch}", leader=self.leader_id)
        epoch = self.leader_epoch
        if replica_id >= 0:
            self._record_follower_fetch(replica_id, offset)
        deadline = time.monotonic() + max_wait_ms / 1000
        # A consumer reads up to the high watermark, so its move is news; a follower reads up
        # to the log end and learns the high watermark with its next records, as in Kafka:
        # waking it for the watermark alone would cost two more calls per batch.
        watches_watermark = replica_id < 0
        while True:
            try:
                data = self.log.read(
                    offset, max_bytes,
                    max_offset=None if replica_id >= 0 else self.log.high_watermark,
                )
            except OffsetOutOfRangeError as error:
                return error_reply(
                    ErrorCode.OFFSET_OUT_OF_RANGE, str(error),
                    log_start_offset=self.log.log_start_offset,
                    log_end_offset=self.log.log_end_offset,
                    high_watermark=self.log.high_watermark,
                )
            remaining = deadline - time.monotonic()
            if len(data.records) >= min_bytes or remaining <= 0:
                return {
                    "error": 0,
                    "records": data.records,
                    "next_offset": data.next_offset,
                    "high_watermark": self.log.high_watermark,
                    "log_start_offset": data.log_start_offset,
                    "log_end_offset": data.log_end_offset,
                }
            end, high_watermark = self.log.log_end_offset, self.log.high_watermark
            await self._wait_until(
                lambda end=end, high_watermark=high_watermark: (
                    self.log.log_end_offset != end
                    or (watches_watermark and self.log.high_watermark != high_watermark)
                    or self.role != LEADER
                    or self.leader_epoch != epoch
                ),
                remaining,
            )
            if self.role != LEADER or self.leader_epoch != epoch:
                return self._not_leader()

    def _record_follower_fetch(self, follower_id: int, offset: int) -> None:
        state = self.leader_state
        if state is None:
            return
        state.record_follower_fetch(follower_id, offset, self.log.log_end_offset, _now_ms())
        self._advance_high_watermark()
        if state.followers_to_add() and not self._isr_write_in_progress:
            new_isr = set(state.isr) | state.followers_to_add()
            self._spawn(self._write_isr(new_isr, "expand"))

    async def _write_isr(self, new_isr: set[int], change: str) -> None:
        """Write the new ISR to ZooKeeper, conditional on the version this leader last saw."""
        if self._isr_write_in_progress or self.leader_state is None:
            return
        self._isr_write_in_progress = True
        epoch = self.leader_epoch
        try:
            new_state = {
                "leader": self.broker_id,
                "leader_epoch": epoch,
                "isr": sorted(new_isr),
                "controller_epoch": self.controller_epoch,
            }
            broker = self._handle(broker_name(self.broker_id))
            reply = await broker.update_partition_state.remote(
                self.topic, self.partition, new_state, self.zk_version
            )
            if self.leader_state is None or self.leader_epoch != epoch:
                return
            if reply.get("error"):
                self._step_down(f"ISR {change} to {sorted(new_isr)} refused: {reply['message']}")
                return
            self.zk_version = reply["version"]
            self.isr = tuple(sorted(new_isr))
            self.leader_state.apply_isr(new_isr)
            self.metrics.isr_changed(change)
            self._report_under_replicated()
            log.info("%s-%d ISR %s to %s", self.topic, self.partition, change, self.isr)
            self._advance_high_watermark()
            self._notify()
        finally:
            self._isr_write_in_progress = False

    async def _maintain_isr(self) -> None:
        lag_ms = self.broker_config.replica_lag_time_max_ms
        while self.role == LEADER and self.leader_state is not None:
            await asyncio.sleep(lag_ms / 2000)
            state = self.leader_state
            if state is None:
                return
            lagging = state.followers_to_remove(self.log.log_end_offset, _now_ms(), lag_ms)
            if lagging:
                await self._write_isr(set(state.isr) - lagging, "shrink")
            # Two fsyncs: on a thread, so produce and fetch requests do not wait behind them.
            await asyncio.to_thread(self.log.checkpoint_high_watermark)

    async def offsets_for_leader_epoch(self, epoch: int, current_leader_epoch: int = -1) -> dict:
        """Where `epoch` ends in this leader's log (Kafka's OffsetsForLeaderEpoch)."""
        if self.role != LEADER:
            return self._not_leader()
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            return error_reply(ErrorCode.FENCED_LEADER_EPOCH,
                               f"leader epoch {current_leader_epoch} is not {self.leader_epoch}")
        found_epoch, end_offset = self.log.end_offset_for_epoch(epoch)
        return {"error": 0, "leader_epoch": found_epoch, "end_offset": end_offset}

    async def list_offsets(self, timestamp_ms: int) -> dict:
        """-2: log start, -1: high watermark (what a consumer can read), else first offset at
        or after the timestamp (None if none), as Kafka's ListOffsets."""
        if self.role != LEADER:
            return self._not_leader()
        if timestamp_ms == -1:
            offset = self.log.high_watermark
        elif timestamp_ms == -2:
            offset = self.log.log_start_offset
        else:
            offset = self.log.offset_for_timestamp(timestamp_ms)
            if offset is not None and offset >= self.log.high_watermark:
                offset = None  # only records a consumer may read count
        return {"error": 0, "offset": offset}

    # ------------------------------------------------------------------- offset manager

    def _load_offsets(self) -> None:
        """Rebuild the offset cache from the whole log: this replica just became leader."""
        cache = OffsetCache()
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 1 << 20)
            if data.next_offset <= offset:
                break
            cache.load((r.key, r.value) for r in decode_batches(data.records, min_offset=offset))
            offset = data.next_offset
        self.offsets = cache

    async def commit_offsets(
        self, group: str, offsets: list[list[Any]], timeout_ms: int = 5000
    ) -> dict:
        """Store a group's offsets `[[topic, partition, offset, metadata], ...]`; answer once
        they are replicated to the ISR (acks=all), as Kafka's offset manager does."""
        if self.role != LEADER or self.offsets is None:
            return self._not_leader()
        now = _now_ms()
        records = []
        for topic, partition, offset, metadata in offsets:
            key, value = encode_commit(group, topic, partition,
                                       OffsetAndMetadata(offset, metadata or "", now))
            records.append((key, value, now, None))
        reply = await self.produce(build_batch(records), acks=-1, timeout_ms=timeout_ms)
        if not reply.get("error") and self.offsets is not None:
            for key, value, _timestamp, _headers in records:
                self.offsets.apply(key, value)
        return reply

    async def fetch_offsets(self, group: str, partitions: list[list[Any]] | None = None) -> dict:
        """A group's committed offsets, from the cache: `[[topic, partition, offset, meta]]`."""
        if self.role != LEADER or self.offsets is None:
            return self._not_leader()
        found = self.offsets.get(group, partitions)
        return {"error": 0, "offsets": [[topic, partition, committed.offset, committed.metadata]
                                        for (topic, partition), committed in found.items()]}

    async def offset_groups(self) -> dict:
        if self.role != LEADER or self.offsets is None:
            return self._not_leader()
        return {"error": 0, "groups": self.offsets.groups()}

    # ---------------------------------------------------------------------- follower side

    async def _follow(self, leader_id: int, epoch: int) -> None:
        """Pull from the leader's actor until the role or epoch changes."""
        backoff_s = self.broker_config.replica_fetch_backoff_ms / 1000
        name = replica_name(self.topic, self.partition, leader_id)
        truncated = False
        while self.role == FOLLOWER and self.leader_epoch == epoch:
            try:
                leader = self._handle(name)
                if not truncated:
                    await self._truncate_to_leader(leader, epoch)
                    truncated = True
                reply = await leader.fetch.remote(
                    self.log.log_end_offset,
                    self.broker_config.replica_fetch_max_bytes,
                    replica_id=self.broker_id,
                    leader_epoch=epoch,
                    max_wait_ms=self.broker_config.replica_fetch_wait_max_ms,
                )
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the leader's actor died or is not there yet
                log.debug("fetch from %s failed: %r", name, error)
                self._forget(name)
                await asyncio.sleep(backoff_s)
                continue
            if self.role != FOLLOWER or self.leader_epoch != epoch:
                return
            code = reply.get("error", 0)
            if code == ErrorCode.OFFSET_OUT_OF_RANGE:
                if self.log.log_end_offset < reply["log_start_offset"]:
                    self.log.truncate_fully_and_start_at(reply["log_start_offset"])
                else:
                    truncated = False
                continue
            if code:
                await asyncio.sleep(backoff_s)
                continue
            if reply["records"]:
                self.log.append_as_follower(reply["records"])
            self.log.high_watermark = min(reply["high_watermark"], self.log.log_end_offset)
            self._notify()

    async def _truncate_to_leader(self, leader: Any, epoch: int) -> None:
        ask = self.log.epoch_cache.latest_epoch
        while ask is not None:
            answer = await leader.offsets_for_leader_epoch.remote(ask, epoch)
            if answer.get("error"):
                raise RuntimeError(answer["message"])
            decision = follower_truncation(
                (answer["leader_epoch"], answer["end_offset"]),
                self.log.end_offset_for_epoch,
                self.log.log_end_offset,
                self.log.high_watermark,
            )
            if decision.offset is not None:
                if decision.offset < self.log.log_end_offset:
                    log.info("%s-%d on broker %d truncates to %d (leader epoch %d)",
                             self.topic, self.partition, self.broker_id, decision.offset, epoch)
                    self.log.truncate_to(decision.offset)
                return
            ask = decision.ask_epoch

    # ------------------------------------------------------------------------ both sides

    async def _maintain_log(self) -> None:
        """Retention, compaction and the flush policy, between requests."""
        interval_s = min(self.config.log.segment_ms, 30_000) / 1000
        while True:
            await asyncio.sleep(interval_s)
            self.log.maybe_flush()
            if self.config.log.delete:
                self.log.delete_old_segments()
            if self.config.log.compact:
                self.log.compact()

    async def describe(self) -> dict:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "broker": self.broker_id,
            "role": self.role,
            "leader": self.leader_id,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
            "log_start_offset": self.log.log_start_offset,
            "log_end_offset": self.log.log_end_offset,
            "high_watermark": self.log.high_watermark,
        }

    async def pid(self) -> int:
        return os.getpid()

    async def close(self, delete: bool = False) -> None:
        """Stop serving; with `delete`, remove the log from disk (topic deletion)."""
        self._cancel_tasks()
        self.role = OFFLINE
        self._notify()
        if not self.log.closed:
            self.log.close()
        if delete:
            shutil.rmtree(self.log_dir, ignore_errors=True)


PartitionReplicaActor = ray.remote(num_cpus=0, max_concurrency=1000)(PartitionReplica)
