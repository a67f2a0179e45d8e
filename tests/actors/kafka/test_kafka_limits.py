"""The Kafka listener's limits as plain objects: connections counted in all and per address,
and a byte budget for requests that lets them in in the order they asked. No sockets."""

from __future__ import annotations

import asyncio

from rafka.actors.kafka.limits import ConnectionQuota, RequestMemory


def test_connections_are_refused_past_the_per_address_and_the_total_limits() -> None:
    quota = ConnectionQuota(max_connections=3, max_connections_per_ip=2)
    assert quota.admit("10.0.0.1") is None and quota.admit("10.0.0.1") is None
    assert "max.connections.per.ip=2" in quota.admit("10.0.0.1")
    assert quota.admit("10.0.0.2") is None
    assert "max.connections=3" in quota.admit("10.0.0.3")
    assert quota.total == 3  # refused ones are not counted
    quota.release("10.0.0.1")
    assert quota.admit("10.0.0.3") is None
    assert quota.per_ip == {"10.0.0.1": 1, "10.0.0.2": 1, "10.0.0.3": 1}


def test_request_bytes_wait_for_room_and_are_let_in_in_order() -> None:
    async def scenario() -> list[str]:
        memory = RequestMemory(100)
        order: list[str] = []
        release_first = asyncio.Event()

        async def request(name: str, size: int, until: asyncio.Event | None = None) -> None:
            await memory.acquire(size)
            order.append(name)
            if until is not None:
                await until.wait()
            memory.release(size)

        first = asyncio.create_task(request("first", 80, release_first))
        await asyncio.sleep(0)
        large = asyncio.create_task(request("large", 60))
        await asyncio.sleep(0)
        small = asyncio.create_task(request("small", 10))  # fits, but comes after the large
        await asyncio.sleep(0.01)
        assert order == ["first"] and memory.in_use == 80
        release_first.set()
        await asyncio.gather(first, large, small)
        assert memory.in_use == 0 and memory.peak == 80
        return order

    assert asyncio.run(scenario()) == ["first", "large", "small"]


def test_a_request_cancelled_while_waiting_gives_its_place_to_the_next() -> None:
    async def scenario() -> None:
        memory = RequestMemory(100)
        held = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:
            await memory.acquire(90)
            held.set()
            await release.wait()
            memory.release(90)

        holder = asyncio.create_task(hold())
        await held.wait()
        waiter = asyncio.create_task(memory.acquire(50))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        async def small() -> None:
            await memory.acquire(10)
            memory.release(10)
        await asyncio.wait_for(small(), 1)  # the cancelled one no longer blocks the queue
        release.set()
        await holder
        assert memory.in_use == 0

    asyncio.run(scenario())


def test_no_capacity_means_no_bound() -> None:
    async def scenario() -> int:
        memory = RequestMemory(None)
        await memory.acquire(10**12)
        return memory.in_use

    assert asyncio.run(scenario()) == 10**12
