"""What commands print and take: stdout kept for their data, tables, `key=value` options.

Ray's driver prints the raylet's warnings ("N worker processes have been started ...") to
`sys.stdout` from a thread of its own, which would mix them into `rafka consume`'s records. So a
command's data goes to the real stdout through `echo()`/`data_stream()`, and `sys.stdout` is
pointed at stderr for everything else (`reserved_stdout()`, used by the command line).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from rafka.cli.commands.errors import CliError

_data: TextIO | None = None


@contextlib.contextmanager
def reserved_stdout() -> Iterator[None]:
    """Within it, only `echo()` and `data_stream()` write to the real stdout."""
    global _data
    if _data is not None:  # reserved already
        yield
        return
    _data, sys.stdout = sys.stdout, sys.stderr
    try:
        yield
    finally:
        sys.stdout, _data = _data, None


def data_stream() -> TextIO:
    return _data or sys.stdout


def echo(*values: object) -> None:
    print(*values, file=data_stream(), flush=True)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Columns left-aligned and two spaces apart, a header line first, as plain text (rich lays
    it out; the caller decides where it goes)."""
    grid = Table(*headers, box=None, pad_edge=False, padding=(0, 2, 0, 0), show_edge=False,
                 header_style=None)
    for row in rows:
        grid.add_row(*(_cell(value) for value in row))
    buffer = io.StringIO()
    Console(file=buffer, width=10_000, color_system=None, soft_wrap=True).print(grid)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines())


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple, set)):
        return ",".join(str(v) for v in value) or "-"
    return str(value)


def key_values(pairs: Iterable[str] | None, option: str) -> dict[str, str]:
    """`["a=1", "b=2"]` -> `{"a": "1", "b": "2"}`; a pair without '=' is a usage error."""
    values = {}
    for pair in pairs or ():
        key, equals, value = pair.partition("=")
        if not equals or not key.strip():
            raise CliError(f"{option} takes key=value, got {pair!r} "
                           f"(e.g. {option} min.insync.replicas=2)", 2)
        values[key.strip()] = value.strip()
    return values


def add_key_value_option(parser: argparse.ArgumentParser, *names: str, help: str) -> None:
    parser.add_argument(*names, action="append", metavar="KEY=VALUE", default=[], help=help)


def console_properties(pairs: Iterable[str] | None, known: dict[str, str]) -> dict[str, str]:
    """Kafka's console tools' `--property name=value`, for the names in `known` (name -> what
    it means here); anything else is a usage error that lists them."""
    values = key_values(pairs, "--property")
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise CliError(f"unknown --property {', '.join(unknown)}; known here: "
                       + ", ".join(f"{name} ({meaning})" for name, meaning in known.items()), 2)
    return values
