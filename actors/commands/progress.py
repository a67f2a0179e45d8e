"""A small text progress bar on stderr, with no dependency (tqdm is not installed here).

It draws only on a terminal unless forced, so that logs and pipes stay clean, and redraws at most
ten times a second, so that counting a million records costs nothing measurable.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TypeVar

T = TypeVar("T")

_WIDTH = 30


def _human(count: float, unit: str) -> str:
    if unit == "B":
        for suffix in ("B", "KiB", "MiB", "GiB"):
            if abs(count) < 1024 or suffix == "GiB":
                return f"{count:.0f} {suffix}" if suffix == "B" else f"{count:.1f} {suffix}"
            count /= 1024
    return f"{count:,.0f} {unit}"


class Progress:
    """`with Progress("producing", total=n, unit="records") as bar: bar.update(1)`.

    With a total it draws `label [#####.....]  42%  4,200/10,000 records  1,234 records/s`;
    without one, the count and the rate.
    """

    def __init__(
        self,
        label: str,
        *,
        total: float | None = None,
        unit: str = "records",
        enabled: bool | None = None,
        stream: IO[str] | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.count = 0.0
        self.started = time.monotonic()
        self._drawn_at = 0.0

    def update(self, amount: float = 1) -> None:
        self.count += amount
        now = time.monotonic()
        if self.enabled and now - self._drawn_at >= 0.1:
            self._draw(now)

    def _draw(self, now: float) -> None:
        self._drawn_at = now
        elapsed = max(now - self.started, 1e-9)
        rate = f"{_human(self.count / elapsed, self.unit)}/s"
        if self.total:
            done = min(self.count / self.total, 1.0)
            bar = "#" * int(done * _WIDTH) + "." * (_WIDTH - int(done * _WIDTH))
            text = (f"{self.label} [{bar}] {done:4.0%}  {_human(self.count, self.unit)}"
                    f"/{_human(self.total, self.unit)}  {rate}")
        else:
            text = f"{self.label}  {_human(self.count, self.unit)}  {rate}"
        # \r redraws the line; the trailing spaces wipe what a longer line left.
        self.stream.write(f"\r{text}    ")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self._draw(time.monotonic())
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def wait_with_spinner(label: str, work: Callable[[], T], *, enabled: bool | None = None,
                      announce: bool = False, stream: IO[str] | None = None) -> T:
    """Run `work()` (a call that blocks with nothing to count) showing the time it takes.

    Off a terminal there is no spinner; with `announce` a plain `label ...` line says what the
    wait is for (a long step of `rafka up` should not look like a hang in a log).
    """
    stream = stream or sys.stderr
    if not (stream.isatty() if enabled is None else enabled):
        if announce:
            stream.write(f"{label} ...\n")
            stream.flush()
        return work()
    finished = threading.Event()

    def tick() -> None:
        started = time.monotonic()
        frames = "|/-\\"
        index = 0
        while not finished.wait(0.2):
            stream.write(f"\r{label} {frames[index % 4]} {time.monotonic() - started:.0f} s  ")
            stream.flush()
            index += 1
        stream.write(f"\r{label} done ({time.monotonic() - started:.1f} s)   \n")
        stream.flush()

    ticker = threading.Thread(target=tick, name="rafka-spinner", daemon=True)
    ticker.start()
    try:
        return work()
    finally:
        finished.set()
        ticker.join(1)
