"""The listener the data ports and control endpoints share (`common/serving.py`), on loopback."""

from __future__ import annotations

import asyncio

import psutil

from rafka.common.serving import Listener


def test_callers_asking_at_once_share_one_port() -> None:
    # A replica host's broker publishes its data port while a follower asks the host where it
    # listens: both must learn the same port, and only one socket may listen.
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    def listening() -> set[int]:  # this process's (a test worker may have other servers)
        return {connection.laddr.port for connection in psutil.Process().net_connections("tcp")
                if connection.status == psutil.CONN_LISTEN}

    async def run() -> tuple[list[int], set[int]]:
        listener = Listener("127.0.0.1", serve, 1.0)
        before = listening()
        try:
            ports = await asyncio.gather(*(listener.listen() for _ in range(8)))
            return ports, listening() - before
        finally:
            await listener.close()

    ports, opened = asyncio.run(run())
    assert len(set(ports)) == 1
    assert opened == set(ports)
