"""What several benchmarks share: a deadline on a block of the main thread, settings run in
ABBA order, and pyplot."""

from __future__ import annotations

import contextlib
import signal
import statistics
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType
from typing import Any, TypeVar

Setting = TypeVar("Setting")


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


def abba_runs(rounds: int, settings: Mapping[str, Setting],
              run: Callable[[Setting], dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """`run(setting)` for each of `settings`, `rounds` times, the order reversed every other
    round, so that neither setting always runs on the warmer machine: each setting's runs."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in settings}
    for round_ in range(rounds):
        order = list(settings) if round_ % 2 == 0 else list(reversed(settings))
        for name in order:
            runs[name].append(run(settings[name]))
    return runs


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each figure over runs of one shape (nested dicts of numbers)."""
    first = runs[0]
    if not isinstance(first, dict):
        return statistics.median(runs)
    return {key: median_run([run[key] for run in runs]) for key in first}


def with_medians(args: Any, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """What an ABBA benchmark prints: its arguments, every run, and per setting the median
    run (`median_run`)."""
    result: dict[str, Any] = {"args": vars(args), "runs": runs}
    for name, found in runs.items():
        result[name] = median_run(found)
    return result


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
