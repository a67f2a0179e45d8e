"""Kafka's transaction requests, for Kafka clients: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, and the admin's ListTransactions and DescribeTransactions,
answered by the broker's transaction coordinator (`actors/txn/coordinator.py`).
TxnOffsetCommit goes to the group coordinator, which owns the group's offsets; FindCoordinator
for a transactional id is answered there too."""

from __future__ import annotations

from typing import Any

from rafka.actors.errors import ErrorCode
from rafka.actors.txn.transaction_state import select_listed
from rafka.actors.txn.view import TransactionCoordinatorView
from rafka.common.clock import wall_clock_ms
from rafka.common.producer_ids import random_producer_id
from rafka.wire.protocol import Api


class KafkaTransactionHandler:
    """The transaction APIs of one broker's Kafka listener."""

    def __init__(self, coordinator: TransactionCoordinatorView) -> None:
        self.coordinator = coordinator

    async def init_producer_id(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        """A transactional producer's id and bumped epoch from its coordinator. Without a
        transactional id, an idempotent producer's: random (62 bits make a collision
        unlikely), epoch 0; asked again with its id (KIP-360), the next epoch."""
        expected = None
        if version >= 3 and request.producer_id >= 0 and request.producer_epoch >= 0:
            expected = (request.producer_id, request.producer_epoch)
        if request.transactional_id is not None:
            error, producer_id, epoch = await self.coordinator.init_producer_id(
                request.transactional_id, request.transaction_timeout_ms, expected)
        elif expected is not None:
            error, producer_id, epoch = ErrorCode.NONE, expected[0], (expected[1] + 1) % 32768
        else:
            error, producer_id, epoch = ErrorCode.NONE, random_producer_id(), 0
        return {"throttle_time_ms": 0, "error_code": error, "producer_id": producer_id,
                "producer_epoch": epoch}

    async def add_partitions_to_txn(self, api: Api, version: int, request: Any
                                    ) -> dict[str, Any]:
        """v0-3: one transaction's partitions, one error for all of them. v4+ is KIP-890's
        request between brokers (`_add_partitions_batched`)."""
        if version >= 4:
            return await self._add_partitions_batched(api, request)
        wanted = [(topic.name, partition) for topic in request.v3_and_below_topics
                  for partition in topic.partitions]
        error = await self.coordinator.add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, wanted)
        if error == ErrorCode.PRODUCER_FENCED and version < 2:
            error = ErrorCode.INVALID_PRODUCER_EPOCH  # what clients of those versions know
        result = api.response.AddPartitionsToTxnTopicResult
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            result(name=topic.name, results_by_partition=[
                result.AddPartitionsToTxnPartitionResult(partition_index=partition,
                                                         partition_error_code=error)
                for partition in topic.partitions])
            for topic in request.v3_and_below_topics]}

    async def _add_partitions_batched(self, api: Api, request: Any) -> dict[str, Any]:
        """AddPartitionsToTxn v4+: several transactions, each answered per partition. With
        `verify_only`, whether each partition is in the transaction (NONE, or
        TRANSACTION_ABORTABLE), as a leader asks before a transaction's first batch; without,
        the partitions are added. rafka's own brokers ask over their control endpoints
        (`actors/server/transaction_verifications.py`); this serves the same question to a
        Kafka tool or broker."""
        result = api.response.AddPartitionsToTxnResult
        topic_result = api.response.AddPartitionsToTxnTopicResult
        partition_result = topic_result.AddPartitionsToTxnPartitionResult
        answers = []
        for transaction in request.transactions:
            wanted = [(topic.name, partition) for topic in transaction.topics
                      for partition in topic.partitions]
            if transaction.verify_only:
                verified = await self.coordinator.verify_partitions(
                    transaction.transactional_id, transaction.producer_id,
                    transaction.producer_epoch, wanted)
            else:
                verified = await self.coordinator.add_partitions(
                    transaction.transactional_id, transaction.producer_id,
                    transaction.producer_epoch, wanted)
            errors = verified if isinstance(verified, dict) else dict.fromkeys(wanted, verified)
            answers.append(result(transactional_id=transaction.transactional_id, topic_results=[
                topic_result(name=topic.name, results_by_partition=[
                    partition_result(partition_index=partition,
                                     partition_error_code=errors[(topic.name, partition)])
                    for partition in topic.partitions])
                for topic in transaction.topics]))
        return {"throttle_time_ms": 0, "error_code": 0, "results_by_transaction": answers}

    async def add_offsets_to_txn(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        error = await self.coordinator.add_offsets(
            request.transactional_id, request.producer_id, request.producer_epoch,
            request.group_id)
        return {"throttle_time_ms": 0, "error_code": error}

    async def end_txn(self, api: Api, version: int, request: Any) -> dict[str, Any]:
        error = await self.coordinator.end_transaction(
            request.transactional_id, request.producer_id, request.producer_epoch,
            bool(request.committed))
        return {"throttle_time_ms": 0, "error_code": error}

    async def list_transactions(self, api: Api, version: int, request: Any
                                ) -> dict[str, Any]:
        """The transactional ids this broker coordinates (an admin asks every broker), by
        Kafka's filters: states, producer ids and (v1) how long a transaction has run."""
        error, transactions = await self.coordinator.list_transactions()
        unknown, chosen = select_listed(
            transactions, request.state_filters, request.producer_id_filters,
            request.duration_filter if version >= 1 else -1, wall_clock_ms())
        state = api.response.TransactionState
        return {"throttle_time_ms": 0, "error_code": error, "unknown_state_filters": unknown,
                "transaction_states": [
                    state(transactional_id=t.transactional_id, producer_id=t.producer_id,
                          transaction_state=t.state.value)
                    for t in sorted(chosen, key=lambda t: t.transactional_id)]}

    async def describe_transactions(self, api: Api, version: int, request: Any
                                    ) -> dict[str, Any]:
        """Each transactional id's producer and current transaction, from its coordinator
        (NOT_COORDINATOR elsewhere, TRANSACTIONAL_ID_NOT_FOUND for an id never used)."""
        state = api.response.TransactionState
        answers = []
        for transactional_id in request.transactional_ids:
            error, found = await self.coordinator.describe_transaction(transactional_id)
            if found is None:
                answers.append(state(error_code=error, transactional_id=transactional_id,
                                     transaction_state="", transaction_timeout_ms=0,
                                     transaction_start_time_ms=-1, producer_id=-1,
                                     producer_epoch=-1, topics=[]))
                continue
            topics: dict[str, list[int]] = {}
            for topic, partition in sorted(found.partitions):
                topics.setdefault(topic, []).append(partition)
            answers.append(state(
                error_code=error, transactional_id=transactional_id,
                transaction_state=found.state.value, transaction_timeout_ms=found.timeout_ms,
                transaction_start_time_ms=found.started_ms, producer_id=found.producer_id,
                producer_epoch=found.producer_epoch,
                topics=[state.TopicData(topic=topic, partitions=partitions)
                        for topic, partitions in topics.items()]))
        return {"throttle_time_ms": 0, "transaction_states": answers}
