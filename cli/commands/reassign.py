"""`rafka reassign`: move partition replicas between brokers (kafka-reassign-partitions).

    rafka reassign --topic orders --replicas 3,1 [--partition 0]   every partition unless told
    rafka reassign --reassignment-json-file plan.json              Kafka's format
    rafka reassign --verify [--reassignment-json-file plan.json]   in progress, or done

The request goes to `/admin/reassign_partitions`, which the controller carries out: new replicas
catch up and join the ISR before the old ones leave, leadership moves last, and producers and
consumers keep running. By default the command waits until it is done (`--no-wait` does not).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rafka.actors.cluster import Cluster
from rafka.cli.commands.connection import add_connection_options, connected
from rafka.cli.commands.errors import CliError
from rafka.cli.commands.output import echo
from rafka.cli.commands.progress import wait_with_spinner
from rafka.coordination.admin import parse_reassignment
from rafka.coordination.errors import InvalidReplicaAssignmentError

Plan = dict[tuple[str, int], list[int]]


def register(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser(
        "reassign", help="move partition replicas to other brokers (or --verify a move)")
    parser.add_argument("--topic", help="the topic whose partitions move")
    parser.add_argument("--partition", type=int, action="append", default=[],
                        help="only this partition (repeatable; default: every partition)")
    parser.add_argument("--replicas", metavar="ID,ID,...",
                        help="the new replicas, the first the preferred leader")
    parser.add_argument("--reassignment-json-file", metavar="FILE",
                        help='Kafka\'s format: {"version": 1, "partitions": [{"topic": "t", '
                             '"partition": 0, "replicas": [1, 2]}]}')
    parser.add_argument("--verify", action="store_true",
                        help="say whether the reassignment (of the plan given) is done")
    parser.add_argument("--no-wait", dest="wait", action="store_false",
                        help="return once the request is written, without waiting")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds to wait for the move (default 600)")
    parser.set_defaults(run=_run)
    add_connection_options(parser)


def _plan(args: argparse.Namespace, cluster: Cluster | None) -> Plan | None:
    """The reassignment these arguments ask for ({} for a bare --verify); None if it needs the
    `cluster` (to list the topic's partitions) and has none: usage errors come before that."""
    if args.reassignment_json_file:
        if args.topic or args.replicas or args.partition:
            raise CliError("give either --reassignment-json-file or --topic/--replicas", 2)
        path = Path(args.reassignment_json_file)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise CliError(f"cannot read the reassignment file {path}: {error}", 2) from None
        try:
            return {(tp.topic, tp.partition): list(r)
                    for tp, r in parse_reassignment(data).items()}
        except InvalidReplicaAssignmentError as error:
            raise CliError(f"{path}: {error}", 2) from None
    if not args.topic and not args.replicas:
        if args.verify:
            return {}
        raise CliError("what moves where? give --topic T --replicas 1,2 (and --partition P), "
                       "or --reassignment-json-file FILE", 2)
    if not args.topic or not args.replicas:
        raise CliError("--topic and --replicas go together", 2)
    try:
        replicas = [int(b) for b in args.replicas.split(",") if b.strip()]
    except ValueError:
        raise CliError(f"--replicas takes broker ids separated by commas, got "
                       f"{args.replicas!r}", 2) from None
    partitions = args.partition
    if not partitions:
        if cluster is None:
            return None
        partitions = [p["partition"] for p in cluster.describe_topic(args.topic)["partitions"]]
    return {(args.topic, p): list(replicas) for p in partitions}


def _run(args: argparse.Namespace) -> int:
    plan = _plan(args, None)
    with connected(args) as cluster:
        if plan is None:
            plan = _plan(args, cluster)
            assert plan is not None
        if args.verify:
            return _verify(cluster, plan)
        cluster.reassign_partitions(plan, wait=False)
        echo(f"reassignment of {len(plan)} partition(s) started")
        if args.wait:
            wait_with_spinner("moving replicas", lambda: cluster.wait_for_reassignment(
                plan, args.timeout), announce=True)
            return _verify(cluster, plan)
        return 0


def _verify(cluster: Cluster, plan: Plan) -> int:
    """Kafka's --verify: one line per partition; exit 1 while anything is still moving."""
    pending = cluster.reassignment_in_progress()
    if not plan:
        for (topic, partition), replicas in sorted(pending.items()):
            echo(f"reassignment of partition {topic}-{partition} to {replicas} is in progress")
        if not pending:
            echo("no reassignment is in progress")
        return 1 if pending else 0
    unfinished = 0
    for (topic, partition), replicas in sorted(plan.items()):
        entry: dict[str, Any] = cluster.describe_topic(topic)["partitions"][partition]
        if (topic, partition) in pending:
            status = "is still in progress"
        elif entry["replicas"] == replicas:
            status = f"is completed (leader {entry['leader']}, ISR {entry['isr']})"
        else:
            status = f"did not happen: its replicas are {entry['replicas']}"
        unfinished += not status.startswith("is completed")
        echo(f"reassignment of partition {topic}-{partition} to {replicas} {status}")
    return 1 if unfinished else 0
