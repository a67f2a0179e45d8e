"""Progress bars and spinners on stderr, drawn by rich.

They draw only on a terminal unless forced, so that logs and pipes stay clean: a bar redrawn into
a captured log would come out as one line of concatenated redraws. rich redraws at most ten
times a second, so counting a million records costs nothing measurable.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Progress as RichProgress

T = TypeVar("T")


def _console(stream: IO[str] | None, enabled: bool | None) -> Console | None:
    """A console on `stream` (stderr), or None if nothing is to be drawn there."""
    stream = stream or sys.stderr
    if not (stream.isatty() if enabled is None else enabled):
        return None
    return Console(file=stream, force_terminal=True if enabled else None)


class Progress:
    """`with Progress("producing", total=n, unit="records") as bar: bar.update(1)`.

    With a total it draws `label ━━━━━━━━╸━━━━  42% 4200/10000 records 0:00:03`; without one,
    the count and the time.
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
        self.total = total
        self.count = 0.0
        console = _console(stream, enabled)
        self._bar: RichProgress | None = None
        if console is not None:
            columns: list[ProgressColumn] = [TextColumn("{task.description}")]
            if total:
                columns += [BarColumn(), TaskProgressColumn()]
            columns += [MofNCompleteColumn() if total else TextColumn("{task.completed:,.0f}"),
                        TextColumn(unit), TimeElapsedColumn()]
            self._bar = RichProgress(*columns, console=console, transient=False)
            self._task = self._bar.add_task(label, total=total)
            self._bar.start()

    def update(self, amount: float = 1) -> None:
        self.count += amount
        if self._bar is not None:
            self._bar.update(self._task, advance=amount)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def wait_with_spinner(label: str, work: Callable[[], T], *, enabled: bool | None = None,
                      announce: bool = False, stream: IO[str] | None = None) -> T:
    """Run `work()` (a call that blocks with nothing to count) under a spinner.

    Off a terminal there is no spinner; with `announce` a plain `label ...` line says what the
    wait is for (a long step of `rafka up` should not look like a hang in a log).
    """
    console = _console(stream, enabled)
    if console is None:
        if announce:
            out = stream or sys.stderr
            out.write(f"{label} ...\n")
            out.flush()
        return work()
    with console.status(label):
        result = work()
    console.print(f"{label} done")
    return result
