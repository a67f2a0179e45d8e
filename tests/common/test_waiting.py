"""wait_until: returns what the condition found, or says what it waited for."""

from __future__ import annotations

import asyncio
import time

import pytest

from rafka.common.clock import monotonic_ms, wall_clock_ms
from rafka.common.waiting import Deadline, wait_for_event, wait_until, wait_until_async


def test_wait_until_returns_the_first_true_result() -> None:
    answers = iter([None, 0, [], "found"])
    assert wait_until(lambda: next(answers), 5, interval_s=0.001) == "found"


def test_wait_until_names_what_it_waited_for_and_raises_the_error_asked() -> None:
    started = time.monotonic()
    with pytest.raises(ConnectionError, match=r"after 0.2 s waiting for the broker"):
        wait_until(lambda: False, 0.2, "the broker", interval_s=0.05, error=ConnectionError)
    assert 0.2 <= time.monotonic() - started < 2


def test_a_zero_timeout_still_checks_once() -> None:
    assert wait_until(lambda: 42, 0) == 42
    with pytest.raises(TimeoutError):
        wait_until(lambda: False, 0)


def test_wait_until_async_takes_coroutine_conditions_and_does_not_block_the_loop() -> None:
    async def scenario() -> tuple[str, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        task = asyncio.create_task(ticker())
        calls = 0

        async def ready() -> str | None:
            nonlocal calls
            calls += 1
            return "ready" if calls == 5 else None

        result = await wait_until_async(ready, 5, interval_s=0.02)
        task.cancel()
        return result, ticks

    result, ticks = asyncio.run(scenario())
    assert result == "ready"
    assert ticks >= 3  # the loop kept running while waiting


def test_deadline_counts_down_and_expires() -> None:
    deadline = Deadline(0.05)
    assert not deadline.expired and 0 < deadline.remaining_s() <= 0.05
    time.sleep(0.06)
    assert deadline.expired and deadline.remaining_s() == 0


def test_the_two_clocks_are_different_clocks() -> None:
    # The wall clock is the time of day (after 2020); the monotonic one is not.
    assert wall_clock_ms() > 1_577_836_800_000
    assert abs(wall_clock_ms() - time.time() * 1000) < 1000
    assert abs(monotonic_ms() - time.monotonic() * 1000) < 1000


def test_wait_for_event_says_whether_the_event_was_set_in_time() -> None:
    async def scenario() -> tuple[bool, bool, bool, float]:
        already = asyncio.Event()
        already.set()
        never = asyncio.Event()
        later = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, later.set)
        started = time.monotonic()
        timed_out = await wait_for_event(never, 0.1)
        waited = time.monotonic() - started
        return await wait_for_event(already, 0), timed_out, await wait_for_event(later, 5), waited

    already_set, timed_out, set_while_waiting, waited = asyncio.run(scenario())
    assert already_set and set_while_waiting
    assert not timed_out and waited >= 0.09
