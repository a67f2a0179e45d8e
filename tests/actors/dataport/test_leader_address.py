"""Where a follower finds its leader host's data port (`async_client.leader_address`), as pure
logic: Ray's answer and ZooKeeper's word stand in as coroutines, so that each can be late,
fail or never come."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rafka.actors.dataport.async_client import leader_address

ADDRESS = ("10.0.0.7", 4242, b"token", None)


class _Remote:
    def __init__(self, answer: asyncio.Future) -> None:
        self._answer = answer

    def remote(self) -> asyncio.Future:
        return self._answer


class StandInHost:
    """A host handle whose `data_port_address` answers when (and as) the test says."""

    def __init__(self) -> None:
        self.answer: asyncio.Future = asyncio.get_running_loop().create_future()
        self.data_port_address = _Remote(self.answer)


def test_zookeeper_is_asked_again_while_ray_does_not_answer() -> None:
    async def run() -> Any:
        host = StandInHost()  # never answers: a call to a host Ray cannot reach
        asked: list[int] = []

        async def handle() -> StandInHost:
            return host

        async def published() -> Any:
            asked.append(1)
            return None if len(asked) < 3 else ADDRESS  # the broker has not published it yet

        return await asyncio.wait_for(leader_address(handle, published, 0.01), 10), asked

    found, asked = asyncio.run(run())
    assert found == ADDRESS
    assert len(asked) == 3


def test_ray_answering_while_zookeeper_knows_nothing_is_taken() -> None:
    async def run() -> Any:
        host = StandInHost()

        async def handle() -> StandInHost:
            return host

        async def published() -> None:
            asyncio.get_running_loop().call_later(0.05, host.answer.set_result, list(ADDRESS))
            return None

        return await asyncio.wait_for(leader_address(handle, published, 0.01), 10)

    assert asyncio.run(run()) == ADDRESS


def test_what_ray_said_is_raised_when_zookeeper_knows_nothing() -> None:
    async def run() -> Any:
        host = StandInHost()
        host.answer.set_exception(ConnectionResetError("the host's process went"))

        async def handle() -> StandInHost:
            return host

        async def published() -> None:
            return None

        return await asyncio.wait_for(leader_address(handle, published, 0.01), 10)

    with pytest.raises(ConnectionResetError):
        asyncio.run(run())
