"""`rafka bench`: produce and consume throughput, printed as JSON.

It runs the repository's `bench/produce_consume.py` when there is one (it starts a cluster of its
own; --records, --record-size and --partitions are passed on, its other options follow `--`).
Otherwise, or with `--builtin`, a small check on the running cluster: `--records` records of
`--record-size` bytes into a new topic, flushed, read back from the beginning, topic deleted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from rafka.actors.cluster import Cluster
from rafka.cli.commands.arguments import add_command
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError
from rafka.cli.commands.output import echo
from rafka.cli.commands.progress import Progress

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "produce_consume.py"


def register(commands: argparse._SubParsersAction) -> None:
    parser = add_command(commands, "bench", help="produce/consume throughput, as JSON", doc=__doc__)
    parser.add_argument("--builtin", action="store_true",
                        help="run the built-in check even if bench/produce_consume.py exists")
    parser.add_argument("--records", "--num-records", type=int,
                        help="records to produce and consume (built-in default 20,000)")
    parser.add_argument("--record-size", type=int, help="bytes per value (default 100)")
    parser.add_argument("--partitions", type=int, help="partitions (built-in default 1)")
    parser.add_argument("--replication-factor", type=int, default=1)
    parser.add_argument("--acks", choices=("0", "1", "all", "-1"), default="all")
    parser.add_argument("--progress", action="store_true", default=None,
                        help="show progress bars on stderr (default: when it is a terminal)")
    parser.add_argument("script_args", nargs="*", metavar="-- ARGS",
                        help="options for bench/produce_consume.py")
    add_connection_options(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if SCRIPT.exists() and not args.builtin:
        return _run_script(args)
    args.records = 20_000 if args.records is None else args.records
    args.record_size = 100 if args.record_size is None else args.record_size
    args.partitions = 1 if args.partitions is None else args.partitions
    if args.records < 1 or args.record_size < 0:
        raise CliError("--records must be at least 1 and --record-size at least 0", 2)
    with connected(args) as cluster:
        result = _builtin(cluster, args)
    echo(json.dumps(result))
    return 0


def _run_script(args: argparse.Namespace) -> int:
    passed_on = [f"--{name.replace('_', '-')}={value}"
                 for name in ("records", "record_size", "partitions")
                 if (value := getattr(args, name)) is not None]
    command = [sys.executable, str(SCRIPT), *passed_on, *args.script_args]
    print(f"running {' '.join(command[1:])} (it starts a cluster of its own; "
          f"`rafka bench --builtin` measures the running one)", file=sys.stderr)
    return subprocess.run(command, check=False).returncode


def _builtin(cluster: Cluster, args: argparse.Namespace) -> dict[str, object]:
    topic = f"rafka-bench-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=args.partitions,
                         replication_factor=args.replication_factor)
    value = os.urandom(args.record_size)
    total_bytes = args.records * args.record_size
    try:
        producer = cluster.producer(acks=args.acks)
        started = time.monotonic()
        with Progress("produce", total=args.records, enabled=args.progress) as bar:
            for _ in range(args.records):
                producer.send(topic, value)
                bar.update()
            producer.flush()
        produce_s = time.monotonic() - started
        producer.close()

        consumer = cluster.consumer([topic], auto_offset_reset="earliest")
        started = time.monotonic()
        received = 0
        with Progress("consume", total=args.records, enabled=args.progress) as bar:
            while received < args.records:
                if time.monotonic() - started > 120:
                    raise CliError(f"read back only {received} of {args.records} records in "
                                   f"120 s")
                records = consumer.poll(timeout_ms=1000)
                received += len(records)
                bar.update(len(records))
        consume_s = time.monotonic() - started
        consumer.close()
    finally:
        cluster.delete_topic(topic, wait=False)
    return {
        "records": args.records,
        "record_size": args.record_size,
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
        "acks": args.acks,
        "produce": _rates(args.records, total_bytes, produce_s),
        "consume": _rates(received, received * args.record_size, consume_s),
    }


def _rates(records: int, nbytes: int, seconds: float) -> dict[str, float]:
    seconds = max(seconds, 1e-9)
    return {"seconds": round(seconds, 3), "records_per_s": round(records / seconds),
            "mb_per_s": round(nbytes / seconds / 1e6, 2)}
