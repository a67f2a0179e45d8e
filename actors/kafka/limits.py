"""What one broker's Kafka listener lets its clients hold: connections (Kafka's max.connections
and max.connections.per.ip) and the bytes of requests read but not yet answered (Kafka's
queued.max.request.bytes, its request memory pool).

A connection over a limit is closed as soon as it is accepted, before it is read from, as
Kafka's per-IP limit does; the others never notice it. A request that does not fit the memory
left waits before its body is read (its connection is not read from meanwhile, so its client
waits too), and the bytes come back when it is answered: a burst of large requests is served a
few at a time instead of all held at once.
"""

from __future__ import annotations

import asyncio
from collections import Counter


class ConnectionQuota:
    """Counts connections in all and per client address; `admit` says why one is refused."""

    def __init__(self, max_connections: int, max_connections_per_ip: int) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.per_ip: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.per_ip.values())

    def admit(self, ip: str) -> str | None:
        """Count a new connection from `ip`, or return why it is refused (then not counted)."""
        if self.per_ip[ip] >= self.max_connections_per_ip:
            return (f"{ip} has {self.per_ip[ip]} connections already "
                    f"(max.connections.per.ip={self.max_connections_per_ip})")
        if self.total >= self.max_connections:
            return (f"the broker has {self.total} connections already "
                    f"(max.connections={self.max_connections})")
        self.per_ip[ip] += 1
        return None

    def release(self, ip: str) -> None:
        self.per_ip[ip] -= 1
        if self.per_ip[ip] <= 0:
            del self.per_ip[ip]


class RequestMemory:
    """A budget of request bytes shared by every connection; None: unbounded (Kafka's -1).

    Requests are let in in the order they asked: a large one is not starved by small ones
    that keep arriving after it.
    """

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.in_use = 0
        self.peak = 0
        self._waiting: list[tuple[int, asyncio.Future[None]]] = []

    async def acquire(self, size: int) -> None:
        """Wait until `size` bytes (at most the capacity: the listener refuses larger frames)
        fit, and hold them until `release(size)`."""
        if self.capacity is not None and (self._waiting or self.in_use + size > self.capacity):
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiting.append((size, future))
            try:
                await future
            except asyncio.CancelledError:
                if future.done() and not future.cancelled():
                    self.release(size)  # granted just as it was cancelled
                else:
                    self._waiting.remove((size, future))
                    self._grant()
                raise
        else:
            self.in_use += size
        self.peak = max(self.peak, self.in_use)

    def release(self, size: int) -> None:
        """Give back bytes `acquire` granted."""
        self.in_use -= size
        self._grant()

    def _grant(self) -> None:
        assert self.capacity is not None or not self._waiting
        while (self._waiting and self.capacity is not None
               and self.in_use + self._waiting[0][0] <= self.capacity):
            size, future = self._waiting.pop(0)
            self.in_use += size
            future.set_result(None)
