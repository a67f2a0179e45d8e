"""Kafka's wire protocol for one broker: a TCP server on the broker actor's event loop.

This is the connection side, as Kafka's `SocketServer`: it accepts connections, reads each
one's frames in order and writes the answers in the same order; every request is answered by
its API's handler in `actors/kafka/apis.py` (`KafkaApis`, as Kafka's `KafkaApis`).

A connection's requests are answered in the order they came, as Kafka answers them, and read
up to five ahead of the answer due next. Each waits for the ones before it, so a partition's
appends keep the order its producer sent them in (Ray runs an async actor's calls in any order,
so two produce requests handed to a host together could be appended either way round), except
a produce whose batches are all an idempotent producer's: the leader puts those in sequence
order itself, so a client with five in flight keeps five at work (docs/kafka-protocol.md,
"How fast"). A produce with acks=0 gets no answer, a frame larger
than socket.request.max.bytes or one that does not decode closes the connection, and a
request for an API or version rafka does not serve is answered with UNSUPPORTED_VERSION.
Each connection's frames are read straight into buffers (`actors/kafka/connection.py`).
Connections and queued request bytes are bounded (`actors/kafka/limits.py`), across all of the
broker's listeners.

A broker has a server socket per listener (`listeners`), each speaking its security protocol:
PLAINTEXT, or SSL (TLS through asyncio's own, so a handshake never blocks the loop and one that
takes longer than `ssl.handshake.timeout.ms` is dropped; `actors/kafka/tls.py`). Each request
knows the listener it came in on (`CLIENT_LISTENER`), so a client is told the brokers'
endpoints of its own listener, and each connection its client's principal. SASL_PLAINTEXT
and SASL_SSL listeners authenticate each connection before serving it, and answer its
re-authentications (`actors/kafka/sasl.py`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kafka.protocol.api_key import ApiKey

from rafka.actors.group.client_host import CLIENT_HOST
from rafka.actors.kafka.apis import KafkaApis
from rafka.actors.kafka.authorization import CLIENT_CONNECTION
from rafka.actors.kafka.connection import KafkaConnection
from rafka.actors.kafka.limits import ConnectionQuota, RequestMemory
from rafka.actors.kafka.quotas import ClientQuotas
from rafka.actors.kafka.sasl import SaslListeners
from rafka.actors.kafka.tls import server_ssl_context
from rafka.actors.txn.view import TransactionalBrokerView
from rafka.wire.listeners import (
    CLIENT_LISTENER,
    Listener,
    parse_protocol_map,
    security_protocol,
)
from rafka.wire.principal import principal_from_certificate
from rafka.wire.protocol import (
    Api,
    MalformedRequestError,
    UnsupportedRequestError,
    api_versions_response,
    encode_response,
    read_request,
    unsupported_response,
)
from rafka.wire.records import from_idempotent_producer

log = logging.getLogger(__name__)

# How many of a connection's requests are read ahead of the one whose answer is next: the
# default max.in.flight.requests.per.connection of Kafka's clients, and the most an idempotent
# producer keeps out.
REQUESTS_READ_AHEAD = 5


class KafkaListener:
    """Serves Kafka clients for `broker` on each of `listeners`; `advertised` (by listener
    name) is what they are told, the listener as bound for a name it lacks."""

    def __init__(self, broker: TransactionalBrokerView, listeners: Sequence[Listener],
                 advertised: Mapping[str, Listener],
                 max_request_bytes: int) -> None:
        self.broker = broker
        self.listeners = list(listeners)
        self.advertised: list[Listener] = []
        self._static_advertised = dict(advertised)
        self.max_request_bytes = max_request_bytes
        self._servers: dict[str, asyncio.Server] = {}
        self._connections: dict[asyncio.Task, KafkaConnection] = {}
        config = broker.config
        self.protocol_map = parse_protocol_map(config.listener_security_protocol_map)
        self.quota = ConnectionQuota(config.max_connections, config.max_connections_per_ip)
        self.request_memory = RequestMemory(
            None if config.queued_max_request_bytes < 0 else config.queued_max_request_bytes)
        self.apis = KafkaApis(broker)
        self.client_quotas = ClientQuotas()
        self.sasl = SaslListeners(broker, self.listeners, self.protocol_map)

    async def start(self) -> list[Listener]:
        """Bind every listener, and return the endpoints to advertise (each with the port it
        bound where 0 was asked)."""
        loop = asyncio.get_running_loop()
        config = self.broker.config
        for listener in self.listeners:
            tls: dict[str, Any] = {}
            if security_protocol(listener, self.protocol_map).uses_tls:
                tls = {"ssl": server_ssl_context(config.for_listener(listener.name)),
                       "ssl_handshake_timeout": config.ssl_handshake_timeout_ms / 1000}
            connection = functools.partial(
                KafkaConnection, functools.partial(self._serve, listener.name))
            self._servers[listener.name] = await loop.create_server(
                connection, listener.host, listener.port, **tls)
        self.apis.start()
        assert self.broker.store is not None  # a broker serves Kafka clients once it has one
        await self.client_quotas.watch(self.broker.store)
        self.sasl.start()
        self.advertise(self._static_advertised)
        log.info("broker %d serves Kafka's protocol on %s (advertised %s)",
                 self.broker.broker_id,
                 ", ".join(f"{listener.name}://{listener.host}:{self.bound_port(listener.name)}"
                           for listener in self.listeners),
                 ",".join(map(str, self.advertised)))
        return self.advertised

    def bound_port(self, name: str) -> int:
        """The port the listener of that name bound."""
        return int(self._servers[name].sockets[0].getsockname()[1])

    def advertise(self, advertised: Mapping[str, Listener]) -> None:
        """Tell clients `advertised` from now on: a listener it does not name is advertised as
        bound, and port 0 is the port it bound (a dynamic advertised.listeners changes it
        while the broker runs)."""
        endpoints = []
        for listener in self.listeners:
            endpoint = advertised.get(listener.name)
            if endpoint is None:
                endpoint = listener._replace(port=self.bound_port(listener.name))
            elif endpoint.port == 0:
                endpoint = endpoint._replace(port=self.bound_port(listener.name))
            endpoints.append(endpoint)
        self.advertised = endpoints
        self.apis.topics.advertised_listener = ",".join(map(str, endpoints))

    async def close(self) -> None:
        self.client_quotas.close()
        self.sasl.close()
        await self.apis.close()
        for server in self._servers.values():
            server.close()
        for task in list(self._connections):
            task.cancel()
        for server in self._servers.values():
            await server.wait_closed()

    # --------------------------------------------------------------------- connections

    def stats(self) -> dict[str, Any]:
        """What the clients hold now: connections (in all and per address) and request bytes
        (now, and the most at once since the start); how many host calls failed, and how many
        were answered over the hosts' data ports; the fetch sessions held, and how many were
        evicted; and the principals of the clients connected now, by listener."""
        principals: dict[str, list[str]] = {}
        for connection in self._connections.values():
            principals.setdefault(connection.listener_name, []).append(str(connection.principal))
        return {"connections": self.quota.total,
                "principals": {name: sorted(found) for name, found in principals.items()},
                "connections_per_ip": dict(self.quota.per_ip),
                "queued_request_bytes": self.request_memory.in_use,
                "queued_request_bytes_peak": self.request_memory.peak,
                "host_failures": self.apis.host_failures,
                "host_calls_over_data_ports": self.apis.host_calls_over_data_ports,
                "fetch_sessions": len(self.apis.fetch_sessions.sessions),
                "fetch_sessions_evicted": self.apis.fetch_sessions.evicted,
                "client_quotas": self.client_quotas.stats()}

    def _release_request(self, size: int, _answered: asyncio.Task[bytes | None]) -> None:
        self.request_memory.release(size)

    async def _serve(self, listener_name: str, connection: KafkaConnection) -> None:
        peer = connection.peername
        ip = peer[0] if peer else ""
        refused = self.quota.admit(ip)
        if refused is not None:
            log.warning("closing a new connection from %s: %s", peer, refused)
            connection.close()
            return
        task = asyncio.current_task()
        assert task is not None
        connection.listener_name = listener_name
        connection.principal = principal_from_certificate(connection.peercert)
        self._connections[task] = connection
        CLIENT_HOST.set(f"/{ip}" if ip else "")
        CLIENT_LISTENER.set(listener_name)
        CLIENT_CONNECTION.set(connection)
        # Requests read and not yet answered, in the order they came; None: no more.
        answers: asyncio.Queue[asyncio.Task[bytes | None] | None] = asyncio.Queue(
            REQUESTS_READ_AHEAD)
        working: set[asyncio.Task[bytes | None]] = set()
        replier: asyncio.Task[None] | None = None
        try:
            if not await self.sasl.authenticate(connection, self.max_request_bytes, peer):
                return
            replier = asyncio.create_task(self._reply_in_order(answers, connection, peer))
            await self._read_requests(connection, answers, working, peer)
            await answers.put(None)  # what was read is answered before the connection closes
            await replier
        except Exception:  # a bug: this connection closes, the others go on
            log.exception("closing the connection of %s after an unexpected error", peer)
        finally:
            if replier is not None:
                replier.cancel()
            for request in working:
                request.cancel()
            self._connections.pop(task, None)
            self.quota.release(ip)
            connection.close()

    async def _read_requests(self, connection: KafkaConnection,
                             answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
                             working: set[asyncio.Task[bytes | None]], peer: Any) -> None:
        """Read a connection's requests and start answering each, until the client closes it or
        sends what closes it. Up to REQUESTS_READ_AHEAD are read ahead of the one whose answer
        is next (Kafka's clients keep up to max.in.flight.requests.per.connection out), and
        each waits for the requests before it unless order cannot matter to it
        (`_may_overlap`): a partition's appends keep the order its producer sent them in."""
        last_in_order: asyncio.Task[bytes | None] | None = None
        while True:
            try:
                await self.client_quotas.unmuted(connection)
                size = await connection.read_size()
            except (asyncio.IncompleteReadError, ConnectionError):
                return  # the client went away
            if not 0 <= size <= self.max_request_bytes:
                log.warning("closing the connection of %s: a frame of %d bytes (at most "
                            "socket.request.max.bytes=%d)", peer, size, self.max_request_bytes)
                return
            await self.request_memory.acquire(size)
            try:
                request = _parse(await connection.read_frame(size))
            except BaseException as error:
                self.request_memory.release(size)
                if isinstance(error, (asyncio.IncompleteReadError, ConnectionError)):
                    return  # the client went away mid-frame
                if isinstance(error, MalformedRequestError):
                    log.warning("closing the connection of %s: %s", peer, error)
                    return
                raise
            if connection.sasl is not None:  # KIP-368: a session ends, or re-authenticates
                if connection.sasl.must_close(request):
                    self.request_memory.release(size)
                    log.info("closing the connection of %s: its SASL session expired", peer)
                    return
                request = connection.sasl.reauthenticate(request)
            in_order = not _may_overlap(request)
            if in_order:
                before = list(working)
            else:
                before = [] if last_in_order is None or last_in_order.done() \
                    else [last_in_order]
            answer = asyncio.create_task(self._answer(connection, request, size, before))
            working.add(answer)
            answer.add_done_callback(working.discard)
            # A callback, not the task's own `finally`: it also runs for a task cancelled
            # before it started.
            answer.add_done_callback(functools.partial(self._release_request, size))
            if in_order:
                last_in_order = answer
            await answers.put(answer)
            if connection.sasl is not None and connection.sasl.must_close():
                return  # a failed re-authentication: answered, then closed

    @staticmethod
    async def _reply_in_order(answers: asyncio.Queue[asyncio.Task[bytes | None] | None],
                              connection: KafkaConnection, peer: Any) -> None:
        """Write each answer in the order its request came. Once the connection cannot be
        written to, the rest are still waited for (their work is under way) and dropped."""
        broken = False
        while (answer := await answers.get()) is not None:
            try:
                response = await answer
            except Exception:  # a bug: this connection closes, the others go on
                if not broken:
                    log.exception("closing the connection of %s after an unexpected error",
                                  peer)
                broken = True
                connection.close()
                continue
            if response is None or broken:
                continue
            try:
                connection.write(response)
                await connection.drain()
            except ConnectionError:
                broken = True  # the client went away; the reader sees it too

    async def _answer(self, connection: KafkaConnection, request: tuple[Api, int, Any] | bytes,
                      size: int, before: list[asyncio.Task[bytes | None]]) -> bytes | None:
        """The response to `request` (None for a produce with acks=0), once the requests in
        `before` are answered, throttled as its client's quotas say."""
        if before:
            await asyncio.wait(before)
        if isinstance(request, bytes):
            return request
        api, version, body = request
        fields = await self.client_quotas.answer(
            connection, api, version, body.header.client_id, size,
            self.apis.handler_for(api.key)(api, version, body))
        if fields is None or isinstance(fields, bytes):
            return fields  # no answer (acks=0), or one the handler wrote itself
        return encode_response(api, version, body.header.correlation_id, **fields)


def _parse(frame: bytes | bytearray) -> tuple[Api, int, Any] | bytes:
    """`(api, version, request)` from a frame, or the answer already known without a handler
    (ApiVersions, or UNSUPPORTED_VERSION for an API or version not served). Raises
    `MalformedRequestError` for a frame that does not decode."""
    try:
        api, version, request = read_request(frame)
    except UnsupportedRequestError as error:
        log.info("answering %s with UNSUPPORTED_VERSION", error)
        return unsupported_response(error)
    if api.key == ApiKey.ApiVersions:
        return api_versions_response(version, request.header.correlation_id)
    return api, version, request


def _may_overlap(request: tuple[Api, int, Any] | bytes) -> bool:
    """Whether a request may be worked on while its connection's earlier ones still are: an
    answer known already (it goes out in order all the same), or a produce whose every batch is
    an idempotent producer's, which the leader appends in sequence order whatever order the
    requests reach it in (a batch ahead of its turn waits there for those before it). Kafka's
    idempotent clients keep five such requests out per connection; answering them one at a
    time would leave four idle."""
    if isinstance(request, bytes):
        return True
    api, _version, body = request
    return api.key == ApiKey.Produce and all(
        part.records and from_idempotent_producer(part.records)
        for topic in body.topic_data for part in topic.partition_data)
