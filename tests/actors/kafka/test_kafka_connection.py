"""The Kafka listener's connections (`actors/kafka/connection.py`): frames read straight into
buffers over a real localhost socket, however the bytes are cut on the way; large frames into
buffers of their own; a frame cut short; reading paused while nobody takes frames; answers
after the client shut its sending side. asyncio only: no Ray, no broker."""

from __future__ import annotations

import asyncio
import socket
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rafka.actors.kafka.connection import KafkaConnection

SMALL_BUFFER = 64  # so that frames of a few dozen bytes already cross the receive buffer


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


async def serve_frames(chunks: list[bytes], count: int, buffer_bytes: int,
                       pause_s: float = 0.0) -> list[bytes | bytearray]:
    """Start a server reading `count` frames; a client writes `chunks`, one send each."""
    frames: list[bytes | bytearray] = []
    finished = asyncio.get_running_loop().create_future()

    async def serve(connection: KafkaConnection) -> None:
        try:
            for _ in range(count):
                frames.append(await connection.read_frame(await connection.read_size()))
            finished.set_result(None)
        except BaseException as error:
            finished.set_exception(error)
        finally:
            connection.close()

    server = await asyncio.get_running_loop().create_server(
        lambda: KafkaConnection(serve, buffer_bytes), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for chunk in chunks:
        writer.write(chunk)
        await writer.drain()
        if pause_s:
            await asyncio.sleep(pause_s)
    await asyncio.wait_for(finished, 30)
    writer.close()
    server.close()
    await server.wait_closed()
    return frames


@settings(max_examples=60, deadline=None)
@given(bodies=st.lists(st.binary(min_size=0, max_size=300), min_size=1, max_size=12),
       cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=30),
       pause=st.booleans())
def test_frames_read_whole_and_in_order_however_the_bytes_are_cut(
        bodies: list[bytes], cuts: list[int], pause: bool) -> None:
    stream = b"".join(framed(body) for body in bodies)
    chunks, at = [], 0
    for cut in cuts:
        if at >= len(stream):
            break
        chunks.append(stream[at:at + cut])
        at += cut
    if at < len(stream):
        chunks.append(stream[at:])
    frames = asyncio.run(serve_frames(chunks, len(bodies), SMALL_BUFFER,
                                      pause_s=0.001 if pause else 0.0))
    assert [bytes(frame) for frame in frames] == bodies
    # Frames that fit the receive buffer come out as bytes, larger ones in their own buffer.
    assert [type(frame) for frame in frames] == [
        bytes if len(body) <= SMALL_BUFFER else bytearray for body in bodies]


def test_a_megabyte_frame_between_small_ones_arrives_whole() -> None:
    large = bytes(range(256)) * 4096  # 1 MiB
    stream = framed(b"first") + framed(large) + framed(b"last")
    frames = asyncio.run(serve_frames([stream], 3, 64 * 1024))
    assert frames[0] == b"first" and frames[2] == b"last"
    assert isinstance(frames[1], bytearray) and frames[1] == large


@pytest.mark.parametrize("body_size", [10, 100_000])
def test_a_frame_cut_short_by_the_client_raises_incomplete_read(body_size: int) -> None:
    async def scenario() -> BaseException:
        outcome = asyncio.get_running_loop().create_future()

        async def serve(connection: KafkaConnection) -> None:
            try:
                size = await connection.read_size()
                await connection.read_frame(size)
                outcome.set_result(None)
            except BaseException as error:
                outcome.set_result(error)
            connection.close()

        server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(serve, 4096), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            client.sendall(struct.pack(">i", body_size) + b"x" * (body_size // 2))
            client.shutdown(socket.SHUT_WR)
            error = await asyncio.wait_for(outcome, 30)
        server.close()
        await server.wait_closed()
        return error

    error = asyncio.run(scenario())
    assert isinstance(error, asyncio.IncompleteReadError)
    assert error.expected == body_size and len(error.partial) == body_size // 2


def test_reading_pauses_while_nobody_takes_frames_and_resumes_when_they_do() -> None:
    async def scenario() -> tuple[bool, list[bytes | bytearray]]:
        take = asyncio.Event()
        connections: list[KafkaConnection] = []
        frames: list[bytes | bytearray] = []
        done = asyncio.get_running_loop().create_future()

        async def serve(connection: KafkaConnection) -> None:
            connections.append(connection)
            await take.wait()
            for _ in range(200):
                frames.append(await connection.read_frame(await connection.read_size()))
            done.set_result(None)
            connection.close()

        server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(serve, 1024), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(framed(b"%05d" % i + b"." * 95) for i in range(200)))  # 20 KB
        # Polled, not slept on: on a stalled machine the server may not have read yet.
        deadline = asyncio.get_running_loop().time() + 30
        paused = False  # 1 KB read, the rest left to the socket
        while not paused and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
            transport = connections[0]._transport if connections else None
            paused = transport is not None and not transport.is_reading()
        take.set()
        await asyncio.wait_for(done, 30)
        writer.close()
        server.close()
        await server.wait_closed()
        return paused, frames

    paused, frames = asyncio.run(scenario())
    assert paused
    assert [frame[:5] for frame in frames] == [b"%05d" % i for i in range(200)]


def test_a_client_that_shut_its_sending_side_still_gets_its_answer() -> None:
    async def scenario() -> bytes:
        async def serve(connection: KafkaConnection) -> None:
            frame = await connection.read_frame(await connection.read_size())
            connection.write(framed(b"answer to " + bytes(frame)))
            await connection.drain()
            connection.close()

        server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(serve), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(framed(b"question"))
        writer.write_eof()
        size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 30))[0]
        answer = await reader.readexactly(size)
        writer.close()
        server.close()
        await server.wait_closed()
        return answer

    assert asyncio.run(scenario()) == b"answer to question"
