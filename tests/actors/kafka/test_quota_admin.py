"""DescribeClientQuotas and AlterClientQuotas over a store in memory: what is written, what
is refused, and what each filter finds."""

from __future__ import annotations

import asyncio
from typing import Any

from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest
from kafka.protocol.api_key import ApiKey

from rafka.actors.errors import ErrorCode
from rafka.actors.kafka.quota_admin import ClientQuotaAdmin
from rafka.wire.protocol import APIS
from rafka.wire.quotas import DEFAULT, MATCH_DEFAULT, MATCH_SPECIFIED, QuotaEntity


class MemoryQuotas:
    def __init__(self) -> None:
        self.configs: dict[QuotaEntity, dict[str, float]] = {}

    def read_all(self) -> dict[QuotaEntity, dict[str, float]]:
        return {entity: dict(values) for entity, values in self.configs.items()}

    def alter(self, entity: QuotaEntity, updates: dict[str, float | None]) -> None:
        values = self.configs.setdefault(entity, {})
        for key, value in updates.items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value


def _alter(admin: ClientQuotaAdmin, entries: list[tuple[list[Any], list[Any]]],
           validate_only: bool = False) -> list[tuple[int, str | None]]:
    request = AlterClientQuotasRequest.EntryData
    body = AlterClientQuotasRequest(version=1, validate_only=validate_only, entries=[
        request(entity=[request.EntityData(entity_type=kind, entity_name=name)
                        for kind, name in entity],
                ops=[request.OpData(key=key, value=value, remove=remove)
                     for key, value, remove in ops])
        for entity, ops in entries])
    answer = asyncio.run(admin.alter_client_quotas(APIS[ApiKey.AlterClientQuotas], 1, body))
    return [(entry.error_code, entry.error_message) for entry in answer["entries"]]


def _describe(admin: ClientQuotaAdmin, components: list[Any], strict: bool = False) -> Any:
    component = DescribeClientQuotasRequest.ComponentData
    body = DescribeClientQuotasRequest(version=1, strict=strict, components=[
        component(entity_type=kind, match_type=match_type, match=match)
        for kind, match_type, match in components])
    answer = asyncio.run(admin.describe_client_quotas(
        APIS[ApiKey.DescribeClientQuotas], 1, body))
    if answer["error_code"]:
        return answer["error_code"]
    return {tuple((part.entity_type, part.entity_name) for part in entry.entity):
            {value.key: value.value for value in entry.values}
            for entry in answer["entries"]}


def test_quotas_altered_are_described() -> None:
    store = MemoryQuotas()
    admin = ClientQuotaAdmin(lambda: store)
    assert _alter(admin, [
        ([("user", "alice")], [("producer_byte_rate", 1024.0, False)]),
        ([("user", None), ("client-id", "app")], [("request_percentage", 12.5, False)]),
    ]) == [(0, None), (0, None)]
    assert store.configs == {QuotaEntity("alice", None): {"producer_byte_rate": 1024.0},
                             QuotaEntity(DEFAULT, "app"): {"request_percentage": 12.5}}
    assert _describe(admin, [("user", MATCH_SPECIFIED, None)]) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("user", None), ("client-id", "app")): {"request_percentage": 12.5}}
    assert _describe(admin, [("user", MATCH_DEFAULT, None)], strict=True) == {}
    assert _describe(admin, [("ip", MATCH_DEFAULT, None)]) == ErrorCode.INVALID_REQUEST
    assert _alter(admin, [([("user", "alice")], [("producer_byte_rate", 0.0, True)])]) == [
        (0, None)]
    assert _describe(admin, [("user", 0, "alice")]) == {}


def test_what_kafka_refuses_is_refused_entry_by_entry() -> None:
    store = MemoryQuotas()
    admin = ClientQuotaAdmin(lambda: store)
    results = _alter(admin, [
        ([("user", "alice")], [("producer_byte_rate", 10.5, False)]),
        ([("ip", "1.2.3.4")], [("connection_creation_rate", 1.0, False)]),
        ([("client-id", "app")], [("consumer_byte_rate", 100.0, False)]),
        ([("client-id", "x")], [("no_such_key", 0.0, True)]),
    ])
    assert [code for code, _ in results] == [ErrorCode.INVALID_REQUEST,
                                             ErrorCode.INVALID_REQUEST, 0,
                                             ErrorCode.INVALID_REQUEST]
    assert "whole number" in (results[0][1] or "")
    assert store.configs == {QuotaEntity(None, "app"): {"consumer_byte_rate": 100.0}}
    assert _alter(admin, [([("user", "bob")], [("producer_byte_rate", 1.0, False)])],
                  validate_only=True) == [(0, None)]
    assert QuotaEntity("bob", None) not in store.configs
