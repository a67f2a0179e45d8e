"""What several benchmarks share: a deadline on a block of the main thread, and pyplot."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import ModuleType
from typing import Any


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """TimeoutError in the main thread if the block runs longer than `seconds` (none if
    `seconds` <= 0): a client call that never returns must not keep the cluster up (the
    caller's finally shuts it down)."""

    def expire(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"{what} did not finish within {seconds:.0f} s")

    if seconds <= 0:
        yield
        return
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def pyplot() -> ModuleType | None:
    """matplotlib.pyplot drawing to files (the Agg backend); None if matplotlib is not installed
    (a plot is an extra: the caller says so and goes on)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
