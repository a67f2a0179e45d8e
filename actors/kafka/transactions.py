"""Kafka's transaction requests, for Kafka clients: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn and EndTxn, answered by the broker's transaction coordinator
(`actors/txn/coordinator.py`). TxnOffsetCommit goes to the group coordinator, which owns the
group's offsets; FindCoordinator for a transactional id is answered there too."""

from __future__ import annotations

import secrets
from typing import Any

from rafka.actors.broker_view import TransactionCoordinatorView
from rafka.actors.errors import ErrorCode
from rafka.wire.protocol import Api

# An idempotent producer's id is drawn at random, as rafka's own producers draw theirs.
_PRODUCER_ID_BITS = 62


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
            error, producer_id, epoch = ErrorCode.NONE, secrets.randbits(_PRODUCER_ID_BITS), 0
        return {"throttle_time_ms": 0, "error_code": error, "producer_id": producer_id,
                "producer_epoch": epoch}

    async def add_partitions_to_txn(self, api: Api, version: int, request: Any
                                    ) -> dict[str, Any]:
        """v0-3: one transaction's partitions, one error for all of them."""
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
