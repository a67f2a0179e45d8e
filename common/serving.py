"""A TCP server rafka runs on an event loop (a replica host's data port, a broker's control
endpoint): the one way it listens, keeps each accepted connection, and closes them all."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable

Serve = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def no_delay(writer: asyncio.StreamWriter) -> None:
    """Small frames go at once: an answer is often a few hundred bytes."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class Listener:
    """Listens on `host` and hands each connection to `serve`, which keeps it inside
    `keeping`; `close` stops listening and drops every connection kept."""

    def __init__(self, host: str, serve: Serve, handshake_timeout_s: float) -> None:
        self.host = host
        self.port: int | None = None
        self._serve = serve
        self._handshake_timeout_s = handshake_timeout_s
        self._server: asyncio.Server | None = None
        # Callers ask concurrently (a host's broker publishing its port while a follower asks
        # it): without the lock each would start a server, and they would learn two ports.
        self._starting = asyncio.Lock()
        self._connections: set[asyncio.StreamWriter] = set()

    @property
    def listening(self) -> bool:
        return self._server is not None

    @property
    def connections_open(self) -> int:
        return len(self._connections)

    async def listen(self, port: int = 0, ssl_context: ssl.SSLContext | None = None) -> int:
        """Listening, if not yet, on `port` (0: any free one), over TLS with `ssl_context`;
        the port. A TLS client has `handshake_timeout_s` to finish its handshake."""
        async with self._starting:
            if self._server is None:
                self._server = await asyncio.start_server(
                    self._serve, self.host, port, ssl=ssl_context,
                    ssl_handshake_timeout=self._handshake_timeout_s if ssl_context else None)
                self.port = self._server.sockets[0].getsockname()[1]
        assert self.port is not None, "the port is known once the server listens"
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._connections):
            writer.close()

    @contextlib.asynccontextmanager
    async def keeping(self, writer: asyncio.StreamWriter, refused: tuple[type[Exception], ...],
                      log: logging.Logger, what: str) -> AsyncIterator[None]:
        """Serve one connection inside the block: kept meanwhile, closed after. A peer that
        goes (or never speaks) ends it quietly; one that sends what the protocol refuses
        (`refused`) is logged and dropped, nothing it sent acted on; any other error is a bug,
        logged: this connection goes, the server and the others stay."""
        no_delay(writer)
        self._connections.add(writer)
        peer = writer.get_extra_info("peername")
        try:
            yield
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
            pass  # the peer went (or never spoke): it connects again when it needs to
        except refused as error:
            log.warning("closing a %s connection from %s: %s", what, peer, error)
        except Exception:
            log.exception("a %s connection from %s failed", what, peer)
        finally:
            self._connections.discard(writer)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
