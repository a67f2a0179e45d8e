"""Connections to replica hosts' data ports from a caller on an event loop: a broker's Kafka
listener's to the hosts of its broker (`HostConnections`) and a follower host's to each of its
leader hosts (`LeaderConnection`). Both open a connection the same way (`open_connection`:
the host's address and token from an actor call, the hello first) and read an answer the same
way (`read_frame`, which the port reads its requests with too, in `server`). Over TLS when the
host says its port speaks it (`rafka.actors.dataport.tls`)."""

from __future__ import annotations

import asyncio
from typing import Any

from rafka.actors.dataport import frames
from rafka.actors.dataport.server import read_frame
from rafka.actors.dataport.tls import DataPortTls, client_context
from rafka.actors.messages import ErrorReply, ReplicaFetchResponse
from rafka.common.errors import RafkaError
from rafka.common.serving import no_delay
from rafka.common.waiting import wait_within

DataPortAddress = tuple[str, int, bytes, DataPortTls | None]


async def open_connection(address: DataPortAddress, connect_timeout_s: float,
                          ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the data port at `address` (a host's `data_port_address`), the hello
    written (it goes out with the first request); the TLS handshake, if any, counts against
    the connect timeout."""
    name, port, token, tls = address
    connecting = (asyncio.open_connection(name, port) if tls is None else
                  asyncio.open_connection(name, port, ssl=client_context(tls)))
    reader, writer = await asyncio.wait_for(connecting, connect_timeout_s)
    no_delay(writer)
    writer.write(frames.hello(token))
    return reader, writer


class RequestTooLarge(RafkaError, ValueError):
    """A request longer than a data port takes: nothing was sent (an actor call has no such
    bound)."""


class HostConnections:
    """Connections a caller on an event loop (a broker's Kafka listener) keeps to replica
    hosts' data ports. A connection carries one request at a time, so a host gets as many as
    the caller has requests in flight to it; each goes back to the host's idle ones when
    answered, and at most `max_idle_per_host` wait there. A connection that fails is closed,
    and the host's address asked again for the next."""

    def __init__(self, connect_timeout_s: float, max_request_bytes: int,
                 max_answer_bytes: int, max_idle_per_host: int = 8) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.max_request_bytes = max_request_bytes
        self.max_answer_bytes = max_answer_bytes
        self.max_idle_per_host = max_idle_per_host
        self._idle: dict[Any, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._addresses: dict[Any, DataPortAddress] = {}
        self._closed = False
        # Requests answered over a data port, for the listener's stats.
        self.answered = 0

    async def call(self, host: Any, method: str, timeout_s: float, *arguments: Any) -> Any:
        """`host.<method>(*arguments)` over a data port connection, answered within
        `timeout_s`; raises OSError, asyncio.TimeoutError, IncompleteReadError or FrameError
        when the connection fails (it is then dropped), Ray's errors when the host cannot
        tell where it listens, and RequestTooLarge, before sending anything, for a request
        longer than the port takes (socket.request.max.bytes)."""
        request = frames.REQUESTS[method](*arguments)
        if len(request) - frames.LENGTH.size > self.max_request_bytes:
            raise RequestTooLarge(f"a {method} request of {len(request)} bytes")
        idle = self._idle.setdefault(host, [])
        writer = None
        try:
            reader, writer = idle.pop() if idle else await self._connect(host)
            writer.write(request)
            await writer.drain()
            body = await wait_within(read_frame(reader, self.max_answer_bytes), timeout_s)
            answer = frames.ANSWER_READERS[method](body)
        except BaseException:
            # The host may be gone or restarted elsewhere: its other idle connections go too,
            # and its address is asked again.
            if writer is not None:
                writer.close()
            for _, idle_writer in self._idle.pop(host, []):
                idle_writer.close()
            self._addresses.pop(host, None)
            raise
        self.answered += 1
        idle = self._idle.setdefault(host, [])
        if not self._closed and len(idle) < self.max_idle_per_host:
            idle.append((reader, writer))
        else:
            writer.close()
        return answer

    async def _connect(self, host: Any) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        address = self._addresses.get(host)
        if address is None:
            address = self._addresses[host] = tuple(await host.data_port_address.remote())
        return await open_connection(address, self.connect_timeout_s)

    def close(self) -> None:
        """Close every idle connection (those in use close when their answer comes)."""
        self._closed = True
        for connections in self._idle.values():
            for _, writer in connections:
                writer.close()
        self._idle.clear()


class LeaderConnection:
    """A follower host's connection to one leader host's data port (used by
    `rafka.actors.server.replica_fetcher`); made on the first fetch, and again after any
    failure."""

    def __init__(self, connect_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def fetch(self, leader: Any, arguments: tuple[Any, ...], timeout_s: float,
                    max_answer_bytes: int) -> ReplicaFetchResponse | ErrorReply:
        """`leader.replica_fetch(*arguments)` over the connection; raises OSError,
        asyncio.TimeoutError, IncompleteReadError or FrameError when it fails (the connection
        is then dropped), Ray's errors when the leader host cannot tell where it listens."""
        try:
            if self._writer is None:
                self._reader, self._writer = await open_connection(
                    tuple(await leader.data_port_address.remote()), self.connect_timeout_s)
            reader, writer = self._reader, self._writer
            assert reader is not None, "the reader opens with the writer"
            writer.write(frames.replica_fetch_request(*arguments))
            await writer.drain()
            body = await wait_within(read_frame(reader, max_answer_bytes), timeout_s)
            return frames.read_replica_fetch_answer(body)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
