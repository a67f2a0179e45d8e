"""One accepted connection's life on a server rafka runs on an event loop (a replica host's data
port, a broker's control endpoint): the one way such a connection is kept, and closed when it
ends, however it ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import AsyncIterator


def no_delay(writer: asyncio.StreamWriter) -> None:
    """Small frames go at once: an answer is often a few hundred bytes."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


@contextlib.asynccontextmanager
async def serving(writer: asyncio.StreamWriter, connections: set[asyncio.StreamWriter],
                  refused: tuple[type[Exception], ...], log: logging.Logger, what: str,
                  ) -> AsyncIterator[None]:
    """Serve one connection inside the block: kept in `connections` meanwhile, closed after.
    A peer that goes (or never speaks) ends it quietly; one that sends what the protocol
    refuses (`refused`) is logged and dropped, nothing it sent acted on; any other error is a
    bug, logged: this connection goes, the server and the others stay."""
    no_delay(writer)
    connections.add(writer)
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
        connections.discard(writer)
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
