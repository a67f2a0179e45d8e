"""What the rooms that run beside the transaction coordinator on a broker (the Kafka listener,
the group coordinator) may ask of it, and of the broker that holds it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from rafka.actors.broker_view import BrokerView
from rafka.actors.errors import ErrorCode
from rafka.actors.txn.transaction_state import TransactionMetadata


class TransactionCoordinatorView(Protocol):
    """What the Kafka listener asks of the broker's transaction coordinator
    (`actors/txn/coordinator.py`); each answer carries Kafka's error code."""

    async def partition_of(self, transactional_id: str) -> int | None:
        """The id's `__transaction_state` partition (None until the topic has partitions)."""
        ...

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, expected: tuple[int, int] | None = None,
    ) -> tuple[ErrorCode, int, int]:
        ...

    async def add_partitions(self, transactional_id: str, producer_id: int,
                             producer_epoch: int, partitions: Iterable[tuple[str, int]],
                             ) -> ErrorCode:
        ...

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[tuple[str, int]],
    ) -> ErrorCode | dict[tuple[str, int], ErrorCode]:
        ...

    async def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int,
                          group_id: str) -> ErrorCode:
        ...

    async def end_transaction(self, transactional_id: str, producer_id: int,
                              producer_epoch: int, commit: bool) -> ErrorCode:
        ...

    async def describe_transaction(self, transactional_id: str
                                   ) -> tuple[ErrorCode, TransactionMetadata | None]:
        ...

    async def list_transactions(self) -> tuple[ErrorCode, list[TransactionMetadata]]:
        ...


class TransactionalBrokerView(BrokerView, Protocol):
    """A broker with its transaction coordinator, as the Kafka listener and the group
    coordinator see it."""

    @property
    def transactions(self) -> TransactionCoordinatorView:
        """The transaction coordinator of the `__transaction_state` partitions it leads."""
        ...
