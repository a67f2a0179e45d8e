"""A data port without Ray, for the tests and the benchmark of its TLS: `QuickPort`, a
`DataPort` on an event loop in a thread whose host methods answer at once, `serve_in_process`,
the same in a process of its own, and `StandInHost` with `lookups_answered_at_once`, which let
the blocking client (`TcpCalls`) reach a port whose address is known, its actor-call lookup
stood in for."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection
from typing import Any
from unittest import mock

from rafka.actors.dataport import blocking_client
from rafka.actors.dataport.server import DataPort
from rafka.actors.dataport.tls import DataPortTls
from rafka.actors.messages import Appended, FetchedRecords, ListedOffset

LISTED = [ListedOffset(42, -1, 3)]
Address = tuple[str, int, bytes, DataPortTls | None]


class QuickPort:
    """A data port on 127.0.0.1 answering at once: `produce` one offset per partition,
    `fetch` `answer_bytes` of records per partition, `list_offsets` LISTED."""

    def __init__(self, tls: DataPortTls | None, answer_bytes: int = 0) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        records = os.urandom(answer_bytes)

        async def produce(requests: list[Any], *_: Any) -> list[Any]:
            return [Appended(0, 0, -1, 0) for _ in requests]

        async def fetch(requests: list[Any], *_: Any) -> list[Any]:
            return [FetchedRecords(records, 1, 1, 0, 1, 1) for _ in requests]

        async def list_offsets(*_: Any) -> list[Any]:
            return LISTED

        async def unused(*_: Any) -> Any:
            raise NotImplementedError

        self.port = DataPort("127.0.0.1", 1 << 30, produce=produce, produce_kafka=unused,
                             replica_fetch=unused, fetch=fetch, fetch_kafka=unused,
                             list_offsets=list_offsets, fetch_offsets=unused, commit_offsets=unused,
                             commit_transactional_offsets=unused,
                             offsets_for_leader_epoch=unused, wake_session=unused,
                             tls=tls)
        self.address: Address = self.run(self.port.start())

    def run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def close(self) -> None:
        self.run(self.port.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def serve_in_process(tls: DataPortTls | None, answer_bytes: int, pipe: Connection) -> None:
    """A process's target: a QuickPort, its address sent on `pipe`, until the pipe closes."""
    port = QuickPort(tls, answer_bytes)
    pipe.send(port.address)
    with contextlib.suppress(EOFError):
        pipe.recv()
    port.close()


class StandInHost:
    """A host whose `data_port_address.remote()` is the lookup's stand-in: the address."""

    def __init__(self, address: Address) -> None:
        self.data_port_address = mock.Mock()
        self.data_port_address.remote.return_value = address


@contextlib.contextmanager
def lookups_answered_at_once() -> Iterator[None]:
    """The blocking client's lookups (actor calls) answered at once, by StandInHosts."""
    ray = blocking_client.ray
    with mock.patch.object(ray, "wait", lambda refs, num_returns, timeout: (list(refs), [])), \
            mock.patch.object(ray, "get", lambda ref: ref):
        yield
