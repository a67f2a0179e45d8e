"""Kafka's transaction coordinator, on the broker that leads a transactional id's partition of
`__transaction_state`: InitProducerId with a transactional id, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, for Kafka clients (through the listener) and rafka's own producers.

Each transactional id's state (`actors/txn/transaction_state.py`, pure) lives in memory for the
partitions this broker leads, and every change is first written to the partition with acks=all:
a coordinator that lost its leadership cannot write, so it cannot act (its replica refuses the
append). When a broker becomes a partition's leader it loads the partition's records (the
newest per id wins) before it answers for those ids, and finishes every transaction it finds
being ended.

Ending a transaction: the prepared state (PrepareCommit or PrepareAbort) is written, the client
is answered, and the markers go to the leader of every partition in the transaction (each
answered once its ISR holds it; retried, against fresh metadata, until they are all written);
then the Complete state is written. Until then the producer's next transaction waits
(CONCURRENT_TRANSACTIONS). A transaction left Ongoing past its transaction.timeout.ms is
aborted by the coordinator with the producer's epoch bumped, which fences the producer.
The coordinator epoch carried in the markers is the partition's leader epoch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import ray

from rafka.actors.broker_view import BrokerView
from rafka.actors.errors import ErrorCode, code_of
from rafka.actors.messages import (
    Appended,
    ErrorReply,
    FetchedRecords,
    PartitionFetch,
    PartitionProduce,
    TxnMarker,
)
from rafka.actors.naming import cluster_namespace
from rafka.actors.offsets_topic import (
    OFFSETS_TOPIC,
    ensure_internal_topic,
    ensure_offsets_topic,
    offsets_partition,
)
from rafka.actors.txn import transaction_state as txn
from rafka.actors.txn.transaction_log import decode_state, encode_state
from rafka.actors.txn.transaction_state import (
    TRANSACTION_STATE_TOPIC,
    TransactionMetadata,
    Transition,
)
from rafka.common.clock import wall_clock_ms
from rafka.common.producer_ids import random_producer_id
from rafka.common.topic_partition import TopicPartition
from rafka.logstore.batch import build_batch, decode_batches

log = logging.getLogger(__name__)

# How often expired transactions are looked for.
TICK_S = 1.0
WRITE_TIMEOUT_MS = 10_000
# How long a request waits for the previous transaction's markers before it is answered
# CONCURRENT_TRANSACTIONS (the client asks again).
ENDING_WAIT_S = 5.0
# Between rounds of markers that could not all be written (a leader moving, say).
MARKER_RETRY_S = 0.2


@dataclass
class _Partition:
    """The transactional ids of one `__transaction_state` partition this broker leads."""

    leader_epoch: int
    transactions: dict[str, TransactionMetadata] = field(default_factory=dict)


class TransactionCoordinator:
    """The transactional ids of the `__transaction_state` partitions this broker leads."""

    def __init__(self, broker: BrokerView) -> None:
        self.broker = broker
        self._partition_count: int | None = None
        self._partitions: dict[int, _Partition] = {}
        self._loading: dict[int, asyncio.Lock] = {}
        # One request at a time per transactional id, as Kafka's coordinator locks its state.
        self._locks: dict[str, asyncio.Lock] = {}
        # Each id's ending (markers, then Complete), with the load of its partition it began
        # under: an ending stops once that load is replaced, and the new load starts its own.
        self._endings: dict[str, tuple[_Partition, asyncio.Future]] = {}
        self._hosts: dict[str, Any] = {}
        self._ticker: asyncio.Task | None = None

    # ----------------------------------------------------------------- where an id lives

    async def partition_of(self, transactional_id: str) -> int | None:
        """The id's `__transaction_state` partition, creating the topic if it is missing (None
        until it has partitions: the client asks again)."""
        if self._partition_count is None:
            metadata = await self.broker.metadata([TRANSACTION_STATE_TOPIC])
            partitions = metadata["topics"].get(TRANSACTION_STATE_TOPIC)
            if not partitions:
                assert self.broker.store is not None
                await asyncio.to_thread(
                    ensure_internal_topic, self.broker.store, TRANSACTION_STATE_TOPIC,
                    txn.DEFAULT_TRANSACTION_STATE_PARTITIONS, txn.TRANSACTION_STATE_TOPIC_CONFIG)
                return None
            self._partition_count = len(partitions)
        return txn.transaction_state_partition(transactional_id, self._partition_count)

    async def _coordinating(self, transactional_id: str
                            ) -> tuple[ErrorCode, int, _Partition | None]:
        """`(NONE, partition, its state)` if this broker coordinates the id (the partition
        loaded first if this broker just became its leader), else `(error, -1, None)`."""
        partition = await self.partition_of(transactional_id)
        if partition is None:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, None
        error, loaded = await self._led(partition)
        return error, partition, loaded

    async def _led(self, partition: int) -> tuple[ErrorCode, _Partition | None]:
        """The partition's state if this broker leads it, loaded first where it just became
        its leader; else NOT_COORDINATOR, or COORDINATOR_LOAD_IN_PROGRESS while it loads."""
        state = self.broker.replica_states.get(TopicPartition(TRANSACTION_STATE_TOPIC, partition))
        if state is None or state.leader != self.broker.broker_id:
            self._partitions.pop(partition, None)
            return ErrorCode.NOT_COORDINATOR, None
        loaded = self._partitions.get(partition)
        if loaded is None or loaded.leader_epoch != state.leader_epoch:
            async with self._loading.setdefault(partition, asyncio.Lock()):
                loaded = self._partitions.get(partition)
                if loaded is None or loaded.leader_epoch != state.leader_epoch:
                    loaded = await self._load(partition, state.leader_epoch)
        if loaded is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        return ErrorCode.NONE, loaded

    async def _load(self, partition: int, leader_epoch: int) -> _Partition | None:
        """Read the partition's records, as its new leader; None if they cannot all be read
        yet (the replica is not leader yet, or its high watermark is below its log end)."""
        host = self.broker.replica_host_for(TRANSACTION_STATE_TOPIC, partition)
        if host is None:
            return None
        loaded = _Partition(leader_epoch)
        offset = 0
        while True:
            try:
                [reply] = await host.fetch.remote(
                    [PartitionFetch(TRANSACTION_STATE_TOPIC, partition, offset, 1 << 20)])
            except ray.exceptions.RayError as error:
                log.warning("could not read %s-%d: %r", TRANSACTION_STATE_TOPIC, partition, error)
                return None
            if not isinstance(reply, FetchedRecords):
                start = reply.log_start_offset
                if reply.code == ErrorCode.OFFSET_OUT_OF_RANGE and start > offset:
                    offset = start
                    continue
                return None
            for record in decode_batches(reply.records, min_offset=offset):
                if record.key is None or record.value is None:
                    continue
                try:
                    metadata = decode_state(record.key, record.value)
                except ValueError as error:
                    log.warning("skipping record %d of %s-%d: %s", record.offset,
                                TRANSACTION_STATE_TOPIC, partition, error)
                    continue
                loaded.transactions[metadata.transactional_id] = metadata
            before, offset = offset, reply.next_offset
            if offset >= reply.high_watermark:
                if reply.high_watermark < reply.log_end_offset:
                    return None  # the rest is not known to be committed yet: ask again
                break
            if offset <= before:
                return None
        self._partitions[partition] = loaded
        log.info("broker %d coordinates %d transactional ids of %s-%d (leader epoch %d)",
                 self.broker.broker_id, len(loaded.transactions), TRANSACTION_STATE_TOPIC,
                 partition, leader_epoch)
        for metadata in loaded.transactions.values():
            if metadata.state.preparing:
                self._finish_later(partition, metadata)
        return loaded

    def _lock(self, transactional_id: str) -> asyncio.Lock:
        return self._locks.setdefault(transactional_id, asyncio.Lock())

    async def _write(self, partition: int, loaded: _Partition, metadata: TransactionMetadata
                     ) -> ErrorCode:
        """Store the id's new state (acks=all), then hold it in memory."""
        key, value = encode_state(metadata)
        host = self.broker.replica_host_for(TRANSACTION_STATE_TOPIC, partition)
        if host is None:
            return ErrorCode.NOT_COORDINATOR
        batch = build_batch([(key, value, wall_clock_ms(), None)])
        try:
            [reply] = await host.produce.remote(
                [PartitionProduce(TRANSACTION_STATE_TOPIC, partition, batch)], -1,
                WRITE_TIMEOUT_MS)
        except ray.exceptions.RayError as error:
            log.warning("could not write %s's state: %r", metadata.transactional_id, error)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if not isinstance(reply, Appended):
            if reply.code in (ErrorCode.NOT_LEADER_OR_FOLLOWER,
                                  ErrorCode.UNKNOWN_TOPIC_OR_PARTITION):
                self._partitions.pop(partition, None)
                return ErrorCode.NOT_COORDINATOR
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if self._partitions.get(partition) is not loaded:
            return ErrorCode.NOT_COORDINATOR  # the partition moved while this was written
        loaded.transactions[metadata.transactional_id] = metadata
        return ErrorCode.NONE

    async def _apply(
        self, transactional_id: str,
        decide: Callable[[TransactionMetadata | None], Transition],
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        """Run one request on the id's state: `decide(current)` returns a Transition; its new
        state is written before the request is answered. Returns the answer's error and the
        state after it.

        A request that finds the previous transaction being ended waits for that (up to
        ENDING_WAIT_S) rather than answering CONCURRENT_TRANSACTIONS at once: the producer's
        next transaction then starts the moment the last one is complete, not a client's
        retry backoff later."""
        error, partition, loaded = await self._coordinating(transactional_id)
        if loaded is None:
            return error, None
        _began_under, ending = self._endings.get(transactional_id, (None, None))
        if ending is not None and not ending.done():
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(ending), ENDING_WAIT_S)
        async with self._lock(transactional_id):
            current = loaded.transactions.get(transactional_id)
            transition: Transition = decide(current)
            if transition.new is None:
                return transition.error, current
            written = await self._write(partition, loaded, transition.new)
            if written:
                return written, None
            if transition.new.state.preparing:
                self._finish_later(partition, transition.new)
            return transition.error, transition.new

    # ------------------------------------------------------------------------ requests

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> tuple[ErrorCode, int, int]:
        """`(error, producer_id, producer_epoch)` for a transactional producer starting."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST, -1, -1
        error, metadata = await self._apply(transactional_id, lambda current: (
            txn.init_producer_id(current, transactional_id, timeout_ms, wall_clock_ms(),
                                 random_producer_id, expected=expected)))
        if error or metadata is None:
            return error, -1, -1
        return ErrorCode.NONE, metadata.producer_id, metadata.producer_epoch

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> ErrorCode:
        wanted = list(partitions)
        error, _ = await self._apply(transactional_id, lambda current: txn.add_partitions(
            current, producer_id, producer_epoch, wanted, wall_clock_ms()))
        return error

    async def add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str,
    ) -> ErrorCode:
        """AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction,
        so that the offsets the producer then commits in it (TxnOffsetCommit) end with it."""
        metadata = await self.broker.metadata([OFFSETS_TOPIC])
        partitions = metadata["topics"].get(OFFSETS_TOPIC)
        if not partitions:
            assert self.broker.store is not None
            await asyncio.to_thread(ensure_offsets_topic, self.broker.store)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE  # it has leaders in a moment
        return await self.add_partitions(
            transactional_id, producer_id, producer_epoch,
            [(OFFSETS_TOPIC, offsets_partition(group_id, len(partitions)))])

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
    ) -> ErrorCode:
        error, _ = await self._apply(transactional_id, lambda current: txn.end_transaction(
            current, producer_id, producer_epoch, commit, wall_clock_ms()))
        return error

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
        """Whether each partition is in the producer's Ongoing transaction, for a partition
        leader about to take the transaction's first batch there (KIP-890, part 1;
        `txn.verify_partitions`). Read without the id's lock: a state being written is not
        the id's yet, and the leader's guard catches an end that overtakes the answer."""
        if not transactional_id:
            return ErrorCode.INVALID_REQUEST
        error, _partition, loaded = await self._coordinating(transactional_id)
        if loaded is None:
            return error
        return txn.verify_partitions(loaded.transactions.get(transactional_id), producer_id,
                                     producer_epoch, partitions)

    async def describe_transaction(self, transactional_id: str
                                   ) -> tuple[ErrorCode, TransactionMetadata | None]:
        """The id's state as this coordinator holds it (Kafka's DescribeTransactions):
        NOT_COORDINATOR where another broker coordinates it, TRANSACTIONAL_ID_NOT_FOUND where
        no producer ever used it."""
        error, _partition, loaded = await self._coordinating(transactional_id)
        if loaded is None:
            return error, None
        found = loaded.transactions.get(transactional_id)
        return (ErrorCode.NONE if found is not None
                else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND), found

    async def list_transactions(self) -> tuple[ErrorCode, list[TransactionMetadata]]:
        """Every transactional id of the `__transaction_state` partitions this broker leads
        (Kafka's ListTransactions asks each broker), each partition loaded first where this
        broker just became its leader; COORDINATOR_LOAD_IN_PROGRESS while one cannot be."""
        found: list[TransactionMetadata] = []
        for tp, state in sorted(self.broker.replica_states.items()):
            if tp.topic != TRANSACTION_STATE_TOPIC or state.leader != self.broker.broker_id:
                continue
            error, loaded = await self._led(tp.partition)
            if error == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                return error, []
            if loaded is not None:
                found += loaded.transactions.values()
        return ErrorCode.NONE, found

    # ------------------------------------------------------------------------- markers

    def _finish_later(self, partition: int, metadata: TransactionMetadata) -> None:
        """End a prepared transaction in the background, unless an ending of it under the
        partition's current load is running already. One begun under an earlier load (this
        broker lost the partition and led it again) gives up when it sees the new load, so it
        does not count: were it waited for, nobody would end the transaction."""
        loaded = self._partitions.get(partition)
        if loaded is None:
            return
        began_under, running = self._endings.get(metadata.transactional_id, (None, None))
        if running is not None and not running.done() and began_under is loaded:
            return
        self._endings[metadata.transactional_id] = (loaded, asyncio.ensure_future(
            self._finish(partition, loaded, metadata)))

    async def _finish(self, partition: int, loaded: _Partition,
                      prepared: TransactionMetadata) -> None:
        """Have every marker of a prepared end written, then write the Complete state, while
        `loaded` is this broker's load of the partition."""
        transactional_id = prepared.transactional_id
        while True:
            coordinator_epoch = loaded.leader_epoch
            markers = [TxnMarker(topic, index, prepared.producer_id, prepared.producer_epoch,
                                 prepared.committing, coordinator_epoch)
                       for topic, index in sorted(prepared.partitions)]
            try:
                if await self._write_markers(markers):
                    break
            except Exception as error:  # a host gone mid-call: the next round finds another
                log.warning("markers of %s: %r; retrying", transactional_id, error)
            await asyncio.sleep(MARKER_RETRY_S)
            if self._partitions.get(partition) is not loaded:
                return  # loaded again, here or by another broker: that load finishes it
        async with self._lock(transactional_id):
            if self._partitions.get(partition) is not loaded:
                return
            if loaded.transactions.get(transactional_id) != prepared:
                return
            await self._write(partition, loaded, txn.complete(prepared, wall_clock_ms()))

    async def _write_markers(self, markers: list[TxnMarker]) -> bool:
        """One round: each marker to its partition's leader, every leader host at once; True
        if every one is written, or needs no writing any more (its topic is gone, or a newer
        producer epoch fenced it)."""
        if not markers:
            return True
        metadata = await self.broker.metadata(sorted({m.topic for m in markers}))
        by_host: dict[str, list[TxnMarker]] = {}
        pending = False
        for marker in markers:
            described = metadata["topics"].get(marker.topic)
            if described is None:
                continue  # the topic was deleted: nothing to end there
            host = described.get(marker.partition, {}).get("leader_host")
            if host is None:
                pending = True
                continue
            by_host.setdefault(host, []).append(marker)
        answers = await asyncio.gather(
            *(self._markers_to(name, share) for name, share in by_host.items()))
        for replies in answers:
            if replies is None:
                pending = True
                continue
            for reply in replies:
                if code_of(reply) == ErrorCode.TRANSACTION_COORDINATOR_FENCED:
                    return False  # a newer coordinator has it: this one will see it moved
                if code_of(reply) not in (ErrorCode.NONE, ErrorCode.INVALID_PRODUCER_EPOCH):
                    pending = True  # not the leader any more, say: the next round
        return not pending

    async def _markers_to(self, name: str, markers: list[TxnMarker]
                          ) -> list[ErrorReply | None] | None:
        """The replies of one leader host to its markers; None if it could not be asked."""
        handle = self._hosts.get(name)
        try:
            if handle is None:
                handle = self._hosts[name] = await asyncio.to_thread(
                    ray.get_actor, name, namespace=cluster_namespace(self.broker.cluster_name))
            return await handle.write_txn_markers.remote(markers, WRITE_TIMEOUT_MS)
        except (ValueError, ray.exceptions.RayError) as error:  # gone, or not there yet
            log.info("could not write markers on %s: %r", name, error)
            self._hosts.pop(name, None)
            return None

    # ------------------------------------------------------- leadership and expiry

    def start(self) -> None:
        """Look, every TICK_S, for partitions this broker came to lead (loaded at once, so that
        what their old coordinator began ends without waiting for a client) and for
        transactions past their timeout."""
        if self._ticker is None or self._ticker.done():
            self._ticker = asyncio.ensure_future(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                for tp, state in list(self.broker.replica_states.items()):
                    if (tp.topic == TRANSACTION_STATE_TOPIC
                            and state.leader == self.broker.broker_id):
                        await self._led(tp.partition)
                await self._abort_expired()
            except Exception:  # keep ticking: one bad round must not end recovery or expiry
                log.exception("the transaction coordinator's round failed")

    async def _abort_expired(self) -> None:
        now = wall_clock_ms()
        for partition, loaded in list(self._partitions.items()):
            state = self.broker.replica_states.get(
                TopicPartition(TRANSACTION_STATE_TOPIC, partition))
            if state is None or state.leader != self.broker.broker_id:
                self._partitions.pop(partition, None)
                continue
            for transactional_id, metadata in list(loaded.transactions.items()):
                if not metadata.expired(now):
                    continue
                async with self._lock(transactional_id):
                    current = loaded.transactions.get(transactional_id)
                    if current is None or not current.expired(now):
                        continue
                    log.info("aborting %s's transaction: open for longer than its "
                             "transaction.timeout.ms (%d ms)", transactional_id,
                             current.timeout_ms)
                    aborting = txn.expire(current, now, random_producer_id)
                    if await self._write(partition, loaded, aborting) == ErrorCode.NONE:
                        self._finish_later(partition, aborting)

    def close(self) -> None:
        for task in [self._ticker, *(ending for _loaded, ending in self._endings.values())]:
            if task is not None:
                task.cancel()
        self._endings.clear()
