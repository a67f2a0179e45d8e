"""How slow the machine itself was while a benchmark ran.

A process of its own times one fixed piece of CPU work (about 0.15 ms) every 4 ms. On the
developers' shared VM that time jumps 5 to 20 times for 50-100 ms at a stretch, every 1.5 s or
so, on both cores at once, with nothing of rafka's running and no steal time accounted for it
(2026-11-28). A latency tail measured there is partly the machine's: each such stretch makes
everything on the path several times slower, and requests queue behind one another. A
benchmark that keeps the canary's samples can say, per phase, how much of the time the
machine was slow (`slow_fraction`).
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from typing import Any

INTERVAL_S = 0.004
# A unit this many times the run's median counts as the machine being slow.
SLOW_FACTOR = 3.0


def _unit_of_work() -> int:
    """The same Python work every time: a dict of 400 small lists, summed."""
    table = {str(i): [i, 2 * i] for i in range(400)}
    return sum(pair[1] for pair in table.values())


def _run(stop: Any, results: Any) -> None:
    samples: list[tuple[float, float]] = []
    while not stop.is_set():
        started = time.perf_counter()
        _unit_of_work()
        samples.append((time.time(), (time.perf_counter() - started) * 1000))
        time.sleep(INTERVAL_S)
    results.put(samples)


class MachineCanary:
    """`with MachineCanary() as canary:` ... then `canary.slow_fraction(start, end)` for any
    stretch of wall-clock time (`time.time()`) inside the block; `canary.idle(seconds)` first
    gives a stretch with nothing else running to compare with."""

    def __init__(self) -> None:
        context = multiprocessing.get_context("spawn")
        self._stop, self._results = context.Event(), context.Queue()
        self._process = context.Process(target=_run, args=(self._stop, self._results),
                                        daemon=True)
        self.samples: list[tuple[float, float]] = []

    def __enter__(self) -> MachineCanary:
        self._process.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.samples = self._results.get(timeout=30)
        self._process.join(10)

    def idle(self, seconds: float) -> float:
        """Wait `seconds` with nothing else asked of the machine; the wall-clock time they
        started at, for `slow_fraction` (the machine's own weather, before a benchmark adds
        its load: under load the canary's share counts the benchmark's contention too)."""
        began = time.time()
        time.sleep(seconds)
        return began

    @property
    def median_ms(self) -> float:
        return statistics.median(took for _when, took in self.samples)

    def slow_fraction(self, start: float, end: float) -> float:
        """The share of the canary's units in [start, end) that took more than SLOW_FACTOR
        times the median of the whole run."""
        limit = SLOW_FACTOR * self.median_ms
        inside = [took for when, took in self.samples if start <= when < end]
        return round(sum(1 for took in inside if took > limit) / len(inside), 4) if inside else 0.0
