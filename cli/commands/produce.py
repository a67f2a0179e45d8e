"""`rafka produce`: one record per input line, as kafka-console-producer does.

With `--key-separator SEP` each line is `key SEP value` (kafka-console-producer's
`parse.key=true` and `key.separator`); a line without the separator stops the run with an error
naming it, after what came before it has been sent. The summary goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rafka.actors.clients.producer import RecordFuture
from rafka.cli.commands.arguments import add_command, add_topic_argument, required_topic_of
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError, checked_count
from rafka.cli.commands.output import add_key_value_option, console_properties, key_values
from rafka.cli.commands.progress import Progress

# Futures are checked (and dropped) in chunks, so that a long input does not keep them all.
_CHECK_EVERY = 1000


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(
        commands, "produce", doc=__doc__,
        help="send lines of stdin or a file as records",
    )
    add_topic_argument(parser)
    parser.add_argument("--file", help="read this file instead of stdin")
    parser.add_argument("--key-separator", metavar="SEP",
                        help="split each line into key and value at the first SEP")
    parser.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all",
                        help="acknowledgements to wait for (default all)")
    parser.add_argument("--partition", type=int, help="send every record to this partition")
    add_key_value_option(parser, "--property",
                         help="kafka-console-producer's parse.key=true and key.separator=SEP")
    add_key_value_option(parser, "--producer-property",
                         help="a producer setting (e.g. linger.ms=10); repeatable")
    progress = parser.add_mutually_exclusive_group()
    progress.add_argument("--progress", action="store_true", default=None,
                          help="show a progress bar on stderr (default: when it is a terminal)")
    progress.add_argument("--no-progress", dest="progress", action="store_false")
    add_connection_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    topic = required_topic_of(args)
    checked_count(args.partition, "--partition", 0)
    settings = key_values(args.producer_property, "--producer-property")
    properties = console_properties(args.property, {
        "parse.key": "true: split key and value", "key.separator": "default tab"})
    if properties.get("parse.key", "false").lower() == "true" and args.key_separator is None:
        args.key_separator = properties.get("key.separator", "\t")
    separator = args.key_separator.encode() if args.key_separator else None
    if separator == b"":
        raise CliError("--key-separator must not be empty", 2)
    source, total = _open(args.file)
    with connected(args) as cluster:
        if args.partition is not None:
            # Checked once here: the producer would refuse each line with a ValueError.
            count = cluster.partition_count(topic)
            if args.partition >= count:
                raise CliError(f"partition {args.partition} does not exist in topic {topic!r}: "
                               f"it has partitions 0..{count - 1}")
        producer = cluster.producer(acks=args.acks, **settings)
        try:
            with Progress(f"producing to {topic}", total=total,
                          unit="B" if total else "records", enabled=args.progress) as bar:
                sent, failed, first_error = _send_lines(producer, topic, source, separator,
                                                        args.partition, bar)
        finally:
            producer.close()
        if source is not sys.stdin.buffer:
            source.close()
    return _summarise(topic, sent, failed, first_error)


def _open(path: str | None) -> tuple[IO[bytes], int | None]:
    if path is None:
        return sys.stdin.buffer, None
    try:
        # Closed by run(), which also reads stdin: not a `with` here.
        return open(path, "rb"), Path(path).stat().st_size
    except OSError as error:
        raise CliError(f"cannot read --file {path}: {error.strerror}") from None


def _lines(source: IO[bytes]) -> Iterator[tuple[int, bytes, int]]:
    """(line number, line without its end of line, bytes read)."""
    for number, raw in enumerate(source, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        yield number, line[:-1] if line.endswith(b"\r") else line, len(raw)


def _send_lines(producer, topic: str, source: IO[bytes], separator: bytes | None,
                partition: int | None, bar: Progress) -> tuple[int, int, BaseException | None]:
    pending: list[RecordFuture] = []
    sent = failed = 0
    first_error: BaseException | None = None

    def settle(futures: list[RecordFuture]) -> list[RecordFuture]:
        nonlocal failed, first_error
        waiting = []
        for future in futures:
            if not future.done():
                waiting.append(future)
            elif (error := future.exception()) is not None:
                failed += 1
                first_error = first_error or error
        return waiting

    for number, line, size in _lines(source):
        key, value = None, line
        if separator is not None:
            key, found, value = line.partition(separator)
            if not found:
                producer.flush()
                settle(pending)
                raise CliError(f"line {number} has no key separator {separator.decode()!r}: "
                               f"write 'key{separator.decode()}value' on every line "
                               f"({sent - failed} earlier record(s) were sent)")
        pending.append(producer.send(topic, value, key, partition=partition))
        sent += 1
        bar.update(size if bar.total else 1)
        if len(pending) >= _CHECK_EVERY:
            pending = settle(pending)
    producer.flush()
    settle(pending)
    return sent, failed, first_error


def _summarise(topic: str, sent: int, failed: int, first_error: BaseException | None) -> int:
    if failed:
        print(f"{failed} of {sent} record(s) were not written to {topic!r}: {first_error}",
              file=sys.stderr)
        return 1
    print(f"produced {sent} record(s) to {topic!r}", file=sys.stderr)
    return 0
