"""`rafka consume`: print records, one per line, as kafka-console-consumer does.

From the end of each partition unless `--from-beginning` (or `--partition P --offset O`); until
`--max-messages` records, or until none came for `--timeout-ms`, or Ctrl-C. Raw output is the
value (`--print-key` puts the key and `--key-separator` first); `--format json` prints one object
per record, bytes as UTF-8 text, or base64 where they are not text. The count goes to stderr.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from rafka.actors.clients.consumer import ConsumerRecord
from rafka.actors.cluster import Cluster
from rafka.cli.commands.arguments import add_command, add_topic_argument, required_topic_of
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError, checked_count
from rafka.cli.commands.output import (
    add_key_value_option,
    console_properties,
    data_stream,
    key_values,
)


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "consume", help="print records of a topic", doc=__doc__)
    add_topic_argument(parser)
    parser.add_argument("--from-beginning", action="store_true",
                        help="start at the earliest record rather than the end")
    parser.add_argument("--partition", type=int, help="read only this partition")
    parser.add_argument("--offset", default=None,
                        help="with --partition: where to start, an offset, 'earliest' or "
                             "'latest' (default latest, or earliest with --from-beginning)")
    parser.add_argument("--group", help="read as a member of this consumer group "
                                        "(committing its offsets)")
    parser.add_argument("--max-messages", type=int, help="stop after this many records")
    parser.add_argument("--timeout-ms", type=int,
                        help="stop when no record has come for this long")
    parser.add_argument("--format", choices=("raw", "json"), default="raw")
    parser.add_argument("--print-key", action="store_true", help="raw: print the key too")
    parser.add_argument("--key-separator", default="\t",
                        help="raw: between key and value with --print-key (default tab)")
    add_key_value_option(parser, "--property",
                         help="kafka-console-consumer's print.key=true and key.separator=SEP")
    add_key_value_option(parser, "--consumer-property",
                         help="a consumer setting (e.g. fetch.max.wait.ms=100); repeatable")
    add_connection_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    topic = required_topic_of(args)
    checked_count(args.partition, "--partition", 0)
    checked_count(args.max_messages, "--max-messages", 0)
    checked_count(args.timeout_ms, "--timeout-ms", 0)
    if args.offset is not None and args.partition is None:
        raise CliError("--offset needs --partition (an offset belongs to one partition)", 2)
    if args.group is not None and args.partition is not None:
        raise CliError("--group and --partition exclude each other: a group shares out the "
                       "partitions itself", 2)
    properties = console_properties(args.property, {
        "print.key": "true: like --print-key", "key.separator": "like --key-separator"})
    args.print_key = args.print_key or properties.get("print.key", "").lower() == "true"
    args.key_separator = properties.get("key.separator", args.key_separator)
    settings: dict[str, Any] = dict(key_values(args.consumer_property, "--consumer-property"))
    settings.setdefault("auto_offset_reset", "earliest" if args.from_beginning else "latest")
    printed = [0]  # kept by _print_records as it goes, so that Ctrl-C still has the count
    with connected(args) as cluster:
        consumer = _consumer(cluster, topic, args, settings)
        try:
            with _interrupt_stops() as stopped:  # how an endless consume ends
                _print_records(consumer, args, printed, stopped)
            # A group member commits what it has printed (not after a failure to print it).
            if args.group is not None and hasattr(consumer, "commit"):
                consumer.commit()
        finally:
            consumer.close()
    print(f"processed a total of {printed[0]} message(s)", file=sys.stderr)
    return 0


def _consumer(cluster: Cluster, topic: str, args: argparse.Namespace,
              settings: dict[str, Any]) -> Any:
    if args.group is not None:
        return cluster.consumer([topic], group=args.group, **settings)
    if not cluster.topic_exists(topic):
        raise CliError(f"topic {topic!r} does not exist: `rafka topics list` shows those "
                       f"that do")
    if args.partition is None:
        return cluster.consumer([topic], **settings)
    consumer = cluster.consumer(**settings)
    try:
        consumer.assign([(topic, args.partition)])
    except ValueError as error:
        raise CliError(str(error)) from None
    offset = args.offset or ("earliest" if args.from_beginning else "latest")
    if offset == "earliest":
        consumer.seek_to_beginning((topic, args.partition))
    elif offset == "latest":
        consumer.seek_to_end((topic, args.partition))
    elif offset.isdigit():
        consumer.seek(topic, args.partition, int(offset))
    else:
        raise CliError(f"--offset takes a number, 'earliest' or 'latest', got {offset!r}", 2)
    return consumer


@contextlib.contextmanager
def _interrupt_stops() -> Iterator[threading.Event]:
    """Ctrl-C sets the event instead of raising: a KeyboardInterrupt raised inside a Ray or
    kazoo call can leave them half-way, and the exit then hung."""
    stopped = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _signal, _frame: stopped.set())
    try:
        yield stopped
    finally:
        signal.signal(signal.SIGINT, previous)


def _print_records(consumer: Any, args: argparse.Namespace, printed: list[int],
                   stopped: threading.Event) -> None:
    last_record = time.monotonic()
    out = data_stream().buffer
    while (args.max_messages is None or printed[0] < args.max_messages) and not stopped.is_set():
        wanted = None if args.max_messages is None else args.max_messages - printed[0]
        records = consumer.poll(timeout_ms=200, max_records=wanted)
        for record in records:
            # Counted first: Ctrl-C may land right after an unbuffered write has gone out.
            printed[0] += 1
            out.write(_format(record, args))
        if records:
            out.flush()
            last_record = time.monotonic()
        elif args.timeout_ms is not None and (
                time.monotonic() - last_record) * 1000 >= args.timeout_ms:
            break


def _format(record: ConsumerRecord, args: argparse.Namespace) -> bytes:
    if args.format == "json":
        return json.dumps(_as_json(record), ensure_ascii=False).encode() + b"\n"
    value = b"null" if record.value is None else record.value
    if args.print_key:
        key = b"null" if record.key is None else record.key
        return key + args.key_separator.encode() + value + b"\n"
    return value + b"\n"


def _as_json(record: ConsumerRecord) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
    }
    for name in ("key", "value"):
        raw = getattr(record, name)
        entry[name], encoding = _text(raw)
        if encoding:
            entry[f"{name}_encoding"] = encoding
    headers = {}
    for header_key, header_value in record.headers or ():
        headers[header_key], _ = _text(header_value)
    if headers:
        entry["headers"] = headers
    return entry


def _text(raw: bytes | None) -> tuple[str | None, str | None]:
    """UTF-8 text where the bytes are text, else base64 (and say so)."""
    if raw is None:
        return None, None
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"
