"""One Kafka client's connection to the listener: its frames read, its answers written.

A Kafka frame is a 4-byte big-endian size and that many bytes. asyncio's streams would copy a
frame's bytes three times on their way in (from the socket into a bytes object, into the
stream's buffer, out of it into the frame), and wake the reader for every 256 KB of a large one.
Here the socket is read straight into buffers (`asyncio.BufferedProtocol`), as Kafka's
`NetworkReceive` reads: small frames are cut out of one receive buffer (one `recv` often holds
several requests), and a frame larger than that buffer gets a buffer of its own size, which the
kernel fills, so its bytes are not copied at all. What a client sends in a loop (a producer's
megabyte batches, or a batch too large for its topic that is refused from its header) costs the
broker's loop that much less.

Reading stops while the receive buffer is full and nobody is taking frames out of it, so a
connection holds at most one receive buffer unread, plus the frame being read; the listener
decides, from the size alone, whether and when a frame's bytes may be read
(`socket.request.max.bytes`, `queued.max.request.bytes`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from rafka.wire.principal import ANONYMOUS, KafkaPrincipal

SIZE_BYTES = 4
RECEIVE_BUFFER_BYTES = 64 * 1024
# Less free space than this at the receive buffer's end: what is unread moves to the front
# before the next read, rather than reading a few bytes at a time.
MIN_RECEIVE_BYTES = 4096


class KafkaConnection(asyncio.BufferedProtocol):
    """The listener's side of one TCP connection. `serve(connection)` runs in a task of its
    own from the moment the connection is made; it reads with `read_size` and `read_frame`
    (which raise `asyncio.IncompleteReadError` or `ConnectionError` once the client is gone, as
    a stream's `readexactly` does) and answers with `write` and `drain`."""

    def __init__(self, serve: Callable[[KafkaConnection], Coroutine[Any, Any, None]],
                 receive_buffer_bytes: int = RECEIVE_BUFFER_BYTES) -> None:
        self._serve = serve
        self._buffer = bytearray(receive_buffer_bytes)
        self._start = 0  # the first unread byte of _buffer
        self._end = 0  # one past the last byte received into _buffer
        self._frame: bytearray | None = None  # a large frame being read into a buffer of its own
        self._filled = 0
        self._wanted = 0  # how many unread bytes the reader waits for
        self._reader: asyncio.Future[None] | None = None
        self._drained: list[asyncio.Future[None]] = []
        self._reading_paused = False
        self._writing_paused = False
        self._eof = False
        self._lost: BaseException | None = None
        self._tls = False
        self._transport: asyncio.Transport | None = None
        self.peername: Any = None
        # The client's certificate, as `ssl.SSLSocket.getpeercert()` gives it (None without
        # TLS or without one), the listener it came in on and its principal, which the
        # listener sets from them.
        self.peercert: dict[str, Any] | None = None
        self.listener_name = ""
        self.principal: KafkaPrincipal = ANONYMOUS
        # Until when (monotonic seconds) nothing more is read: its client is being throttled.
        self.muted_until = 0.0
        # On a SASL listener, its authentication (actors/kafka/sasl.py); None on the others.
        # (Any: the authenticator's module imports this one.)
        self.sasl: Any = None
        self.task: asyncio.Task[None] | None = None

    # --------------------------------------------------------------- the protocol's side

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.peername = transport.get_extra_info("peername")
        self.peercert = transport.get_extra_info("peercert")
        self._tls = transport.get_extra_info("sslcontext") is not None
        self.task = asyncio.get_running_loop().create_task(self._serve(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled:]
        if self._start and len(self._buffer) - self._end < MIN_RECEIVE_BYTES:
            self._compact()  # what is unread is less than the whole buffer, or reading paused
        return memoryview(self._buffer)[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._frame is not None:
            self._filled += nbytes
            if self._filled == len(self._frame):
                self._frame = None  # whole: what comes next goes to the receive buffer
                self._wake_reader()
            return
        self._end += nbytes
        if self._end - self._start >= self._wanted:
            self._wake_reader()
        if self._start == 0 and self._end == len(self._buffer):
            self._pause_reading()  # full: nobody has taken a frame out yet

    def eof_received(self) -> bool:
        self._eof = True
        self._wake_reader()
        # A client that only shut its sending side still gets its answers; TLS cannot keep a
        # half-closed connection (asyncio closes it whatever this says).
        return not self._tls

    def connection_lost(self, exc: BaseException | None) -> None:
        self._eof = True
        self._lost = exc or ConnectionResetError("the connection was closed")
        self._wake_reader()
        for waiter in self._drained:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("the connection was lost"))
        self._drained.clear()

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        for waiter in self._drained:
            if not waiter.done():
                waiter.set_result(None)
        self._drained.clear()

    # ---------------------------------------------------------------- the server's side

    async def read_size(self) -> int:
        """The next frame's size (signed, as the client sent it)."""
        await self._unread(SIZE_BYTES)
        size = int.from_bytes(self._buffer[self._start:self._start + SIZE_BYTES], "big",
                              signed=True)
        self._took(SIZE_BYTES)
        return size

    async def read_frame(self, size: int) -> bytes | bytearray:
        """The `size` bytes that follow: `bytes` when they fit the receive buffer, else a
        `bytearray` of their own that the socket was read into."""
        if size <= len(self._buffer):
            await self._unread(size)
            frame = bytes(memoryview(self._buffer)[self._start:self._start + size])
            self._took(size)
            return frame
        large_frame = bytearray(size)
        unread = self._end - self._start
        large_frame[:unread] = memoryview(self._buffer)[self._start:self._end]
        self._start = self._end = 0
        self._frame, self._filled = large_frame, unread
        self._resume_reading()
        try:
            while self._frame is not None:
                if self._eof:
                    raise asyncio.IncompleteReadError(bytes(large_frame[:self._filled]), size)
                await self._wait()
        finally:
            self._frame = None
        return large_frame

    def write(self, data: bytes) -> None:
        assert self._transport is not None
        self._transport.write(data)

    async def drain(self) -> None:
        """Wait while the socket's send buffer is over its high-water mark."""
        if self._lost is not None:
            raise ConnectionResetError("the connection was lost")
        if not self._writing_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drained.append(waiter)
        await waiter

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    # ------------------------------------------------------------------------ inside

    async def _unread(self, size: int) -> None:
        """Wait until `size` unread bytes (at most the receive buffer) are in the buffer."""
        while self._end - self._start < size:
            if self._eof:
                raise asyncio.IncompleteReadError(
                    bytes(self._buffer[self._start:self._end]), size)
            if self._start + size > len(self._buffer):
                self._compact()  # the rest could not fit behind what is unread
            self._wanted = size
            self._resume_reading()
            try:
                await self._wait()
            finally:
                self._wanted = 0

    def _compact(self) -> None:
        """Move what is unread to the front of the receive buffer."""
        unread = self._end - self._start
        self._buffer[:unread] = self._buffer[self._start:self._end]
        self._start, self._end = 0, unread

    def _took(self, size: int) -> None:
        self._start += size
        if self._start == self._end:
            self._start = self._end = 0
        self._resume_reading()

    async def _wait(self) -> None:
        self._reader = asyncio.get_running_loop().create_future()
        try:
            await self._reader
        finally:
            self._reader = None

    def _wake_reader(self) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.set_result(None)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self._transport is not None:
            self._reading_paused = True
            self._transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._reading_paused and self._transport is not None and not self._eof:
            self._reading_paused = False
            self._transport.resume_reading()
