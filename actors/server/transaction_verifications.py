"""A broker's part in KIP-890's verification: a leader host of this broker asks whether a
partition is in a producer's ongoing transaction (`txn_verification.py`), and the broker puts
the question to the transaction's coordinator: its own, or another broker's, over that
broker's control endpoint, as Kafka's brokers send each other AddPartitionsToTxn v4 with
`verify_only`. The answer carries Kafka's codes: one for the whole request (the producer
fenced or unknown, the coordinator moving or loading), or one per partition.

A question forwarded to another broker is answered there, whatever that broker finds: if
it no longer coordinates the id, it says NOT_COORDINATOR, and the leader's producer retries.
"""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable

from rafka.actors.controller.broker_connections import (
    BrokerConnections,
    BrokerDidNotAnswer,
    BrokerUnreachable,
)
from rafka.actors.controller.control_frames import ControlAnswer
from rafka.actors.errors import ErrorCode, error_reply
from rafka.actors.messages import ErrorReply, PartitionErrors
from rafka.actors.txn.coordinator import TransactionCoordinator
from rafka.common.topic_partition import TopicPartition
from rafka.coordination.models import BrokerInfo

# How long a forwarded question may take: the coordinator answers from memory, or at once
# that it is loading.
FORWARD_TIMEOUT_S = 10.0


class TransactionVerifications:
    """Answers the verifications this broker is asked (`Broker.verify_transaction`)."""

    def __init__(self, broker_id: int, coordinator: TransactionCoordinator,
                 coordinator_of: Callable[[str], Awaitable[int | ErrorReply]],
                 broker_info: Callable[[int], BrokerInfo | None], token: bytes,
                 ssl_context: ssl.SSLContext | None) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self.coordinator_of = coordinator_of
        self.broker_info = broker_info
        self._connections = BrokerConnections(token, ssl_context, FORWARD_TIMEOUT_S)

    async def verify(self, transactional_id: str, producer_id: int, producer_epoch: int,
                     partitions: list[tuple[str, int]], forwarded: bool) -> ControlAnswer:
        """None where every partition is in the transaction; else the errors."""
        coordinator = self.broker_id if forwarded else await self.coordinator_of(
            transactional_id)
        if isinstance(coordinator, ErrorReply):
            return coordinator
        if coordinator == self.broker_id:
            return _answer(await self.coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions))
        connection = self._connections.sender(coordinator, self.broker_info(coordinator))
        if connection is None:
            return error_reply(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                               f"broker {coordinator} is not registered")
        try:
            return await connection.verify_transaction(
                transactional_id, producer_id, producer_epoch, partitions, forwarded=True)
        except (BrokerDidNotAnswer, BrokerUnreachable) as error:
            return error_reply(ErrorCode.NETWORK_EXCEPTION, str(error))

    def close(self) -> None:
        self._connections.close()


def _answer(result: ErrorCode | dict[tuple[str, int], ErrorCode]) -> ControlAnswer:
    if isinstance(result, ErrorCode):
        return error_reply(result, f"the transaction coordinator answered {result.name}") \
            if result else None
    refused = {TopicPartition(*tp): error_reply(code, code.name)
               for tp, code in result.items() if code}
    return PartitionErrors(refused) if refused else None
