"""Client quotas on the Kafka listener: each request's usage counted against the quotas of its
client's user and client id, and a client over one throttled, as Kafka's `ClientQuotaManager`s
and its `SocketServer` throttle it (the counting and the waits are `rafka.wire.quotas`).

Three kinds are counted: a produce request's bytes (`producer_byte_rate`), a fetch answer's
record bytes (`consumer_byte_rate`), and the time the broker's loop spent working on each
request, in percent of that one thread (`request_percentage`). A request that finds its client
over a quota is answered with how long it must wait in `throttle_time_ms`, and the connection
is muted as long: nothing more is read from it. A client of a version after KIP-219 gets its
answer at once and waits by itself; an older one gets it only after the wait. A throttled fetch
is answered empty, its bytes not counted, as Kafka answers it.

With no quota set, a request costs one attribute check here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any

from rafka.actors.kafka.connection import KafkaConnection
from rafka.actors.kafka.quota_store import QuotaWatch, ZooKeeperQuotas
from rafka.coordination.store import ClusterStore
from rafka.wire.produce import with_throttle_time
from rafka.wire.protocol import Api
from rafka.wire.quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    REQUEST_PERCENTAGE,
    ClientQuotaManager,
    QuotaConfigs,
    client_throttles_itself,
)

Answer = dict[str, Any] | bytes | None


class ClientQuotas:
    """The broker's quotas and every client's usage of them; `update` gives the quotas as
    stored, whole, each time they change."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.clock = clock
        self.sleep = sleep
        self.produce = ClientQuotaManager(PRODUCER_BYTE_RATE)
        self.fetch = ClientQuotaManager(CONSUMER_BYTE_RATE)
        self.request = ClientQuotaManager(REQUEST_PERCENTAGE)
        self.enabled = False
        # How many answers carried a throttle time, and the waits they asked, in all.
        self.throttled = 0
        self.throttle_ms_total = 0
        self._watch: QuotaWatch | None = None

    async def watch(self, store: ClusterStore) -> None:
        """Take the quotas `store` keeps, now and after each change, on this loop."""
        loop = asyncio.get_running_loop()
        self._watch = await asyncio.to_thread(
            ZooKeeperQuotas(store).watch,
            lambda quotas: loop.call_soon_threadsafe(self.update, quotas))

    def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()

    def update(self, configs: QuotaConfigs) -> None:
        for manager in (self.produce, self.fetch, self.request):
            manager.update(configs)
        self.enabled = any(manager.enabled for manager in (self.produce, self.fetch,
                                                             self.request))

    async def unmuted(self, connection: KafkaConnection) -> None:
        """Wait while the connection is muted (its client is being throttled)."""
        while (wait_s := connection.muted_until - self.clock()) > 0:
            await self.sleep(wait_s)

    async def answer(self, connection: KafkaConnection, api: Api, version: int,
                     client_id: str | None, request_bytes: int,
                     handling: Awaitable[Answer]) -> Answer:
        """What `handling` answers, with the throttle time the client's quotas ask of it set
        in the answer and its connection muted that long (and, for a client that does not
        throttle itself, the answer held back that long)."""
        if not self.enabled:
            return await handling
        user, client = connection.principal.name, client_id or ""
        timed = _LoopTime(handling)
        fields = await timed
        now = self.clock()
        throttle_ms = self.request.record(user, client, timed.seconds * 100, now)
        name = api.name
        if name == "Produce":
            throttle_ms = max(throttle_ms, self.produce.record(user, client, request_bytes, now))
        elif name == "Fetch" and isinstance(fields, dict):
            sent = _fetched_bytes(fields)
            fetch_ms = self.fetch.record(user, client, sent, now)
            throttle_ms = max(throttle_ms, fetch_ms)
            if throttle_ms:
                self.fetch.unrecord(user, client, sent, now)
                fields["responses"] = []
        if not throttle_ms:
            return fields
        self.throttled += 1
        self.throttle_ms_total += throttle_ms
        connection.muted_until = max(connection.muted_until, now + throttle_ms / 1000)
        if isinstance(fields, bytes):
            fields = with_throttle_time(fields, version, throttle_ms)
        elif isinstance(fields, dict) and "throttle_time_ms" in fields:
            fields["throttle_time_ms"] = throttle_ms
        if not client_throttles_itself(name, version):
            await self.sleep(throttle_ms / 1000)
        return fields

    def stats(self) -> dict[str, Any]:
        return {"enabled": self.enabled, "throttled": self.throttled,
                "throttle_ms_total": self.throttle_ms_total}


def _fetched_bytes(fields: dict[str, Any]) -> int:
    return sum(len(partition.records or b"") for topic in fields["responses"]
               for partition in topic.partitions)


class _LoopTime(Awaitable[Answer]):
    """Awaits `awaitable` and adds up the time the loop spent running it (each step between
    two of its waits), which is what the request cost the broker's one thread: a fetch that
    waits max_wait_ms for records costs its steps, not its wait."""

    def __init__(self, awaitable: Awaitable[Answer]) -> None:
        self.awaitable = awaitable
        self.seconds = 0.0

    def __await__(self) -> Generator[Any, Any, Answer]:
        steps, sent, thrown = self.awaitable.__await__(), None, None
        while True:
            started = time.perf_counter()
            try:
                waiting = steps.throw(thrown) if thrown is not None else steps.send(sent)
            except StopIteration as done:
                self.seconds += time.perf_counter() - started
                result: Answer = done.value
                return result
            self.seconds += time.perf_counter() - started
            sent, thrown = None, None
            try:
                sent = yield waiting
            except BaseException as error:  # cancelled, say: the coroutine sees it too
                thrown = error
