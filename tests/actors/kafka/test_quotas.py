"""The listener's quota shell, without sockets: what it counts, what it writes in an answer,
how long it mutes a connection and when it holds an answer back (a fake clock and sleep)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.kafka.quotas import ClientQuotas
from rafka.wire.principal import KafkaPrincipal
from rafka.wire.produce import PartitionAnswer, produce_response
from rafka.wire.protocol import APIS
from rafka.wire.quotas import (
    CONSUMER_BYTE_RATE,
    DEFAULT,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    QuotaEntity,
)

ALICE = KafkaPrincipal("User", "alice")


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def _quotas(configs: dict[QuotaEntity, dict[str, float]]) -> tuple[ClientQuotas, FakeTime]:
    fake = FakeTime()
    quotas = ClientQuotas(fake.clock, fake.sleep)
    quotas.update(configs)
    return quotas, fake


def _connection() -> Any:
    return SimpleNamespace(principal=ALICE, muted_until=0.0)


async def _value(value: Any) -> Any:
    return value


def _produce_answer(version: int) -> bytes:
    return produce_response(version, 1, [PartitionAnswer("t", 0, 0, base_offset=5)])


def test_without_quotas_the_answer_passes_untouched() -> None:
    quotas, fake = _quotas({})
    connection = _connection()
    answer = _produce_answer(9)
    assert not quotas.enabled
    assert asyncio.run(quotas.answer(connection, APIS[ApiKey.Produce], 9, "app", 10**9,
                                     _value(answer))) is answer
    assert connection.muted_until == 0.0 and not fake.slept


def test_a_producer_over_its_rate_is_told_its_wait_and_muted_for_it() -> None:
    quotas, fake = _quotas({QuotaEntity("alice", None): {PRODUCER_BYTE_RATE: 1000}})
    connection = _connection()
    answer = asyncio.run(quotas.answer(connection, APIS[ApiKey.Produce], 9, "app", 15_000,
                                       _value(_produce_answer(9))))
    assert answer == produce_response(9, 1, [PartitionAnswer("t", 0, 0, base_offset=5)],
                                      throttle_time_ms=5_000)
    assert connection.muted_until == fake.now + 5.0
    assert not fake.slept  # v9 throttles itself (KIP-219): answered at once
    asyncio.run(quotas.unmuted(connection))
    assert fake.slept == [5.0]
    assert quotas.stats() == {"enabled": True, "throttled": 1, "throttle_ms_total": 5_000}


def test_an_older_producer_gets_its_answer_after_the_wait() -> None:
    quotas, fake = _quotas({QuotaEntity(None, DEFAULT): {PRODUCER_BYTE_RATE: 1000}})
    connection = _connection()
    asyncio.run(quotas.answer(connection, APIS[ApiKey.Produce], 5, "app", 15_000,
                              _value(_produce_answer(5))))
    assert fake.slept == [5.0]


def test_a_throttled_fetch_is_answered_empty_and_its_bytes_not_counted() -> None:
    quotas, fake = _quotas({QuotaEntity(None, "app"): {CONSUMER_BYTE_RATE: 100}})
    connection = _connection()
    part = SimpleNamespace(records=b"x" * 5000)
    fields = {"throttle_time_ms": 0, "responses": [SimpleNamespace(partitions=[part])]}
    answer = asyncio.run(quotas.answer(connection, APIS[ApiKey.Fetch], 12, "app", 100,
                                       _value(fields)))
    assert answer == {"throttle_time_ms": 11_000, "responses": []}
    assert quotas.fetch.rate("alice", "app", fake.now) == 0


def test_request_time_is_the_loops_not_the_waits() -> None:
    quotas, fake = _quotas({QuotaEntity("alice", "app"): {REQUEST_PERCENTAGE: 50}})
    connection = _connection()

    async def waits_long() -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"throttle_time_ms": 0}

    answer = asyncio.run(quotas.answer(connection, APIS[ApiKey.Metadata], 12, "app", 100,
                                       waits_long()))
    assert answer == {"throttle_time_ms": 0}
    # 50 ms waited, a fraction of that run: a few thousandths of a percent-second.
    assert 0 < quotas.request.rate("alice", "app", fake.now) < 0.05
