"""DescribeClientQuotas and AlterClientQuotas (KIP-546), as Kafka's broker answers them from
the quotas it keeps in ZooKeeper (what `kafka-configs.sh --entity-type users|clients` and
`rafka quotas` send). The entities, keys and filters are checked by `rafka.wire.quotas`; the
quotas are read and written through a `QuotaStore` (ZooKeeper's is `ZooKeeperQuotas`), in a
thread, never on the broker's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from rafka.actors.broker_view import BrokerView
from rafka.actors.errors import ErrorCode
from rafka.actors.kafka.quota_store import ZooKeeperQuotas
from rafka.common.errors import RafkaError
from rafka.wire.protocol import Api
from rafka.wire.quotas import (
    QUOTA_KEYS,
    QuotaEntity,
    QuotaRequestError,
    entity_components,
    entity_from_components,
    matches_filter,
    quota_value,
)


class QuotaStore(Protocol):
    """Where the quotas are kept: every entity's, and changed one entity at a time."""

    def read_all(self) -> dict[QuotaEntity, dict[str, float]]: ...

    def alter(self, entity: QuotaEntity, updates: dict[str, float | None]) -> None:
        """Set each key to its value, removing those whose value is None."""


class ClientQuotaAdmin:
    """Answers DescribeClientQuotas and AlterClientQuotas from `store()`'s quotas."""

    def __init__(self, store: Callable[[], QuotaStore]) -> None:
        self.store = store

    @classmethod
    def of(cls, broker: BrokerView) -> ClientQuotaAdmin:
        """The admin of the quotas in `broker`'s ZooKeeper."""

        def store() -> QuotaStore:
            assert broker.store is not None  # a broker's APIs are served once it has one
            return ZooKeeperQuotas(broker.store)

        return cls(store)

    async def describe_client_quotas(self, api: Api, version: int, request: Any
                                     ) -> dict[str, Any]:
        filters = [(part.entity_type, part.match_type, part.match)
                   for part in request.components]
        configs = await asyncio.to_thread(self.store().read_all)
        try:
            found = {entity: values for entity, values in configs.items()
                     if values and matches_filter(entity, filters, request.strict)}
        except QuotaRequestError as error:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.INVALID_REQUEST,
                    "error_message": str(error), "entries": None}
        entry = api.response.EntryData
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "entries": [
            entry(entity=_entity_data(entry, entity),
                  values=[entry.ValueData(key=key, value=value)
                          for key, value in sorted(values.items())])
            for entity, values in sorted(found.items(), key=lambda item: str(item[0]))]}

    async def alter_client_quotas(self, api: Api, version: int, request: Any
                                  ) -> dict[str, Any]:
        entry = api.response.EntryData
        results = []
        for asked in request.entries:
            components = [(part.entity_type, part.entity_name) for part in asked.entity]
            code, message = 0, None
            try:
                entity = entity_from_components(components)
                updates = _updates(asked.ops)
                if not request.validate_only:
                    await asyncio.to_thread(self.store().alter, entity, updates)
            except QuotaRequestError as error:
                code, message = ErrorCode.INVALID_REQUEST, str(error)
            except RafkaError as error:  # ZooKeeper's (a write that kept conflicting, say)
                code, message = error.code, str(error)
            results.append(entry(error_code=code, error_message=message, entity=[
                entry.EntityData(entity_type=kind, entity_name=name)
                for kind, name in components]))
        return {"throttle_time_ms": 0, "entries": results}


def _updates(ops: Any) -> dict[str, float | None]:
    updates: dict[str, float | None] = {}
    for op in ops:
        if op.key in updates:
            raise QuotaRequestError(f"quota key {op.key!r} given twice")
        if op.remove and op.key not in QUOTA_KEYS:
            raise QuotaRequestError(f"unknown quota key {op.key!r}")
        updates[op.key] = None if op.remove else quota_value(op.key, op.value)
    return updates


def _entity_data(entry: Any, entity: QuotaEntity) -> list[Any]:
    return [entry.EntityData(entity_type=kind, entity_name=name)
            for kind, name in entity_components(entity)]
