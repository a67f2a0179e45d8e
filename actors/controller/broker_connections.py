"""The controller's connections to the brokers' control endpoints, as Kafka's controller keeps
one to each broker (`ControllerChannelManager`'s RequestSendThread): no Ray actor call, no
lookup in Ray's directory. A broker's endpoint is in its registration in ZooKeeper
(`BrokerInfo.control_endpoint`), which the controller reads anyway. A replica host keeps one
`BrokerConnection` too, to its own broker, for its leaders' ISR changes.

Each connection is made when a request is to go, made again after it fails, waiting longer
between attempts (`ReconnectBackoff`), and carries requests one after another without waiting
for their answers; the broker applies them in order. A request unanswered within
`request_timeout_s` fails with `BrokerDidNotAnswer` (the controller's channel sends again what
was not applied); a connection on which nothing has come back for `socket_timeout_s` while
requests wait is closed, so that a broker that went silent (cut off, paused) is connected to
afresh, and every request still waiting on it fails.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import ssl
from collections.abc import Awaitable
from typing import Any

from rafka.actors.controller import control_frames
from rafka.actors.controller.control_frames import (
    ControlAnswer,
    PendingRequests,
    ReconnectBackoff,
)
from rafka.actors.messages import IsrChange, LeaderAndIsrRequest, UpdateMetadataRequest
from rafka.common.errors import RafkaError
from rafka.coordination.models import BrokerInfo

log = logging.getLogger(__name__)

# Kafka's controller.socket.timeout.ms: how long a connection may stay silent while it owes
# answers before it is closed and made again.
CONTROLLER_SOCKET_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 5.0
# How often a connection that owes answers looks at how long it has been silent.
SILENCE_CHECK_S = 0.5


class BrokerDidNotAnswer(RafkaError, TimeoutError):
    """A broker did not answer the controller in time."""


class BrokerUnreachable(RafkaError, ConnectionError):
    """The connection to a broker's control endpoint failed before its answer came."""


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """`host:port` (an IPv6 host in brackets) as (host, port)."""
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a control endpoint is host:port, not {endpoint!r}")
    return host.strip("[]"), int(port)


class BrokerConnection:
    """A connection to one broker's control endpoint: the controller's (a `BrokerSender`), or
    a replica host's to its own broker."""

    def __init__(self, broker_id: int, address: tuple[str, int], token: bytes,
                 ssl_context: ssl.SSLContext | None, request_timeout_s: float,
                 socket_timeout_s: float = CONTROLLER_SOCKET_TIMEOUT_S,
                 backoff: ReconnectBackoff | None = None) -> None:
        self.broker_id = broker_id
        self.address = address
        self.token = token
        self.ssl_context = ssl_context
        self.request_timeout_s = request_timeout_s
        self.socket_timeout_s = socket_timeout_s
        self.backoff = backoff or ReconnectBackoff()
        # Requests not sent yet, in order, and the event that says one was added.
        self._outbox: collections.deque[tuple[bytes, int, asyncio.Future]] = collections.deque()
        self._queued = asyncio.Event()
        self._pending: PendingRequests[asyncio.Future] = PendingRequests()
        self._owed: set[int] = set()
        self._silent_since: float | None = None
        self._task: asyncio.Task | None = None
        self._closed = False
        # How many connections were made (the tests count reconnects).
        self.connections_made = 0

    # --------------------------------------------------------- the BrokerSender protocol

    def leader_and_isr(self, controller_epoch: int,
                       partitions: list[LeaderAndIsrRequest]) -> Awaitable[ControlAnswer]:
        return self.request(control_frames.LEADER_AND_ISR, controller_epoch, partitions)

    def update_metadata(self, request: UpdateMetadataRequest) -> Awaitable[ControlAnswer]:
        return self.request(control_frames.UPDATE_METADATA, request.controller_epoch, request)

    def stop_replicas(self, controller_epoch: int, partitions: list[tuple[str, int]],
                      delete: bool) -> Awaitable[ControlAnswer]:
        return self.request(control_frames.STOP_REPLICAS, controller_epoch, partitions, delete)

    def update_topic_config(self, controller_epoch: int, topic: str,
                            config: dict[str, str]) -> Awaitable[ControlAnswer]:
        return self.request(control_frames.UPDATE_TOPIC_CONFIG, controller_epoch, topic, config)

    # ------------------------------------------------------------- a replica host's request

    def update_partition_states(self, changes: list[IsrChange]) -> Awaitable[ControlAnswer]:
        """Leaders' ISR changes, for the broker to write (`Broker.update_partition_states`):
        each change carries its own controller epoch, so the frame's is left at -1."""
        return self.request(control_frames.UPDATE_PARTITION_STATES, -1, changes)

    def verify_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int,
                           partitions: list[tuple[str, int]], forwarded: bool = False
                           ) -> Awaitable[ControlAnswer]:
        """Whether `partitions` are in the producer's ongoing transaction (KIP-890's
        verify-only AddPartitionsToTxn): a leader host asks its broker, which asks the
        transaction's coordinator (`forwarded`: this broker was asked by another, and does
        not ask on)."""
        return self.request(control_frames.VERIFY_TRANSACTION, -1, transactional_id,
                            producer_id, producer_epoch, partitions, forwarded)

    # --------------------------------------------------------------------------- requests

    def request(self, method: str, controller_epoch: int, *arguments: Any) -> asyncio.Future:
        """Queue one request; its answer, to await, fails with `BrokerDidNotAnswer` after
        `request_timeout_s` and with `BrokerUnreachable` if the connection fails first."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future = loop.create_future()
        if self._closed:
            answer.set_exception(BrokerUnreachable(f"the connection to broker "
                                                   f"{self.broker_id} is closed"))
            return answer
        correlation_id = self._pending.add(answer)
        frame = control_frames.encode_request(correlation_id, method, controller_epoch,
                                              *arguments)
        timer = loop.call_later(self.request_timeout_s, self._timed_out, correlation_id,
                                method)
        answer.add_done_callback(lambda _: timer.cancel())
        self._outbox.append((frame, correlation_id, answer))
        self._queued.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        return answer

    def _timed_out(self, correlation_id: int, method: str) -> None:
        answer = self._pending.answered(correlation_id)
        if answer is not None and not answer.done():
            answer.set_exception(BrokerDidNotAnswer(
                f"broker {self.broker_id} did not answer {method} within "
                f"{self.request_timeout_s:g} s"))

    def close(self) -> None:
        """Close the connection; every request still waiting fails."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
        self._fail_waiting(f"the connection to broker {self.broker_id} was closed")

    def _fail_waiting(self, why: str) -> None:
        for answer in self._pending.take_all():
            if not answer.done():
                answer.set_exception(BrokerUnreachable(why))

    # ------------------------------------------------------------------ the connection

    async def _run(self) -> None:
        """Connect, send what is queued, read the answers; again after a failure, after a
        backoff, while anything is queued."""
        failures = 0
        while not self._closed and (self._outbox or len(self._pending)):
            await asyncio.sleep(self.backoff.delay_s(failures))
            try:
                reader, writer = await self._connect()
            except (OSError, asyncio.TimeoutError) as error:
                failures += 1
                log.info("cannot connect to broker %d's control endpoint at %s:%d (%r), "
                         "attempt %d", self.broker_id, *self.address, error, failures)
                self._drop_given_up()
                continue
            failures = 0
            self.connections_made += 1
            try:
                await self._exchange(reader, writer)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError,
                    control_frames.ControlFrameError) as error:
                log.info("the connection to broker %d's control endpoint failed: %r",
                         self.broker_id, error)
            finally:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            # What was sent on it is lost with it: the channel sends again what was not
            # applied. What was not sent yet goes on the next connection.
            self._fail_waiting(f"the connection to broker {self.broker_id} failed")
            failures = 1

    def _drop_given_up(self) -> None:
        """Requests queued whose answer was already given up (timed out) are not sent."""
        for _, correlation_id, answer in self._outbox:
            if answer.done():
                self._pending.forget(correlation_id)
        self._outbox = collections.deque(
            queued for queued in self._outbox if not queued[2].done())

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        host, port = self.address
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, ssl=self.ssl_context), CONNECT_TIMEOUT_S)
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        writer.write(control_frames.hello(self.token))
        return reader, writer

    async def _exchange(self, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter) -> None:
        # What was written on this connection and not answered yet (given up or not), and
        # since when nothing has come back while something was owed.
        self._owed = set()
        self._silent_since = None
        reading = asyncio.ensure_future(self._read_answers(reader))
        try:
            while True:
                while self._outbox:
                    frame, correlation_id, answer = self._outbox.popleft()
                    if answer.done():  # given up before it could go
                        self._pending.forget(correlation_id)
                        continue
                    writer.write(frame)
                    self._owed.add(correlation_id)
                    if self._silent_since is None:
                        self._silent_since = asyncio.get_running_loop().time()
                await writer.drain()
                self._queued.clear()
                queued = asyncio.ensure_future(self._queued.wait())
                done, _ = await asyncio.wait({queued, reading},
                                             return_when=asyncio.FIRST_COMPLETED)
                if reading in done:
                    queued.cancel()
                    reading.result()  # raises what ended it
                    return
        finally:
            reading.cancel()

    async def _read_answers(self, reader: asyncio.StreamReader) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                # A short wait, to look at the silence now and then; readexactly keeps what
                # came of a frame when it is cancelled.
                header = await asyncio.wait_for(
                    reader.readexactly(control_frames.LENGTH.size), SILENCE_CHECK_S)
            except asyncio.TimeoutError:
                if (self._silent_since is not None
                        and loop.time() - self._silent_since > self.socket_timeout_s):
                    raise BrokerDidNotAnswer(
                        f"broker {self.broker_id} has said nothing for "
                        f"{self.socket_timeout_s:g} s") from None
                continue
            body = await asyncio.wait_for(
                reader.readexactly(control_frames.frame_length(header)), self.socket_timeout_s)
            correlation_id, reply = control_frames.decode_answer(body)
            self._owed.discard(correlation_id)
            self._silent_since = loop.time() if self._owed else None
            answer = self._pending.answered(correlation_id)
            if answer is not None and not answer.done():
                answer.set_result(reply)


class BrokerConnections:
    """One `BrokerConnection` per registered broker, to the endpoint its registration names;
    made again when the broker registers anew (another epoch, maybe another endpoint)."""

    def __init__(self, token: bytes, ssl_context: ssl.SSLContext | None,
                 request_timeout_s: float) -> None:
        self.token = token
        self.ssl_context = ssl_context
        self.request_timeout_s = request_timeout_s
        self._connections: dict[int, tuple[int | None, str, BrokerConnection]] = {}

    def sender(self, broker: int, info: BrokerInfo | None) -> BrokerConnection | None:
        """The connection to `broker` as registered (`info`); None if it is not, or its
        registration names no control endpoint (a broker of an older rafka)."""
        if info is None or not info.control_endpoint:
            self.drop(broker)
            return None
        kept = self._connections.get(broker)
        if kept is not None and kept[:2] == (info.epoch, info.control_endpoint):
            return kept[2]
        self.drop(broker)
        connection = BrokerConnection(broker, parse_endpoint(info.control_endpoint),
                                      self.token, self.ssl_context, self.request_timeout_s)
        self._connections[broker] = (info.epoch, info.control_endpoint, connection)
        return connection

    def drop(self, broker: int) -> None:
        kept = self._connections.pop(broker, None)
        if kept is not None:
            kept[2].close()

    def close(self) -> None:
        for broker in list(self._connections):
            self.drop(broker)

    def connections_made(self) -> dict[int, int]:
        """How many connections were made to each broker (reconnects count)."""
        return {broker: kept[2].connections_made for broker, kept in self._connections.items()}
