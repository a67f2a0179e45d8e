"""`Wakeup`, what waiting produces and fetches wait on: set wakes every waiter at once, a wait
times out on its own, and neither leaves a waiter behind."""

from __future__ import annotations

import asyncio
import time

import pytest

from rafka.actors.server.wakeup import Wakeup


def run(coroutine):
    return asyncio.run(coroutine)


def test_set_wakes_every_waiter_at_once_and_says_so() -> None:
    async def scenario() -> tuple[list[bool], float]:
        wakeup = Wakeup()
        waiters = [asyncio.ensure_future(wakeup.wait(30)) for _ in range(3)]
        await asyncio.sleep(0.01)
        started = time.monotonic()
        wakeup.set()
        woken = await asyncio.gather(*waiters)
        return woken, time.monotonic() - started

    woken, took = run(scenario())
    assert woken == [True, True, True]
    assert took < 5  # not the 30 s timeout


def test_a_wait_times_out_and_is_no_longer_listed() -> None:
    async def scenario() -> tuple[bool, float, int]:
        wakeup = Wakeup()
        started = time.monotonic()
        woken = await wakeup.wait(0.05)
        return woken, time.monotonic() - started, len(wakeup._waiters)

    woken, took, left = run(scenario())
    assert woken is False and took >= 0.05 and left == 0


def test_set_until_cleared_then_waits_again() -> None:
    async def scenario() -> tuple[bool, bool]:
        wakeup = Wakeup()
        wakeup.set()
        before_clear = await wakeup.wait(0.01)
        wakeup.clear()
        after_clear = await wakeup.wait(0.01)
        return before_clear, after_clear

    assert run(scenario()) == (True, False)


def test_a_set_and_clear_pulse_wakes_who_waits_only() -> None:
    """A replica's notify: those waiting wake; a wait that starts after waits for the next."""
    async def scenario() -> tuple[bool, bool]:
        wakeup = Wakeup()
        waiting = asyncio.ensure_future(wakeup.wait(30))
        await asyncio.sleep(0)
        wakeup.set()
        wakeup.clear()
        return await waiting, await wakeup.wait(0.01)

    assert run(scenario()) == (True, False)


def test_a_cancelled_wait_is_no_longer_listed() -> None:
    async def scenario() -> int:
        wakeup = Wakeup()
        waiting = asyncio.ensure_future(wakeup.wait(30))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        wakeup.set()  # nothing left to wake
        return len(wakeup._waiters)

    assert run(scenario()) == 0
