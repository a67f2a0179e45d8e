"""A data port over TLS in this process, without Ray: the port (`DataPort` with `tls`) on an
event loop of its own, reached by the clients the cluster's processes use, the asyncio one
(Kafka listeners, follower hosts) and the blocking one (producers, consumers; the host's
lookup, an actor call, stood in for); a client with another CA's certificate is refused, and
a port without TLS serves the blocking client as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from rafka.actors.dataport import frames
from rafka.actors.dataport.async_client import open_connection
from rafka.actors.dataport.blocking_client import HostConnectionError, TcpCalls
from rafka.actors.dataport.server import read_frame
from rafka.actors.dataport.tls import DataPortTls
from rafka.actors.messages import OffsetQuery
from tests.support.certificates import cluster_files
from tests.support.data_ports import LISTED, QuickPort, StandInHost, lookups_answered_at_once


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[DataPortTls, DataPortTls]:
    return cluster_files(tmp_path_factory.mktemp("port-tls"))


@pytest.fixture
def port(files: tuple[DataPortTls, DataPortTls]) -> Iterator[QuickPort]:
    served = QuickPort(files[0])
    yield served
    served.close()


async def ask(address: tuple[str, int, bytes, DataPortTls | None]) -> Any:
    reader, writer = await open_connection(address, 10)
    try:
        writer.write(frames.list_offsets_request([OffsetQuery("t", 0, -1)]))
        await writer.drain()
        return frames.read_list_offsets_answer(await asyncio.wait_for(
            read_frame(reader, 1 << 20), 10))
    finally:
        writer.close()


def test_the_asyncio_client_is_served_with_the_clusters_certificate(
        port: QuickPort, files: tuple[DataPortTls, DataPortTls]) -> None:
    host, number, token, tls = port.address
    assert tls == files[0]
    assert asyncio.run(ask(port.address)) == LISTED
    stranger = (host, number, token, files[1])
    with pytest.raises((OSError, asyncio.IncompleteReadError)):
        asyncio.run(ask(stranger))
    in_the_clear = (host, number, token, None)
    with pytest.raises((OSError, asyncio.IncompleteReadError, asyncio.TimeoutError)):
        asyncio.run(ask(in_the_clear))


@pytest.fixture
def stand_in_lookups() -> Iterator[None]:
    with lookups_answered_at_once():
        yield


def call_list_offsets(calls: TcpCalls, host: StandInHost, times: int = 3,
                      name: str = "host") -> list[Any]:
    answers = []
    for _ in range(times):  # the first connects (and shakes hands), the others reuse it
        key = calls.send(name, host, "list_offsets", ([OffsetQuery("t", 0, -1)],), 10)
        assert calls.wait([key], 10) == [key]
        answers.append(calls.result(key))
    return answers


def test_the_blocking_client_is_served_over_tls_and_refused_with_a_strangers_files(
        port: QuickPort, files: tuple[DataPortTls, DataPortTls],
        stand_in_lookups: None) -> None:
    calls = TcpCalls(10, 1 << 20)
    try:
        assert call_list_offsets(calls, StandInHost(port.address)) == [LISTED] * 3
        host, number, token, _tls = port.address
        with pytest.raises(HostConnectionError):
            call_list_offsets(calls, StandInHost((host, number, token, files[1])), 1,
                              name="the same host, a stranger's files")
    finally:
        calls.close()


def test_the_blocking_client_of_a_port_in_the_clear_is_served_as_before(
        stand_in_lookups: None) -> None:
    plain = QuickPort(None)
    calls = TcpCalls(10, 1 << 20)
    try:
        assert plain.address[3] is None
        assert call_list_offsets(calls, StandInHost(plain.address)) == [LISTED] * 3
    finally:
        calls.close()
        plain.close()
