"""`Wakeup`: what a waiting produce or fetch waits on, an asyncio.Event whose `wait` takes
its own timeout.

Every acks=all produce, follower fetch and consumer fetch waits for a change with a deadline.
`asyncio.wait_for(event.wait(), timeout)` does that on Python 3.11 by wrapping the wait in a
task of its own, scheduled a loop turn later, and unwinding it the same way: at 5,000 records
a second that was most of a leader host's waits' cost (issue 26). Here a wait is one future
and one timer.
"""

from __future__ import annotations

import asyncio


def _time_out(waiter: asyncio.Future) -> None:
    if not waiter.done():
        waiter.set_result(False)


class Wakeup:
    """Set, clear and wait as with asyncio.Event; `wait(timeout_s)` says whether it was set."""

    __slots__ = ("_is_set", "_waiters")

    def __init__(self) -> None:
        self._is_set = False
        self._waiters: set[asyncio.Future] = set()

    def is_set(self) -> bool:
        return self._is_set

    def set(self) -> None:
        """Wake every waiter; a wait that starts before `clear` returns at once."""
        if self._is_set:
            return
        self._is_set = True
        waiters, self._waiters = self._waiters, set()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._is_set = False

    async def wait(self, timeout_s: float) -> bool:
        """Until set, for at most `timeout_s`: whether it was set."""
        if self._is_set:
            return True
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.add(waiter)
        timer = loop.call_later(timeout_s, _time_out, waiter)
        try:
            return await waiter
        finally:
            timer.cancel()
            self._waiters.discard(waiter)  # timed out or cancelled: still listed
