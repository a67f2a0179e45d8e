"""Waiting in tests: rafka's own ``wait_until`` (rafka.common.waiting), failing as a test does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from rafka.common import waiting

T = TypeVar("T")


def wait_until(condition: Callable[[], T], timeout_s: float = 30.0, what: str = "", *,
               interval_s: float = 0.1) -> T:
    """What ``condition`` returns once it is true; an AssertionError saying what was awaited
    (``what``) if it is not within ``timeout_s``."""
    return waiting.wait_until(condition, timeout_s, what, interval_s=interval_s,
                              error=AssertionError)


def eventually(condition: Callable[[], object], timeout_s: float = 10.0, *,
               interval_s: float = 0.01) -> bool:
    """Whether ``condition`` became true within ``timeout_s``: ``assert eventually(...)``, or
    ``assert not eventually(...)`` for what must not happen."""
    try:
        waiting.wait_until(condition, timeout_s, interval_s=interval_s)
    except TimeoutError:
        return False
    return True
