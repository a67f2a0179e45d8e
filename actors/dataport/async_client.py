"""Connections to replica hosts' data ports from a caller on an event loop: a broker's Kafka
listener's to the hosts of its broker (`HostConnections`) and a follower host's to each of its
leader hosts (`LeaderConnection`). Both open a connection the same way (`open_connection`:
the host's address and token from an actor call, the hello first) and read an answer the same
way (`read_frame`, which the port reads its requests with too, in `server`). Over TLS when the
host says its port speaks it (`rafka.actors.dataport.tls`).

A follower asks its leader host where it listens through Ray first and, when Ray fails or is
late (`ZOOKEEPER_AFTER_S`: a host whose GCS connection is half-open calls a restarted leader
at its old address for minutes), where the leader's broker published it in ZooKeeper
(`leader_address`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import ray

from rafka.actors.dataport import frames
from rafka.actors.dataport.server import read_frame
from rafka.actors.dataport.tls import DataPortTls, client_context
from rafka.actors.messages import ErrorReply, ReplicaFetchResponse
from rafka.actors.runtime import ZOOKEEPER_AFTER_S
from rafka.common.errors import RafkaError
from rafka.common.serving import no_delay
from rafka.common.waiting import wait_within

DataPortAddress = tuple[str, int, bytes, DataPortTls | None]
# Where a host's broker last published the host's data port (None: never), read from ZooKeeper.
PublishedAddress = Callable[[], Awaitable[DataPortAddress | None]]


# How often a follower waiting on Ray for a leader host's address asks ZooKeeper again.
PUBLISHED_RETRY_S = 0.5


async def leader_address(host: Callable[[], Awaitable[Any]], published: PublishedAddress | None,
                         timeout_s: float) -> DataPortAddress:
    """Where a host listens: its `data_port_address` through Ray (`host()` gives its handle),
    or, once that fails or has not answered within `ZOOKEEPER_AFTER_S`, the address its broker
    published (`published`, given at least `timeout_s`). When ZooKeeper cannot say yet, it is
    asked again every `PUBLISHED_RETRY_S` while Ray's answer is awaited, for as long as that
    takes: on a loaded machine either may be slow and still right, and a Ray call to a host
    that was paused can wait many seconds on a connection Ray makes again. A host Ray knows
    died for good is not looked for in ZooKeeper: its error tells the caller to find the host
    anew."""

    async def ask_ray() -> DataPortAddress:
        return tuple(await (await host()).data_port_address.remote())  # type: ignore[return-value]

    asking = asyncio.ensure_future(ask_ray())
    try:
        done, _ = await asyncio.wait({asking}, timeout=min(ZOOKEEPER_AFTER_S, timeout_s))
        if asking in done and (asking.exception() is None or published is None
                               or isinstance(asking.exception(), ray.exceptions.ActorDiedError)):
            return asking.result()
        if published is None:
            return await asking
        while True:
            try:
                found = await asyncio.wait_for(published(), max(timeout_s, ZOOKEEPER_AFTER_S))
            except Exception:  # the broker could not read it either: Ray may still answer
                found = None
            if found is not None:
                return found
            if not asking.done():
                await asyncio.wait({asking}, timeout=PUBLISHED_RETRY_S)
            if asking.done():
                return asking.result()  # or raises what Ray said, ZooKeeper knowing nothing
    finally:
        if not asking.done():
            asking.cancel()
        with contextlib.suppress(BaseException):
            asking.exception()


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
    `rafka.actors.server.replica_fetcher`): its fetches and its OffsetsForLeaderEpoch, one at
    a time. Made on the first request, and again after any failure; the leader's address
    comes from `leader_address` (`leader` gives the host's handle, `published` its broker's
    word in ZooKeeper)."""

    def __init__(self, connect_timeout_s: float, leader: Callable[[], Awaitable[Any]],
                 published: PublishedAddress | None = None) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._leader = leader
        self._published = published
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def fetch(self, arguments: tuple[Any, ...], timeout_s: float,
                    max_answer_bytes: int) -> ReplicaFetchResponse | ErrorReply:
        """`leader.replica_fetch(*arguments)` over the connection."""
        return await self.call(frames.REPLICA_FETCH, arguments, timeout_s, max_answer_bytes)

    async def call(self, method: str, arguments: tuple[Any, ...], timeout_s: float,
                   max_answer_bytes: int) -> Any:
        """`leader.<method>(*arguments)` over the connection; raises OSError,
        asyncio.TimeoutError, IncompleteReadError or FrameError when it fails (the connection
        is then dropped), or Ray's errors when Ray failed to say where the leader host
        listens and ZooKeeper did not know."""
        try:
            if self._writer is None:
                address = await leader_address(self._leader, self._published,
                                               self.connect_timeout_s)
                self._reader, self._writer = await open_connection(address,
                                                                   self.connect_timeout_s)
            reader, writer = self._reader, self._writer
            assert reader is not None, "the reader opens with the writer"
            writer.write(frames.REQUESTS[method](*arguments))
            await writer.drain()
            body = await wait_within(read_frame(reader, max_answer_bytes), timeout_s)
            return frames.ANSWER_READERS[method](body)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
