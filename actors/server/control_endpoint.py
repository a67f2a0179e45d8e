"""A broker's control endpoint: the TCP port the controller's requests come in on (LeaderAndIsr,
UpdateMetadata, StopReplica, topic config changes), as a Kafka broker's inter-broker listener
takes its controller's, instead of Ray actor calls; its own replica hosts send their ISR
changes to it too.

The broker registers it in ZooKeeper (`BrokerInfo.control_endpoint`), where the controller
finds it (`rafka.actors.controller.broker_connections`). Frames are the control protocol's
(`rafka.actors.controller.control_frames`); a connection opens with the cluster's control
token, and over mutual TLS exactly when the data ports speak it
(`security.inter.broker.protocol=SSL`). A connection's requests are handed to the broker's
handlers one after another, in the order they came, and each answer goes back as soon as it
is ready; a stale controller epoch is refused by the handlers, as over Ray. A transaction's
verification (a leader host's, or another broker's, KIP-890) is the exception: it is applied
beside the others, since it may wait on another broker.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from rafka.actors.controller import control_frames
from rafka.actors.controller.control_frames import ControlAnswer, ControlFrameError
from rafka.common.serving import Listener

log = logging.getLogger(__name__)

# How long a new connection has to say who it is (and, over TLS, to finish its handshake).
HELLO_TIMEOUT_S = 10.0
# A request that takes longer than this is logged (info), with how long: a controller that
# gives up on an answer after 5 s leaves no other trace of where the time went.
SLOW_REQUEST_S = 2.0


class ControlEndpoint:
    """Serves the controller's requests (and the hosts' ISR changes) on `host`; `handlers` by
    method name (`control_frames.METHODS`), each called with the request's epoch and
    arguments, except those in `control_frames.WITHOUT_EPOCH`, called with the arguments."""

    def __init__(self, host: str, token: bytes,
                 handlers: Mapping[str, Callable[..., Awaitable[ControlAnswer]]],
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.token = token
        self.handlers = dict(handlers)
        self.ssl_context = ssl_context
        self._listener = Listener(host, self._serve, HELLO_TIMEOUT_S)
        # How many connections were accepted and said the right token (the tests read it).
        self.connections_accepted = 0

    @property
    def port(self) -> int | None:
        """The port it listens on (the one it had, while closed); None before it started."""
        return self._listener.port

    @property
    def endpoint(self) -> str:
        """Where it listens, as the registration says it: `host:port`."""
        assert self.port is not None, "known once started"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    async def start(self) -> str:
        """Listen (on the port it had, if it listened before; else any free one)."""
        await self._listener.listen(self.port or 0, self.ssl_context)
        return self.endpoint

    async def close(self) -> None:
        """Stop listening and drop every connection."""
        await self._listener.close()

    async def restart(self) -> str:
        """Drop every connection and listen again on the same port (fault injection: the
        controller must connect again and tell the broker what it missed)."""
        await self.close()
        return await self.start()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._listener.keeping(writer, (ControlFrameError,), log, "control"):
            token = control_frames.read_hello(await asyncio.wait_for(
                self._read_frame(reader), HELLO_TIMEOUT_S))
            if not hmac.compare_digest(token, self.token):
                raise ControlFrameError("a wrong token")
            self.connections_accepted += 1
            # Requests applied beside the others (`control_frames.CONCURRENT`), and the lock
            # that keeps their answers and the others' whole on the socket.
            running: set[asyncio.Task] = set()
            writing = asyncio.Lock()

            async def answer(request: control_frames.ControlRequest) -> None:
                reply = await self._apply(request)
                async with writing:
                    writer.write(control_frames.encode_answer(request.correlation_id, reply))
                    await writer.drain()

            try:
                while True:
                    request = control_frames.decode_request(await self._read_frame(reader))
                    if request.method in control_frames.CONCURRENT:
                        task = asyncio.ensure_future(answer(request))
                        running.add(task)
                        task.add_done_callback(running.discard)
                    else:
                        await answer(request)
            finally:
                for task in running:
                    task.cancel()

    async def _apply(self, request: control_frames.ControlRequest) -> ControlAnswer:
        handler = self.handlers[request.method]
        started = time.monotonic()
        try:
            if request.method in control_frames.WITHOUT_EPOCH:
                return await handler(*request.arguments)
            return await handler(request.controller_epoch, *request.arguments)
        finally:
            took_s = time.monotonic() - started
            if took_s > SLOW_REQUEST_S:
                log.info("control endpoint %s: %s took %.1f s", self.host, request.method,
                         took_s)

    @staticmethod
    async def _read_frame(reader: asyncio.StreamReader) -> bytes:
        header = await reader.readexactly(control_frames.LENGTH.size)
        return await reader.readexactly(control_frames.frame_length(header))

    def stats(self) -> dict[str, Any]:
        return {"endpoint": self.endpoint if self.port else None,
                "connections_accepted": self.connections_accepted,
                "connections_open": self._listener.connections_open}
