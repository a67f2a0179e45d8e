"""Waiting for a condition until a deadline, the one way rafka polls; and for an asyncio
event with a timeout, the one way a produce or fetch waits for a change."""

from __future__ import annotations

import asyncio
import inspect
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar, overload

T = TypeVar("T")


class Deadline:
    """A point on the monotonic clock ``timeout_s`` from now."""

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.at = time.monotonic() + timeout_s

    def remaining_s(self) -> float:
        """Seconds left, never below 0."""
        return max(0.0, self.at - time.monotonic())

    @property
    def expired(self) -> bool:
        return time.monotonic() >= self.at


def wait_until(
    condition: Callable[[], T],
    timeout_s: float,
    what: str = "",
    *,
    interval_s: float = 0.1,
    error: type[Exception] = TimeoutError,
) -> T:
    """Call ``condition`` every ``interval_s`` until it returns something true, and return that.

    After ``timeout_s`` raise ``error`` saying what was awaited (``what``). The condition is
    always called at least once, and once more at the deadline, so a zero timeout is a check.
    """
    deadline = Deadline(timeout_s)
    while True:
        result = condition()
        if result:
            return result
        if deadline.expired:
            raise error(f"timed out after {timeout_s:g} s waiting for {what or condition}")
        time.sleep(min(interval_s, deadline.remaining_s()) or 0.001)


# Two overloads: with a union alone, mypy cannot tell T from Awaitable[T] for a coroutine function.
@overload
async def wait_until_async(
    condition: Callable[[], Awaitable[T]],
    timeout_s: float,
    what: str = "",
    *,
    interval_s: float = 0.1,
    error: type[Exception] = TimeoutError,
) -> T: ...


@overload
async def wait_until_async(
    condition: Callable[[], T],
    timeout_s: float,
    what: str = "",
    *,
    interval_s: float = 0.1,
    error: type[Exception] = TimeoutError,
) -> T: ...


async def wait_until_async(
    condition: Callable[[], T | Awaitable[T]],
    timeout_s: float,
    what: str = "",
    *,
    interval_s: float = 0.1,
    error: type[Exception] = TimeoutError,
) -> T:
    """`wait_until` on an event loop: sleeps without blocking it, and ``condition`` may be a
    coroutine function."""
    deadline = Deadline(timeout_s)
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if deadline.expired:
            raise error(f"timed out after {timeout_s:g} s waiting for {what or condition}")
        await asyncio.sleep(min(interval_s, deadline.remaining_s()) or 0.001)


async def wait_within(awaitable: Awaitable[T], timeout_s: float) -> T:
    """``await awaitable``, cancelled with a TimeoutError (asyncio's, before 3.11) after
    ``timeout_s``: with `asyncio.timeout` where there is one, for `wait_for_event`'s reason."""
    if sys.version_info < (3, 11):  # no asyncio.timeout before 3.11
        return await asyncio.wait_for(awaitable, timeout_s)
    async with asyncio.timeout(timeout_s):
        return await awaitable


async def wait_for_event(event: asyncio.Event, timeout_s: float) -> bool:
    """Until ``event`` is set, for at most ``timeout_s``: whether it was set.

    `asyncio.timeout`, not `asyncio.wait_for`: on Python 3.11 wait_for runs the wait in a task
    of its own, which takes one more loop turn to wake the waiter; on a replica host's data path
    (these waits and the data ports' answer waits) that turn shows in the median latency
    (docs/latency.md, "Why it is built this way").
    """
    if sys.version_info < (3, 11):  # no asyncio.timeout before 3.11
        try:
            await asyncio.wait_for(event.wait(), timeout_s)
        except asyncio.TimeoutError:
            return False
        return True
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True
