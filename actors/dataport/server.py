"""A replica host's data port: the TCP port that answers producers' requests, followers' and
consumers' fetches, and a broker's Kafka listener's produce and fetch requests.

Each follower host keeps one connection to each leader host it fetches from
(`rafka.actors.dataport.async_client.LeaderConnection`, used by
`rafka.actors.server.replica_fetcher`) and another for the wake-ups of its held fetches;
producers and consumers keep theirs to each host they write to or read from
(`rafka.actors.dataport.blocking_client`), and a broker's Kafka listener keeps its own to its
hosts (`rafka.actors.dataport.async_client.HostConnections`); each connection carries one
request at a time, as Kafka's broker serves a connection. The port hands each request to the
host's own method (`produce`, `produce_kafka`, `replica_fetch`, `fetch`, `fetch_kafka`,
`list_offsets`, `fetch_offsets`, `commit_offsets`, `commit_transactional_offsets`,
`offsets_for_leader_epoch` or `wake_session`, the same calls Ray would make) and writes the
answer back as soon as it is ready. Frames and their checks are in
`rafka.actors.dataport.frames`. A connection that opens with a wrong token, or sends anything
that is not a request, is closed; nothing it sent is acted on.

With `security.inter.broker.protocol=SSL` the port speaks mutual TLS (`rafka.actors.dataport.tls`):
a client without a certificate the cluster's CA signed fails its handshake before it can say a
word, and one with it still opens with the token.

Where the network fails silently (a cut, a paused host), a follower waits for a fetch's answer at
most `replica.socket.timeout.ms` beyond the fetch's own wait, then drops the connection and
makes another: no fetch waits on a dead connection for longer.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from rafka.actors.dataport import frames
from rafka.actors.dataport.frames import (
    CommitOffsetsRequest,
    CommitTransactionalOffsetsRequest,
    ConsumerFetchRequest,
    FetchOffsetsRequest,
    FrameError,
    KafkaFetchRequest,
    KafkaProduceRequest,
    ListOffsetsRequest,
    OffsetsForLeaderEpochRequest,
    ProduceRequest,
    ReplicaFetchRequest,
    WakeSessionRequest,
)
from rafka.actors.dataport.tls import DataPortTls, server_context
from rafka.actors.messages import CommittedOffsets, ErrorReply, ReplicaFetchResponse
from rafka.common.serving import Listener

log = logging.getLogger(__name__)

# How long a new connection has to say who it is (and, over TLS, to finish its handshake).
HELLO_TIMEOUT_S = 10.0


# The streams' side of the frames: the port's, and its asyncio clients' (`async_client`).

async def read_frame(reader: asyncio.StreamReader, limit: int) -> bytes:
    """The next frame's body (IncompleteReadError at the end of the stream)."""
    header = await reader.readexactly(frames.LENGTH.size)
    return await reader.readexactly(frames.frame_length(header, limit))


class DataPort:
    """Serves a host's `produce`, `produce_kafka`, `replica_fetch`, `fetch`, `fetch_kafka`,
    `list_offsets`, `fetch_offsets`, `commit_offsets`, `commit_transactional_offsets`,
    `offsets_for_leader_epoch` and `wake_session` on `host`, any free port; a request may be
    `max_request_bytes` long (the broker's socket.request.max.bytes); with `tls`, over mutual
    TLS."""

    def __init__(self, host: str, max_request_bytes: int, *,
                 produce: Callable[..., Awaitable[list[Any]]],
                 produce_kafka: Callable[..., Awaitable[list[Any]]],
                 replica_fetch: Callable[..., Awaitable[ReplicaFetchResponse | ErrorReply]],
                 fetch: Callable[..., Awaitable[list[Any]]],
                 fetch_kafka: Callable[..., Awaitable[list[Any]]],
                 list_offsets: Callable[..., Awaitable[list[Any]]],
                 fetch_offsets: Callable[..., Awaitable[CommittedOffsets | ErrorReply]],
                 commit_offsets: Callable[..., Awaitable[ErrorReply | None]],
                 commit_transactional_offsets: Callable[..., Awaitable[ErrorReply | None]],
                 offsets_for_leader_epoch: Callable[..., Awaitable[list[Any]]],
                 wake_session: Callable[..., Awaitable[None]],
                 tls: DataPortTls | None = None) -> None:
        self.host = host
        self.tls = tls
        self.max_request_bytes = max_request_bytes
        self._methods: dict[type, Callable[..., Awaitable[Any]]] = {
            ProduceRequest: produce, KafkaProduceRequest: produce_kafka,
            ReplicaFetchRequest: replica_fetch, ConsumerFetchRequest: fetch,
            KafkaFetchRequest: fetch_kafka, ListOffsetsRequest: list_offsets,
            FetchOffsetsRequest: fetch_offsets, CommitOffsetsRequest: commit_offsets,
            CommitTransactionalOffsetsRequest: commit_transactional_offsets,
            OffsetsForLeaderEpochRequest: offsets_for_leader_epoch,
            WakeSessionRequest: wake_session}
        self.token = secrets.token_bytes(16)
        self._listener = Listener(host, self._serve, HELLO_TIMEOUT_S)

    async def start(self) -> tuple[str, int, bytes, DataPortTls | None]:
        """Listening, if not yet: where, the token a connection must open with, and the TLS
        it must speak (None: none)."""
        if not self._listener.listening:
            await self._listener.listen(0, None if self.tls is None else server_context(self.tls))
        assert self._listener.port is not None, "the port is known once the server listens"
        return self.host, self._listener.port, self.token, self.tls

    async def close(self) -> None:
        await self._listener.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._listener.keeping(writer, (FrameError,), log, "data port"):
            token = frames.read_hello(await asyncio.wait_for(
                read_frame(reader, frames.MAX_REQUEST_BYTES), HELLO_TIMEOUT_S))
            if not hmac.compare_digest(token, self.token):
                raise FrameError("a wrong token")
            while True:
                request = frames.decode_request(
                    await read_frame(reader, self.max_request_bytes))
                reply = await self._methods[type(request)](*request)
                writer.write(frames.ANSWERS[type(request)](reply))
                await writer.drain()

